#!/usr/bin/env bash
# Measurements for the EFA data path work (issue 37) that machines without EFA can give (parts:
# EFA_PATH_PARTS, default "sim perf ll moe"; sim runs anywhere, the others need 2 GPUs):
# 1. doorbell batching (PSHMEM_OFI_MORE) off and on, alternating, through the proxy over tcp
#    between 2 GPUs: device-initiated message rate and put bandwidth (pshmem-perf);
# 2. the MoE low-latency kernels' send/receive split with each EP rank on a GPU of its own
#    (EP 2 and, with 4 GPUs, EP 4), over NVLink/IPC and through the proxy (tcp): the kernel
#    times the EFA model (benches/efa-model) takes as input;
# 3. the MoE kernels' message streams through the proxy on the simulated efa profile (below).
# Writes OUT/sim.json (and the traces), OUT/perf-more*.json, OUT/ll-*.out, OUT/moe-efa.json,
# OUT/bench-efa-path.log.
# Usage: scripts/bench-efa-path.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, efa-path-out)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-efa-path-out}"
mkdir -p "$OUT"
LOG="$OUT/bench-efa-path.log"
: > "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PSHMEM_OP_TIMEOUT=60 CUDA_MODULE_LOADING=EAGER
PARTS=" ${EFA_PATH_PARTS:-sim perf ll moe} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
# 0. (any machine) The simulated efa profile through the proxy: rt-ops at 2, 4 and 8 PEs over 4
#    simulated NICs with delays, reordering and 5 % duplicated completions, and 5 puts of 4 MiB
#    (with signal) over 4 rails of tcp and of the simulated fabric, each traced: the gates,
#    holds, duplicates and bytes per rail of every proxy thread (OUT/sim.json).
if want sim; then
  SIM="PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=sim PSHMEM_SIM_PROFILE=efa PSHMEM_SIM_DELAY_US=200"
  for n in 2 4 8; do
    for strong in 0 1; do
      name="sim-ops-$n-strong$strong"
      rm -rf "$OUT/$name"; mkdir -p "$OUT/$name"
      echo "== $name" | tee -a "$LOG"
      env $SIM PSHMEM_RAILS=4 PSHMEM_SIM_DUPLICATE=0.05 PSHMEM_EMULATE_GPU_HEAP=registered \
        PSHMEM_STRONG_SIGNALS=$strong PSHMEM_SYMMETRIC_SIZE=64M PSHMEM_TRACE="$OUT/$name/t" \
        timeout 120 "$BIN/pshmrun" -n "$n" -- "$BIN/pshmem-testbin" rt-ops >> "$LOG" 2>&1 \
        || echo "$name failed" | tee -a "$LOG"
    done
  done
  for prov in tcp sim; do
    name="rails-$prov"
    rm -rf "$OUT/$name"; mkdir -p "$OUT/$name"
    echo "== $name" | tee -a "$LOG"
    envs="PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=$prov"
    [ "$prov" = sim ] && envs="$SIM"
    env $envs PSHMEM_RAILS=4 PSHMEM_SYMMETRIC_SIZE=64M PSHMEM_TRACE="$OUT/$name/t" timeout 120 \
      "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-testbin" rt-trace --count 5 --size 4194304 --signal \
      >> "$LOG" 2>&1 || echo "$name failed" | tee -a "$LOG"
  done
  python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
runs = {}
for d in sorted(glob.glob(os.path.join(out, "sim-ops-*")) + glob.glob(os.path.join(out, "rails-*"))):
    sums = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, "*.summary.json")))]
    keys = ("messages", "gates", "fence_gates", "fence_marks", "holds", "duplicates")
    runs[os.path.basename(d)] = {
        "threads": len(sums),
        **{k: sum(s.get(k, 0) for s in sums) for k in keys},
        "busy_us_per_message": [s.get("busy_us_per_message") for s in sums],
        "rail_bytes": [s.get("rail_bytes") for s in sums],
    }
json.dump(runs, open(os.path.join(out, "sim.json"), "w"), indent=1)
for k, v in runs.items():
    print(k, json.dumps(v))
PY
fi
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
# Part moe counts messages, which do not depend on how PEs share GPUs: one GPU (under MPS)
# serves it; the timed parts need 2.
if [ "$NGPU" -lt 2 ] && { [ "$NGPU" -lt 1 ] || want perf || want ll; }; then
  echo "SKIP bench-efa-path: needs 2 GPUs (found $NGPU; part moe alone runs on 1)" | tee -a "$LOG"
  exit 0
fi
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUT/machine.txt" 2>&1
for round in 1 2; do
  want perf || break
  for more in 0 16; do
    name="perf-more$more-r$round"
    echo "== $name" | tee -a "$LOG"
    env PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp PSHMEM_OFI_MORE=$more timeout 120 \
      "$BIN/pshmrun" -n 2 -- "$BIN/pshmem-perf" msg_rate put_bw -b 8 -e 65536 -f 8 -n 30 \
      --json "$OUT/$name.json" >> "$LOG" 2>&1 || echo "$name failed" | tee -a "$LOG"
  done
