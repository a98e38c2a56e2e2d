#!/usr/bin/env bash
# Host-side benchmarks, each comparison side by side in one run, results as JSON plus a Markdown
# report (scripts/report.py):
#   fabric-bench            raw transport: our safe layer vs libfabric's C API posting on the
#                           same endpoint (tcp, shm)
#   datapath-bench vs-raw   the runtime through the proxy vs the raw transport on the proxy
#                           thread's own endpoint (tcp)
#   datapath-bench rate     ring + one proxy thread alone (instant transport)
#   pshmem-perf             every host-initiated perftest, direct path and through the proxy
# Usage: scripts/bench-host.sh OUT_DIR [BIN_DIR]     (REPS=N alternating repetitions, default 9;
#   PIN=0|1|auto core pinning, see below; SHM=1 adds the safe layer vs C over shm;
#   FABRIC_MIN=BYTES the smallest size of the safe layer vs C, default 64)
#   BIN_DIR defaults to target/release (built here with cargo); on a machine without Rust, pass
#   a folder holding pshmrun, fabric-bench, datapath-bench and pshmem-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: scripts/bench-host.sh OUT_DIR [BIN_DIR]}"
BIN="${2:-target/release}"
if [ "$BIN" = target/release ]; then
  bash scripts/setup.sh
  cargo build --release --quiet -p pshmem-tools -p pshmem-benches
fi
mkdir -p "$OUT"
export PSHMEM_SYMMETRIC_SIZE="${PSHMEM_SYMMETRIC_SIZE:-512M}" PSHMEM_PROVIDER=tcp
REPS="${REPS:-9}"
# On a machine with cores to spare, every busy thread gets a core of its own, so that the
# scheduler's placement does not decide a comparison: rank r's application thread on core
# 3 + 2r, its proxy thread on core 9 + 2r (odd cores, away from core 0's interrupts and, on a
# VM numbering hyperthreads in pairs, never two busy threads on one physical core). PIN=0
# turns it off.
PIN="${PIN:-auto}"
if [ "$PIN" = auto ]; then
  if [ "$(nproc)" -ge 12 ] && command -v taskset >/dev/null; then PIN=1; else PIN=0; fi
fi
if [ "$PIN" = 1 ]; then
  echo "== pinned: application threads on cores 3 + 2r, proxy threads on cores 9 + 2r"
  run2() {
    "$BIN/pshmrun" -n 2 --timeout 900 -- sh -c \
      'r=${PSHMEM_RANK:?}; PSHMEM_PROXY_CPU=$((9 + 2 * r)) exec taskset -c $((3 + 2 * r)) "$@"' _ "$@"
  }
  export RATE_PROXY_CPU=9
  # The rate measurement's own thread (filling rings, waiting for the counter) on core 3,
  # away from the proxy's core and its sibling.
  rate_pin() { taskset -c 3 "$@"; }
  echo "pinned: application threads on cores 3 + 2r, proxy threads on cores 9 + 2r (rate: proxy on core 9, filler on core 3)" > "$OUT/pinning.txt"
else
  rate_pin() { "$@"; }
  echo "== not pinned ($(nproc) cores)"
  echo "not pinned ($(nproc) cores)" > "$OUT/pinning.txt"
  run2() { "$BIN/pshmrun" -n 2 --timeout 900 -- "$@"; }
fi

date -u +"== %H:%M:%S fabric-bench (tcp): safe layer vs C API on its endpoint"
run2 "$BIN/fabric-bench" --provider tcp --min "${FABRIC_MIN:-64}" --max $((64 << 20)) --reps "$REPS" --json "$OUT/fabric-bench-tcp.json"
if [ "${SHM:-0}" = 1 ]; then
  # Opt-in: no network stack, so the layer's own cost shows. On the GPU hosts' containers the
  # shm provider stalled at the first size (2026-11-23), so it is off by default there.
  echo "== fabric-bench (shm): safe layer vs C API"
  timeout 300 "$BIN/pshmrun" -n 2 --timeout 300 -- "$BIN/fabric-bench" --provider shm --min 64 \
    --max $((64 << 20)) --reps "$REPS" --json "$OUT/fabric-bench-shm.json" || echo "== fabric-bench (shm) failed"
fi
date -u +"== %H:%M:%S datapath-bench vs-raw (tcp)"
run2 "$BIN/datapath-bench" vs-raw --min $((64 << 10)) --max $((64 << 20)) --reps "$REPS" --json "$OUT/datapath-vs-raw.json"
date -u +"== %H:%M:%S datapath-bench rate (instant transport)"
PSHMEM_PROXY_CPU="${RATE_PROXY_CPU:-${PSHMEM_PROXY_CPU:-}}" \
  rate_pin "$BIN/datapath-bench" rate --count 4000000 --reps "$REPS" --json "$OUT/datapath-rate.json"
date -u +"== %H:%M:%S pshmem-perf, direct path"
run2 "$BIN/pshmem-perf" all --device off -b 8 -e $((4 << 20)) -f 4 -n 100 -w 10 --json "$OUT/pshmem-perf-direct.json"
date -u +"== %H:%M:%S pshmem-perf, through the proxy (tcp)"
PSHMEM_DISABLE_P2P=1 run2 "$BIN/pshmem-perf" all --device off -b 8 -e $((4 << 20)) -f 4 -n 100 -w 10 --json "$OUT/pshmem-perf-proxy.json"
python3 scripts/report.py "$OUT" > "$OUT/REPORT.md"
echo "== wrote $OUT/REPORT.md"
