#!/usr/bin/env bash
# The NVSHMEM-compatible programs (examples/nvshmem/) side by side with NVIDIA's NVSHMEM 3.4.5:
# the same sources built twice, against our NVSHMEM-style tree (scripts/nvshmem-home.sh, as
# examples/nvshmem/build.sh builds them) and against the nvidia-nvshmem-cu13 package (its
# include/ and lib/), then each program run on 2 and 4 PEs by each runtime, alternating, REPS
# times. Both sides use the -rdc=true builds: NVIDIA's device library is relocatable device
# code, so its non-rdc builds do not link (tried and recorded below). Ours start under pshmrun,
# NVIDIA's under mpirun with NVSHMEM_BOOTSTRAP=MPI (its documented MPI bootstrap; the package has
# no launcher of its own). Records per run: passed (every PE printed its OK line, exit 0), the
# job's wall time (launcher included) and the key=value figures of PE 0's OK line; then
# benches/gpu/compare_report.py writes OUT/compare.md (ours / NVSHMEM's).
# Where PEs outnumber GPUs both runtimes share them under CUDA MPS (NVSHMEM needs MPS for
# several PEs per GPU, as we do). NVIDIA's proxy transports need a NIC this machine lacks, so
# runs through the proxy are ours only (scripts/gpu-test.sh runs them).
# Usage: scripts/nvshmem-compare.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, compare-out)
#   REPS (default 2), COMPARE_PES (default "2 4"), COMPARE_TIMEOUT (seconds per run, 30),
#   COMPARE_PROGRAMS (default: all ten)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-compare-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/compare.log"
: > "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
NVCC="$(command -v nvcc || ls /usr/local/cuda/bin/nvcc .tools/cuda/nvidia/cu13/bin/nvcc 2>/dev/null | head -1)"
NV="$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null)"
TREE="${NVSHMEM_TREE:-}"
if [ "$BIN" = target/release ]; then
  TREE="$(bash scripts/nvshmem-home.sh)"
elif [ -z "$TREE" ] && [ -d "$BIN/../nvshmem-home" ]; then
  TREE="$(cd "$BIN/../nvshmem-home" && pwd)"
fi
if [ "$NGPU" -lt 1 ] || [ -z "$NVCC" ] || [ -z "$NV" ] || [ -z "$TREE" ]; then
  echo "SKIP nvshmem-compare: needs a GPU ($NGPU), nvcc ('$NVCC'), the nvidia-nvshmem package ('$NV') and our tree ('$TREE')" | tee -a "$LOG"
  exit 0
fi
# More PEs than GPUs: both runtimes share them under MPS (scripts/mps.sh; NVSHMEM needs it for
# several PEs per GPU too).
. scripts/mps.sh
MOST=0
for n in ${COMPARE_PES:-2 4}; do [ "$n" -gt "$MOST" ] && MOST=$n; done
if mps_needed "$NGPU" "$MOST" && mps_start; then
  trap mps_stop EXIT
  echo "$NGPU GPU(s) for up to $MOST PEs: both runtimes' PEs share them under CUDA MPS" | tee -a "$LOG"
fi
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; echo "NVSHMEM package: $NV"; "$NVCC" --version | tail -1; } > "$OUT/machine.txt" 2>&1

# Ours: examples/nvshmem/build.sh (both variants; the .rdc ones are compared).
# Built in the background while NVIDIA's builds run (each side's builds are independent).
OURS="$OUT/ours"
bash examples/nvshmem/build.sh "$TREE" "$OURS" "$NVCC" > "$OUT/ours-build.log" 2>&1 &
OURS_BUILD=$!

# NVIDIA's: the same sources and flags, -rdc=true, against the package (its host library is
# shipped as libnvshmem_host.so.3 only, hence -l:).
THEIRS="$OUT/nvidia"
mkdir -p "$THEIRS"
CUDA_ROOT="$(dirname "$(dirname "$NVCC")")"
ARCH=(-gencode "arch=compute_90,code=[sm_90,compute_90]")
LINK=(-L"$NV/lib" -l:libnvshmem_host.so.3 -lnvshmem_device -L"$CUDA_ROOT/lib64/stubs" -lcuda -Xlinker -rpath="$NV/lib")
[ -e "$CUDA_ROOT/lib/libcudart_static.a" ] && LINK+=(-L"$CUDA_ROOT/lib")
BUILDS="$OUT/builds.txt"
: > "$BUILDS"
nvbuild() { # name nvcc-args...   (in the background: one log per program)
  local name="$1"
  shift
  (
    if "$NVCC" "${ARCH[@]}" -O2 "$@" -I"$NV/include" > "$OUT/nvidia-build-$name.log" 2>&1; then
      echo "$name nvidia built" >> "$BUILDS"
    else
      echo "$name nvidia failed: $(grep -m1 -iE 'error|fatal' "$OUT/nvidia-build-$name.log" | tail -c 200)" >> "$BUILDS"
    fi
  ) &
}
EX=examples/nvshmem
for p in ring put_block ping_pong atomics team_split collective_launch on_stream collectives vector_waits; do
  nvbuild "$p" -rdc=true -o "$THEIRS/$p.rdc" "$EX/$p.cu" "${LINK[@]}"
