#!/usr/bin/env bash
# A/B of two builds of the Python package on the MoE benchmarks, side by side in one session:
# installs each wheel into its own directory, then runs scripts/bench-ep.sh with one and the
# other alternately, ROUNDS times (EP_MODES, EP_SIZES and the other bench-ep.sh variables pass
# through). Writes OUT/raw/<BATCH>-old-<round>/ and OUT/raw/<BATCH>-new-<round>/ (each
# configuration's per-rank JSON lines), then OUT/ab.{json,md,svg} (ep/bench/ab_report.py:
# every round's time per build and the ratio of the medians). Skips loudly without a GPU.
# Usage: scripts/ab-ep.sh BIN_DIR OLD_WHEEL_DIR NEW_WHEEL_DIR OUT_DIR [BATCH]
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { sed -n 2,9p "$0"; exit 2; }
BIN="$1"; OUT="$4"; BATCH="${5:-a}"; ROUNDS="${ROUNDS:-2}"
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 1 ]; then
  echo "ab-ep: SKIPPED — no GPU on this machine"; exit 0
fi
mkdir -p "$OUT/raw"
declare -A SITE
for v in old new; do
  wheels="$2"; [ "$v" = new ] && wheels="$3"
  SITE[$v]="$(mktemp -d)"
  python3 -m pip install -q --no-deps --no-index --target "${SITE[$v]}" "$wheels"/*.whl || exit 1
done
for r in $(seq 1 "$ROUNDS"); do
  for v in old new; do
    d="$OUT/raw/$BATCH-$v-$r"
    t0=$(date +%s)
    PYTHONPATH="${SITE[$v]}" bash scripts/bench-ep.sh "$BIN" "$d" python3 > "$d.stdout" 2>&1
    echo "ab-ep: $v round $r rc=$? in $(( $(date +%s) - t0 )) s"
    # Keep the per-rank lines; the traces' full event files are large.
    rm -rf "$d"/trace-*/t.*[0-9].json
  done
done
python3 ep/bench/ab_report.py "$OUT"
