/* proxyshmem device API: put, get (thread, warp and block variants; blocking and nbi), and the
 * typed single-element p and g.
 *
 * Routing, per call: a PE whose heap this GPU maps (itself, and same-host peers opened through
 * CUDA IPC) is reached by loads and stores; any other PE through the command ring and the
 * proxy. Direct stores become visible system-wide at a fence or quiet (or with a signal's
 * release, signal.cuh); ring operations finish when the ring's `completed` passes them. */
#ifndef PSHMEM_RMA_CUH
#define PSHMEM_RMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pshmem/state.cuh"
#include "pshmem/types.h"

/* Copies n bytes with `nt` threads (this one is `t`): 16-byte vectors when both addresses and
 * the length allow, bytes otherwise. */
__device__ __forceinline__ void pshmem_i_copy(void *dst, const void *src, size_t n, uint32_t t,
                                              uint32_t nt) {
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (((d | s) & 15) == 0 && n <= 16 * (size_t)nt) {
        /* At most one vector per thread (a group's small put): no loop, 32-bit indices. */
        uint32_t nv = (uint32_t)(n >> 4), tail = (uint32_t)n & 15;
        if (t < nv) ((int4 *)dst)[t] = ((const int4 *)src)[t];
        for (uint32_t j = t; j < tail; j += nt) ((char *)dst)[nv * 16 + j] = ((const char *)src)[nv * 16 + j];
        return;
    }
    if (((d | s) & 15) == 0) {
        size_t nv = n / 16;
        int4 *dv = (int4 *)dst;
        const int4 *sv = (const int4 *)src;
        size_t i = t;
        /* Four independent 16-byte loads in flight per thread before the stores. */
        for (; i + 3 * (size_t)nt < nv; i += 4 * (size_t)nt) {
            int4 a = sv[i], b = sv[i + nt], c = sv[i + 2 * (size_t)nt], e = sv[i + 3 * (size_t)nt];
            dv[i] = a;
            dv[i + nt] = b;
            dv[i + 2 * (size_t)nt] = c;
            dv[i + 3 * (size_t)nt] = e;
        }
        for (; i < nv; i += nt) dv[i] = sv[i];
        for (size_t j = nv * 16 + t; j < n; j += nt) ((char *)dst)[j] = ((const char *)src)[j];
    } else {
        for (size_t j = t; j < n; j += nt) ((char *)dst)[j] = ((const char *)src)[j];
    }
}

/* Shared by every put/get variant: `t` of `nt` cooperating threads; thread 0 publishes ring
 * work. Returns the ring index to wait for (0: none or direct). */
__device__ __forceinline__ uint64_t pshmem_i_putget(bool put, void *dest, const void *src,
                                                    size_t n, int pe, uint32_t t, uint32_t nt) {
    if (n == 0) return 0;
    const void *sym = put ? dest : src; /* the symmetric side */
    void *remote = pshmem_ptr(sym, pe);
    if (remote) {
        if (put) pshmem_i_copy(remote, src, n, t, nt);
        else pshmem_i_copy(dest, remote, n, t, nt);
        return 0;
    }
    if (t != 0 || !pshmem_i_valid_pe(pe)) return 0;
    uint64_t off = pshmem_i_offset(sym, n, pe);
    if (off == ~0ull) return 0;
    /* The local side goes as a device address (any device or mapped memory): the proxy copies
     * it through its staging buffers. A thread's shared or local memory has no such address
     * (the proxy would read whatever host memory shares its number): refused and recorded. */
    const void *mine = put ? src : dest;
    if (__isShared(mine) || __isLocal(mine)) {
        pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, (uint32_t)pe));
        return 0;
    }
    uint64_t local = (uint64_t)(uintptr_t)mine;
    pshmem_slot_t s = pshmem_i_slot(put ? PSHMEM_OP_PUT : PSHMEM_OP_GET, PSHMEM_FLAG_RAW_LOCAL, 0,
                                     1, (uint32_t)pe, off, local, n);
    return pshmem_i_push(&s, 1);
}

