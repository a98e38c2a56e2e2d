#!/usr/bin/env bash
# Runs the whole test suite (installing what it needs first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --release --quiet
