/* nvshmem.h — proxyshmem's NVSHMEM compatibility header.
 *
 * Lets a program written against NVSHMEM's documented API build unchanged against proxyshmem
 * and run on it: the NVSHMEM names, types and constants (NVSHMEM 3.x values), each mapped onto
 * proxyshmem's C API (pshmem/pshmem.h, libpshmem.so) on the host and its device API
 * (pshmem/device.cuh) in kernels. Written from NVSHMEM's public documentation; it contains
 * nothing of NVIDIA's headers. What it does not provide yet is listed in compat/nvshmem/README.md.
 *
 * Semantics, as NVSHMEM documents them:
 * - Two-stage init: nvshmem_init (or nvshmemx_init_attr) joins the job; the GPU part (heap,
 *   peers, device state) completes at the first nvshmem_malloc/calloc/align, barrier, sync,
 *   team split or collective launch, on the CUDA device current then.
 * - init and finalize are reference-counted; finalize is collective.
 * - nvshmem_malloc/calloc/align/free are collective and end with (free: begins with) a
 *   barrier; 0 bytes gives NULL without one.
 * - nvshmem_ptr: the pointer itself for this PE, a peer's address where its GPU heap is mapped
 *   (same host, NVLink/PCIe peer access), NULL for PEs reached through the proxy (all of them
 *   under NVSHMEM_DISABLE_P2P=1).
 * - The host barrier runs as a kernel on the runtime's internal non-blocking stream (never the
 *   legacy default stream); the _on_stream calls only launch kernels on the given stream, so
 *   they can be captured in a CUDA graph.
 * - Host-side errors of functions that return nothing print the error and end the process,
 *   as NVSHMEM does; the others return a non-zero status.
 *
 * Compiles as C (gcc), C++ (g++) and CUDA (nvcc, with or without -rdc); defines none of the
 * names programs commonly define themselves (NVSHMEM_INT, NVSHMEM_SUM, NVSHMEM_WARP, ...). */
#ifndef PSHMEM_COMPAT_NVSHMEM_H
#define PSHMEM_COMPAT_NVSHMEM_H

#include <assert.h> /* reached through NVSHMEM's headers: its examples assert() unincluded */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#elif defined(__has_include)
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st *cudaStream_t;
#endif
#else
typedef struct CUstream_st *cudaStream_t;
#endif

#include "pshmem/pshmem.h"
#include "pshmem/types.h"
#if defined(__CUDACC__)
#include "pshmem/device.cuh"
#endif

/* ---- version ----------------------------------------------------------------------------------- */
/* The NVSHMEM API level this layer implements. */
#define NVSHMEM_MAJOR_VERSION 3
#define NVSHMEM_MINOR_VERSION 4
#define NVSHMEM_VENDOR_STRING "proxyshmem (NVSHMEM 3.4 API compatibility)"
#define NVSHMEM_MAX_NAME_LEN 256

/* ---- constants --------------------------------------------------------------------------------- */
enum nvshmem_cmp_type {
    NVSHMEM_CMP_EQ = PSHMEM_CMP_EQ,
    NVSHMEM_CMP_NE = PSHMEM_CMP_NE,
    NVSHMEM_CMP_GT = PSHMEM_CMP_GT,
    NVSHMEM_CMP_LE = PSHMEM_CMP_LE,
    NVSHMEM_CMP_LT = PSHMEM_CMP_LT,
    NVSHMEM_CMP_GE = PSHMEM_CMP_GE
};
enum nvshmem_signal_op_type { NVSHMEM_SIGNAL_SET = PSHMEM_SIGNAL_SET, NVSHMEM_SIGNAL_ADD = PSHMEM_SIGNAL_ADD };
enum nvshmem_thread_support {
    NVSHMEM_THREAD_SINGLE = PSHMEM_THREAD_SINGLE,
    NVSHMEM_THREAD_FUNNELED = PSHMEM_THREAD_FUNNELED,
    NVSHMEM_THREAD_SERIALIZED = PSHMEM_THREAD_SERIALIZED,
    NVSHMEM_THREAD_MULTIPLE = PSHMEM_THREAD_MULTIPLE
};
enum nvshmemx_status {
    NVSHMEMX_SUCCESS = 0,
    NVSHMEMX_ERROR_INVALID_VALUE,
    NVSHMEMX_ERROR_OUT_OF_MEMORY,
    NVSHMEMX_ERROR_NOT_SUPPORTED,
    NVSHMEMX_ERROR_SYMMETRY,
    NVSHMEMX_ERROR_GPU_NOT_SELECTED,
    NVSHMEMX_ERROR_COLLECTIVE_LAUNCH_FAILED,
    NVSHMEMX_ERROR_INTERNAL,
    NVSHMEMX_ERROR_SENTINEL = INT_MAX /* NVSHMEM's value: the enum is int-sized */
};
enum nvshmemx_init_status {
    NVSHMEM_STATUS_NOT_INITIALIZED = 0,
    NVSHMEM_STATUS_IS_BOOTSTRAPPED,
    NVSHMEM_STATUS_IS_INITIALIZED,
    NVSHMEM_STATUS_INVALID
};
enum nvshmemx_init_flags {
    NVSHMEMX_INIT_THREAD_PES = 1,
    NVSHMEMX_INIT_WITH_MPI_COMM = 1 << 1,
    NVSHMEMX_INIT_WITH_SHMEM = 1 << 2,
    NVSHMEMX_INIT_WITH_UNIQUEID = 1 << 3
};

/* ---- teams ------------------------------------------------------------------------------------- */
typedef int32_t nvshmem_team_t;
#define NVSHMEM_TEAM_INVALID PSHMEM_TEAM_INVALID
#define NVSHMEM_TEAM_WORLD PSHMEM_TEAM_WORLD
#define NVSHMEM_TEAM_SHARED PSHMEM_TEAM_SHARED
#define NVSHMEMX_TEAM_NODE PSHMEMX_TEAM_NODE
#define NVSHMEMX_TEAM_SAME_MYPE_NODE PSHMEMX_TEAM_SAME_MYPE_NODE
#define NVSHMEM_TEAM_WORLD_INDEX 0
#define NVSHMEM_TEAM_SHARED_INDEX 1
#define NVSHMEMX_TEAM_NODE_INDEX 2
#define NVSHMEMX_TEAM_SAME_MYPE_NODE_INDEX 3
typedef struct {
    int num_contexts;
} nvshmem_team_config_t;

/* ---- unique ids and init attributes ------------------------------------------------------------ */
#define NVSHMEMX_UNIQUEID_VERSION ((1 << 16) + 128)
typedef struct {
    int version;
    char internal[124];
} nvshmemx_uniqueid_t;
#define NVSHMEMX_UNIQUEID_INITIALIZER {NVSHMEMX_UNIQUEID_VERSION, {0}}

typedef struct {
    int version;
    nvshmemx_uniqueid_t *id;
    int myrank;
    int nranks;
} nvshmemx_uniqueid_args_t;

typedef struct {
    int version;
    nvshmemx_uniqueid_args_t uid_args;
    char content[96];
} nvshmemx_init_args_t;

typedef struct {
    int version;
    void *mpi_comm;
    nvshmemx_init_args_t args;
} nvshmemx_init_attr_t;
#define NVSHMEMX_INIT_ATTR_INITIALIZER {1, NULL, {1, {1, NULL, -1, -1}, {0}}}

PSHMEM_STATIC_ASSERT(sizeof(nvshmemx_uniqueid_t) == 128, "nvshmemx_uniqueid_t is 128 bytes");
PSHMEM_STATIC_ASSERT(sizeof(nvshmemx_init_args_t) == 128, "nvshmemx_init_args_t is 128 bytes");
PSHMEM_STATIC_ASSERT(sizeof(nvshmemx_init_attr_t) == 144, "nvshmemx_init_attr_t is 144 bytes");

/* ---- how each name is defined ------------------------------------------------------------------ */
/* Host-and-device names: one definition per compilation pass (device body in kernels, the C API
 * on the host). */
