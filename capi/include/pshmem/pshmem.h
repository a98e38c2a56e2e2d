/* proxyshmem's C API (libpshmem.so): one PE per process, its symmetric heaps, host-initiated
 * RMA, signals and atomics, ordering, barriers, teams, and the GPU's on-stream operations.
 *
 * Conventions:
 * - Functions return 0 (PSHMEM_SUCCESS) or a PSHMEM_ERR_* code, and leave the error's message
 *   (naming the PE, the operation and the peer) for pshmem_last_error() on the calling thread.
 *   Functions returning a pointer return NULL on error; queries return -1 (with a message).
 * - Result pointers (`old`, `seen`, `provided`) may be NULL where the result is not wanted; a
 *   split's team handles and pshmem_signal_fetch's `value` may not.
 * - A symmetric address lies in the host symmetric heap (pshmem_malloc: host memory, the size
 *   of PSHMEM_SYMMETRIC_SIZE) or in the GPU symmetric heap (pshmemx_gpu_malloc: device memory,
 *   PSHMEM_GPU_SYMMETRIC_SIZE); every call goes to the heap its address is in. With the host
 *   heap, local buffers are host memory; with the GPU heap, any memory of the process (pageable
 *   host memory is staged; the on-stream calls take device or pinned memory only).
 * - Allocation, free, barriers, syncs, team splits and finalize are collective.
 * - Kernels use the device API (pshmem/device.cuh) on GPU symmetric addresses.
 *
 * - In CUDA translation units (nvcc), the names this API shares with the device API
 *   (pshmem/device.cuh: pshmem_my_pe, pshmem_putmem, pshmem_quiet, ...) are the device
 *   functions; their host forms are spelled pshmem_host_<name> there (PSHMEM_HOST(name) spells
 *   whichever applies), bound to the same library symbols.
 *
 * Compiles as C99 and C++ with -Wall -Werror; needs no CUDA header. */
#ifndef PSHMEM_PSHMEM_H
#define PSHMEM_PSHMEM_H

#include <stddef.h>
#include <stdint.h>

#include "pshmem/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A host function whose name the device API also has: under nvcc declared as
 * pshmem_host_<name>, bound by an asm label to the library's pshmem_<name>. */
#if defined(__CUDACC__)
#define PSHMEM_HOST(name) pshmem_host_##name
#define PSHMEMI_SHARED(ret, name, args) ret pshmem_host_##name args __asm__("pshmem_" #name)
#else
#define PSHMEM_HOST(name) pshmem_##name
#define PSHMEMI_SHARED(ret, name, args) ret pshmem_##name args
#endif

/* ---- errors ---------------------------------------------------------------------------------- */
#define PSHMEM_SUCCESS 0
#define PSHMEM_ERR_NOT_INITIALIZED 1 /* not initialized, or already finalized */
#define PSHMEM_ERR_INVALID_ARG 2     /* a bad PE, address, range, alignment, size or team */
#define PSHMEM_ERR_OUT_OF_MEMORY 3   /* the symmetric heap (or the team slots) ran out */
#define PSHMEM_ERR_PEER_FAILED 4     /* a peer died or the data path failed */
#define PSHMEM_ERR_TIMEOUT 5         /* a wait ran past PSHMEM_OP_TIMEOUT */
#define PSHMEM_ERR_CONFIG 6          /* a bad setting (the message names the variable) */
#define PSHMEM_ERR_CUDA 7            /* CUDA failed, or there is no GPU */
#define PSHMEM_ERR_BOOTSTRAP 8       /* joining the job or a bootstrap collective failed */
#define PSHMEM_ERR_TRANSPORT 9       /* the network transport failed to open or connect */
#define PSHMEM_ERR_MISMATCH 10       /* a collective call differed across PEs */
#define PSHMEM_ERR_INTERNAL 11       /* a bug: the message says where */
#define PSHMEM_ERR_UNSUPPORTED 12    /* not provided (yet) */

/* This thread's last error message ("" when none). */
const char *pshmem_last_error(void);

