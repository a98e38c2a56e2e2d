# Sourced by the GPU scripts. CUDA MPS for runs that put several PEs on one GPU: without it their
# kernels are time-sliced, and a kernel waiting on a peer's store sees it only at the next slice
# (about 2000 times slower). Several GPUs are fine under one server.
#   mps_start  starts a private server unless CUDA_MPS_PIPE_DIRECTORY already names one, and
#              exports its directories to every process started afterwards
#   mps_stop   stops the server mps_start started (nothing otherwise)
#   mps_needed NGPU MOST_PES   true when some run puts more PEs than GPUs
MPS_STARTED=""
mps_start() {
  [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && return 0
  command -v nvidia-cuda-mps-control >/dev/null || return 1
  local d
  d="$(mktemp -d)"
  export CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    MPS_STARTED=1
  else
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 1
  fi
}
mps_stop() {
  [ -n "$MPS_STARTED" ] || return 0
  echo quit | nvidia-cuda-mps-control
  MPS_STARTED=""
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
mps_needed() {
  [ "$1" -ge 1 ] && [ "$2" -gt "$1" ]
}