#if defined(__CUDACC__)
#define NVSHMEMI_HD __host__ __device__
#define NVSHMEMI_DEV __device__
#else
#define NVSHMEMI_HD
#endif
#if defined(__CUDA_ARCH__)
#define NVSHMEMI_PICK(dev, host) dev
#else
#define NVSHMEMI_PICK(dev, host) host
#endif

/* A failed host call of a function that returns nothing: print and end the process. */
static inline void nvshmemi_check(int rc, const char *what) {
    if (rc != PSHMEM_SUCCESS) {
        fprintf(stderr, "%s failed: %s\n", what, pshmem_last_error());
        pshmem_global_exit(1);
    }
}

static inline int nvshmemi_status(int rc) {
    switch (rc) {
    case PSHMEM_SUCCESS: return NVSHMEMX_SUCCESS;
    case PSHMEM_ERR_INVALID_ARG: return NVSHMEMX_ERROR_INVALID_VALUE;
    case PSHMEM_ERR_OUT_OF_MEMORY: return NVSHMEMX_ERROR_OUT_OF_MEMORY;
    case PSHMEM_ERR_UNSUPPORTED: return NVSHMEMX_ERROR_NOT_SUPPORTED;
    case PSHMEM_ERR_MISMATCH: return NVSHMEMX_ERROR_SYMMETRY;
    default: return NVSHMEMX_ERROR_INTERNAL;
    }
}

/* ---- init and queries (host) ------------------------------------------------------------------- */
static inline void nvshmem_init(void) {
    nvshmemi_check(pshmemx_init_flags(PSHMEMX_INIT_GPU_ON_DEMAND), "nvshmem_init");
}
static inline int nvshmem_init_thread(int requested, int *provided) {
    (void)requested;
    int rc = pshmemx_init_flags(PSHMEMX_INIT_GPU_ON_DEMAND);
    if (rc == PSHMEM_SUCCESS && provided) *provided = NVSHMEM_THREAD_MULTIPLE;
    return nvshmemi_status(rc);
}
static inline void nvshmem_finalize(void) { nvshmemi_check(pshmem_finalize(), "nvshmem_finalize"); }
static inline int nvshmemx_init_status(void) {
    switch (pshmem_init_status()) {
    case 0: return NVSHMEM_STATUS_NOT_INITIALIZED;
    case 1: return NVSHMEM_STATUS_IS_BOOTSTRAPPED;
    default: return NVSHMEM_STATUS_IS_INITIALIZED;
    }
}
/* The caller of get_uniqueid hosts the rendezvous: one rank makes the id, all use that one. */
static inline int nvshmemx_get_uniqueid(nvshmemx_uniqueid_t *id) {
    pshmem_uniqueid_t u;
    int rc = pshmem_uniqueid_get(&u);
    if (rc != PSHMEM_SUCCESS) return nvshmemi_status(rc);
    id->version = NVSHMEMX_UNIQUEID_VERSION;
    memcpy(id->internal, u.bytes, sizeof id->internal);
    return NVSHMEMX_SUCCESS;
}
/* Stores a pointer to `id`: it must stay alive until nvshmemx_init_attr. */
static inline int nvshmemx_set_attr_uniqueid_args(const int myrank, const int nranks,
                                                  const nvshmemx_uniqueid_t *id,
                                                  nvshmemx_init_attr_t *attr) {
    attr->args.uid_args.version = 1;
    attr->args.uid_args.id = (nvshmemx_uniqueid_t *)id;
    attr->args.uid_args.myrank = myrank;
    attr->args.uid_args.nranks = nranks;
    return NVSHMEMX_SUCCESS;
}
/* NVSHMEMX_INIT_WITH_UNIQUEID joins with the id set by nvshmemx_set_attr_uniqueid_args;
 * NVSHMEMX_INIT_WITH_MPI_COMM over attr->mpi_comm (an MPI_Comm *, NULL for MPI_COMM_WORLD) of
 * the program's MPI; NVSHMEMX_INIT_WITH_SHMEM is refused (there is no OpenSHMEM runtime to join);
 * no flag joins through the launcher's environment. */
static inline int nvshmemx_init_attr(unsigned int flags, nvshmemx_init_attr_t *attr) {
    if (flags & NVSHMEMX_INIT_WITH_SHMEM) {
        fprintf(stderr, "nvshmemx_init_attr: NVSHMEMX_INIT_WITH_SHMEM is not supported by "
                        "proxyshmem (no OpenSHMEM runtime to join): use "
                        "NVSHMEMX_INIT_WITH_MPI_COMM, a unique id or nvshmem_init\n");
        return NVSHMEMX_ERROR_NOT_SUPPORTED;
    }
    if (flags & NVSHMEMX_INIT_WITH_MPI_COMM) {
        return nvshmemi_status(
            pshmemx_init_mpi_comm(attr ? attr->mpi_comm : NULL, PSHMEMX_INIT_GPU_ON_DEMAND));
    }
    if ((flags & NVSHMEMX_INIT_WITH_UNIQUEID) && attr && attr->args.uid_args.id) {
        pshmem_uniqueid_t u;
        memset(&u, 0, sizeof u);
        memcpy(u.bytes, attr->args.uid_args.id->internal, sizeof attr->args.uid_args.id->internal);
        return nvshmemi_status(pshmemx_init_uniqueid(&u, attr->args.uid_args.myrank,
                                                     attr->args.uid_args.nranks,
                                                     PSHMEMX_INIT_GPU_ON_DEMAND));
    }
    return nvshmemi_status(pshmemx_init_flags(PSHMEMX_INIT_GPU_ON_DEMAND));
}
static inline void nvshmem_info_get_version(int *major, int *minor) {
    *major = NVSHMEM_MAJOR_VERSION;
    *minor = NVSHMEM_MINOR_VERSION;
}
static inline void nvshmem_info_get_name(char *name) {
    strncpy(name, NVSHMEM_VENDOR_STRING, NVSHMEM_MAX_NAME_LEN - 1);
    name[NVSHMEM_MAX_NAME_LEN - 1] = '\0';
}
static inline void nvshmem_global_exit(int status) { pshmem_global_exit(status); }

NVSHMEMI_HD static inline int nvshmem_my_pe(void) {
    return NVSHMEMI_PICK(pshmem_my_pe(), PSHMEM_HOST(my_pe)());
}
NVSHMEMI_HD static inline int nvshmem_n_pes(void) {
    return NVSHMEMI_PICK(pshmem_n_pes(), PSHMEM_HOST(n_pes)());
}
NVSHMEMI_HD static inline int nvshmem_team_my_pe(nvshmem_team_t team) {
    return NVSHMEMI_PICK(pshmem_team_my_pe(team), PSHMEM_HOST(team_my_pe)(team));
}
NVSHMEMI_HD static inline int nvshmem_team_n_pes(nvshmem_team_t team) {
    return NVSHMEMI_PICK(pshmem_team_n_pes(team), PSHMEM_HOST(team_n_pes)(team));
}
NVSHMEMI_HD static inline int nvshmem_team_translate_pe(nvshmem_team_t src, int pe,
                                                        nvshmem_team_t dest) {
    return NVSHMEMI_PICK(pshmem_team_translate_pe(src, pe, dest),
                         PSHMEM_HOST(team_translate_pe)(src, pe, dest));
}
NVSHMEMI_HD static inline void *nvshmem_ptr(const void *dest, int pe) {
    return NVSHMEMI_PICK(pshmem_ptr(dest, pe), PSHMEM_HOST(ptr)(dest, pe));
}

