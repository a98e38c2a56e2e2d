#!/usr/bin/env bash
# Runs the whole test suite (installing what it needs first): every crate's unit and
# multi-process tests, the Python package's tests, the NVSHMEM compatibility builds, a scan of
# the kernels' machine code (scripts/sass-check.sh), a short run of random faults on running
# jobs (scripts/chaos.sh), the transport and multi-process suites again against libfabric 2.x
# (built from source once, scripts/setup-libfabric.sh), then the
# loom model checks of the command ring (a separate build with --cfg loom, in its own target
# folder so the main build stays cached).
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests set every setting they test: ones the caller exported (an EFA image's
# FI_PROVIDER=efa, a PSHMEM_PROVIDER, torchrun's RANK or a launcher's ranks of an enclosing
# job) would change which provider and bootstrap every rank uses, so they are dropped, and
# said so.
for v in $(compgen -e | grep -E '^(PSHMEM|NVSHMEM)_' || true) FI_PROVIDER RANK WORLD_SIZE \
  LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
  PMI_RANK PMI_SIZE SLURM_PROCID SLURM_STEP_NUM_TASKS; do
  if [ -n "${!v+x}" ]; then
    echo "test: ignoring $v=${!v} from the environment" >&2
    unset "$v"
  fi
done
bash scripts/setup.sh
# Tests that cannot do a part here (no GPU, not root) record why in this file
# (pshmem_tests::skipped; cargo shows nothing a passing test printed); every line is printed when
# the run ends, passed or failed, so the log shows each skip.
export PSHMEM_TEST_SKIPS="$PWD/target/test-skips.log"
mkdir -p target
: >"$PSHMEM_TEST_SKIPS"
skips() {
  if [ -s "$PSHMEM_TEST_SKIPS" ]; then
    echo "test: $(sort -u "$PSHMEM_TEST_SKIPS" | wc -l) skipped part(s) (each says why):"
    sort -u "$PSHMEM_TEST_SKIPS" | sed 's/^/  /'
  else
    echo "test: no test skipped a part"
  fi
}
trap skips EXIT
cargo test --workspace --release --quiet
# The multi-process tests of the proxy paths again, with the simulated fabric given EFA's
# capabilities (PSHMEM_SIM_PROFILE=efa: 4-byte immediates, no native atomics, 32-byte inject,
# 8 KiB sends). The host-staged GPU path needs 8 bytes of CQ data and refuses this profile by
# design (its refusal is a test of its own), so its comparison is skipped here.
PSHMEM_SIM_PROFILE=efa cargo test --release --quiet -p pshmem-tests \
  --test runtime --test collectives --test faults \
  -- --skip the_host_staged_gpu_path_matches_the_direct_path
PSHMEM_SIM_PROFILE=efa cargo test --release --quiet -p pshmem-capi --test capi
# The Python package (python/): the project's environment (.venv with torch, pytest, maturin;
# the pshmem wheel built and installed by scripts/python-env.sh), its pytest suite and the MoE
# tests of pshmem.ep (ep/tests) in host mode (jobs of several processes on this CPU, the
# examples of examples/python/ among them; the GPU tests skip without a GPU), then the wheel
# installed into a clean virtual environment.
cargo build --release --quiet -p pshmem-tools
PY="$(bash scripts/python-env.sh)"
"$PY" -m pytest -q -rs python/tests ep/tests
bash python/check-wheel.sh
# The NVSHMEM compatibility layer as its users build against it: the install tree, every
# example of examples/nvshmem/ built by the pinned nvcc against the compat headers and library
# names only (with and without -rdc; run on GPU machines by scripts/gpu-test.sh), and host
# programs built through the tree's pkg-config file and CMake package, run as 1-PE jobs.
tree="$(bash scripts/nvshmem-home.sh)"
bash examples/nvshmem/build.sh "$tree" target/nvshmem-examples "$(bash scripts/setup-cuda.sh)"
bash examples/nvshmem/packaging/check.sh "$tree" .tools/cuda/nvidia/cu13/include target/nvshmem-packaging
# The machine code of our kernels and of those examples (our headers inlined into users'
# kernels), scanned for a ptxas miscompile of 16-bit float byte stores (scripts/sass-check.sh).
bash scripts/sass-check.sh
bash scripts/chaos.sh 24
# libfabric 2.x, what EFA hosts run (scripts/setup-libfabric.sh: Debian trixie's 2.1.0 built
# into .tools/libfabric, about a minute once): the transport, runtime, collectives and EFA
# profile suites again, compiled against its headers and run against it (their own target
# folder, so the main build stays cached; its binaries need 2.x's symbols, so they cannot load
# the system's 1.17 by mistake). pshmem-info then shows which library ran and that its efa
# provider is there without a device.
lf="$(bash scripts/setup-libfabric.sh)"
(
  export PSHMEM_LIBFABRIC_PREFIX="$lf" CARGO_TARGET_DIR=target/libfabric2 LD_LIBRARY_PATH="$lf/lib"
  cargo test --release --quiet -p pshmem-transport -p pshmem-tests \
    --test transport --test runtime --test collectives --test efa
  PSHMEM_SIM_PROFILE=efa cargo test --release --quiet -p pshmem-tests --test runtime \
    --test collectives -- --skip the_host_staged_gpu_path_matches_the_direct_path
  cargo build --release --quiet -p pshmem-tools
  target/libfabric2/release/pshmem-info | sed -n '/== libfabric/,/^efa:/p' | tee target/libfabric2/info.txt
  grep -q "^== libfabric 2\." target/libfabric2/info.txt
  grep -q "^efa: present" target/libfabric2/info.txt
)
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --release --quiet -p pshmem-ring --test loom