done
. scripts/pshmem-python.sh
pshmem_python "$BIN"
if [ -z "${PYBIN:-}" ]; then
  echo "SKIP LL kernel split: no python with torch and pshmem" | tee -a "$LOG"
  exit 0
fi
ARGS="--tokens 128 --hidden 7168 --topk 8 --experts-per-rank 8"
for n in 2 4; do
  want ll || break
  [ "$n" -le "$NGPU" ] || continue
  for path in direct proxy sim-efa; do
    envs="PSHMEM_GPU_RINGS=8"
    [ "$path" = proxy ] && envs="$envs PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp"
    # EFA's capabilities simulated, the GPU heap registered (no host staging), 2 rails, traced.
    [ "$path" = sim-efa ] && envs="$envs PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=sim \
      PSHMEM_SIM_PROFILE=efa PSHMEM_SIM_GPU_MEMORY=1 PSHMEM_RAILS=2 PSHMEM_TRACE=$OUT/trace-ep$n/t"
    name="ll-ep$n-$path"
    iters="--iters 30"; [ "$path" = sim-efa ] && iters="--iters 10 --warmup 2"
    echo "== $name" | tee -a "$LOG"
    mkdir -p "$OUT/trace-ep$n"
    env $envs timeout 200 "$BIN/pshmrun" -n "$n" -- "$PYBIN" ep/bench/ll_bench.py $ARGS $iters \
      --label "$name" > "$OUT/$name.out" 2>> "$LOG" || echo "$name failed" | tee -a "$LOG"
    grep -o '{"label".*' "$OUT/$name.out" | tee -a "$LOG"
  done
done
# 3. The MoE kernels through the proxy on the efa profile, the GPU heap registered, traced
#    (part moe): low latency (128 tokens, hidden 7168, top-8, 8 experts per rank) at EP 2, 4
#    and 8, the dispatch alone and dispatch + combine; the normal mode on two emulated nodes at
#    EP 2, 4 and 8 (1024 tokens: the simulated NIC copies synchronously), the full dispatch alone
#    and full + cached dispatch + combine. More PEs than GPUs share them under MPS (one GPU
#    will do).
#    OUT/moe-efa.json (ep/bench/efa_moe.py): per operation per PE, the MoE's posts and bytes;
#    signal and fence gates, holds; busy µs per message; proxy threads.
if want moe; then
  . scripts/mps.sh
  mps_needed "$NGPU" 8 && mps_start && trap mps_stop EXIT
  SIMG="PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=sim PSHMEM_SIM_PROFILE=efa PSHMEM_SIM_GPU_MEMORY=1 PSHMEM_RAILS=2"
  for n in 2 4 8; do
    for only in dispatch both; do
      name="moe-ll-ep$n-$only"
      rm -rf "$OUT/$name"; mkdir -p "$OUT/$name"
      echo "== $name" | tee -a "$LOG"
      env $SIMG PSHMEM_GPU_RINGS=8 PSHMEM_TRACE="$OUT/$name/t" timeout 300 "$BIN/pshmrun" -n "$n" -- \
        "$PYBIN" ep/bench/ll_bench.py $ARGS --only "$only" --iters 10 --warmup 0 --label "$name" \
        > "$OUT/$name.out" 2>> "$LOG" || echo "$name failed" | tee -a "$LOG"
      rm -f "$OUT/$name"/t.*[0-9].json  # the Chrome traces; the summaries stay
    done
  done
  for n in 2 4 8; do
    # Every PE's kernels must be resident at once (they wait for each other): more than 6 PEs
    # on a GPU take 8 SMs each (4 channels) instead of the benchmark's 20 (10 channels).
    sms=20; [ $(( (n + NGPU - 1) / NGPU * 20 )) -gt 128 ] && sms=8
    for only in dispatch all; do
      name="moe-ht-ep$n-$only"
      rm -rf "$OUT/$name"; mkdir -p "$OUT/$name"
      echo "== $name" | tee -a "$LOG"
      env $SIMG PSHMEM_TRACE="$OUT/$name/t" timeout 300 "$BIN/pshmrun" -n "$n" --hosts 2 -- \
        "$PYBIN" ep/bench/ht_bench.py --tokens 1024 --num-sms $sms --only "$only" --iters 3 --warmup 0 \
        --label "$name" > "$OUT/$name.out" 2>> "$LOG" || echo "$name failed" | tee -a "$LOG"
      rm -f "$OUT/$name"/t.*[0-9].json
    done
  done
  # ep/bench/efa_moe.py knows how many calls each run above made (keep them in step).
  python3 ep/bench/efa_moe.py "$OUT" | tee -a "$LOG"
fi
# The simulated efa runs' proxy traces: messages, signal gates, holds, busy time per message.
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
for d in sorted(glob.glob(os.path.join(out, "trace-ep*"))):
    sums = [json.load(open(f)) for f in glob.glob(os.path.join(d, "*.summary.json"))]
    if not sums:
        continue
    keys = ("operations", "messages", "bytes", "gates", "fence_gates", "fence_marks", "holds", "duplicates")
    row = {k: sum(s.get(k, 0) for s in sums) for k in keys}
    row["busy_us_per_message"] = sorted(s.get("busy_us_per_message") for s in sums)
    print(os.path.basename(d), json.dumps(row))
PY
