#!/usr/bin/env bash
# Where a GPU job's start-up time goes. For each PE count in STARTUP_PES ("2 4"), REPS (3) jobs of
# `pshmem-gpu-tests gpu-init-rank` under pshmrun (host init, GPU init, finalize, the defaults'
# 1 GiB heaps), with PSHMEM_LOG=pshmem=info so every PE logs each init's phases; beside them the
# floor: as many processes that only create a CUDA context at once. PEs share GPUs under CUDA MPS
# where they outnumber them, as in every other GPU script. Writes OUT/startup-*.log and
# OUT/startup.{json,md} (benches/gpu/startup_report.py: medians per phase). Skips loudly without
# a GPU.
# STARTUP_PROGRAM names a program to profile the same way instead (say an examples/nvshmem
# build, with STARTUP_LIB its library folder for LD_LIBRARY_PATH): there the application creates
# its CUDA context itself, as NVSHMEM programs do, and the log shows our part of its start-up.
# Usage: scripts/startup-profile.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, startup-out)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-startup-out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
if [ "$NGPU" -lt 1 ]; then
  echo "SKIP startup-profile: no GPU (nvidia-smi lists none)"
  exit 0
fi
mkdir -p "$OUT"
. scripts/mps.sh
MOST=0
for n in ${STARTUP_PES:-2 4}; do [ "$n" -gt "$MOST" ] && MOST=$n; done
if mps_needed "$NGPU" "$MOST" && mps_start; then
  trap mps_stop EXIT
fi
now() { date +%s.%N; }
# The floor: N processes that load the driver and create a primary context on their GPU (the
# local rank modulo the GPUs, as the runtime chooses), started together.
floor() {
  python3 - "$1" "$NGPU" <<'PY'
import ctypes, subprocess, sys, time
n, ngpu = int(sys.argv[1]), int(sys.argv[2])
code = ("import ctypes,sys\n"
        "cu = ctypes.CDLL('libcuda.so.1')\n"
        "d, c = ctypes.c_int(), ctypes.c_void_p()\n"
        "assert cu.cuInit(0) == 0\n"
        "assert cu.cuDeviceGet(ctypes.byref(d), int(sys.argv[1])) == 0\n"
        "assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d) == 0\n"
        "assert cu.cuCtxSetCurrent(c) == 0\n")
t = time.time()
procs = [subprocess.Popen([sys.executable, "-c", code, str(r % ngpu)]) for r in range(n)]
rcs = [p.wait() for p in procs]
print(f"FLOOR pes={n} wall_ms={(time.time() - t) * 1e3:.1f} ok={int(all(rc == 0 for rc in rcs))}")
PY
}
for n in ${STARTUP_PES:-2 4}; do
  for r in $(seq 1 "${REPS:-3}"); do
    log="$OUT/startup-$n-$r.log"
    t0=$(now)
    if [ -n "${STARTUP_PROGRAM:-}" ]; then
      LD_LIBRARY_PATH="${STARTUP_LIB:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PSHMEM_LOG=pshmem=info \
        timeout 120 "$BIN/pshmrun" -n "$n" -- "$STARTUP_PROGRAM" > "$log" 2>&1
    else
      PSHMEM_LOG=pshmem=info timeout 120 "$BIN/pshmrun" -n "$n" -- "$BIN/pshmem-gpu-tests" gpu-init-rank > "$log" 2>&1
    fi
    rc=$?
    t1=$(now)
    echo "JOB pes=$n rep=$r rc=$rc start=$t0 end=$t1 wall_ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }')" | tee -a "$log"
    floor "$n" | tee -a "$log"
  done
done
python3 benches/gpu/startup_report.py "$OUT"
