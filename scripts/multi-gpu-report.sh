#!/usr/bin/env bash
# Files one run of scripts/multi-gpu.sh under benches/results/NAME/: the parts' results and
# logs (not the compiled programs, nor files over 256 KiB such as full proxy traces and long compiler logs), the
# point-to-point tables and plots (scripts/gpu-report.sh), and REPORT.md regenerated from them.
# Usage: scripts/multi-gpu-report.sh OUT NAME   (NAME: the machine kind, e.g. h200-x2-multi)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC="$(cd "$1" && pwd)"
NAME="$2"
DST="benches/results/$NAME"
mkdir -p "$DST"
(cd "$SRC" && find . -type f -size -256k ! -path './examples/ours/*' ! -path './examples/nvidia/*' \
  ! -name nvshmem_bench ! -name '*.tgz' -print0) | while IFS= read -r -d '' f; do
  mkdir -p "$DST/$(dirname "$f")"
  cp "$SRC/$f" "$DST/$f"
done
if [ -f "$DST/p2p/result.json" ]; then
  bash scripts/gpu-report.sh "$DST/p2p/result.json" "$NAME/p2p/p2p"
fi
python3 benches/gpu/multi_report.py "$DST" "$NAME" > "$DST/REPORT.md"
echo "multi-gpu-report: $DST/REPORT.md"
