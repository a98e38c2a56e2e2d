#!/usr/bin/env bash
# The MoE benchmarks, one command (EP_MODES: "ll ht" by default). Low latency (issue 19): pshmem.ep.Buffer dispatch/combine at
# 128 tokens per rank, hidden 7168, top-8, 8 experts per rank, FP8 dispatch / BF16 combine, at
# EP 2, 4 and 8 (several PEs share one GPU under CUDA MPS when there are fewer GPUs), over
# NVLink/IPC ("direct") and forced through the proxy ("proxy": host-staged over tcp), with
# batched (one message per destination rank) and per-token messages. On the proxy path a
# second, traced run (PSHMEM_TRACE) counts the messages each dispatch posts and the proxy time
# per message. Writes OUT/ep*-*.out (one JSON line per rank), OUT/ep-ll.json (merged) and
# OUT/ep-ll.md.
# Usage: scripts/bench-ep.sh [BIN_DIR] [OUT_DIR] [PYTHON]
#   (defaults: target/release, bench-ep-out, the project's .venv or python3)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-bench-ep-out}"
PY="${3:-python3}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
if [ "$NGPU" -lt 1 ] || ! "$PY" -c "import torch, pshmem.ep" 2>/dev/null; then
  echo "SKIP bench-ep: needs a GPU and the pshmem package with torch ('$PY')"
  exit 0
fi
LOG="$OUT/bench-ep.log"
: > "$LOG"
# Several EP ranks per GPU where the sizes outnumber the GPUs: under MPS (scripts/mps.sh).
. scripts/mps.sh
MOST=0
for n in ${EP_SIZES:-2 4 8}; do [ "$n" -gt "$MOST" ] && MOST=$n; done
if mps_needed "$NGPU" "$MOST" && mps_start; then
  trap mps_stop EXIT
fi
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUT/machine.txt" 2>&1
export PSHMEM_OP_TIMEOUT=60
# 8 GPU rings (DeepEP's num_qps_per_rank = experts per rank; per-token messages spread over
# them by destination rank, batched ones take ring 0).
export PSHMEM_GPU_RINGS="${PSHMEM_GPU_RINGS:-8}"
MODES=" ${EP_MODES:-ll ht} "
ARGS="--tokens 128 --hidden 7168 --topk 8 --experts-per-rank 8 --iters ${EP_ITERS:-30}"
for n in ${EP_SIZES:-2 4 8}; do
  [[ "$MODES" == *" ll "* ]] || break
  for path in direct proxy; do
    envs=""
    [ "$path" = proxy ] && envs="PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp"
    # Over NVLink/IPC no message is posted: the message mode only matters through the proxy.
    msgs="batched"; [ "$path" = proxy ] && msgs="batched per_token"
    for msg in $msgs; do
      flag=""; [ "$msg" = per_token ] && flag="--per-token"
      name="ep$n-$path-$msg"
      echo "== $name" | tee -a "$LOG"
      env $envs timeout 150 "$BIN/pshmrun" -n "$n" -- "$PY" ep/bench/ll_bench.py $ARGS $flag \
        --label "$name" > "$OUT/$name.out" 2>> "$LOG" || echo "$name failed" | tee -a "$LOG"
      grep -o '{"label".*' "$OUT/$name.out" | tee -a "$LOG"
      if [ "$path" = proxy ]; then
        rm -rf "$OUT/trace-$name"; mkdir -p "$OUT/trace-$name"
        env $envs PSHMEM_TRACE="$OUT/trace-$name/t" timeout 150 "$BIN/pshmrun" -n "$n" -- "$PY" \
          ep/bench/ll_bench.py $ARGS $flag --only dispatch --iters 10 --warmup 0 \
          --label "$name-traced" > "$OUT/$name-traced.out" 2>> "$LOG" || echo "$name traced failed" | tee -a "$LOG"
      fi
    done
  done
done
[[ "$MODES" == *" ll "* ]] && "$PY" ep/bench/report.py "$OUT" | tee -a "$LOG"
# The normal (high-throughput) mode (issue 20): 4096 tokens per rank, hidden 7168, top-8 of 256
# experts, FP8 dispatch / BF16 combine, at EP 2, 4 and 8: one node over IPC ("direct"), one
# node through the proxy (host-staged tcp), and two emulated nodes (tcp between them, IPC
# inside); a traced run of each proxied configuration counts what a dispatch posts. EP_HT_PATHS
# picks among those three paths.
if [[ "$MODES" == *" ht "* ]]; then
  for n in ${EP_SIZES:-2 4 8}; do
    for path in ${EP_HT_PATHS:-direct proxy nodes2}; do
      envs=""; hosts=1
      [ "$path" = proxy ] && envs="PSHMEM_DISABLE_P2P=1 PSHMEM_PROVIDER=tcp"
      [ "$path" = nodes2 ] && envs="PSHMEM_PROVIDER=tcp" && hosts=2
      name="ht$n-$path"
      echo "== $name" | tee -a "$LOG"
      env $envs timeout 200 "$BIN/pshmrun" -n "$n" --hosts $hosts -- "$PY" ep/bench/ht_bench.py \
        --iters "${EP_HT_ITERS:-8}" --label "$name" > "$OUT/$name.out" 2>> "$LOG" || echo "$name failed" | tee -a "$LOG"
      grep -o '{"label".*' "$OUT/$name.out" | head -1 | tee -a "$LOG"
      if [ "$path" != direct ]; then
        rm -rf "$OUT/trace-$name"; mkdir -p "$OUT/trace-$name"
        env $envs PSHMEM_TRACE="$OUT/trace-$name/t" timeout 200 "$BIN/pshmrun" -n "$n" --hosts $hosts -- "$PY" \
          ep/bench/ht_bench.py --only dispatch --iters 3 --warmup 0 --label "$name-traced" \
          > "$OUT/$name-traced.out" 2>> "$LOG" || echo "$name traced failed" | tee -a "$LOG"
      fi
    done
  done
  "$PY" ep/bench/ht_report.py "$OUT" | tee -a "$LOG"
fi
