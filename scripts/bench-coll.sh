#!/usr/bin/env bash
# The collectives beside NCCL, in one run on a machine of 2 or more GPUs: pshmem-perf's
# collective latencies (world team of 2 PEs on GPUs 0 and 1, and of 4 where there are 4 GPUs;
# the host's on-stream form, large messages on a grid, as NCCL's are; the one-block device form
# as well) and NCCL's through torch.distributed (benches/gpu/nccl_coll.py), 4 B ... 256 MiB per
# PE, then a Markdown table of both (benches/gpu/coll_table.py). COLL_PES overrides the PE
# counts. On fewer GPUs it says so and stops.
# Usage: scripts/bench-coll.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, bench-coll-out)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-bench-coll-out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "SKIP bench-coll: needs 2 GPUs (NCCL runs one rank per GPU)"
  exit 0
fi
MAX="${COLL_MAX:-268435456}"
# 2 PEs, and 4 where there are 4 GPUs (one PE per GPU, as NCCL's ranks): files of the 4-PE run
# carry "-4pe".
PES="2"
[ "$(nvidia-smi -L | wc -l)" -ge 4 ] && PES="2 4"
for n in ${COLL_PES:-$PES}; do
  sfx=""
  [ "$n" = 2 ] || sfx="-${n}pe"
  PSHMEM_GPU_SYMMETRIC_SIZE=3G "$BIN/pshmrun" -n "$n" -- "$BIN/pshmem-perf" sync_latency barrier_latency \
    bcast_latency fcollect_latency alltoall_latency reduce_latency reducescatter_latency \
    --coll stream -b 4 -e "$MAX" -f 4 -n 5 --json "$OUT/pshmem-coll$sfx.json" | tee "$OUT/pshmem-coll$sfx.log"
  PSHMEM_GPU_SYMMETRIC_SIZE=3G "$BIN/pshmrun" -n "$n" -- "$BIN/pshmem-perf" bcast_latency fcollect_latency \
    alltoall_latency reduce_latency reducescatter_latency -b 4 -e "$MAX" -f 4 -n 5 \
    --json "$OUT/pshmem-coll-block$sfx.json" | tee "$OUT/pshmem-coll-block$sfx.log"
  timeout 1200 python3 benches/gpu/nccl_coll.py "$OUT/nccl-coll$sfx.json" "$MAX" "$n" | tee "$OUT/nccl-coll$sfx.log"
  python3 benches/gpu/coll_table.py "$OUT/pshmem-coll$sfx.json" "$OUT/nccl-coll$sfx.json" | tee "$OUT/coll$sfx.md"
done
