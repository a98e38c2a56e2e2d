#!/usr/bin/env bash
# Builds what the GPU scripts need on a GPU machine without Rust, into one folder to carry there
# (the device tool's `carry`; /.device is git-ignored):
#   bin/           the release programs the GPU scripts run, stripped, and libpshmem.so
#   wheels/        the pshmem wheel (scripts/pshmem-python.sh installs it there)
#   nvshmem-home/  the NVSHMEM-style tree (scripts/nvshmem-home.sh) for the examples' builds
#   commit.txt     the commit built ("-dirty" with uncommitted changes); multi-gpu.sh records it
# Then on the GPU machine: bash scripts/multi-gpu.sh .device/bin OUT (or gpu-test.sh, bench-*.sh).
# Stripped, the folder is about 35 MB; the tool carries 64 MiB with the working tree, so the
# script fails above BUNDLE_MAX_MB (default 48).
# With BUNDLE_LIBFABRIC=2: the programs of the registered-GPU-heap runs only (pshmrun,
# pshmem-info, pshmem-gpu-tests, pshmem-perf, fabric-bench, the wheel), built against the
# CUDA-enabled libfabric 2.x of scripts/setup-libfabric.sh (in target/libfabric2), with that
# library in DIR/lib (about 22 MB; gpu-test.sh's `registered` part puts DIR/lib first).
# Usage: scripts/device-bundle.sh [DIR]   (default .device)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.device}"
bash scripts/setup.sh
PROGRAMS="pshmrun pshmem-info pshmem-gpu-tests pshmem-perf fabric-bench datapath-bench pshmem-testbin libpshmem.so"
RELEASE=target/release
if [ "${BUNDLE_LIBFABRIC:-}" = 2 ]; then
  PREFIX="$(bash scripts/setup-libfabric.sh)"
  export PSHMEM_LIBFABRIC_PREFIX="$PREFIX" CARGO_TARGET_DIR=target/libfabric2
  PROGRAMS="pshmrun pshmem-info pshmem-gpu-tests pshmem-perf fabric-bench"
  RELEASE=target/libfabric2/release
fi
cargo build --release --quiet -p pshmem-tests -p pshmem-tools -p pshmem-benches -p pshmem-capi
# The wheel needs maturin only: the project's environment has it when scripts/python-env.sh ran;
# otherwise a small environment of its own (no torch).
MATURIN=.venv/bin/maturin
if [ ! -x "$MATURIN" ]; then
  MATURIN=.tools/maturin-venv/bin/maturin
  if [ ! -x "$MATURIN" ]; then
    python3 -m venv .tools/maturin-venv
    .tools/maturin-venv/bin/pip install -q --disable-pip-version-check "maturin>=1.16,<2"
  fi
fi
WHEELS="$(mktemp -d)"
"$MATURIN" build --release --quiet -m python/Cargo.toml -o "$WHEELS" >&2
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/wheels"
for f in $PROGRAMS; do
  strip -o "$DIR/bin/$f" "$RELEASE/$f"
done
cp "$WHEELS"/pshmem-*.whl "$DIR/wheels/"
rm -rf "$WHEELS"
if [ "${BUNDLE_LIBFABRIC:-}" = 2 ]; then
  mkdir -p "$DIR/lib"
  cp -a "$PREFIX"/lib/libfabric.so* "$DIR/lib/"
  echo "libfabric $(cat "$PREFIX/.stamp")" > "$DIR/libfabric.txt"
else
  PSHMEM_SKIP_BUILD=1 bash scripts/nvshmem-home.sh "$DIR/nvshmem-home" > /dev/null
  cp "$DIR/bin/libpshmem.so" "$DIR/nvshmem-home/lib/libpshmem.so"
fi
commit="$(git rev-parse --short HEAD)"
git diff --quiet HEAD -- . ':!benches/results' || commit="$commit-dirty"
echo "$commit" > "$DIR/commit.txt"
mb="$(du -sm "$DIR" | cut -f1)"
echo "device-bundle: $DIR ($mb MB, commit $commit)"
if [ "$mb" -gt "${BUNDLE_MAX_MB:-48}" ]; then
  echo "device-bundle: $DIR is $mb MB, over BUNDLE_MAX_MB=${BUNDLE_MAX_MB:-48}: the device tool carries 64 MiB with the working tree" >&2
  exit 1
fi
