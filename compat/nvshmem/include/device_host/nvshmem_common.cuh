/* device_host/nvshmem_common.cuh — proxyshmem's NVSHMEM compatibility tree: NVSHMEM's
 * definitions shared by host and device code, which some of NVSHMEM's own tests include
 * directly. Everything of it this layer provides is declared by nvshmem.h and nvshmemx.h;
 * the tile API that NVSHMEM also reaches from here is refused by device_host/nvshmem_tensor.h. */
#ifndef PSHMEM_COMPAT_NVSHMEM_COMMON_CUH
#define PSHMEM_COMPAT_NVSHMEM_COMMON_CUH
#include "../nvshmem.h"
#include "../nvshmemx.h"
#endif /* PSHMEM_COMPAT_NVSHMEM_COMMON_CUH */
