/* nvshmemx.h — proxyshmem's NVSHMEM compatibility header for the NVSHMEM extensions
 * (nvshmemx_*): everything is declared by nvshmem.h, which this includes. As NVSHMEM's, it
 * also makes the CUDA driver API (<cuda.h>, where the CUDA headers are on the include path)
 * and the error-reporting macros of non_abi/nvshmemx_error.h reachable: NVSHMEM's own examples
 * and perftests use both without including them. */
#ifndef PSHMEM_COMPAT_NVSHMEMX_H
#define PSHMEM_COMPAT_NVSHMEMX_H
#include "nvshmem.h"
#include "non_abi/nvshmemx_error.h"
#if defined(__CUDACC__)
#include <cuda.h>
#elif defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#endif
#endif
#endif /* PSHMEM_COMPAT_NVSHMEMX_H */
