#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler (nvcc, from NVIDIA's PyPI wheels) into .tools/cuda,
# idempotently and quietly: kernels are compiled at build time on machines without a GPU or a
# CUDA installation. CUDA 13.0 exactly, because the GPU machines' driver (580) runs PTX of 13.0
# and older. Prints the nvcc path.
set -euo pipefail
cd "$(dirname "$0")/.."
PINS="nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85"
DIR=.tools/cuda
NVCC=$DIR/nvidia/cu13/bin/nvcc
if [ -x "$NVCC" ] && [ "$(cat "$DIR/.pins" 2>/dev/null)" = "$PINS" ]; then
  echo "$NVCC"
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "setup: installing python3-pip" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi
echo "setup: fetching CUDA 13.0 nvcc wheels into $DIR" >&2
rm -rf "$DIR" .tools/wheels
mkdir -p "$DIR" .tools/wheels
# `pip download` (not install) works under PEP 668 "externally managed" Pythons too.
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
  -d .tools/wheels $PINS
python3 - "$DIR" .tools/wheels <<'PY'
import os, stat, sys, zipfile, glob
dest, wheels = sys.argv[1], sys.argv[2]
for w in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
    with zipfile.ZipFile(w) as z:
        for info in z.infolist():
            path = z.extract(info, dest)
            mode = info.external_attr >> 16
            if mode:
                os.chmod(path, mode & 0o7777)
for sub in ("nvidia/cu13/bin", "nvidia/cu13/nvvm/bin"):
    d = os.path.join(dest, sub)
    for f in os.listdir(d):
        p = os.path.join(d, f)
        if os.path.isfile(p):
            os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
rm -rf .tools/wheels
"$NVCC" --version >/dev/null
echo "$PINS" > "$DIR/.pins"
echo "$NVCC"
