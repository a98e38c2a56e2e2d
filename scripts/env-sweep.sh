#!/usr/bin/env bash
# The environment sweep: every variable of the table set to values it must refuse (malformed,
# out of bounds, naming nothing usable), each in a one-PE job that must stop at init within
# 10 s with an error naming the variable. Writes the table as JSON; exits non-zero on any
# setting that crashed, hung, was accepted silently or was refused without naming itself.
# CI runs the same test (tests/tests/env_sweep.rs) through scripts/test.sh.
# Usage: scripts/env-sweep.sh [OUT_JSON]   (default: env-sweep.json)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="$(realpath -m "${1:-env-sweep.json}")"
bash scripts/setup.sh
PSHMEM_SWEEP_JSON="$OUT" cargo test --release --quiet -p pshmem-tests --test env_sweep -- --nocapture
echo "env-sweep: table in $OUT"
