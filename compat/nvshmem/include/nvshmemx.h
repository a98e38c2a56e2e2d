/* nvshmemx.h — proxyshmem's NVSHMEM compatibility header for the NVSHMEM extensions
 * (nvshmemx_*): everything is declared by nvshmem.h, which this includes. */
#ifndef PSHMEM_COMPAT_NVSHMEMX_H
#define PSHMEM_COMPAT_NVSHMEMX_H
#include "nvshmem.h"
#endif /* PSHMEM_COMPAT_NVSHMEMX_H */
