#!/usr/bin/env bash
# The built wheel installs into a clean virtual environment (no torch, no network) and works
# there: import, a 1-PE job, and the tensor API's message asking for torch.
# Usage: python/check-wheel.sh [WHEEL]   (default: the newest in target/wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL="${1:-$(ls -t target/wheels/pshmem-*-abi3-*.whl | head -1)}"
V="$(mktemp -d)"
trap 'rm -rf "$V"' EXIT
python3 -m venv "$V"
"$V/bin/python" -m pip install -q --disable-pip-version-check --no-index "$WHEEL"
cd "$V"
"$V/bin/python" - <<'PY'
import pshmem
with pshmem.init() as pe:
    assert (pe.my_pe, pe.n_pes) == (0, 1), pe
    try:
        pshmem.zeros(4)
    except ImportError as e:
        assert "pip install torch" in str(e), e
    else:
        raise SystemExit("torch is importable in a clean environment?")
print(f"check-wheel: pshmem {pshmem.__version__} installs and runs in a clean environment")
PY
