#!/usr/bin/env bash
# Random faults on running jobs (pshmem-chaos): SIGKILL, SIGTERM, SIGSTOP (left stopped, or
# continued within 1.5 s) to a random rank, garbage and slow connections to the bootstrap port
# and the heap sockets, and SIGKILL to the launcher, at random moments of 2-8-PE jobs on the
# direct path, tcp through the proxy, the simulated fabric and shm. Counts hangs, orphans,
# leaked files, wrong blames, digest mismatches and disturbed jobs; exits non-zero on any.
# Usage: scripts/chaos.sh [TRIALS] [pshmem-chaos options, e.g. --seed S --json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet -p pshmem-tests -p pshmem-tools
exec ./target/release/pshmem-chaos "${1:-50}" "${@:2}"
