#!/usr/bin/env bash
# Issue 7's side-by-side benchmarks on a 2-GPU machine, in one command: NCCL (torch.distributed)
# and the copy engine, NVSHMEM 3.4.5 (a comparison program compiled here with this machine's
# nvcc against the nvidia-nvshmem-cu13 package), and proxyshmem (device-initiated pshmem-perf);
# over NVLink and forced through the network (TCP loopback); plus the proxy machinery beside
# the GPU<->CPU mailbox floor. Writes everything under OUT and merges it into OUT/result.json.
# Usage: scripts/bench-gpu.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, bench-gpu-out)
# Then, on any machine: bash scripts/gpu-report.sh OUT/result.json NAME
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-bench-gpu-out}"
mkdir -p "$OUT"
# Never let NVLink multicast objects be created on the shared GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "SKIP bench-gpu: needs 2 GPUs"
  exit 0
fi
LOG="$OUT/bench-gpu.log"
: > "$LOG"
step() { echo "== $*" | tee -a "$LOG"; }
{ nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader; nvidia-smi topo -m | head -3; } > "$OUT/machine.txt" 2>&1
MAX=1073741824

step "NCCL send/recv and copy engine over NVLink"
timeout 400 python3 benches/gpu/nccl_ce.py nvlink "$OUT/nccl-nvlink.json" >> "$LOG" 2>&1 || echo "nccl nvlink failed" | tee -a "$LOG"
step "NCCL forced through sockets"
timeout 400 python3 benches/gpu/nccl_ce.py socket "$OUT/nccl-socket.json" >> "$LOG" 2>&1 || echo "nccl socket failed" | tee -a "$LOG"

step "NVSHMEM 3.4.5"
NV="$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>/dev/null)"
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
CUDA_DIR="$(dirname "$(dirname "$NVCC")")"
if [ -n "$NV" ] && "$NVCC" -rdc=true -arch=sm_90 -O3 -I "$NV/include" benches/gpu/nvshmem_bench.cu \
    -o "$OUT/nvshmem_bench" -L "$NV/lib" -l:libnvshmem_host.so.3 -lnvshmem_device \
    -L "$CUDA_DIR/lib64/stubs" -lcuda -Xlinker -rpath="$NV/lib" >> "$LOG" 2>&1; then
  for shape in nvshmem best; do
    rm -f "$OUT/uid"
    for r in 0 1; do
      LD_LIBRARY_PATH="$NV/lib:${LD_LIBRARY_PATH:-}" NVSHMEM_SYMMETRIC_SIZE=3G NVSHMEM_REMOTE_TRANSPORT=none \
        NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo timeout 300 "$OUT/nvshmem_bench" $r "$OUT/uid" $shape 8 $MAX 64 5 \
        > "$OUT/nvshmem-$shape.r$r" 2>> "$LOG" &
    done
    wait
    cp "$OUT/nvshmem-$shape.r0" "$OUT/nvshmem-$shape.jsonl"
    tail -3 "$OUT/nvshmem-$shape.jsonl" | tee -a "$LOG"
  done
else
  echo "NVSHMEM comparison program not built (package: '$NV', nvcc: $NVCC)" | tee -a "$LOG"
fi

step "proxyshmem over NVLink (device-initiated)"
export PSHMEM_GPU_SYMMETRIC_SIZE=2304M
for shape in nvshmem best; do
  timeout 300 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 8 -e $MAX -n 5 --window 16 --shape $shape \
    --json "$OUT/pshmem-nvlink-$shape.json" >> "$LOG" 2>&1 || echo "pshmem nvlink $shape failed" | tee -a "$LOG"
done
timeout 120 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" p_latency -n 10 --window 250 \
  --json "$OUT/pshmem-nvlink-lat.json" >> "$LOG" 2>&1 || echo "pshmem nvlink latency failed" | tee -a "$LOG"

step "proxyshmem forced through the network (ring + host-staged proxy over tcp;ofi_rxm)"
PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp timeout 400 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 8 -e $MAX -n 3 --window 16 \
  --json "$OUT/pshmem-network-bw.json" >> "$LOG" 2>&1 || echo "pshmem network bw failed" | tee -a "$LOG"
