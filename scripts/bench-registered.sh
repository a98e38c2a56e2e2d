#!/usr/bin/env bash
# The registered GPU heap measured (issue 38) on a machine with 2 or more GPUs, with the
# CUDA-enabled libfabric 2.x of scripts/setup-libfabric.sh in BIN_DIR/../lib (the bundle of
# BUNDLE_LIBFABRIC=2 scripts/device-bundle.sh) and its shm provider. Parts (REG_PARTS, default
# "fabric perf moe"):
# - fabric: the provider's own ceiling on GPU memory, a plain C program (fabric-bench --gpu):
#   write bandwidth 8 B – 64 MiB and the time of one 8-byte write to its completion;
# - perf: device-initiated put bandwidth (8 B – 64 MiB) and `p` latency through the proxy on
#   the registered path (FI_HMEM_CUDA), through the host-staged path (same provider), and
#   directly over NVLink (pshmem-perf);
# - moe: MoE low-latency and normal dispatch/combine at EP 2 and 4 (4 with 4 GPUs) on the three
#   paths, the registered runs traced (messages, proxy busy time per message).
# Writes OUT/*.json, OUT/*.out, OUT/trace-*/ and OUT/bench-registered.log; report with
# `python3 benches/results/registered/report.py OUT`.
# REG_EP lists the EP sizes of the moe part (default "2 4").
# Usage: scripts/bench-registered.sh BIN_DIR [OUT_DIR]   (default OUT_DIR: registered-out)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="$1"
OUT="${2:-registered-out}"
mkdir -p "$OUT"
LOG="$OUT/bench-registered.log"
: > "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PSHMEM_OP_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
PARTS=" ${REG_PARTS:-fabric perf moe} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
LF2="$(cd "$BIN/.." && pwd)/lib"
if [ "$NGPU" -lt 2 ] || [ ! -f "$LF2/libfabric.so.1" ]; then
  echo "SKIP bench-registered: needs 2 GPUs (found $NGPU) and libfabric 2.x in $LF2" | tee -a "$LOG"
  exit 0
fi
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUT/machine.txt" 2>&1
CUDA_LIB="$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/lib64"
export LD_LIBRARY_PATH="$LF2:$CUDA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PROXY="PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=shm"
path_env() {
  case "$1" in
    registered) echo "$PROXY PSHMEM_GPU_REGISTRATION=hmem" ;;
    staged) echo "$PROXY PSHMEM_GPU_REGISTRATION=staged" ;;
    direct) echo "PSHMEM_PROVIDER=shm" ;;
  esac
}
step() {
  local name="$1"
  shift
  echo "== $name: $*" | tee -a "$LOG"
  timeout 150 "$@" > "$OUT/$name.out" 2>> "$LOG" || echo "$name failed" | tee -a "$LOG"
}
"$BIN/pshmem-info" > "$OUT/pshmem-info.txt" 2>&1
if want fabric; then
  # (From 64 KiB: the C program's windowed small writes stall on shm, GPU or host memory alike;
  # the 8-byte time is measured one write at a time.)
  step fabric-gpu "$BIN/pshmrun" -n 2 -- "$BIN/fabric-bench" --provider shm --gpu --min 65536 \
    --reps 3 --lat-iters 20000 --json "$OUT/fabric-gpu.json"
fi
if want perf; then
  for path in registered staged direct; do
    step "perf-$path" env $(path_env $path) "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw p_latency \
      -b 8 -e 67108864 -f 4 -n 3 --window 8 --json "$OUT/perf-$path.json"
  done
fi
. scripts/pshmem-python.sh
pshmem_python "$BIN"
if want moe && [ -n "${PYBIN:-}" ]; then
  for n in ${REG_EP:-2 4}; do
    [ "$n" -le "$NGPU" ] || continue
    for path in registered staged direct; do
      envs="$(path_env $path)"
      if [ "$path" = registered ]; then
        mkdir -p "$OUT/trace-ll-ep$n" "$OUT/trace-ht-ep$n"
      fi
      t() { [ "$path" = registered ] && echo "PSHMEM_TRACE=$OUT/trace-$1-ep$n/t"; }
      step "ll-ep$n-$path" env $envs $(t ll) PSHMEM_GPU_RINGS=8 "$BIN/pshmrun" -n "$n" -- "$PYBIN" \
        ep/bench/ll_bench.py --tokens 128 --hidden 7168 --topk 8 --experts-per-rank 8 --iters 20 \
        --label "ll-ep$n-$path"
      step "ht-ep$n-$path" env $envs $(t ht) "$BIN/pshmrun" -n "$n" -- "$PYBIN" ep/bench/ht_bench.py \
        --tokens 4096 --hidden 7168 --iters 5 --label "ht-ep$n-$path"
    done
  done
fi
echo "bench-registered: done ($OUT)" | tee -a "$LOG"