/* ---- init ------------------------------------------------------------------------------------ */
#define PSHMEM_THREAD_SINGLE 0
#define PSHMEM_THREAD_FUNNELED 1
#define PSHMEM_THREAD_SERIALIZED 2
#define PSHMEM_THREAD_MULTIPLE 3

/* Complete the GPU part at the first allocation, barrier, sync or collective launch, on the
 * CUDA device current then (NVSHMEM's two-stage init). */
#define PSHMEMX_INIT_GPU_ON_DEMAND 1u

/* From the launcher: pshmrun's or torchrun's variables, or mpirun's, mpiexec's or srun's (the
 * ranks meet over the program's MPI if it is initialised, else on their own); none: a 1-PE
 * job. Reference-counted: every init needs a finalize, the last one tears down. */
int pshmem_init(void);
int pshmemx_init_flags(unsigned flags);
int pshmem_init_thread(int requested, int *provided); /* provides PSHMEM_THREAD_MULTIPLE */

/* Unique-id launch: one rank makes the id (it hosts the rendezvous), every rank gets a copy
 * by its own means and joins with its rank. */
typedef struct pshmem_uniqueid {
    unsigned char bytes[128];
} pshmem_uniqueid_t;
int pshmem_uniqueid_get(pshmem_uniqueid_t *id);
int pshmem_init_uniqueid(const pshmem_uniqueid_t *id, int rank, int nranks);
int pshmemx_init_uniqueid(const pshmem_uniqueid_t *id, int rank, int nranks, unsigned flags);

/* Over an MPI communicator of the program's own MPI (found at run time: libpshmem links no
 * MPI; Open MPI and MPICH-ABI libraries), which must be initialised: the PEs are its ranks, in
 * order. `comm` points to an MPI_Comm (NULL: MPI_COMM_WORLD). Collective over the
 * communicator. */
int pshmemx_init_mpi_comm(const void *comm, unsigned flags);

int pshmem_finalize(void);
/* 0: not initialized; 1: the host part; 2: the GPU part too. */
int pshmem_init_status(void);
/* Ends this process with `status`; the other PEs see it die. */
void pshmem_global_exit(int status);
void pshmem_version(int *major, int *minor);

/* ---- PEs and teams --------------------------------------------------------------------------- */
typedef int32_t pshmem_team_t;
#define PSHMEM_TEAM_INVALID (-1)
#define PSHMEM_TEAM_WORLD 0
#define PSHMEM_TEAM_SHARED 1         /* PEs whose memory this PE maps */
#define PSHMEMX_TEAM_NODE 2          /* PEs of this host */
#define PSHMEMX_TEAM_SAME_MYPE_NODE 3 /* PEs with this PE's local rank, one per host */

PSHMEMI_SHARED(int, my_pe, (void));
PSHMEMI_SHARED(int, n_pes, (void));
PSHMEMI_SHARED(int, team_my_pe, (pshmem_team_t team));
PSHMEMI_SHARED(int, team_n_pes, (pshmem_team_t team));
PSHMEMI_SHARED(int, team_translate_pe, (pshmem_team_t src, int pe, pshmem_team_t dest));
/* Collective over the parent; PEs may pass different triples (disjoint sub-teams). A PE
 * outside its triple gets PSHMEM_TEAM_INVALID. */
/* A 2-D split of the parent's members, numbered row by row with `xrange` per row: *xaxis gets
 * this PE's row, *yaxis its column (collective over the parent; config as NVSHMEM's, unused). */
int pshmem_team_split_2d(pshmem_team_t parent, int xrange, pshmem_team_t *xaxis,
                         pshmem_team_t *yaxis);
int pshmem_team_split_strided(pshmem_team_t parent, int start, int stride, int size,
                              pshmem_team_t *new_team);
int pshmem_team_destroy(pshmem_team_t team);
PSHMEMI_SHARED(int, team_sync, (pshmem_team_t team)); /* every member arrives */
int pshmem_team_barrier(pshmem_team_t team); /* quiet, then team_sync */

