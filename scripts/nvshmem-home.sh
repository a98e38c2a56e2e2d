#!/usr/bin/env bash
# Builds the NVSHMEM-style install tree of the compatibility layer and prints its path, so that
# NVSHMEM_HOME=<that path> is all an existing NVSHMEM build needs:
#   include/  nvshmem.h, nvshmemx.h, non_abi/ (the error macros), device_host/ (refuses the tile
#             API) and proxyshmem's headers (pshmem/)
#   lib/      libpshmem.so; libnvshmem_host.so (a linker script naming libpshmem.so);
#             libnvshmem_device.a (the device API is header-only: a version stamp);
#             pkgconfig/nvshmem.pc; cmake/nvshmem/ (nvshmem::nvshmem_host, nvshmem::nvshmem_device)
# Run programs with LD_LIBRARY_PATH=<path>/lib (as with NVSHMEM). The tree can be moved; only
# its pkg-config file records the path (CMake finds it relative to itself).
# Usage: scripts/nvshmem-home.sh [TREE]   (default target/nvshmem-home)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE="${1:-target/nvshmem-home}"
if [ -z "${PSHMEM_SKIP_BUILD:-}" ]; then
  bash scripts/setup.sh >&2
  cargo build --release --quiet -p pshmem-capi >&2
fi
mkdir -p "$TREE"
TREE="$(cd "$TREE" && pwd)"
rm -rf "$TREE/include" "$TREE/lib"
mkdir -p "$TREE/include/pshmem" "$TREE/lib/pkgconfig" "$TREE/lib/cmake/nvshmem"
cp compat/nvshmem/include/nvshmem.h compat/nvshmem/include/nvshmemx.h "$TREE/include/"
cp -r compat/nvshmem/include/non_abi compat/nvshmem/include/device_host "$TREE/include/"
# The shared C headers (abi/include) and the device API (kernels/include); the MoE headers
# (ep/include) are pshmem-ep's own and are not installed.
cp abi/include/pshmem/*.h kernels/include/pshmem/*.cuh "$TREE/include/pshmem/"
cp capi/include/pshmem/pshmem.h "$TREE/include/pshmem/"
cp target/release/libpshmem.so "$TREE/lib/"
# -lnvshmem_host links libpshmem.so itself (a linker script, found through the same -L), so
# the program's references to the C API resolve directly.
printf '/* GNU ld script: NVSHMEM'"'"'s host library name for proxyshmem'"'"'s */\nINPUT(-lpshmem)\n' \
  > "$TREE/lib/libnvshmem_host.so"
cc_out="$(mktemp -d)"
printf 'const char pshmem_nvshmem_device_stamp[] = "proxyshmem: the NVSHMEM device API is in the headers";\n' > "$cc_out/stamp.c"
cc -c -fPIC -O2 -o "$cc_out/stamp.o" "$cc_out/stamp.c"
rm -f "$TREE/lib/libnvshmem_device.a"
ar rcs "$TREE/lib/libnvshmem_device.a" "$cc_out/stamp.o"
rm -rf "$cc_out"
cat > "$TREE/lib/pkgconfig/nvshmem.pc" <<PC
prefix=$TREE
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: nvshmem
Description: proxyshmem's NVSHMEM compatibility layer (NVSHMEM 3.4 API)
Version: 3.4.0
Libs: -L\${libdir} -lnvshmem_host -lnvshmem_device
Cflags: -I\${includedir}
PC
cat > "$TREE/lib/cmake/nvshmem/nvshmem-config.cmake" <<'CM'
# proxyshmem's NVSHMEM compatibility layer as a CMake package: find_package(NVSHMEM) (or
# nvshmem) gives the targets nvshmem::nvshmem_host, nvshmem::nvshmem_device and
# nvshmem::nvshmem, and NVSHMEM_INCLUDE_DIR / NVSHMEM_LIB_DIR.
get_filename_component(_pshmem_nvshmem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(NVSHMEM_INCLUDE_DIR "${_pshmem_nvshmem_prefix}/include")
set(NVSHMEM_LIB_DIR "${_pshmem_nvshmem_prefix}/lib")
if(NOT TARGET nvshmem::nvshmem_host)
  add_library(nvshmem::nvshmem_host SHARED IMPORTED)
  set_target_properties(nvshmem::nvshmem_host PROPERTIES
    IMPORTED_LOCATION "${NVSHMEM_LIB_DIR}/libpshmem.so"
    INTERFACE_INCLUDE_DIRECTORIES "${NVSHMEM_INCLUDE_DIR}")
  add_library(nvshmem::nvshmem_device STATIC IMPORTED)
  set_target_properties(nvshmem::nvshmem_device PROPERTIES
    IMPORTED_LOCATION "${NVSHMEM_LIB_DIR}/libnvshmem_device.a"
    INTERFACE_INCLUDE_DIRECTORIES "${NVSHMEM_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES nvshmem::nvshmem_host)
  add_library(nvshmem::nvshmem INTERFACE IMPORTED)
  set_target_properties(nvshmem::nvshmem PROPERTIES
    INTERFACE_LINK_LIBRARIES "nvshmem::nvshmem_host;nvshmem::nvshmem_device")
endif()
set(NVSHMEM_FOUND TRUE)
set(nvshmem_FOUND TRUE)
CM
cp "$TREE/lib/cmake/nvshmem/nvshmem-config.cmake" "$TREE/lib/cmake/nvshmem/NVSHMEMConfig.cmake"
printf '3.4.0\n' > "$TREE/lib/cmake/nvshmem/version.txt"
echo "$TREE"
