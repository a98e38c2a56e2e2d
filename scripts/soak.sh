#!/usr/bin/env bash
# A soak: fault-free jobs of 2-8 PEs on every path (pshmem-chaos --fault none: each job's
# digest compared with its path's reference, every rank gone after it, no file or descriptor
# left behind) back to back for SECONDS, in batches of 20. Sums the counters into a JSON
# summary; exits non-zero on any hang, orphan, leak, wrong blame, digest mismatch or
# disturbed job.
# Usage: scripts/soak.sh [SECONDS] [OUT_JSON]   (defaults: 600, soak.json)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-600}"
OUT="$(realpath -m "${2:-soak.json}")"
bash scripts/setup.sh
cargo build --release --quiet -p pshmem-tests -p pshmem-tools
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
start=$(date +%s)
batch=0
fail=0
while [ $(( $(date +%s) - start )) -lt "$SECS" ]; do
  batch=$((batch + 1))
  ./target/release/pshmem-chaos 20 --fault none --json "$DIR/b$batch.json" > "$DIR/b$batch.log" 2>&1 \
    || { fail=1; tail -20 "$DIR/b$batch.log" >&2; }
done
elapsed=$(( $(date +%s) - start ))
python3 - "$DIR" "$OUT" "$elapsed" <<'PY'
import glob, json, sys
d, out, elapsed = sys.argv[1], sys.argv[2], int(sys.argv[3])
tot = {}
for f in sorted(glob.glob(d + "/b*.json")):
    c = json.load(open(f))
    for k, v in c.items():
        if isinstance(v, int) and k != "seed":
            tot[k] = tot.get(k, 0) + v
tot["seconds"] = elapsed
tot["batches"] = len(glob.glob(d + "/b*.json"))
json.dump(tot, open(out, "w"), indent=1)
print("soak:", json.dumps(tot))
PY
exit "$fail"