/* ---- memory ---------------------------------------------------------------------------------- */
/* Host symmetric heap (NULL for 0 bytes). */
void *pshmem_malloc(size_t size);
void *pshmem_calloc(size_t count, size_t size);
void *pshmem_align(size_t alignment, size_t size);
/* Either heap; NULL is a no-op. */
int pshmem_free(void *ptr);
/* `dest` itself for this PE; the address of `pe`'s copy where this PE maps it; else NULL. */
PSHMEMI_SHARED(void *, ptr, (const void *dest, int pe));

/* GPU symmetric heap: device -1 takes the device current on this thread (else
 * PSHMEM_CUDA_DEVICE, else the local rank modulo the devices). */
int pshmemx_gpu_init(int device);
void *pshmemx_gpu_malloc(size_t size);
void *pshmemx_gpu_calloc(size_t count, size_t size);
void *pshmemx_gpu_align(size_t alignment, size_t size);
int pshmemx_gpu_free(void *ptr);

/* ---- RMA, signals, atomics (host-initiated) -------------------------------------------------- */
/* Blocking calls return when the local buffer may be reused (put) or holds the data (get);
 * _nbi calls complete at pshmem_quiet. */
PSHMEMI_SHARED(int, putmem, (void *dest, const void *src, size_t nbytes, int pe));
PSHMEMI_SHARED(int, getmem, (void *dest, const void *src, size_t nbytes, int pe));
PSHMEMI_SHARED(int, putmem_nbi, (void *dest, const void *src, size_t nbytes, int pe));
PSHMEMI_SHARED(int, getmem_nbi, (void *dest, const void *src, size_t nbytes, int pe));
/* The signal (PSHMEM_SIGNAL_SET or _ADD) is never visible before the data. */
PSHMEMI_SHARED(int, putmem_signal, (void *dest, const void *src, size_t nbytes, uint64_t *sig,
                                     uint64_t value, int sig_op, int pe));
PSHMEMI_SHARED(int, putmem_signal_nbi, (void *dest, const void *src, size_t nbytes,
                                         uint64_t *sig, uint64_t value, int sig_op, int pe));
int pshmem_signal_op(uint64_t *sig, uint64_t value, int sig_op, int pe);
PSHMEMI_SHARED(int, signal_fetch, (const uint64_t *sig, uint64_t *value));
/* Waits on a local word until `*word cmp value` (PSHMEM_CMP_*); `seen` gets its value. */
PSHMEMI_SHARED(int, signal_wait_until, (uint64_t *sig, int cmp, uint64_t value, uint64_t *seen));
PSHMEMI_SHARED(int, uint64_wait_until, (uint64_t *ivar, int cmp, uint64_t value, uint64_t *seen));
PSHMEMI_SHARED(int, uint32_wait_until, (uint32_t *ivar, int cmp, uint32_t value, uint32_t *seen));
/* `op` is a PSHMEM_AMO_* code; `old` (may be NULL) gets the old value of fetching ones. */
int pshmem_atomic64(int op, uint64_t *dest, uint64_t operand, uint64_t compare, int pe,
                    uint64_t *old);
int pshmem_atomic32(int op, uint32_t *dest, uint32_t operand, uint32_t compare, int pe,
                    uint32_t *old);

/* ---- ordering, barriers, collectives --------------------------------------------------------- */
PSHMEMI_SHARED(int, quiet, (void)); /* this PE's host-initiated operations are complete */
PSHMEMI_SHARED(int, fence, (void)); /* ordered per target PE */
PSHMEMI_SHARED(int, barrier_all, (void)); /* quiet, then every PE arrives */
PSHMEMI_SHARED(int, sync_all, (void)); /* every PE arrives */
/* Collectives over a team, on either heap (dest and src in the same one), between team syncs:
 * on return the results are complete on every member and src may be reused.
 * broadcastmem: the member `root`'s nbytes into every member's dest (the root's too);
 * fcollectmem: every member's nbytes into every dest at offset index × nbytes;
 * alltoallmem: block j of src (nbytes) to member j's dest at offset index × nbytes;
 * reduce: the element-wise reduction (PSHMEM_RED_*) of every member's nelems elements of
 *   PSHMEM_DT_* type into every member's dest (dest may be src);
 * reducescatter: member i gets in dest the reduction of block i (nelems) of every src. */