done
nvbuild two_file -rdc=true -o "$THEIRS/two_file.rdc" "$EX/two_file/main.cu" "$EX/two_file/kernels.cu" "${LINK[@]}"
nvbuild plugin -rdc=true -shared -Xcompiler -fPIC -o "$THEIRS/libplugin.rdc.so" "$EX/plugin/plugin.cu" "${LINK[@]}"
nvbuild plugin_main -o "$THEIRS/plugin_main" "$EX/plugin/main.cu" "${LINK[@]}" -ldl
# Recorded, not compared: a build without -rdc, and the unique-id program's C host file (gcc).
nvbuild ring-without-rdc -o "$THEIRS/ring" "$EX/ring.cu" "${LINK[@]}"
if gcc -std=c11 -O2 -c -I"$NV/include" -I"$CUDA_ROOT/include" -o "$THEIRS/uniqueid_main.o" "$EX/uniqueid/main.c" > "$OUT/nvidia-build-uniqueid.log" 2>&1; then
  echo "uniqueid-c-host nvidia built" >> "$BUILDS"
else
  echo "uniqueid-c-host nvidia failed: $(grep -m1 -iE 'error' "$OUT/nvidia-build-uniqueid.log" | tail -c 200)" >> "$BUILDS"
fi
wait "$OURS_BUILD" || echo "build of ours failed (ours-build.log)" | tee -a "$LOG"
wait
tee -a "$LOG" < "$BUILDS"

# NVIDIA's launcher: OpenMPI's mpirun (root needs its two opt-in variables; one host, so no
# network transports).
MPIRUN="$(command -v mpirun || true)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_SYMMETRIC_SIZE=512M PSHMEM_SYMMETRIC_SIZE=64M
# Local processes inherit mpirun's environment; -x names the variables that matter (MPS's only
# where one GPU is shared).
MPI_X=(-x LD_LIBRARY_PATH -x NVSHMEM_BOOTSTRAP -x NVSHMEM_BOOTSTRAP_PMI -x NVSHMEM_REMOTE_TRANSPORT
  -x NVSHMEM_SYMMETRIC_SIZE -x NVSHMEM_DISABLE_NVLS)
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && MPI_X+=(-x CUDA_MPS_PIPE_DIRECTORY)
# NVSHMEM's bootstrap under mpirun: its MPI plugin, else PMIx (mpirun serves both); chosen below.
NV_BOOT=MPI
NV_PMI=PMI
RUNS="$OUT/compare.jsonl"
: > "$RUNS"
launch() { # side pes prog args...   (sets OUT_TEXT; returns the job's exit status)
  local side="$1" pes="$2"
  shift 2
  if [ "$side" = ours ]; then
    OUT_TEXT="$(LD_LIBRARY_PATH="$TREE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "${COMPARE_TIMEOUT:-30}" \
      "$BIN/pshmrun" -n "$pes" --timeout "${COMPARE_TIMEOUT:-30}" -- "$@" 2>&1)"
  else
    OUT_TEXT="$(LD_LIBRARY_PATH="$NV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVSHMEM_BOOTSTRAP="$NV_BOOT" \
      NVSHMEM_BOOTSTRAP_PMI="$NV_PMI" timeout "${COMPARE_TIMEOUT:-30}" \
      "$MPIRUN" -np "$pes" --oversubscribe --bind-to none "${MPI_X[@]}" "$@" 2>&1)"
  fi
}
settle() { # prog: after a failed job
  # A timed-out launcher can leave its processes behind, holding the GPU; and a failed MPS
  # client's context takes the server a while to tear down.
  local i
  pkill -KILL -f -- "$1" 2>/dev/null
  for i in $(seq 30); do pgrep -f -- "$1" >/dev/null || break; sleep 1; done
  sleep 3
}
one() { # side pes name prog args...
  local side="$1" pes="$2" name="$3"
  shift 3
  local t0 t1 out rc
  t0="$(date +%s.%N)"
  launch "$side" "$pes" "$@"
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "busy or unavailable" <<<"$OUT_TEXT"; then
    # The GPU was still held by the previous (failed) job, not by this program: once more,
    # after a pause; the log says so.
    echo "== $side $name pes=$pes: GPU busy at start (the previous job's teardown); retried after 10 s" >> "$LOG"
    settle "$1"
    sleep 10
    t0="$(date +%s.%N)"
    launch "$side" "$pes" "$@"
    rc=$?
  fi
  out="$OUT_TEXT"
  t1="$(date +%s.%N)"
  [ "$rc" -eq 0 ] || settle "$1"
  {
    echo "== $side $name pes=$pes rc=$rc"
    echo "$out" | tail -n 15
  } >> "$LOG"
  printf '%s' "$out" | python3 benches/gpu/compare_report.py --record "$side" "$name" "$pes" "$rc" "$t0" "$t1" >> "$RUNS"
  tail -n 1 "$RUNS" | tee -a "$LOG"
}
# Which bootstrap starts NVIDIA's ring on 2 PEs (a probe, not recorded as a run); if none does,
# NVIDIA's side is skipped with the reason rather than timing out run after run.
NV_OK=0
if [ -z "$MPIRUN" ]; then
  echo "no mpirun on this machine: NVIDIA's side cannot start (its package has no launcher)" | tee -a "$LOG"
