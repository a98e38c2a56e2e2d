#!/usr/bin/env bash
# Installs what proxyshmem needs to build and test on Debian 12 / Ubuntu 24.04 (x86_64), idempotently:
# system packages through apt (only the missing ones), then nothing else unless asked.
# Quiet when everything is already present. Needs root (or sudo).
set -euo pipefail

PKGS=(build-essential pkg-config cmake libclang-dev libfabric-dev libfabric-bin libhwloc-dev hwloc libudev-dev libibverbs-dev python3 python3-venv openmpi-bin libopenmpi-dev)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: the Rust toolchain (cargo) is required: https://rustup.rs" >&2; exit 1; }

# The pinned CUDA compiler for the kernels (build-time only; no GPU or driver needed).
bash "$(dirname "$0")/setup-cuda.sh" >/dev/null
