#!/usr/bin/env bash
# Runs the whole test suite (installing what it needs first): every crate's unit and
# multi-process tests, a short run of random faults on running jobs (scripts/chaos.sh), then the
# loom model checks of the command ring (a separate build with --cfg loom, in its own target
# folder so the main build stays cached).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --release --quiet
bash scripts/chaos.sh 24
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --release --quiet -p pshmem-ring --test loom