/* ---- teams (host) ------------------------------------------------------------------------------ */
/* `config` and `config_mask` are accepted and ignored (contexts are not provided). */
static inline int nvshmem_team_split_strided(nvshmem_team_t parent, int start, int stride,
                                             int size, const nvshmem_team_config_t *config,
                                             long config_mask, nvshmem_team_t *new_team) {
    (void)config;
    (void)config_mask;
    return nvshmemi_status(pshmem_team_split_strided(parent, start, stride, size, new_team));
}
/* Rows of `xrange` members (x axis) and the columns across them (y axis). */
static inline int nvshmem_team_split_2d(nvshmem_team_t parent, int xrange,
                                        const nvshmem_team_config_t *xaxis_config,
                                        long xaxis_mask, nvshmem_team_t *xaxis_team,
                                        const nvshmem_team_config_t *yaxis_config,
                                        long yaxis_mask, nvshmem_team_t *yaxis_team) {
    (void)xaxis_config;
    (void)xaxis_mask;
    (void)yaxis_config;
    (void)yaxis_mask;
    return nvshmemi_status(pshmem_team_split_2d(parent, xrange, xaxis_team, yaxis_team));
}
static inline void nvshmem_team_destroy(nvshmem_team_t team) {
    nvshmemi_check(pshmem_team_destroy(team), "nvshmem_team_destroy");
}

/* ---- memory (host) ----------------------------------------------------------------------------- */
static inline void *nvshmemi_after_alloc(void *p, size_t size, const char *what) {
    if (!p && size) {
        fprintf(stderr, "%s(%zu) failed: %s\n", what, size, pshmem_last_error());
        return NULL;
    }
    if (size) nvshmemi_check(PSHMEM_HOST(barrier_all)(), what);
    return p;
}
static inline void *nvshmem_malloc(size_t size) {
    return nvshmemi_after_alloc(pshmemx_gpu_malloc(size), size, "nvshmem_malloc");
}
static inline void *nvshmem_calloc(size_t count, size_t size) {
    return nvshmemi_after_alloc(pshmemx_gpu_calloc(count, size), count * size, "nvshmem_calloc");
}
static inline void *nvshmem_align(size_t alignment, size_t size) {
    return nvshmemi_after_alloc(pshmemx_gpu_align(alignment, size), size, "nvshmem_align");
}
static inline void nvshmem_free(void *ptr) {
    if (!ptr) return;
    nvshmemi_check(PSHMEM_HOST(barrier_all)(), "nvshmem_free");
    nvshmemi_check(pshmem_free(ptr), "nvshmem_free");
}
/* The proxy moves any device memory through its staging buffers: nothing to register. */
static inline int nvshmemx_buffer_register(void *addr, size_t length) {
    (void)addr;
    (void)length;
    return NVSHMEMX_SUCCESS;
}
static inline int nvshmemx_buffer_unregister(void *addr) {
    (void)addr;
    return NVSHMEMX_SUCCESS;
}
static inline void *nvshmemx_buffer_register_symmetric(void *addr, size_t length, int flags) {
    (void)pshmemx_buffer_register_symmetric(addr, length, flags);
    return NULL;
}
static inline int nvshmemx_buffer_unregister_symmetric(void *addr, size_t length) {
    return nvshmemi_status(pshmemx_buffer_unregister_symmetric(addr, length));
}

/* ---- ordering and synchronization -------------------------------------------------------------- */
NVSHMEMI_HD static inline void nvshmem_quiet(void) {
    NVSHMEMI_PICK(pshmem_quiet(), nvshmemi_check(PSHMEM_HOST(quiet)(), "nvshmem_quiet"));
}
NVSHMEMI_HD static inline void nvshmem_fence(void) {
    NVSHMEMI_PICK(pshmem_fence(), nvshmemi_check(PSHMEM_HOST(fence)(), "nvshmem_fence"));
}
NVSHMEMI_HD static inline void nvshmem_barrier_all(void) {
    NVSHMEMI_PICK(pshmem_barrier_all(),
                  nvshmemi_check(PSHMEM_HOST(barrier_all)(), "nvshmem_barrier_all"));
}
NVSHMEMI_HD static inline void nvshmem_sync_all(void) {
    NVSHMEMI_PICK(pshmem_sync_all(), nvshmemi_check(PSHMEM_HOST(sync_all)(), "nvshmem_sync_all"));
}
NVSHMEMI_HD static inline int nvshmem_team_sync(nvshmem_team_t team) {
    NVSHMEMI_PICK(pshmem_team_sync(team), nvshmemi_check(PSHMEM_HOST(team_sync)(team),
                                                         "nvshmem_team_sync"));
    return 0;
}
#define nvshmem_sync nvshmem_team_sync
NVSHMEMI_HD static inline void nvshmem_barrier(nvshmem_team_t team) {
    NVSHMEMI_PICK(pshmem_barrier(team), nvshmemi_check(pshmem_team_barrier(team), "nvshmem_barrier"));
}

static inline void nvshmemx_barrier_all_on_stream(cudaStream_t stream) {
    nvshmemi_check(pshmemx_barrier_all_on_stream((void *)stream), "nvshmemx_barrier_all_on_stream");
}
static inline void nvshmemx_quiet_on_stream(cudaStream_t stream) {
    nvshmemi_check(pshmemx_quiet_on_stream((void *)stream), "nvshmemx_quiet_on_stream");
}
static inline void nvshmemx_sync_all_on_stream(cudaStream_t stream) {
    nvshmemi_check(pshmemx_sync_all_on_stream((void *)stream), "nvshmemx_sync_all_on_stream");
}
static inline void nvshmemx_barrier_on_stream(nvshmem_team_t team, cudaStream_t stream) {
    nvshmemi_check(pshmemx_barrier_on_stream(team, (void *)stream), "nvshmemx_barrier_on_stream");
}
static inline int nvshmemx_team_sync_on_stream(nvshmem_team_t team, cudaStream_t stream) {
    return nvshmemi_status(pshmemx_team_sync_on_stream(team, (void *)stream));
}

#if defined(__CUDACC__)
NVSHMEMI_DEV static inline void nvshmemx_barrier_all_block(void) { pshmemx_barrier_all_block(); }
NVSHMEMI_DEV static inline void nvshmemx_barrier_all_warp(void) { pshmemx_barrier_all_warp(); }
NVSHMEMI_DEV static inline void nvshmemx_sync_all_block(void) { pshmemx_sync_all_block(); }
NVSHMEMI_DEV static inline void nvshmemx_sync_all_warp(void) { pshmemx_sync_all_warp(); }
NVSHMEMI_DEV static inline void nvshmemx_barrier_block(nvshmem_team_t t) { pshmemx_barrier_block(t); }
NVSHMEMI_DEV static inline void nvshmemx_barrier_warp(nvshmem_team_t t) { pshmemx_barrier_warp(t); }
NVSHMEMI_DEV static inline int nvshmemx_team_sync_block(nvshmem_team_t t) {
    pshmemx_team_sync_block(t);
    return 0;
}
NVSHMEMI_DEV static inline int nvshmemx_team_sync_warp(nvshmem_team_t t) {
    pshmemx_team_sync_warp(t);
    return 0;
}
NVSHMEMI_DEV static inline void nvshmemx_quiet_block(void) { pshmemx_quiet_block(); }
NVSHMEMI_DEV static inline void nvshmemx_quiet_warp(void) { pshmemx_quiet_warp(); }
#endif

