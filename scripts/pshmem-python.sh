# Sourced by the GPU scripts: the Python that has the pshmem package (and torch) for BIN's build.
#   pshmem_python BIN   sets PYBIN ("" when there is none): in a checkout (BIN = target/release)
#                       the project's environment (scripts/python-env.sh); else python3 when it
#                       imports both; else python3 with the prebuilt wheel next to BIN
#                       (BIN/../wheels, a GPU machine without Rust) installed into a temporary
#                       directory that is put on PYTHONPATH.
pshmem_python() {
  PYBIN=""
  if [ "$1" = target/release ]; then
    PYBIN="$(bash scripts/python-env.sh)"
    return 0
  fi
  if python3 -c "import pshmem, torch" 2>/dev/null; then
    PYBIN=python3
    return 0
  fi
  local wheel site
  wheel="$(ls "$1"/../wheels/pshmem-*.whl 2>/dev/null | head -1)"
  { [ -n "$wheel" ] && python3 -c "import torch" 2>/dev/null; } || return 0
  site="$(mktemp -d)"
  python3 -m pip install -q --no-deps --no-index --target "$site" "$wheel" || return 0
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  PYBIN=python3
}
