#!/usr/bin/env bash
# The side-by-side benchmarks (issues 7 and 22) in one command. On 2 GPUs: NCCL
# (torch.distributed) and the copy engine, NVSHMEM 3.4.5 (a comparison program compiled here with
# this machine's nvcc against the nvidia-nvshmem-cu13 package), and proxyshmem (device-initiated
# pshmem-perf); over NVLink and forced through the network (TCP loopback). On 1 GPU (2 PEs on it
# under CUDA MPS; NCCL refuses two ranks on one GPU): the same puts between the two PEs' heaps on
# that GPU, NVSHMEM's where it runs under MPS, and the staged network path. Always: raw libfabric
# (c/fabric_raw.c through fabric-bench) on the same provider as the network path's ceiling, a
# proxy trace of the network path (the profile: per-message proxy time, ring to post), and the
# proxy machinery beside the GPU<->CPU mailbox floor. Writes everything under OUT and merges it
# into OUT/result.json. BENCH_GPU_PARTS selects parts (default all: "nvlink network machinery"),
# so a run can be split across a machine's time limit; merge.py takes what each part left.
# BENCH_GPU_NCU=0 leaves out the Nsight Compute profiles of the NVLink puts (minutes on a machine
# whose device time is short; the figures do not depend on them). BENCH_GPU_NET_MAX (bytes) stops
# the network path's bandwidth runs at that size (default: the NVLink runs' largest): over TCP
# loopback both runtimes level off from 32 MiB, and the 512 MiB and 1 GiB rows of the three
# pshmem runs cost about 5 minutes of a short device session.
# Usage: scripts/bench-gpu.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, bench-gpu-out)
# Then, on any machine: bash scripts/gpu-report.sh OUT/result.json NAME
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-bench-gpu-out}"
mkdir -p "$OUT"
# Never let NVLink multicast objects be created on the shared GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
if [ "$NGPU" -lt 1 ]; then
  echo "SKIP bench-gpu: no GPU (nvidia-smi lists none)"
  exit 0
fi
PARTS=" ${BENCH_GPU_PARTS:-nvlink network machinery} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
LOG="$OUT/bench-gpu.log"
touch "$LOG"
step() { echo "== $*" | tee -a "$LOG"; }
echo "$NGPU" > "$OUT/gpus.txt"
if [ "$NGPU" -eq 1 ]; then
  # Two PEs on one GPU need MPS (without it their kernels are time-sliced: 2000x slower).
  . scripts/mps.sh
  mps_start && trap mps_stop EXIT
  step "one GPU: 2 PEs share it under CUDA MPS; no NCCL or copy-engine baselines"
fi
{ nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader; nvidia-smi topo -m | head -3; } > "$OUT/machine.txt" 2>&1
MAX=1073741824
# One GPU: same-GPU copies stop being interesting long before 1 GiB (and the run must fit the
# device tool's 10 minutes per part).
[ "$NGPU" -ge 2 ] || MAX=67108864
NET_MAX="${BENCH_GPU_NET_MAX:-$MAX}"
export PSHMEM_GPU_SYMMETRIC_SIZE=2304M

if want nvlink; then
  if [ "$NGPU" -ge 2 ]; then
    step "NCCL send/recv and copy engine over NVLink"
    timeout 400 python3 benches/gpu/nccl_ce.py nvlink "$OUT/nccl-nvlink.json" >> "$LOG" 2>&1 || echo "nccl nvlink failed" | tee -a "$LOG"
  fi
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
  for shape in nvshmem best; do
    timeout 300 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 8 -e $MAX -n 5 --window 16 --shape $shape \
      --json "$OUT/pshmem-nvlink-$shape.json" >> "$LOG" 2>&1 || echo "pshmem nvlink $shape failed" | tee -a "$LOG"
  done
  timeout 120 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" p_latency -n 10 --window 250 \
    --json "$OUT/pshmem-nvlink-lat.json" >> "$LOG" 2>&1 || echo "pshmem nvlink latency failed" | tee -a "$LOG"

  # Host-initiated puts (the Python package: from a checkout's environment, or the prebuilt
  # wheel next to BIN): by the copy engine from PSHMEM_COPY_ENGINE_MIN, and by the one-block
  # kernel that every size took before.
  step "host-initiated puts to the mapped peer: copy engine vs one-block kernel"
  . scripts/pshmem-python.sh
  pshmem_python "$BIN"
  if [ -n "$PYBIN" ]; then
    timeout 200 "$BIN/pshmrun" -n 2 -- "$PYBIN" benches/gpu/host_put.py host-ce $MAX "$OUT/host-put-ce.json" \
      >> "$LOG" 2>&1 || echo "host put (copy engine) failed" | tee -a "$LOG"
    PSHMEM_COPY_ENGINE_MIN=1T timeout 200 "$BIN/pshmrun" -n 2 -- "$PYBIN" benches/gpu/host_put.py host-kernel $MAX \
      "$OUT/host-put-kernel.json" >> "$LOG" 2>&1 || echo "host put (kernel) failed" | tee -a "$LOG"
  else
    echo "host puts: no pshmem Python package (build the wheel: bash scripts/python-env.sh)" | tee -a "$LOG"
  fi

  if [ "$NGPU" -ge 2 ] && [ "${BENCH_GPU_NCU:-1}" != 0 ] && command -v ncu >/dev/null; then
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