/* ---- RMA: bytes -------------------------------------------------------------------------------- */
NVSHMEMI_HD static inline void nvshmem_putmem(void *dest, const void *src, size_t n, int pe) {
    NVSHMEMI_PICK(pshmem_putmem(dest, src, n, pe),
                  nvshmemi_check(PSHMEM_HOST(putmem)(dest, src, n, pe), "nvshmem_putmem"));
}
NVSHMEMI_HD static inline void nvshmem_getmem(void *dest, const void *src, size_t n, int pe) {
    NVSHMEMI_PICK(pshmem_getmem(dest, src, n, pe),
                  nvshmemi_check(PSHMEM_HOST(getmem)(dest, src, n, pe), "nvshmem_getmem"));
}
NVSHMEMI_HD static inline void nvshmem_putmem_nbi(void *dest, const void *src, size_t n, int pe) {
    NVSHMEMI_PICK(pshmem_putmem_nbi(dest, src, n, pe),
                  nvshmemi_check(PSHMEM_HOST(putmem_nbi)(dest, src, n, pe), "nvshmem_putmem_nbi"));
}
NVSHMEMI_HD static inline void nvshmem_getmem_nbi(void *dest, const void *src, size_t n, int pe) {
    NVSHMEMI_PICK(pshmem_getmem_nbi(dest, src, n, pe),
                  nvshmemi_check(PSHMEM_HOST(getmem_nbi)(dest, src, n, pe), "nvshmem_getmem_nbi"));
}
static inline void nvshmemx_putmem_on_stream(void *dest, const void *src, size_t n, int pe,
                                             cudaStream_t stream) {
    nvshmemi_check(pshmemx_putmem_on_stream(dest, src, n, pe, (void *)stream),
                   "nvshmemx_putmem_on_stream");
}
static inline void nvshmemx_getmem_on_stream(void *dest, const void *src, size_t n, int pe,
                                             cudaStream_t stream) {
    nvshmemi_check(pshmemx_getmem_on_stream(dest, src, n, pe, (void *)stream),
                   "nvshmemx_getmem_on_stream");
}
static inline void nvshmemx_putmem_nbi_on_stream(void *dest, const void *src, size_t n, int pe,
                                                 cudaStream_t stream) {
    nvshmemi_check(pshmemx_putmem_nbi_on_stream(dest, src, n, pe, (void *)stream),
                   "nvshmemx_putmem_nbi_on_stream");
}
static inline void nvshmemx_getmem_nbi_on_stream(void *dest, const void *src, size_t n, int pe,
                                                 cudaStream_t stream) {
    nvshmemi_check(pshmemx_getmem_nbi_on_stream(dest, src, n, pe, (void *)stream),
                   "nvshmemx_getmem_nbi_on_stream");
}
#if defined(__CUDACC__)
#define NVSHMEMI_GROUP_MEM(SUFFIX)                                                               \
    NVSHMEMI_DEV static inline void nvshmemx_putmem_##SUFFIX(void *d, const void *s, size_t n,    \
                                                             int pe) {                          \
        pshmemx_putmem_##SUFFIX(d, s, n, pe);                                                   \
    }                                                                                           \
    NVSHMEMI_DEV static inline void nvshmemx_getmem_##SUFFIX(void *d, const void *s, size_t n,    \
                                                             int pe) {                          \
        pshmemx_getmem_##SUFFIX(d, s, n, pe);                                                   \
    }
NVSHMEMI_GROUP_MEM(warp)
NVSHMEMI_GROUP_MEM(block)
NVSHMEMI_GROUP_MEM(nbi_warp)
NVSHMEMI_GROUP_MEM(nbi_block)
#endif

/* ---- RMA: typed (elements) --------------------------------------------------------------------- */
#define NVSHMEMI_TYPED_HOST(NAME, T)                                                             \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_put(T *d, const T *s, size_t n, int pe) {    \
        nvshmem_putmem(d, s, n * sizeof(T), pe);                                                 \
    }                                                                                            \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_get(T *d, const T *s, size_t n, int pe) {    \
        nvshmem_getmem(d, s, n * sizeof(T), pe);                                                 \
    }                                                                                            \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_put_nbi(T *d, const T *s, size_t n,          \
                                                            int pe) {                            \
        nvshmem_putmem_nbi(d, s, n * sizeof(T), pe);                                             \
    }                                                                                            \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_get_nbi(T *d, const T *s, size_t n,          \
                                                            int pe) {                            \
        nvshmem_getmem_nbi(d, s, n * sizeof(T), pe);                                             \
    }                                                                                            \
    static inline T nvshmemi_host_##NAME##_g(const T *s, int pe) {                               \
        T out;                                                                                   \
        memset(&out, 0, sizeof out);                                                             \
        nvshmemi_check(PSHMEM_HOST(getmem)(&out, s, sizeof(T), pe), "nvshmem_" #NAME "_g");     \
        return out;                                                                              \
    }                                                                                            \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_p(T *d, T v, int pe) {                       \
        NVSHMEMI_PICK(pshmem_##NAME##_p(d, v, pe),                                               \
                      nvshmemi_check(PSHMEM_HOST(putmem)(d, &v, sizeof(T), pe),                  \
                                     "nvshmem_" #NAME "_p"));                                    \
    }                                                                                            \
    NVSHMEMI_HD static inline T nvshmem_##NAME##_g(const T *s, int pe) {                         \
        return NVSHMEMI_PICK(pshmem_##NAME##_g(s, pe), nvshmemi_host_##NAME##_g(s, pe));         \
    }                                                                                            \
    static inline void nvshmemx_##NAME##_put_on_stream(T *d, const T *s, size_t n, int pe,      \
                                                       cudaStream_t st) {                        \
        nvshmemx_putmem_on_stream(d, s, n * sizeof(T), pe, st);                                  \
    }                                                                                            \
    static inline void nvshmemx_##NAME##_get_on_stream(T *d, const T *s, size_t n, int pe,      \
                                                       cudaStream_t st) {                        \
        nvshmemx_getmem_on_stream(d, s, n * sizeof(T), pe, st);                                  \
    }
PSHMEM_RMA_TYPES(NVSHMEMI_TYPED_HOST)
#if defined(__CUDACC__)
/* half and bfloat16 (CUDA's types: CUDA sources only). */
NVSHMEMI_TYPED_HOST(half, __half)
NVSHMEMI_TYPED_HOST(bfloat16, __nv_bfloat16)
#endif

#if defined(__CUDACC__)
#define NVSHMEMI_TYPED_GROUP(NAME, T)                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_warp(T *d, const T *s, size_t n,       \
                                                               int pe) {                         \
        pshmemx_##NAME##_put_warp(d, s, n, pe);                                                  \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_get_warp(T *d, const T *s, size_t n,       \
                                                               int pe) {                         \
        pshmemx_##NAME##_get_warp(d, s, n, pe);                                                  \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_nbi_warp(T *d, const T *s, size_t n,   \
                                                                   int pe) {                     \
        pshmemx_##NAME##_put_nbi_warp(d, s, n, pe);                                              \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_get_nbi_warp(T *d, const T *s, size_t n,   \
                                                                   int pe) {                     \
        pshmemx_##NAME##_get_nbi_warp(d, s, n, pe);                                              \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_block(T *d, const T *s, size_t n,      \
                                                                int pe) {                        \
        pshmemx_##NAME##_put_block(d, s, n, pe);                                                 \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_get_block(T *d, const T *s, size_t n,      \
                                                                int pe) {                        \
        pshmemx_##NAME##_get_block(d, s, n, pe);                                                 \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_nbi_block(T *d, const T *s, size_t n,  \
                                                                    int pe) {                    \
        pshmemx_##NAME##_put_nbi_block(d, s, n, pe);                                             \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_get_nbi_block(T *d, const T *s, size_t n,  \
                                                                    int pe) {                    \
        pshmemx_##NAME##_get_nbi_block(d, s, n, pe);                                             \
    }
PSHMEM_RMA_TYPES(NVSHMEMI_TYPED_GROUP)
NVSHMEMI_TYPED_GROUP(half, __half)
NVSHMEMI_TYPED_GROUP(bfloat16, __nv_bfloat16)
#endif