# The same with 4 tcp endpoints (rails) per PE, larger staging chunks and more landing slots
# (more bytes in flight per target, spread over 4 connections).
PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp PSHMEM_RAILS=4 PSHMEM_STAGING_CHUNK=4194304 PSHMEM_GPU_LANDING_SLOTS=8 timeout 300 \
  "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 16384 -e $MAX -n 3 --window 16 \
  --json "$OUT/pshmem-network-bw-tuned.json" >> "$LOG" 2>&1 || echo "pshmem network bw (tuned) failed" | tee -a "$LOG"
PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp timeout 120 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" p_latency -n 5 --window 50 \
  --json "$OUT/pshmem-network-lat.json" >> "$LOG" 2>&1 || echo "pshmem network latency failed" | tee -a "$LOG"
unset PSHMEM_GPU_SYMMETRIC_SIZE

step "proxy machinery"
{
  "$BIN/pshmem-gpu-tests" mailbox --iters 20000
  "$BIN/pshmem-gpu-tests" ring-latency --iters 20000
  for p in 1 2 4; do "$BIN/pshmem-gpu-tests" ring-rate --blocks 132 --threads 128 --per-warp 4000 --proxies $p; done
  # One proxy thread draining 2 and 4 rings: its capacity when one ring's GPU producers
  # (contending on one head counter) are not the limit.
  for k in 2 4; do "$BIN/pshmem-gpu-tests" ring-rate --blocks 132 --threads 128 --per-warp 4000 --proxies 1 --rings-per-proxy $k; done
} 2>&1 | tee "$OUT/proxy.log" >> "$LOG"

if command -v ncu >/dev/null; then
  NCU_SEC="--section SpeedOfLight --section LaunchStats --section WarpStateStats --metrics smsp__inst_executed.sum,gpu__time_duration.sum"
  step "ncu: small puts (2 KiB, 1 block, 64 per kernel), NVSHMEM and proxyshmem (rank 0)"
  if [ -x "$OUT/nvshmem_bench" ]; then
    rm -f "$OUT/uid"
    LD_LIBRARY_PATH="$NV/lib:${LD_LIBRARY_PATH:-}" NVSHMEM_SYMMETRIC_SIZE=1G NVSHMEM_REMOTE_TRANSPORT=none \
      timeout 200 ncu -k bw_kernel -c 1 $NCU_SEC "$OUT/nvshmem_bench" 0 "$OUT/uid" nvshmem 2048 2048 64 1 > "$OUT/ncu-nvshmem-put-2K.txt" 2>&1 &
    LD_LIBRARY_PATH="$NV/lib:${LD_LIBRARY_PATH:-}" NVSHMEM_SYMMETRIC_SIZE=1G NVSHMEM_REMOTE_TRANSPORT=none \
      timeout 200 "$OUT/nvshmem_bench" 1 "$OUT/uid" nvshmem 2048 2048 64 1 > /dev/null 2>&1
    wait
  fi
  PSHMEM_GPU_SYMMETRIC_SIZE=64M timeout 200 "$BIN/pshmrun" -n 2 -- ncu --target-processes all -k perf_bw -c 1 $NCU_SEC \
    "$BIN/pshmem-perf" put_bw -b 2048 -e 2048 -n 1 --window 16 --shape nvshmem > "$OUT/ncu-pshmem-put-2K.txt" 2>&1 || echo "ncu (2 KiB) failed" | tee -a "$LOG"
  step "ncu: proxyshmem's NVLink put kernel at 256 MiB (rank 0)"
  PSHMEM_GPU_SYMMETRIC_SIZE=600M timeout 200 "$BIN/pshmrun" -n 2 -- ncu --target-processes all -k perf_bw -c 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis "$BIN/pshmem-perf" put_bw -b 268435456 -e 268435456 -n 1 --window 1 --shape nvshmem \
    > "$OUT/ncu-put-256M.txt" 2>&1 || echo "ncu failed (see ncu-put-256M.txt)" | tee -a "$LOG"
fi

python3 benches/gpu/merge.py "$OUT" "$OUT/result.json" | tee -a "$LOG"
# One archive of everything but the compiled program (device tools return few files).
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" --exclude=nvshmem_bench "$(basename "$OUT")"
grep -E "failed" "$LOG" && echo "bench-gpu: some steps FAILED" || echo "bench-gpu: done"
