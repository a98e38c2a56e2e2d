#!/usr/bin/env bash
# Every side-by-side GPU measurement and the GPU test script, in one command per machine; then
# OUT/REPORT.md (benches/gpu/multi_report.py). Parts, each in its own folder under OUT:
#   test      scripts/gpu-test.sh (its parts: GPU_TEST_PARTS, default all) -> OUT/gpu-test-<parts>/;
#             its python part runs the Python examples beside torch.distributed (NCCL on 2 GPUs)
#   examples  scripts/nvshmem-compare.sh: examples/nvshmem/ by us and by NVSHMEM 3.4.5 -> OUT/examples/
#   p2p       scripts/bench-gpu.sh: NVLink put/get and p latency beside NVSHMEM, NCCL and the copy
#             engine; the staged network path beside NCCL's socket transport -> OUT/p2p/
#   coll      scripts/bench-coll.sh: every collective beside NCCL, 4 B ... 256 MiB -> OUT/coll/
#   ep        scripts/bench-ep.sh: MoE low-latency and normal mode at EP 2 and 4 (EP_SIZES), over
#             NVLink and forced through the proxy -> OUT/ep/
# MULTI_GPU_PARTS picks parts (default all), so that one run can be split over a machine's
# per-command time limit; each invocation appends a line to OUT/run.txt and regenerates the
# report from whatever the parts have left. MULTI_GPU_PART_LIMIT (seconds, default 3600) bounds
# each part, so that one part that hangs cannot take the others' time (on 2 H200s the NCCL
# baseline hung for a whole device call). Each invocation ends by packing OUT, without the
# compiled example programs, into OUT.tgz (a few hundred KiB: device tools return few, small
# files). On a build machine: scripts/multi-gpu-report.sh adds the point-to-point plots and
# files the result under benches/results/.
# Usage: scripts/multi-gpu.sh [BIN_DIR] [OUT_DIR]   (defaults: target/release, multi-gpu-out)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release}"
OUT="${2:-multi-gpu-out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PARTS=" ${MULTI_GPU_PARTS:-test examples p2p coll ep} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
NGPU="$(nvidia-smi -L 2>/dev/null | wc -l)"
if [ "$NGPU" -lt 1 ]; then
  echo "SKIP multi-gpu: no GPU (nvidia-smi lists none)"
  exit 0
fi
# What was built: the stamp a carried binary folder brings (BIN/../commit.txt), else the checkout's
# HEAD (a copied tree's git metadata can be older than its files).
COMMIT="$(cat "$BIN/../commit.txt" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
{ nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader; nvidia-smi topo -m | head -$((NGPU + 1)); } > "$OUT/machine.txt" 2>&1
echo "$(date -u +%FT%TZ) commit=$COMMIT gpus=$NGPU parts=${PARTS# } gpu_test_parts=${GPU_TEST_PARTS:-all}" >> "$OUT/run.txt"
fail=0
LIMIT="${MULTI_GPU_PART_LIMIT:-3600}"
part() { # name command...
  local name="$1" t0=$SECONDS
  shift
  echo "== multi-gpu: $name"
  # stdin from /dev/null: a part must never wait for input (CI and device calls have none).
  timeout -k 10 "$LIMIT" "$@" < /dev/null
  local rc=$?
  [ "$rc" -eq 124 ] && echo "multi-gpu: $name stopped at MULTI_GPU_PART_LIMIT=$LIMIT s"
  echo "$name rc=$rc seconds=$((SECONDS - t0))" >> "$OUT/parts.txt"
  [ "$rc" -eq 0 ] || fail=1
}
if want test; then
  tag="$(echo "${GPU_TEST_PARTS:-all}" | tr ' ' '-')"
  # The collectives beside NCCL are the coll part's; gpu-test need not run them a second time.
  part "test:$tag" env GPU_TEST_NO_COLL=1 bash scripts/gpu-test.sh "$BIN" "$OUT/gpu-test-$tag"
fi
want examples && part examples bash scripts/nvshmem-compare.sh "$BIN" "$OUT/examples"
want p2p && part p2p bash scripts/bench-gpu.sh "$BIN" "$OUT/p2p"
want coll && part coll bash scripts/bench-coll.sh "$BIN" "$OUT/coll"
# bench-ep imports the pshmem package (scripts/pshmem-python.sh finds it for BIN's build).
PYBIN=""
if want ep; then
  . scripts/pshmem-python.sh
  pshmem_python "$BIN"
fi
want ep && part ep env EP_SIZES="${EP_SIZES:-2 4}" bash scripts/bench-ep.sh "$BIN" "$OUT/ep" "${PYBIN:-python3}"
python3 benches/gpu/multi_report.py "$OUT" > "$OUT/REPORT.md" || fail=1
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" --exclude=examples/ours --exclude=examples/nvidia \
  --exclude=nvshmem_bench --exclude='*.tgz' "$(basename "$OUT")" || fail=1
echo "multi-gpu: $([ $fail = 0 ] && echo done || echo 'some parts FAILED') (report: $OUT/REPORT.md)"
exit $fail