/* ---- signals ----------------------------------------------------------------------------------- */
NVSHMEMI_HD static inline void nvshmem_putmem_signal(void *dest, const void *src, size_t n,
                                                     uint64_t *sig, uint64_t v, int op, int pe) {
    NVSHMEMI_PICK(pshmem_putmem_signal(dest, src, n, sig, v, op, pe),
                  nvshmemi_check(PSHMEM_HOST(putmem_signal)(dest, src, n, sig, v, op, pe),
                                 "nvshmem_putmem_signal"));
}
NVSHMEMI_HD static inline void nvshmem_putmem_signal_nbi(void *dest, const void *src, size_t n,
                                                         uint64_t *sig, uint64_t v, int op,
                                                         int pe) {
    NVSHMEMI_PICK(pshmem_putmem_signal_nbi(dest, src, n, sig, v, op, pe),
                  nvshmemi_check(PSHMEM_HOST(putmem_signal_nbi)(dest, src, n, sig, v, op, pe),
                                 "nvshmem_putmem_signal_nbi"));
}
NVSHMEMI_HD static inline void nvshmemx_signal_op(uint64_t *sig, uint64_t v, int op, int pe) {
    NVSHMEMI_PICK(pshmemx_signal_op(sig, v, op, pe),
                  nvshmemi_check(pshmem_signal_op(sig, v, op, pe), "nvshmemx_signal_op"));
}
static inline uint64_t nvshmemi_host_signal_fetch(const uint64_t *sig) {
    uint64_t v = 0;
    nvshmemi_check(PSHMEM_HOST(signal_fetch)(sig, &v), "nvshmem_signal_fetch");
    return v;
}
NVSHMEMI_HD static inline uint64_t nvshmem_signal_fetch(const uint64_t *sig) {
    return NVSHMEMI_PICK(pshmem_signal_fetch(sig), nvshmemi_host_signal_fetch(sig));
}
static inline void nvshmemx_putmem_signal_on_stream(void *dest, const void *src, size_t n,
                                                    uint64_t *sig, uint64_t v, int op, int pe,
                                                    cudaStream_t stream) {
    nvshmemi_check(pshmemx_putmem_signal_on_stream(dest, src, n, sig, v, op, pe, (void *)stream),
                   "nvshmemx_putmem_signal_on_stream");
}
static inline void nvshmemx_signal_op_on_stream(uint64_t *sig, uint64_t v, int op, int pe,
                                                cudaStream_t stream) {
    nvshmemi_check(pshmemx_signal_op_on_stream(sig, v, op, pe, (void *)stream),
                   "nvshmemx_signal_op_on_stream");
}
#define NVSHMEMI_TYPED_SIGNAL(NAME, T)                                                           \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_put_signal(T *d, const T *s, size_t n,       \
                                                               uint64_t *sig, uint64_t v,        \
                                                               int op, int pe) {                 \
        nvshmem_putmem_signal(d, s, n * sizeof(T), sig, v, op, pe);                              \
    }                                                                                            \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_put_signal_nbi(T *d, const T *s, size_t n,   \
                                                                   uint64_t *sig, uint64_t v,    \
                                                                   int op, int pe) {             \
        nvshmem_putmem_signal_nbi(d, s, n * sizeof(T), sig, v, op, pe);                          \
    }
PSHMEM_RMA_TYPES(NVSHMEMI_TYPED_SIGNAL)
#if defined(__CUDACC__)
NVSHMEMI_TYPED_SIGNAL(half, __half)
NVSHMEMI_TYPED_SIGNAL(bfloat16, __nv_bfloat16)
#endif

#if defined(__CUDACC__)
NVSHMEMI_DEV static inline void nvshmemx_putmem_signal_warp(void *d, const void *s, size_t n,
                                                            uint64_t *sig, uint64_t v, int op,
                                                            int pe) {
    pshmemx_putmem_signal_warp(d, s, n, sig, v, op, pe);
}
NVSHMEMI_DEV static inline void nvshmemx_putmem_signal_block(void *d, const void *s, size_t n,
                                                             uint64_t *sig, uint64_t v, int op,
                                                             int pe) {
    pshmemx_putmem_signal_block(d, s, n, sig, v, op, pe);
}
NVSHMEMI_DEV static inline void nvshmemx_putmem_signal_nbi_warp(void *d, const void *s, size_t n,
                                                                uint64_t *sig, uint64_t v,
                                                                int op, int pe) {
    pshmemx_putmem_signal_nbi_warp(d, s, n, sig, v, op, pe);
}
NVSHMEMI_DEV static inline void nvshmemx_putmem_signal_nbi_block(void *d, const void *s,
                                                                 size_t n, uint64_t *sig,
                                                                 uint64_t v, int op, int pe) {
    pshmemx_putmem_signal_nbi_block(d, s, n, sig, v, op, pe);
}
#define NVSHMEMI_TYPED_SIGNAL_GROUP(NAME, T)                                                     \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_signal_warp(                           \
        T *d, const T *s, size_t n, uint64_t *sig, uint64_t v, int op, int pe) {                 \
        pshmemx_putmem_signal_warp(d, s, n * sizeof(T), sig, v, op, pe);                         \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_signal_block(                          \
        T *d, const T *s, size_t n, uint64_t *sig, uint64_t v, int op, int pe) {                 \
        pshmemx_putmem_signal_block(d, s, n * sizeof(T), sig, v, op, pe);                        \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_signal_nbi_warp(                       \
        T *d, const T *s, size_t n, uint64_t *sig, uint64_t v, int op, int pe) {                 \
        pshmemx_putmem_signal_nbi_warp(d, s, n * sizeof(T), sig, v, op, pe);                     \
    }                                                                                            \
    NVSHMEMI_DEV static inline void nvshmemx_##NAME##_put_signal_nbi_block(                      \
        T *d, const T *s, size_t n, uint64_t *sig, uint64_t v, int op, int pe) {                 \
        pshmemx_putmem_signal_nbi_block(d, s, n * sizeof(T), sig, v, op, pe);                    \
    }
PSHMEM_RMA_TYPES(NVSHMEMI_TYPED_SIGNAL_GROUP)
NVSHMEMI_TYPED_SIGNAL_GROUP(half, __half)
NVSHMEMI_TYPED_SIGNAL_GROUP(bfloat16, __nv_bfloat16)

/* Waits on local symmetric words (device). */
NVSHMEMI_DEV static inline uint64_t nvshmem_signal_wait_until(uint64_t *sig, int cmp,
                                                              uint64_t v) {
    return pshmem_signal_wait_until(sig, cmp, v);
}
#define NVSHMEMI_WAIT(NAME, T)                                                                   \
    NVSHMEMI_DEV static inline T nvshmem_##NAME##_wait_until(T *ivar, int cmp, T v) {            \
        return pshmem_##NAME##_wait_until(ivar, cmp, v);                                         \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmem_##NAME##_test(T *ivar, int cmp, T v) {                \
        return pshmem_##NAME##_test(ivar, cmp, v);                                               \
    }                                                                                            \
    NVSHMEMI_WAIT_VECTOR(NAME, T, , T v, v)                                                      \
    NVSHMEMI_WAIT_VECTOR(NAME, T, _vector, T *vs, vs)
/* The vector forms: the entries whose status is 0 (all when status is NULL), against one value
 * or (_vector) one per entry. _any: an index (SIZE_MAX when none takes part); _some: how many
 * hold, their indices written to `indices`; test_all: 1 when every entry taking part holds. */
#define NVSHMEMI_WAIT_VECTOR(NAME, T, SUFFIX, PARAM, ARG)                                        \
    NVSHMEMI_DEV static inline void nvshmem_##NAME##_wait_until_all##SUFFIX(                     \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                                 \
        pshmem_##NAME##_wait_until_all##SUFFIX(ivars, n, status, cmp, ARG);                      \
    }                                                                                            \
    NVSHMEMI_DEV static inline size_t nvshmem_##NAME##_wait_until_any##SUFFIX(                   \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                                 \
        return pshmem_##NAME##_wait_until_any##SUFFIX(ivars, n, status, cmp, ARG);               \
    }                                                                                            \
    NVSHMEMI_DEV static inline size_t nvshmem_##NAME##_wait_until_some##SUFFIX(                  \
        T *ivars, size_t n, size_t *indices, const int *status, int cmp, PARAM) {                \
        return pshmem_##NAME##_wait_until_some##SUFFIX(ivars, n, indices, status, cmp, ARG);     \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmem_##NAME##_test_all##SUFFIX(                            \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                                 \
        return pshmem_##NAME##_test_all##SUFFIX(ivars, n, status, cmp, ARG);                     \
    }                                                                                            \
    NVSHMEMI_DEV static inline size_t nvshmem_##NAME##_test_any##SUFFIX(                         \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                                 \
        return pshmem_##NAME##_test_any##SUFFIX(ivars, n, status, cmp, ARG);                     \
    }                                                                                            \
    NVSHMEMI_DEV static inline size_t nvshmem_##NAME##_test_some##SUFFIX(                        \
        T *ivars, size_t n, size_t *indices, const int *status, int cmp, PARAM) {                \
        return pshmem_##NAME##_test_some##SUFFIX(ivars, n, indices, status, cmp, ARG);           \
    }
