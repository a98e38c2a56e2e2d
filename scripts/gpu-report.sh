#!/usr/bin/env bash
# Regenerates the issue-7 report (Markdown + PNG plots) from a bench-gpu result JSON.
# Usage: scripts/gpu-report.sh RESULT.json NAME  -> benches/results/NAME.{json,md}, NAME-*.png
# Installs its pinned plotting library into .tools/report-venv once.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC="$1"
NAME="$2"
VENV=.tools/report-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
  python3 -m venv "$VENV" 2>/dev/null || { apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$VENV"; }
  "$VENV/bin/pip" install -q matplotlib==3.9.2
fi
DST="benches/results/$NAME.json"
[ "$(realpath "$SRC")" = "$(realpath -m "$DST")" ] || cp "$SRC" "$DST"
"$VENV/bin/python" benches/gpu/report.py "$DST" "benches/results/$NAME"