fi

if want network; then
  if [ "$NGPU" -ge 2 ]; then
    step "NCCL forced through sockets"
    timeout 400 python3 benches/gpu/nccl_ce.py socket "$OUT/nccl-socket.json" "$NET_MAX" >> "$LOG" 2>&1 || echo "nccl socket failed" | tee -a "$LOG"
  fi
  step "proxyshmem forced through the network (ring + host-staged proxy over tcp;ofi_rxm)"
  PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp timeout 400 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 8 -e $NET_MAX -n 3 --window 16 \
    --json "$OUT/pshmem-network-bw.json" >> "$LOG" 2>&1 || echo "pshmem network bw failed" | tee -a "$LOG"
  # The same with 4 tcp endpoints (rails) per PE, larger staging chunks and more landing slots
  # (more bytes in flight per target, spread over 4 connections).
  PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp PSHMEM_RAILS=4 PSHMEM_STAGING_CHUNK=4194304 PSHMEM_GPU_LANDING_SLOTS=8 timeout 300 \
    "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 16384 -e $NET_MAX -n 3 --window 16 \
    --json "$OUT/pshmem-network-bw-tuned.json" >> "$LOG" 2>&1 || echo "pshmem network bw (tuned) failed" | tee -a "$LOG"
  # Smaller landing slots, more of them (the same pinned bytes per peer): puts below the
  # staging chunk no longer take a whole 1 MiB slot each, so more of them are in flight.
  PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp PSHMEM_STAGING_CHUNK=262144 PSHMEM_GPU_LANDING_SLOTS=16 timeout 300 \
    "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" put_bw -b 16384 -e $NET_MAX -n 3 --window 16 \
    --json "$OUT/pshmem-network-bw-slots.json" >> "$LOG" 2>&1 || echo "pshmem network bw (small slots) failed" | tee -a "$LOG"
  PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp timeout 120 "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" p_latency -n 5 --window 50 \
    --json "$OUT/pshmem-network-lat.json" >> "$LOG" 2>&1 || echo "pshmem network latency failed" | tee -a "$LOG"
  step "profile: proxy trace of the network path's puts (1 MiB and 16 MiB, 2 windows each)"
  for sz in 1048576 16777216; do
    PSHMEM_LOG=info PSHMEM_TRACE="$OUT/trace-$sz" PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp timeout 120 "$BIN/pshmrun" -n 2 -- \
      "$BIN/pshmem-perf" put_bw -b $sz -e $sz -n 2 -w 0 --window 16 >> "$LOG" 2>&1 || echo "traced network put $sz failed" | tee -a "$LOG"
    rm -f "$OUT"/trace-$sz.*[0-9].json  # keep the summaries; the full traces are large
  done

  step "ceiling: raw libfabric (tcp;ofi_rxm) write bandwidth and latency between the same 2 processes' hosts"
  timeout 300 "$BIN/pshmrun" -n 2 -- "$BIN/fabric-bench" --provider tcp --min 16384 --max 67108864 --reps 3 --window 16 \
    --json "$OUT/fabric-tcp.json" >> "$LOG" 2>&1 || echo "fabric-bench tcp failed" | tee -a "$LOG"

fi
unset PSHMEM_GPU_SYMMETRIC_SIZE

if want machinery; then
  step "proxy machinery"
  {
    "$BIN/pshmem-gpu-tests" mailbox --iters 20000
    "$BIN/pshmem-gpu-tests" ring-latency --iters 20000
    for p in 1 2 4; do "$BIN/pshmem-gpu-tests" ring-rate --blocks 132 --threads 128 --per-warp 4000 --proxies $p; done
    # One proxy thread draining 2 and 4 rings: its capacity when one ring's GPU producers
    # (contending on one head counter) are not the limit.
    for k in 2 4; do "$BIN/pshmem-gpu-tests" ring-rate --blocks 132 --threads 128 --per-warp 4000 --proxies 1 --rings-per-proxy $k; done
    # Per GPU with several proxy threads and rings (the MoE layout: 8 rings over 4 threads).
    "$BIN/pshmem-gpu-tests" ring-rate --blocks 132 --threads 128 --per-warp 4000 --proxies 4 --rings-per-proxy 2
    "$BIN/pshmem-gpu-tests" ring-rate --blocks 132 --threads 128 --per-warp 4000 --proxies 8 --rings-per-proxy 1
  } 2>&1 | tee "$OUT/proxy.log" >> "$LOG"

fi

python3 benches/gpu/merge.py "$OUT" "$OUT/result.json" | tee -a "$LOG"
# One archive of everything but the compiled program (device tools return few files).
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" --exclude=nvshmem_bench "$(basename "$OUT")"
grep -E "failed" "$LOG" && echo "bench-gpu: some steps FAILED" || echo "bench-gpu: done"