/* Blocking: on return the source may be reused (put) or the data is here (get). */
__device__ inline void pshmem_putmem(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_wait_done(pshmem_i_putget(true, dest, src, n, pe, 0, 1));
}
__device__ inline void pshmem_getmem(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_wait_done(pshmem_i_putget(false, dest, src, n, pe, 0, 1));
}
/* Non-blocking: complete with quiet. */
__device__ inline void pshmem_putmem_nbi(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(true, dest, src, n, pe, 0, 1);
}
__device__ inline void pshmem_getmem_nbi(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(false, dest, src, n, pe, 0, 1);
}

/* A group's variant: every thread of the group calls with the same arguments; `t` of `nt`
 * threads copy, thread 0 publishes and (blocking) waits; `SYNC` joins the group after. */
#define PSHMEM_I_GROUP_RMA(NAME, PUT, BLOCKING, T, NT, SYNC)                                   \
    __device__ inline void NAME(void *dest, const void *src, size_t n, int pe) {               \
        uint32_t t_ = (T);                                                                     \
        uint64_t end = pshmem_i_putget(PUT, dest, src, n, pe, t_, (NT));                       \
        if (BLOCKING && t_ == 0) pshmem_i_wait_done(end);                                      \
        SYNC;                                                                                  \
    }

/* Warp variants: every lane of the warp calls with the same arguments. */
PSHMEM_I_GROUP_RMA(pshmemx_putmem_warp, true, true, pshmem_laneid(), 32, __syncwarp())
PSHMEM_I_GROUP_RMA(pshmemx_getmem_warp, false, true, pshmem_laneid(), 32, __syncwarp())
PSHMEM_I_GROUP_RMA(pshmemx_putmem_nbi_warp, true, false, pshmem_laneid(), 32, __syncwarp())
PSHMEM_I_GROUP_RMA(pshmemx_getmem_nbi_warp, false, false, pshmem_laneid(), 32, __syncwarp())

/* Block variants: every thread of the block calls with the same arguments. */
PSHMEM_I_GROUP_RMA(pshmemx_putmem_block, true, true, PSHMEM_I_TID, PSHMEM_I_NT, __syncthreads())
PSHMEM_I_GROUP_RMA(pshmemx_getmem_block, false, true, PSHMEM_I_TID, PSHMEM_I_NT, __syncthreads())
PSHMEM_I_GROUP_RMA(pshmemx_putmem_nbi_block, true, false, PSHMEM_I_TID, PSHMEM_I_NT,
                   __syncthreads())
PSHMEM_I_GROUP_RMA(pshmemx_getmem_nbi_block, false, false, PSHMEM_I_TID, PSHMEM_I_NT,
                   __syncthreads())

/* ---- p / g --------------------------------------------------------------------------------- */

/* One element to `pe` (complete at quiet). */
template <typename T> __device__ __forceinline__ void pshmem_i_p(T *dest, T v, int pe) {
    static_assert(sizeof(T) <= 8, "p is for elements of at most 8 bytes");
    T *remote = (T *)pshmem_ptr(dest, pe);
    if (remote) {
        *(volatile T *)remote = v;
        return;
    }
    if (!pshmem_i_valid_pe(pe)) return;
    uint64_t off = pshmem_i_offset(dest, sizeof(T), pe);
    if (off == ~0ull) return;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    pshmem_slot_t s = pshmem_i_slot(PSHMEM_OP_P, 0, 0, 1, (uint32_t)pe, off, bits, sizeof(T));
    pshmem_i_push(&s, 1);
}

/* One element from `pe`. */
template <typename T> __device__ __forceinline__ T pshmem_i_g(const T *src, int pe) {
    static_assert(sizeof(T) <= 8, "g is for elements of at most 8 bytes");
    const T *remote = (const T *)pshmem_ptr(src, pe);
    if (remote) return *(const volatile T *)remote;
    T out;
    memset(&out, 0, sizeof(T));
    int c = pshmem_i_cell_claim();
    if (c < 0) return out;
    unsigned long long *cell = &pshmem_dstate.cells[c];
    pshmem_getmem(cell, src, sizeof(T), pe);
    unsigned long long bits = *(volatile unsigned long long *)cell;
    memcpy(&out, &bits, sizeof(T));
    pshmem_i_cell_release(c);
    return out;
}

/* The typed families (NVSHMEM's standard RMA types, with pshmem_ names): p and g, and put/get
 * of `nelems` elements — thread, warp and block, blocking and nbi. */
