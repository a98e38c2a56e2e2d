#!/usr/bin/env bash
# Checks that the NVSHMEM-style tree works as NVSHMEM_HOME for the two build systems an existing
# project uses: a C program built with the flags `pkg-config --cflags --libs nvshmem` gives, and
# the same program through CMake's find_package(NVSHMEM) and nvshmem::nvshmem_host; each is run
# (one PE, no launcher, no GPU needed). Usage: check.sh NVSHMEM_HOME CUDA_INCLUDE_DIR OUT_DIR
set -euo pipefail
TREE="$(cd "$1" && pwd)"
CUDA_INC="$(cd "$2" && pwd)"
OUT="$3"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$TREE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A launcher's variables would make it wait for peers.
unset PSHMEM_RANK PSHMEM_WORLD_SIZE RANK WORLD_SIZE
# shellcheck disable=SC2046
gcc -std=c11 -Wall -Wextra -Werror -I"$CUDA_INC" -o "$OUT/hello-pkgconfig" "$HERE/hello.c" \
  $(PKG_CONFIG_PATH="$TREE/lib/pkgconfig" pkg-config --cflags --libs nvshmem)
"$OUT/hello-pkgconfig"
cmake -S "$HERE" -B "$OUT/cmake" -DCMAKE_PREFIX_PATH="$TREE" -DCUDA_INCLUDE_DIR="$CUDA_INC" >/dev/null
cmake --build "$OUT/cmake" >/dev/null
"$OUT/cmake/hello"
echo "packaging: pkg-config and CMake builds ran"
