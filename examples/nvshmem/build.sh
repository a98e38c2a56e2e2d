#!/usr/bin/env bash
# Builds every example against an NVSHMEM-style tree, exactly as an NVSHMEM program is built:
#   nvcc [-rdc=true] prog.cu -I$NVSHMEM_HOME/include -L$NVSHMEM_HOME/lib -lnvshmem_host \
#        -lnvshmem_device -lcuda
# each single-file example twice (with and without -rdc), the two-file program both ways, a
# library loaded after init (both ways), the unique-id program's C host file with gcc, and the
# error-macro program (run here). Checks that the tile API's headers refuse to compile. Where
# no CUDA driver library exists (a build machine), -lcuda resolves to a stub made here, for
# linking only.
# Usage: build.sh NVSHMEM_HOME OUT_DIR [NVCC]
set -euo pipefail
HOME_TREE="$1"
OUT="$2"
NVCC="${3:-nvcc}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
ARCH="${NVCC_ARCH:--gencode arch=compute_90,code=[sm_90,compute_90]}"
LINK=(-L"$HOME_TREE/lib" -lnvshmem_host -lnvshmem_device -lcuda)
# A CUDA installed from NVIDIA's wheels keeps its libraries in lib/, not lib64/.
CUDA_ROOT="$(dirname "$(dirname "$(command -v "$NVCC" || echo "$NVCC")")")"
[ -e "$CUDA_ROOT/lib/libcudart_static.a" ] && LINK+=(-L"$CUDA_ROOT/lib")
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\b' && [ ! -e /usr/lib/x86_64-linux-gnu/libcuda.so ]; then
  mkdir -p "$OUT/stubs"
  printf 'void pshmem_cuda_stub(void) {}\n' > "$OUT/stubs/stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$OUT/stubs/libcuda.so" "$OUT/stubs/stub.c"
  LINK=(-L"$OUT/stubs" "${LINK[@]}")
  echo "build.sh: no CUDA driver library here: linking against a stub libcuda.so (link check only)"
fi
INC=(-I"$HOME_TREE/include")
built=0
for src in ring put_block ping_pong atomics team_split collective_launch on_stream collectives vector_waits; do
  # shellcheck disable=SC2086
  "$NVCC" $ARCH -O2 -o "$OUT/$src" "$HERE/$src.cu" "${INC[@]}" "${LINK[@]}"
  # shellcheck disable=SC2086
  "$NVCC" $ARCH -O2 -rdc=true -o "$OUT/$src.rdc" "$HERE/$src.cu" "${INC[@]}" "${LINK[@]}"
  built=$((built + 2))
done
# shellcheck disable=SC2086
"$NVCC" $ARCH -O2 -o "$OUT/two_file" "$HERE/two_file/main.cu" "$HERE/two_file/kernels.cu" "${INC[@]}" "${LINK[@]}"
# shellcheck disable=SC2086
"$NVCC" $ARCH -O2 -rdc=true -o "$OUT/two_file.rdc" "$HERE/two_file/main.cu" "$HERE/two_file/kernels.cu" "${INC[@]}" "${LINK[@]}"
# A CUDA library loaded with dlopen after init (plugin/), as a PyTorch extension is: with and
# without -rdc.
# shellcheck disable=SC2086
"$NVCC" $ARCH -O2 -shared -Xcompiler -fPIC -o "$OUT/libplugin.so" "$HERE/plugin/plugin.cu" "${INC[@]}" "${LINK[@]}"
# shellcheck disable=SC2086
"$NVCC" $ARCH -O2 -rdc=true -shared -Xcompiler -fPIC -o "$OUT/libplugin.rdc.so" "$HERE/plugin/plugin.cu" "${INC[@]}" "${LINK[@]}"
# shellcheck disable=SC2086
"$NVCC" $ARCH -O2 -o "$OUT/plugin_main" "$HERE/plugin/main.cu" "${INC[@]}" "${LINK[@]}" -ldl
built=$((built + 3))
# The C host file by gcc (against the CUDA runtime's headers for cudaStream_t), the kernels by nvcc.
CUDA_INC="$CUDA_ROOT/include"
gcc -std=c11 -Wall -Wextra -Werror -O2 -c "${INC[@]}" -I"$CUDA_INC" -o "$OUT/uniqueid_main.o" "$HERE/uniqueid/main.c"
# shellcheck disable=SC2086
"$NVCC" $ARCH -O2 -c -o "$OUT/uniqueid_kernel.o" "$HERE/uniqueid/kernel.cu" "${INC[@]}"
# shellcheck disable=SC2086
"$NVCC" $ARCH -o "$OUT/uniqueid" "$OUT/uniqueid_main.o" "$OUT/uniqueid_kernel.o" "${LINK[@]}"
built=$((built + 3))
# NVSHMEM's error macros and the headers nvshmemx.h reaches (no GPU needed: run here too).
gcc -std=c11 -Wall -Wextra -Werror -O2 "${INC[@]}" -I"$CUDA_INC" -o "$OUT/error_macros" "$HERE/error_macros.c"
"$OUT/error_macros" 2>/dev/null | grep -q "^OK error_macros" || { "$OUT/error_macros"; exit 1; }
built=$((built + 1))
# The tile API is refused at compile time, saying why.
printf '#include <nvshmem.h>\n#include <device_host/nvshmem_tensor.h>\n' > "$OUT/tile.cu"
# shellcheck disable=SC2086
if "$NVCC" $ARCH -c -o "$OUT/tile.o" "$OUT/tile.cu" "${INC[@]}" 2> "$OUT/tile.err"; then
  echo "build.sh: a program including device_host/nvshmem_tensor.h compiled (the tile API must be refused)" >&2
  exit 1
fi
grep -q "does not provide NVSHMEM's tile API" "$OUT/tile.err" || { cat "$OUT/tile.err" >&2; exit 1; }
echo "build.sh: built $built programs into $OUT (the tile API refused at compile time, as it should be)"
