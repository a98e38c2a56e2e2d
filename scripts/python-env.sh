#!/usr/bin/env bash
# The project's Python environment, idempotently: a virtual environment in .venv with PyTorch,
# numpy, pytest and maturin (installed only when missing), then the `pshmem` package built from
# python/ (a release wheel in target/wheels) and installed into it whenever it changed.
# Prints the environment's python. Usage: scripts/python-env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${PSHMEM_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "python-env: creating $VENV" >&2
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
if ! "$PY" -c "import torch, numpy, pytest, maturin" 2>/dev/null; then
  echo "python-env: installing torch, numpy, pytest, maturin into $VENV (once)" >&2
  "$PY" -m pip install -q --disable-pip-version-check torch numpy pytest "maturin>=1.16,<2" >&2
fi
# maturin builds through cargo, which rebuilds only what changed.
"$VENV/bin/maturin" build --release --quiet -m python/Cargo.toml -o target/wheels >&2
WHEEL="$(ls -t target/wheels/pshmem-*-abi3-*.whl | head -1)"
STAMP="$VENV/.pshmem-wheel"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$(sha256sum "$WHEEL" | cut -d' ' -f1)" ]; then
  "$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WHEEL" >&2
  sha256sum "$WHEEL" | cut -d' ' -f1 > "$STAMP"
fi
echo "$PY"