PSHMEMI_SHARED(int, broadcastmem,
               (pshmem_team_t team, void *dest, const void *src, size_t nbytes, int root));
PSHMEMI_SHARED(int, fcollectmem, (pshmem_team_t team, void *dest, const void *src, size_t nbytes));
PSHMEMI_SHARED(int, alltoallmem, (pshmem_team_t team, void *dest, const void *src, size_t nbytes));
int pshmem_reduce(pshmem_team_t team, int dtype, int op, void *dest, const void *src,
                  size_t nelems);
int pshmem_reducescatter(pshmem_team_t team, int dtype, int op, void *dest, const void *src,
                         size_t nelems);

/* ---- on a CUDA stream (GPU symmetric memory; graph-capturable) ------------------------------- */
typedef void *pshmem_stream_t; /* a cudaStream_t / CUstream */
int pshmemx_quiet_on_stream(pshmem_stream_t stream);
int pshmemx_barrier_all_on_stream(pshmem_stream_t stream);
int pshmemx_sync_all_on_stream(pshmem_stream_t stream);
int pshmemx_team_sync_on_stream(pshmem_team_t team, pshmem_stream_t stream);
int pshmemx_barrier_on_stream(pshmem_team_t team, pshmem_stream_t stream);
int pshmemx_putmem_on_stream(void *dest, const void *src, size_t nbytes, int pe,
                             pshmem_stream_t stream);
int pshmemx_getmem_on_stream(void *dest, const void *src, size_t nbytes, int pe,
                             pshmem_stream_t stream);
int pshmemx_putmem_nbi_on_stream(void *dest, const void *src, size_t nbytes, int pe,
                                 pshmem_stream_t stream);
int pshmemx_getmem_nbi_on_stream(void *dest, const void *src, size_t nbytes, int pe,
                                 pshmem_stream_t stream);
int pshmemx_putmem_signal_on_stream(void *dest, const void *src, size_t nbytes, uint64_t *sig,
                                    uint64_t value, int sig_op, int pe, pshmem_stream_t stream);
int pshmemx_signal_op_on_stream(uint64_t *sig, uint64_t value, int sig_op, int pe,
                                pshmem_stream_t stream);
int pshmemx_alltoallmem_on_stream(pshmem_team_t team, void *dest, const void *src,
                                  size_t nbytes, pshmem_stream_t stream);
int pshmemx_broadcastmem_on_stream(pshmem_team_t team, void *dest, const void *src,
                                   size_t nbytes, int root, pshmem_stream_t stream);
int pshmemx_fcollectmem_on_stream(pshmem_team_t team, void *dest, const void *src,
                                  size_t nbytes, pshmem_stream_t stream);
int pshmemx_reduce_on_stream(pshmem_team_t team, int dtype, int op, void *dest, const void *src,
                             size_t nelems, pshmem_stream_t stream);
int pshmemx_reducescatter_on_stream(pshmem_team_t team, int dtype, int op, void *dest,
                                    const void *src, size_t nelems, pshmem_stream_t stream);

/* ---- device state ---------------------------------------------------------------------------- */
/* Fills the pshmem_dstate of a module (CUmodule) or library (CUlibrary) the application loaded
 * itself; PSHMEM_ERR_CUDA when it has none. */
int pshmemx_cumodule_init(void *cumodule);
int pshmemx_cumodule_finalize(void *cumodule);
int pshmemx_culibrary_init(void *culibrary);
int pshmemx_culibrary_finalize(void *culibrary);
/* Not provided yet (PSHMEM_ERR_UNSUPPORTED). */
int pshmemx_buffer_register_symmetric(void *addr, size_t len, int flags);
int pshmemx_buffer_unregister_symmetric(void *addr, size_t len);

/* Used by the device API's registration (state.cuh) and by collective launches. */
int pshmemi_register_state(void *(*addr)(void), unsigned size, unsigned version);
void pshmemi_unregister_state(int id);
int pshmemi_sync_states(void);

#ifdef __cplusplus
}
#endif

#endif /* PSHMEM_PSHMEM_H */
