#!/usr/bin/env bash
# The main job on the embedded default: N PEs launched on this machine with pshmrun.
# Usage: scripts/main.sh [N]   (default 4)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
N="${1:-4}"
cargo build --release --quiet -p pshmem-bootstrap -p pshmem-tests
echo "== pshmrun -n $N: bootstrap collectives (allgather, alltoall, broadcast, barrier), verified byte-exact"
./target/release/pshmrun -n "$N" --timeout 300 -- ./target/release/pshmem-testbin bs-collectives --sizes 0,4096,1048576
echo "== pshmrun -n $N: allgather of 4 KiB, latency"
./target/release/pshmrun -n "$N" --timeout 300 -- ./target/release/pshmem-testbin bs-bench --size 4096 --iters 1000
