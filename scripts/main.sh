#!/usr/bin/env bash
# The main job on the embedded default: pshmem-perf on N PEs launched on this machine with
# pshmrun (host memory; libfabric tcp;ofi_rxm where there is no RDMA NIC). It runs twice: on the
# default path (same-host peers map each other's heaps and load/store directly), then forced
# through the command ring, the proxy threads and the transport (PSHMEM_DISABLE_P2P=1). Then the
# same from Python: examples/python/ring.py (the pshmem package on torch tensors, beside
# torch.distributed) on both paths.
# Usage: scripts/main.sh [N]   (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
N="${1:-2}"
cargo build --release --quiet -p pshmem-tools -p pshmem-benches
export PSHMEM_SYMMETRIC_SIZE="${PSHMEM_SYMMETRIC_SIZE:-256M}"
run() {
  ./target/release/pshmrun -n "$N" --timeout 600 -- ./target/release/pshmem-perf all -b 8 -e 4194304 -f 4 -n 50 -w 5
}
echo "== pshmrun -n $N pshmem-perf: default path (same-host peers direct)"
run
echo
echo "== pshmrun -n $N pshmem-perf: PSHMEM_DISABLE_P2P=1 (ring + proxy + ${PSHMEM_PROVIDER:-libfabric, default provider})"
PSHMEM_DISABLE_P2P=1 run
echo
PY="$(bash scripts/python-env.sh)"
echo "== pshmrun -n $N python examples/python/ring.py: default path, then PSHMEM_DISABLE_P2P=1"
./target/release/pshmrun -n "$N" --timeout 600 -- "$PY" examples/python/ring.py --device cpu
PSHMEM_DISABLE_P2P=1 ./target/release/pshmrun -n "$N" --timeout 600 -- "$PY" examples/python/ring.py --device cpu