elif [ -x "$THEIRS/ring.rdc" ]; then
  for boot in MPI:PMI PMI:PMIX; do
    NV_BOOT="${boot%%:*}" NV_PMI="${boot##*:}"
    probe="$(LD_LIBRARY_PATH="$NV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVSHMEM_BOOTSTRAP="$NV_BOOT" \
      NVSHMEM_BOOTSTRAP_PMI="$NV_PMI" timeout 60 "$MPIRUN" -np 2 --oversubscribe --bind-to none "${MPI_X[@]}" \
      "$THEIRS/ring.rdc" 2>&1)"
    if [ "$(grep -c '^OK ' <<<"$probe")" -eq 2 ]; then
      NV_OK=1
      break
    fi
    { echo "== probe: NVSHMEM_BOOTSTRAP=$NV_BOOT NVSHMEM_BOOTSTRAP_PMI=$NV_PMI did not start"; tail -n 20 <<<"$probe"; } | tee -a "$LOG"
  done
fi
if [ "$NV_OK" = 1 ]; then
  echo "NVIDIA's side: mpirun with NVSHMEM_BOOTSTRAP=$NV_BOOT NVSHMEM_BOOTSTRAP_PMI=$NV_PMI" | tee -a "$LOG" "$OUT/nvidia-launch.txt"
else
  echo "NVIDIA's side: not run (no bootstrap started its ring: compare.log)" | tee -a "$LOG" "$OUT/nvidia-launch.txt"
fi
read -r -a progs <<<"${COMPARE_PROGRAMS:-ring put_block ping_pong atomics team_split collective_launch on_stream collectives vector_waits two_file plugin}"
# A program that failed on a runtime at a PE count is not run again there (a failure usually
# repeats, and a hung one costs the whole timeout each time).
declare -A FAILED=()
for ((rep = 0; rep < ${REPS:-2}; rep++)); do
  for pes in ${COMPARE_PES:-2 4}; do
    for p in "${progs[@]}"; do
      # Alternate which runtime goes first (ABBA over repetitions).
      sides=(ours nvidia)
      [ $((rep % 2)) -eq 1 ] && sides=(nvidia ours)
      for side in "${sides[@]}"; do
        dir="$OURS"
        [ "$side" = nvidia ] && dir="$THEIRS"
        if [ "$side" = nvidia ] && [ "$NV_OK" != 1 ]; then continue; fi
        [ -z "${FAILED[$side:$p:$pes]:-}" ] || continue
        if [ "$p" = plugin ]; then
          [ -x "$dir/plugin_main" ] && [ -e "$dir/libplugin.rdc.so" ] || continue
          one "$side" "$pes" "$p" "$dir/plugin_main" "$dir/libplugin.rdc.so"
        else
          [ -x "$dir/$p.rdc" ] || continue
          one "$side" "$pes" "$p" "$dir/$p.rdc"
        fi
        tail -n 1 "$RUNS" | grep -q '"passed": true' || FAILED[$side:$p:$pes]=1
      done
    done
  done
done
python3 benches/gpu/compare_report.py "$OUT" > "$OUT/compare.md"
cat "$OUT/compare.md" >> "$LOG"
echo "nvshmem-compare: done ($(grep -c '"passed": true' "$RUNS") of $(wc -l < "$RUNS") runs passed)" | tee -a "$LOG"