PSHMEM_I_WAIT_TYPES(NVSHMEMI_WAIT)
#endif

/* ---- atomics ----------------------------------------------------------------------------------- */
/* Host side: one kernel per call on the runtime's stream (GPU heap) or the host data path. */
static inline uint64_t nvshmemi_host_amo(int op, void *dest, uint64_t operand, uint64_t compare,
                                         int pe, unsigned width, const char *what) {
    uint64_t old = 0;
    if (width == 8) {
        nvshmemi_check(pshmem_atomic64(op, (uint64_t *)dest, operand, compare, pe, &old), what);
    } else {
        uint32_t o = 0;
        nvshmemi_check(pshmem_atomic32(op, (uint32_t *)dest, (uint32_t)operand, (uint32_t)compare,
                                       pe, &o),
                       what);
        old = o;
    }
    return old;
}
#define NVSHMEMI_BITS(T, v, out)                                                                 \
    do {                                                                                         \
        out = 0;                                                                                 \
        memcpy(&out, &(v), sizeof(T));                                                           \
    } while (0)

#define NVSHMEMI_AMO_STD(NAME, T)                                                                \
    static inline T nvshmemi_host_##NAME##_amo(int op, T *d, T v, T c, int pe, const char *w) { \
        uint64_t x, y, old;                                                                      \
        T out;                                                                                   \
        NVSHMEMI_BITS(T, v, x);                                                                  \
        NVSHMEMI_BITS(T, c, y);                                                                  \
        old = nvshmemi_host_amo(op, d, x, y, pe, (unsigned)sizeof(T), w);                        \
        memcpy(&out, &old, sizeof(T));                                                           \
        return out;                                                                              \
    }                                                                                            \
    NVSHMEMI_HD static inline T nvshmem_##NAME##_atomic_fetch(const T *d, int pe) {              \
        return NVSHMEMI_PICK(pshmem_##NAME##_atomic_fetch(d, pe),                                \
                             nvshmemi_host_##NAME##_amo(PSHMEM_AMO_FETCH, (T *)d, (T)0, (T)0,    \
                                                        pe, "nvshmem_" #NAME "_atomic_fetch"));  \
    }                                                                                            \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_atomic_set(T *d, T v, int pe) {              \
        NVSHMEMI_PICK(pshmem_##NAME##_atomic_set(d, v, pe),                                      \
                      (void)nvshmemi_host_##NAME##_amo(PSHMEM_AMO_SET, d, v, v, pe,              \
                                                       "nvshmem_" #NAME "_atomic_set"));         \
    }                                                                                            \
    NVSHMEMI_HD static inline T nvshmem_##NAME##_atomic_swap(T *d, T v, int pe) {                \
        return NVSHMEMI_PICK(pshmem_##NAME##_atomic_swap(d, v, pe),                              \
                             nvshmemi_host_##NAME##_amo(PSHMEM_AMO_SWAP, d, v, v, pe,            \
                                                        "nvshmem_" #NAME "_atomic_swap"));       \
    }
/* FN is the whole suffix (atomic_fetch_add, ...): and/or/xor are operators in C++ and cannot be
 * pasted into names. */
#define NVSHMEMI_AMO_OP(NAME, T, FN, CODE, ARGS, CALLARGS, V, C)                                 \
    NVSHMEMI_HD static inline T nvshmem_##NAME##_##FN ARGS {                                     \
        return NVSHMEMI_PICK(pshmem_##NAME##_##FN CALLARGS,                                      \
                             nvshmemi_host_##NAME##_amo(CODE, d, V, C, pe,                       \
                                                        "nvshmem_" #NAME "_" #FN));              \
    }
#define NVSHMEMI_AMO_VOID(NAME, T, FN, CODE, ARGS, CALLARGS, V)                                  \
    NVSHMEMI_HD static inline void nvshmem_##NAME##_##FN ARGS {                                  \
        NVSHMEMI_PICK(pshmem_##NAME##_##FN CALLARGS,                                             \
                      (void)nvshmemi_host_##NAME##_amo(CODE, d, V, V, pe,                        \
                                                       "nvshmem_" #NAME "_" #FN));               \
    }
#define NVSHMEMI_AMO_INT(NAME, T)                                                                \
    NVSHMEMI_AMO_STD(NAME, T)                                                                    \
    NVSHMEMI_AMO_OP(NAME, T, atomic_compare_swap, PSHMEM_AMO_COMPARE_SWAP,                       \
                    (T * d, T c, T v, int pe), (d, c, v, pe), v, c)                              \
    NVSHMEMI_AMO_OP(NAME, T, atomic_fetch_add, PSHMEM_AMO_FETCH_ADD, (T * d, T v, int pe),       \
                    (d, v, pe), v, v)                                                            \
    NVSHMEMI_AMO_VOID(NAME, T, atomic_add, PSHMEM_AMO_ADD, (T * d, T v, int pe), (d, v, pe), v)  \
    NVSHMEMI_AMO_OP(NAME, T, atomic_fetch_inc, PSHMEM_AMO_FETCH_ADD, (T * d, int pe), (d, pe),   \
                    (T)1, (T)1)                                                                  \
    NVSHMEMI_AMO_VOID(NAME, T, atomic_inc, PSHMEM_AMO_ADD, (T * d, int pe), (d, pe), (T)1)       \
    NVSHMEMI_AMO_OP(NAME, T, atomic_fetch_and, PSHMEM_AMO_FETCH_AND, (T * d, T v, int pe),       \
                    (d, v, pe), v, v)                                                            \
    NVSHMEMI_AMO_VOID(NAME, T, atomic_and, PSHMEM_AMO_AND, (T * d, T v, int pe), (d, v, pe), v)  \
    NVSHMEMI_AMO_OP(NAME, T, atomic_fetch_or, PSHMEM_AMO_FETCH_OR, (T * d, T v, int pe),         \
                    (d, v, pe), v, v)                                                            \
    NVSHMEMI_AMO_VOID(NAME, T, atomic_or, PSHMEM_AMO_OR, (T * d, T v, int pe), (d, v, pe), v)    \
    NVSHMEMI_AMO_OP(NAME, T, atomic_fetch_xor, PSHMEM_AMO_FETCH_XOR, (T * d, T v, int pe),       \
                    (d, v, pe), v, v)                                                            \
    NVSHMEMI_AMO_VOID(NAME, T, atomic_xor, PSHMEM_AMO_XOR, (T * d, T v, int pe), (d, v, pe), v)
NVSHMEMI_AMO_INT(int, int)
NVSHMEMI_AMO_INT(long, long)
NVSHMEMI_AMO_INT(longlong, long long)
NVSHMEMI_AMO_INT(uint, unsigned int)
NVSHMEMI_AMO_INT(ulong, unsigned long)
NVSHMEMI_AMO_INT(ulonglong, unsigned long long)
NVSHMEMI_AMO_INT(int32, int32_t)
NVSHMEMI_AMO_INT(int64, int64_t)
NVSHMEMI_AMO_INT(uint32, uint32_t)
NVSHMEMI_AMO_INT(uint64, uint64_t)
NVSHMEMI_AMO_INT(size, size_t)
NVSHMEMI_AMO_INT(ptrdiff, ptrdiff_t)
NVSHMEMI_AMO_STD(float, float)
NVSHMEMI_AMO_STD(double, double)

/* ---- collectives ------------------------------------------------------------------------------- */
/* Over a team, between team syncs (on return results are complete on every member and the source
 * may be reused). Bytes for the *mem forms, elements for the typed ones. Host forms take either
 * symmetric heap; on-stream forms the GPU heap. */
NVSHMEMI_HD static inline int nvshmem_broadcastmem(nvshmem_team_t team, void *dest,
                                                   const void *source, size_t nelems,
                                                   int PE_root) {
    return NVSHMEMI_PICK(
        pshmem_broadcastmem(team, dest, source, nelems, PE_root),
        nvshmemi_status(PSHMEM_HOST(broadcastmem)(team, dest, source, nelems, PE_root)));
}
NVSHMEMI_HD static inline int nvshmem_fcollectmem(nvshmem_team_t team, void *dest,
                                                  const void *source, size_t nelems) {
    return NVSHMEMI_PICK(pshmem_fcollectmem(team, dest, source, nelems),
                         nvshmemi_status(PSHMEM_HOST(fcollectmem)(team, dest, source, nelems)));
}
NVSHMEMI_HD static inline int nvshmem_alltoallmem(nvshmem_team_t team, void *dest,
                                                  const void *source, size_t nelems) {
    return NVSHMEMI_PICK(pshmem_alltoallmem(team, dest, source, nelems),
                         nvshmemi_status(PSHMEM_HOST(alltoallmem)(team, dest, source, nelems)));
}
static inline int nvshmemx_broadcastmem_on_stream(nvshmem_team_t team, void *dest,
                                                  const void *source, size_t nelems, int PE_root,
                                                  cudaStream_t stream) {
    return nvshmemi_status(
        pshmemx_broadcastmem_on_stream(team, dest, source, nelems, PE_root, (void *)stream));
}
static inline int nvshmemx_fcollectmem_on_stream(nvshmem_team_t team, void *dest,
                                                 const void *source, size_t nelems,
                                                 cudaStream_t stream) {
    return nvshmemi_status(
        pshmemx_fcollectmem_on_stream(team, dest, source, nelems, (void *)stream));
}
static inline int nvshmemx_alltoallmem_on_stream(nvshmem_team_t team, void *dest,
                                                 const void *source, size_t nelems,
                                                 cudaStream_t stream) {
    return nvshmemi_status(
        pshmemx_alltoallmem_on_stream(team, dest, source, nelems, (void *)stream));
}
#if defined(__CUDACC__)
#define NVSHMEMI_GROUP_COLLMEM(SUF)                                                              \
    NVSHMEMI_DEV static inline int nvshmemx_broadcastmem_##SUF(                                 \
        nvshmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root) {       \
        return pshmemx_broadcastmem_##SUF(team, dest, source, nelems, PE_root);                  \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmemx_fcollectmem_##SUF(nvshmem_team_t team, void *dest,   \
                                                              const void *source,                \
                                                              size_t nelems) {                   \
        return pshmemx_fcollectmem_##SUF(team, dest, source, nelems);                            \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmemx_alltoallmem_##SUF(nvshmem_team_t team, void *dest,   \
                                                              const void *source,                \
                                                              size_t nelems) {                   \
        return pshmemx_alltoallmem_##SUF(team, dest, source, nelems);                            \
    }