#define PSHMEM_I_TYPED_RMA(NAME, T)                                                            \
    __device__ inline void pshmem_##NAME##_p(T *d, T v, int pe) { pshmem_i_p<T>(d, v, pe); }  \
    __device__ inline T pshmem_##NAME##_g(const T *s, int pe) { return pshmem_i_g<T>(s, pe); } \
    PSHMEM_I_TYPED_BULK(NAME, T)
#define PSHMEM_I_TYPED_BULK(NAME, T)                                                           \
    __device__ inline void pshmem_##NAME##_put(T *d, const T *s, size_t n, int pe) {          \
        pshmem_putmem(d, s, n * sizeof(T), pe);                                                \
    }                                                                                          \
    __device__ inline void pshmem_##NAME##_get(T *d, const T *s, size_t n, int pe) {          \
        pshmem_getmem(d, s, n * sizeof(T), pe);                                                \
    }                                                                                          \
    __device__ inline void pshmem_##NAME##_put_nbi(T *d, const T *s, size_t n, int pe) {      \
        pshmem_putmem_nbi(d, s, n * sizeof(T), pe);                                            \
    }                                                                                          \
    __device__ inline void pshmem_##NAME##_get_nbi(T *d, const T *s, size_t n, int pe) {      \
        pshmem_getmem_nbi(d, s, n * sizeof(T), pe);                                            \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_put_warp(T *d, const T *s, size_t n, int pe) {    \
        pshmemx_putmem_warp(d, s, n * sizeof(T), pe);                                          \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_get_warp(T *d, const T *s, size_t n, int pe) {    \
        pshmemx_getmem_warp(d, s, n * sizeof(T), pe);                                          \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_put_nbi_warp(T *d, const T *s, size_t n, int pe) { \
        pshmemx_putmem_nbi_warp(d, s, n * sizeof(T), pe);                                      \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_get_nbi_warp(T *d, const T *s, size_t n, int pe) { \
        pshmemx_getmem_nbi_warp(d, s, n * sizeof(T), pe);                                      \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_put_block(T *d, const T *s, size_t n, int pe) {   \
        pshmemx_putmem_block(d, s, n * sizeof(T), pe);                                         \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_get_block(T *d, const T *s, size_t n, int pe) {   \
        pshmemx_getmem_block(d, s, n * sizeof(T), pe);                                         \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_put_nbi_block(T *d, const T *s, size_t n,         \
                                                          int pe) {                            \
        pshmemx_putmem_nbi_block(d, s, n * sizeof(T), pe);                                     \
    }                                                                                          \
    __device__ inline void pshmemx_##NAME##_get_nbi_block(T *d, const T *s, size_t n,         \
                                                          int pe) {                            \
        pshmemx_getmem_nbi_block(d, s, n * sizeof(T), pe);                                     \
    }

/* Every standard RMA type (types.h). */
PSHMEM_RMA_TYPES(PSHMEM_I_TYPED_RMA)

/* half and bfloat16, NVSHMEM's two RMA types beyond the standard ones: p and g move the 16 bits
 * as an unsigned short, reinterpreted by CUDA's intrinsics (never a memcpy of a 16-bit float,
 * which ptxas may lower to byte stores: scripts/sass-check.sh). */
#define PSHMEM_I_TYPED_RMA_F16(NAME, T, TO_BITS, FROM_BITS)                                    \
    __device__ inline void pshmem_##NAME##_p(T *d, T v, int pe) {                              \
        pshmem_i_p<unsigned short>((unsigned short *)d, TO_BITS(v), pe);                       \
    }                                                                                          \
    __device__ inline T pshmem_##NAME##_g(const T *s, int pe) {                                \
        return FROM_BITS(pshmem_i_g<unsigned short>((const unsigned short *)s, pe));           \
    }                                                                                          \
    PSHMEM_I_TYPED_BULK(NAME, T)
PSHMEM_I_TYPED_RMA_F16(half, __half, __half_as_ushort, __ushort_as_half)
PSHMEM_I_TYPED_RMA_F16(bfloat16, __nv_bfloat16, __bfloat16_as_ushort, __ushort_as_bfloat16)

#endif /* PSHMEM_RMA_CUH */
