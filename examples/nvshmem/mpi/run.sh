#!/usr/bin/env bash
# NVSHMEM programs started the way their MPI users start them, on this machine's GPUs: built with
# nvcc against the NVSHMEM-style tree and the machine's Open MPI, run by `mpirun -np 2` and
# `-np 4` with nothing of ours exported, and checked for every rank's line:
#   ring_mpi.cu (here)       MPI_Init, then nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM) or
#                            plain nvshmem_init; also once through the proxy (tcp)
#   ../ring.cu               plain nvshmem_init in a program without MPI
#   THEIRS_DIR/*.cu          when given: NVSHMEM's own MPI examples (mpi-based-init.cu,
#                            dev-guide-ring-mpi.cu, dev-guide-ring.cu), copied by the user from
#                            NVSHMEM's sources into an ignored folder (never committed), built
#                            unmodified; run where every PE has a GPU of its own (they set
#                            device = node rank, as with NVSHMEM)
# Several PEs on one GPU need CUDA MPS: the caller starts it (scripts/gpu-test.sh does).
# Usage: run.sh NVSHMEM_HOME NVCC OUT_DIR [THEIRS_DIR]   (MPI_TIMEOUT: seconds per run, 120)
set -uo pipefail
TREE="$(cd "$1" && pwd)"
NVCC="$2"
OUT="$3"
THEIRS="${4:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/mpi.log"
: > "$LOG"
MPIRUN="$(command -v mpirun || true)"
MPICC="$(command -v mpicc || true)"
if [ -z "$MPIRUN" ] || [ -z "$MPICC" ] || ! "$MPICC" --showme:incdirs > /dev/null 2>&1; then
  echo "SKIP MPI-launched NVSHMEM programs: need Open MPI's mpirun and mpicc ('$MPIRUN', '$MPICC')" | tee -a "$LOG"
  exit 0
fi
echo "$("$MPIRUN" --version 2>&1 | head -1)" | tee -a "$LOG"
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
MPI_FLAGS=()
for d in $("$MPICC" --showme:incdirs); do MPI_FLAGS+=(-I"$d"); done
for d in $("$MPICC" --showme:libdirs); do MPI_FLAGS+=(-L"$d" -Xlinker -rpath="$d"); done
MPI_FLAGS+=(-lmpi)
ARCH="${NVCC_ARCH:--gencode arch=compute_90,code=[sm_90,compute_90]}"
LINK=(-L"$TREE/lib" -lnvshmem_host -lnvshmem_device -lcuda)
CUDA_ROOT="$(dirname "$(dirname "$(command -v "$NVCC" || echo "$NVCC")")")"
[ -e "$CUDA_ROOT/lib/libcudart_static.a" ] && LINK+=(-L"$CUDA_ROOT/lib")
fail=0
runs=0
build() { # name source
  # shellcheck disable=SC2086
  if ! "$NVCC" $ARCH -O2 -o "$OUT/$1" "$2" -I"$TREE/include" "${LINK[@]}" "${MPI_FLAGS[@]}" > "$OUT/build-$1.log" 2>&1; then
    echo "FAILED build $1 (build-$1.log):" | tee -a "$LOG"
    tail -5 "$OUT/build-$1.log" | tee -a "$LOG"
    fail=$((fail + 1))
    return 1
  fi
}
# The line PE `i` of `n` prints when `kind`'s run is right.
expect() { # kind i n
  case "$1" in
    done) echo "[$2 of $3] run complete" ;;
    ring) echo "$2: received message $((($2 + $3 - 1) % $3))" ;;
    ours) echo "OK ring_mpi" ;;
    oursring) echo "OK ring pe=$2 n=$3" ;;
  esac
}
check() { # name kind pes env... -- prog args...
  local name="$1" kind="$2" pes="$3"
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out rc missing=""
  out="$(env "${envs[@]}" timeout "${MPI_TIMEOUT:-120}" "$MPIRUN" --oversubscribe --bind-to none -np "$pes" "$@" 2>&1)"
  rc=$?
  runs=$((runs + 1))
  for i in $(seq 0 $((pes - 1))); do
    local want
    want="$(expect "$kind" "$i" "$pes")"
    if [ "$kind" = ours ]; then
      grep -q "^OK ring_mpi .*pe=$i n=$pes " <<<"$out" || missing+=" $i"
    else
      grep -qF -- "$want" <<<"$out" || missing+=" $i"
    fi
  done
  if [ "$rc" -ne 0 ] || [ -n "$missing" ]; then
    fail=$((fail + 1))
    echo "FAILED $name np=$pes ${envs[*]} (rc $rc; no line from rank(s)$missing)" | tee -a "$LOG"
    echo "$out" | tail -20 | tee -a "$LOG"
    sleep 3
  else
    echo "passed $name np=$pes ${envs[*]}" | tee -a "$LOG"
    grep -E "run complete|received message|^OK" <<<"$out" | sort | head -"$pes" >> "$LOG"
  fi
}
export LD_LIBRARY_PATH="$TREE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export PSHMEM_SYMMETRIC_SIZE="${PSHMEM_SYMMETRIC_SIZE:-64M}" NVSHMEM_SYMMETRIC_SIZE="${NVSHMEM_SYMMETRIC_SIZE:-256M}"
# Ours: what a launcher's job would otherwise pick up must not be set.
unset PSHMEM_RANK PSHMEM_WORLD_SIZE PSHMEM_BOOTSTRAP_ADDR RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
build ring_mpi "$HERE/ring_mpi.cu"
build ring "$HERE/../ring.cu"
progs=()
if [ -n "$THEIRS" ]; then
  for p in mpi-based-init dev-guide-ring-mpi dev-guide-ring; do
    if [ -f "$THEIRS/$p.cu" ]; then
      build "$p" "$THEIRS/$p.cu" && progs+=("$p")
    else
      echo "SKIP $p: not in $THEIRS" | tee -a "$LOG"
    fi
  done
fi
for n in 2 4; do
  [ -x "$OUT/ring_mpi" ] && check ring_mpi-attr ours "$n" -- "$OUT/ring_mpi" attr
  [ -x "$OUT/ring_mpi" ] && check ring_mpi-init ours "$n" -- "$OUT/ring_mpi" init
  [ -x "$OUT/ring" ] && check ring-no-mpi oursring "$n" -- "$OUT/ring"
  for p in "${progs[@]}"; do
    # NVSHMEM's examples call cudaSetDevice(mype_node): one GPU per PE, with NVSHMEM as here.
    if [ "$n" -gt "$NGPU" ]; then
      echo "SKIP nvshmem:$p np=$n: it needs a GPU per PE (cudaSetDevice(mype_node)), this machine has $NGPU" | tee -a "$LOG"
      continue
    fi
    case "$p" in mpi-based-init) k=done ;; *) k=ring ;; esac
    check "nvshmem:$p" "$k" "$n" -- "$OUT/$p"
  done
done
[ -x "$OUT/ring_mpi" ] && check ring_mpi-attr-proxied ours 2 PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp -- "$OUT/ring_mpi" attr
echo "mpi: $runs runs, $fail failed (log: $LOG)" | tee -a "$LOG"
[ "$fail" -eq 0 ]