NVSHMEMI_GROUP_COLLMEM(warp)
NVSHMEMI_GROUP_COLLMEM(block)
#endif

/* Typed broadcast, fcollect, alltoall: host and device, on-stream, and the warp/block forms. */
#define NVSHMEMI_TYPED_COLL_HOST(NAME, T)                                                        \
    NVSHMEMI_HD static inline int nvshmem_##NAME##_broadcast(nvshmem_team_t team, T *dest,       \
                                                             const T *source, size_t nelems,     \
                                                             int PE_root) {                      \
        return NVSHMEMI_PICK(pshmem_##NAME##_broadcast(team, dest, source, nelems, PE_root),     \
                             nvshmem_broadcastmem(team, dest, source, nelems * sizeof(T),        \
                                                  PE_root));                                     \
    }                                                                                            \
    NVSHMEMI_HD static inline int nvshmem_##NAME##_fcollect(nvshmem_team_t team, T *dest,        \
                                                            const T *source, size_t nelems) {    \
        return NVSHMEMI_PICK(pshmem_##NAME##_fcollect(team, dest, source, nelems),               \
                             nvshmem_fcollectmem(team, dest, source, nelems * sizeof(T)));       \
    }                                                                                            \
    NVSHMEMI_HD static inline int nvshmem_##NAME##_alltoall(nvshmem_team_t team, T *dest,        \
                                                            const T *source, size_t nelems) {    \
        return NVSHMEMI_PICK(pshmem_##NAME##_alltoall(team, dest, source, nelems),               \
                             nvshmem_alltoallmem(team, dest, source, nelems * sizeof(T)));       \
    }                                                                                            \
    static inline int nvshmemx_##NAME##_broadcast_on_stream(nvshmem_team_t team, T *dest,        \
                                                            const T *source, size_t nelems,      \
                                                            int PE_root, cudaStream_t stream) {  \
        return nvshmemx_broadcastmem_on_stream(team, dest, source, nelems * sizeof(T), PE_root,   \
                                               stream);                                          \
    }                                                                                            \
    static inline int nvshmemx_##NAME##_fcollect_on_stream(nvshmem_team_t team, T *dest,         \
                                                           const T *source, size_t nelems,       \
                                                           cudaStream_t stream) {                \
        return nvshmemx_fcollectmem_on_stream(team, dest, source, nelems * sizeof(T), stream);   \
    }                                                                                            \
    static inline int nvshmemx_##NAME##_alltoall_on_stream(nvshmem_team_t team, T *dest,         \
                                                           const T *source, size_t nelems,       \
                                                           cudaStream_t stream) {                \
        return nvshmemx_alltoallmem_on_stream(team, dest, source, nelems * sizeof(T), stream);   \
    }
#if defined(__CUDACC__)
#define NVSHMEMI_TYPED_COLL_GROUP(NAME, T, SUF)                                                  \
    NVSHMEMI_DEV static inline int nvshmemx_##NAME##_broadcast_##SUF(                           \
        nvshmem_team_t team, T *dest, const T *source, size_t nelems, int PE_root) {             \
        return pshmemx_##NAME##_broadcast_##SUF(team, dest, source, nelems, PE_root);            \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmemx_##NAME##_fcollect_##SUF(                            \
        nvshmem_team_t team, T *dest, const T *source, size_t nelems) {                          \
        return pshmemx_##NAME##_fcollect_##SUF(team, dest, source, nelems);                      \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmemx_##NAME##_alltoall_##SUF(                            \
        nvshmem_team_t team, T *dest, const T *source, size_t nelems) {                          \
        return pshmemx_##NAME##_alltoall_##SUF(team, dest, source, nelems);                      \
    }
#define NVSHMEMI_TYPED_COLL(NAME, T)                                                             \
    NVSHMEMI_TYPED_COLL_HOST(NAME, T)                                                            \
    NVSHMEMI_TYPED_COLL_GROUP(NAME, T, warp)                                                     \
    NVSHMEMI_TYPED_COLL_GROUP(NAME, T, block)
PSHMEM_RMA_TYPES(NVSHMEMI_TYPED_COLL)
NVSHMEMI_TYPED_COLL(half, __half)
NVSHMEMI_TYPED_COLL(bfloat16, __nv_bfloat16)
#else
PSHMEM_RMA_TYPES(NVSHMEMI_TYPED_COLL_HOST)
#endif

/* Reductions: nvshmem_NAME_OP_reduce / _reducescatter (host and device), their on-stream forms
 * (types the host calls carry: PSHMEM_DT_*), and the warp/block forms (every type). */
#define NVSHMEMI_RED_HOST(NAME, T, DT, OPN, OP)                                                  \
    NVSHMEMI_HD static inline int nvshmem_##NAME##_##OPN##_reduce(nvshmem_team_t team, T *dest,  \
                                                                  const T *source,               \
                                                                  size_t nreduce) {              \
        return NVSHMEMI_PICK(pshmem_##NAME##_##OPN##_reduce(team, dest, source, nreduce),        \
                             nvshmemi_status(pshmem_reduce(team, DT, OP, dest, source,           \
                                                           nreduce)));                           \
    }                                                                                            \
    NVSHMEMI_HD static inline int nvshmem_##NAME##_##OPN##_reducescatter(                       \
        nvshmem_team_t team, T *dest, const T *source, size_t nreduce) {                         \
        return NVSHMEMI_PICK(pshmem_##NAME##_##OPN##_reducescatter(team, dest, source, nreduce), \
                             nvshmemi_status(pshmem_reducescatter(team, DT, OP, dest, source,    \
                                                                  nreduce)));                    \
    }                                                                                            \
    static inline int nvshmemx_##NAME##_##OPN##_reduce_on_stream(                                \
        nvshmem_team_t team, T *dest, const T *source, size_t nreduce, cudaStream_t stream) {    \
        return nvshmemi_status(                                                                  \
            pshmemx_reduce_on_stream(team, DT, OP, dest, source, nreduce, (void *)stream));      \
    }                                                                                            \
    static inline int nvshmemx_##NAME##_##OPN##_reducescatter_on_stream(                         \
        nvshmem_team_t team, T *dest, const T *source, size_t nreduce, cudaStream_t stream) {    \
        return nvshmemi_status(pshmemx_reducescatter_on_stream(team, DT, OP, dest, source,       \
                                                               nreduce, (void *)stream));        \
    }
#define NVSHMEMI_RED_GROUP(NAME, T, OPN, SUF)                                                    \
    NVSHMEMI_DEV static inline int nvshmemx_##NAME##_##OPN##_reduce_##SUF(                      \
        nvshmem_team_t team, T *dest, const T *source, size_t nreduce) {                         \
        return pshmemx_##NAME##_##OPN##_reduce_##SUF(team, dest, source, nreduce);               \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmemx_##NAME##_##OPN##_reducescatter_##SUF(               \
        nvshmem_team_t team, T *dest, const T *source, size_t nreduce) {                         \
        return pshmemx_##NAME##_##OPN##_reducescatter_##SUF(team, dest, source, nreduce);        \
    }
#if defined(__CUDACC__)
#define NVSHMEMI_RED_GROUPS(NAME, T, OPN)                                                        \
    NVSHMEMI_RED_GROUP(NAME, T, OPN, warp) NVSHMEMI_RED_GROUP(NAME, T, OPN, block)
/* Device-only reductions (types the host calls do not carry). */
#define NVSHMEMI_RED_DEV(NAME, T, OPN)                                                           \
    NVSHMEMI_DEV static inline int nvshmem_##NAME##_##OPN##_reduce(nvshmem_team_t team, T *dest, \
                                                                   const T *source,              \
                                                                   size_t nreduce) {             \
        return pshmem_##NAME##_##OPN##_reduce(team, dest, source, nreduce);                      \
    }                                                                                            \
    NVSHMEMI_DEV static inline int nvshmem_##NAME##_##OPN##_reducescatter(                      \
        nvshmem_team_t team, T *dest, const T *source, size_t nreduce) {                         \
        return pshmem_##NAME##_##OPN##_reducescatter(team, dest, source, nreduce);               \
    }                                                                                            \
    NVSHMEMI_RED_GROUPS(NAME, T, OPN)
#else
#define NVSHMEMI_RED_GROUPS(NAME, T, OPN)
#endif
#define NVSHMEMI_RED_OP(NAME, T, DT, OPN, OP)                                                    \
    NVSHMEMI_RED_HOST(NAME, T, DT, OPN, OP) NVSHMEMI_RED_GROUPS(NAME, T, OPN)
#define NVSHMEMI_RED_ARITH(NAME, T, DT)                                                          \
    NVSHMEMI_RED_OP(NAME, T, DT, sum, PSHMEM_RED_SUM)                                            \
    NVSHMEMI_RED_OP(NAME, T, DT, prod, PSHMEM_RED_PROD)                                          \
    NVSHMEMI_RED_OP(NAME, T, DT, min, PSHMEM_RED_MIN)                                            \
    NVSHMEMI_RED_OP(NAME, T, DT, max, PSHMEM_RED_MAX)
#define NVSHMEMI_RED_INT(NAME, T, DT)                                                            \
    NVSHMEMI_RED_ARITH(NAME, T, DT)                                                              \
    NVSHMEMI_RED_OP(NAME, T, DT, and, PSHMEM_RED_AND)                                            \
    NVSHMEMI_RED_OP(NAME, T, DT, or, PSHMEM_RED_OR)                                              \
    NVSHMEMI_RED_OP(NAME, T, DT, xor, PSHMEM_RED_XOR)
PSHMEM_RED_WIDE_INT_TYPES(NVSHMEMI_RED_INT)
NVSHMEMI_RED_ARITH(float, float, PSHMEM_DT_FLOAT)
NVSHMEMI_RED_ARITH(double, double, PSHMEM_DT_DOUBLE)
#if defined(__CUDACC__)
NVSHMEMI_RED_ARITH(half, __half, PSHMEM_DT_HALF)
NVSHMEMI_RED_ARITH(bfloat16, __nv_bfloat16, PSHMEM_DT_BFLOAT16)
#define NVSHMEMI_RED_DEV_INT(NAME, T)                                                            \
    NVSHMEMI_RED_DEV(NAME, T, sum) NVSHMEMI_RED_DEV(NAME, T, prod)                               \
    NVSHMEMI_RED_DEV(NAME, T, min) NVSHMEMI_RED_DEV(NAME, T, max)                                \
    NVSHMEMI_RED_DEV(NAME, T, and) NVSHMEMI_RED_DEV(NAME, T, or) NVSHMEMI_RED_DEV(NAME, T, xor)
PSHMEM_RED_NARROW_INT_TYPES(NVSHMEMI_RED_DEV_INT)
#endif

/* ---- modules and launches ---------------------------------------------------------------------- */
/* Fills the device state of a module (or library) the program loaded itself; an error (not an
 * abort) for one without it. */
static inline int nvshmemx_cumodule_init(void *module) {
    return nvshmemi_status(pshmemx_cumodule_init(module));
}
static inline int nvshmemx_cumodule_finalize(void *module) {
    return nvshmemi_status(pshmemx_cumodule_finalize(module));
}
static inline int nvshmemx_culibrary_init(void *library) {
    return nvshmemi_status(pshmemx_culibrary_init(library));
}
static inline int nvshmemx_culibrary_finalize(void *library) {
    return nvshmemi_status(pshmemx_culibrary_finalize(library));
}

#if defined(__CUDACC__)
/* The largest grid of `func` whose blocks can all be resident at once on the current device. */
static inline int nvshmemx_collective_launch_query_gridsize(const void *func, dim3 block,
                                                            void **args, size_t shared,
                                                            int *gridsize) {
    (void)args;
    int dev = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func,
                                                      (int)(block.x * block.y * block.z),
                                                      shared) != cudaSuccess)
        return NVSHMEMX_ERROR_INTERNAL;
    *gridsize = per_sm * sms;
    return NVSHMEMX_SUCCESS;
}
/* A cooperative launch (every block resident: kernels may sync across PEs); a grid of 0 takes
 * the largest that fits. Completes the GPU part of init and fills the device states first. */
static inline int nvshmemx_collective_launch(const void *func, dim3 grid, dim3 block, void **args,
                                             size_t shared, cudaStream_t stream) {
    if (pshmemi_sync_states() != PSHMEM_SUCCESS) {
        fprintf(stderr, "nvshmemx_collective_launch: %s\n", pshmem_last_error());
        return NVSHMEMX_ERROR_COLLECTIVE_LAUNCH_FAILED;
    }
    if (grid.x * grid.y * grid.z == 0) {
        int g = 0;
        if (nvshmemx_collective_launch_query_gridsize(func, block, args, shared, &g) != 0 || !g)
            return NVSHMEMX_ERROR_COLLECTIVE_LAUNCH_FAILED;
        grid = dim3((unsigned)g, 1, 1);
    }
    cudaError_t e = cudaLaunchCooperativeKernel(func, grid, block, args, shared, stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "nvshmemx_collective_launch: %s\n", cudaGetErrorString(e));
        return NVSHMEMX_ERROR_COLLECTIVE_LAUNCH_FAILED;
    }
    return NVSHMEMX_SUCCESS;
}
#endif

#endif /* PSHMEM_COMPAT_NVSHMEM_H */
