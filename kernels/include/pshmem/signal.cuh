/* proxyshmem device API: signals — signal_op, put-with-signal (the signal is never visible
 * before the data), and the waits on local words (signal_wait_until, TYPE_wait_until).
 *
 * Memory ordering: a direct signal is a release store or release add at system scope, after a
 * __threadfence_system() when several threads wrote the data; a waiter's acquire load that sees
 * it then sees the data. Through the ring, the target's proxy applies the signal after the data
 * (see proxy/src/engine). */
#ifndef PSHMEM_SIGNAL_CUH
#define PSHMEM_SIGNAL_CUH

#include <stdint.h>

#include "pshmem/rma.cuh"

/* Applies a signal to a directly reachable word with release semantics (earlier stores of this
 * thread are visible before the signal is). */
__device__ __forceinline__ void pshmem_i_signal_direct(uint64_t *p, uint64_t v, int op) {
    if (op == PSHMEM_SIGNAL_ADD) pshmem_red_release_sys_add_u64(p, v);
    else pshmem_st_release_sys_u64(p, v);
}

/* Returns the ring index to wait for (0: direct or error). */
__device__ __forceinline__ uint64_t pshmem_i_signal_op(uint64_t *sig, uint64_t v, int op, int pe) {
    uint64_t *remote = (uint64_t *)pshmem_ptr(sig, pe);
    if (remote) {
        pshmem_i_signal_direct(remote, v, op);
        return 0;
    }
    if (!pshmem_i_valid_pe(pe)) return 0;
    uint64_t off = pshmem_i_offset(sig, 8, pe);
    if (off == ~0ull) return 0;
    pshmem_slot_t s = pshmem_i_slot(PSHMEM_OP_SIGNAL, 0, (uint32_t)op, 1, (uint32_t)pe, off, v, 0);
    return pshmem_i_push(&s, 1);
}

/* Updates `pe`'s signal word (non-blocking; complete with quiet). */
__device__ inline void pshmemx_signal_op(uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_signal_op(sig, v, op, pe);
}

/* put-with-signal by `t` of `nt` cooperating threads: the signal is never visible before the
 * data. Returns the ring index to wait for (0: direct or error). */
__device__ __forceinline__ uint64_t pshmem_i_put_signal(void *dest, const void *src, size_t n,
                                                        uint64_t *sig, uint64_t v, int op, int pe,
                                                        uint32_t t, uint32_t nt) {
    void *remote = pshmem_ptr(dest, pe);
    if (remote) {
        pshmem_i_copy(remote, src, n, t, nt);
        if (nt > 1) {
            /* Every cooperating thread's stores are ordered before thread 0's release. */
            __threadfence_system();
            if (nt == 32) __syncwarp(); else __syncthreads();
        }
        if (t == 0) pshmem_i_signal_direct((uint64_t *)pshmem_ptr(sig, pe), v, op);
        return 0;
    }
    if (t != 0 || !pshmem_i_valid_pe(pe)) return 0;
    uint64_t off = pshmem_i_offset(dest, n, pe);
    uint64_t soff = pshmem_i_offset(sig, 8, pe);
    if (off == ~0ull || soff == ~0ull) return 0;
    pshmem_slot_t s[2];
    s[0] = pshmem_i_slot(PSHMEM_OP_PUT_SIGNAL, PSHMEM_FLAG_RAW_LOCAL, (uint32_t)op, 2, (uint32_t)pe,
                         off, (uint64_t)(uintptr_t)src, n);
    s[1] = pshmem_i_cont((uint32_t)pe, soff, v);
    return pshmem_i_push(s, 2);
}

__device__ inline void pshmem_putmem_signal(void *dest, const void *src, size_t n, uint64_t *sig,
                                            uint64_t v, int op, int pe) {
    pshmem_i_wait_done(pshmem_i_put_signal(dest, src, n, sig, v, op, pe, 0, 1));
}
__device__ inline void pshmem_putmem_signal_nbi(void *dest, const void *src, size_t n,
                                                uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_put_signal(dest, src, n, sig, v, op, pe, 0, 1);
}
__device__ inline void pshmemx_putmem_signal_nbi_warp(void *dest, const void *src, size_t n,
                                                      uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_put_signal(dest, src, n, sig, v, op, pe, pshmem_laneid(), 32);
    __syncwarp();
}
__device__ inline void pshmemx_putmem_signal_nbi_block(void *dest, const void *src, size_t n,
                                                       uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_put_signal(dest, src, n, sig, v, op, pe, PSHMEM_I_TID, PSHMEM_I_NT);
    __syncthreads();
}

__device__ inline void pshmemx_putmem_signal_warp(void *dest, const void *src, size_t n,
                                                  uint64_t *sig, uint64_t v, int op, int pe) {
    uint32_t t = pshmem_laneid();
    uint64_t end = pshmem_i_put_signal(dest, src, n, sig, v, op, pe, t, 32);
    if (t == 0) pshmem_i_wait_done(end);
    __syncwarp();
}
__device__ inline void pshmemx_putmem_signal_block(void *dest, const void *src, size_t n,
                                                   uint64_t *sig, uint64_t v, int op, int pe) {
    uint32_t t = PSHMEM_I_TID;
    uint64_t end = pshmem_i_put_signal(dest, src, n, sig, v, op, pe, t, PSHMEM_I_NT);
    if (t == 0) pshmem_i_wait_done(end);
    __syncthreads();
}

/* ---- waits --------------------------------------------------------------------------------- */

template <typename T>
__device__ __forceinline__ bool pshmem_i_cmp(T a, int cmp, T b) {
    switch (cmp) {
    case PSHMEM_CMP_EQ: return a == b;
    case PSHMEM_CMP_NE: return a != b;
    case PSHMEM_CMP_GT: return a > b;
    case PSHMEM_CMP_LE: return a <= b;
    case PSHMEM_CMP_LT: return a < b;
    default: return a >= b;
    }
}

/* Acquire loads of local words a peer's signal or the proxy writes, for 2-, 4- and 8-byte
 * types (the bits reinterpreted). */
template <typename T> __device__ __forceinline__ T pshmem_i_load(const T *p) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "2, 4 or 8 bytes");
    T out;
    if (sizeof(T) == 8) {
        uint64_t v = pshmem_ld_acquire_sys((const uint64_t *)p);
        memcpy(&out, &v, sizeof(T));
    } else if (sizeof(T) == 4) {
        uint32_t v = pshmem_ld_acquire_sys_u32((const uint32_t *)p);
        memcpy(&out, &v, sizeof(T));
    } else {
        uint16_t v = pshmem_ld_acquire_sys_u16((const uint16_t *)p);
        memcpy(&out, &v, sizeof(T));
    }
    return out;
}

/* Waits until `*ivar cmp v` holds (a local symmetric word, loaded with acquire: pairs with the
 * release of a peer's signal or with the proxy's completed copy); returns its last value. Ends
 * early (with the error recorded) when the wait is over (pshmem_i_wait). */
template <typename T>
__device__ __forceinline__ T pshmem_i_wait_until(T *ivar, int cmp, T v) {
    T x = pshmem_i_load(ivar);
    pshmem_i_wait<6, 32>([&] {
        x = pshmem_i_load(ivar);
        return pshmem_i_cmp(x, cmp, v);
    });
    return x;
}

/* Whether `*ivar cmp v` holds now (one acquire load). */
template <typename T> __device__ __forceinline__ int pshmem_i_test(T *ivar, int cmp, T v) {
    return pshmem_i_cmp(pshmem_i_load(ivar), cmp, v) ? 1 : 0;
}

/* Vector waits and tests (OpenSHMEM 1.5's, as NVSHMEM offers them) over `n` local words: the
 * entries whose `status` is 0 take part (every entry when status is NULL), each compared with
 * one value, or with its own (`each`, the _vector forms). */
template <typename T> struct PshmemICmpTo {
    const T *each;
    T one;
    __device__ __forceinline__ T at(size_t i) const { return each ? each[i] : one; }
};

template <typename T> __device__ __forceinline__ PshmemICmpTo<T> pshmem_i_to_one(T v) {
    PshmemICmpTo<T> c;
    c.each = NULL;
    c.one = v;
    return c;
}
template <typename T> __device__ __forceinline__ PshmemICmpTo<T> pshmem_i_to_each(const T *vs) {
    PshmemICmpTo<T> c;
    c.each = vs;
    c.one = T();
    return c;
}

__device__ __forceinline__ bool pshmem_i_counts(const int *status, size_t i) {
    return !status || status[i] == 0;
}

/* 1 when every entry that takes part holds (also when none takes part), else 0. */
template <typename T>
__device__ inline int pshmem_i_test_all(T *ivars, size_t n, const int *status, int cmp,
                                        PshmemICmpTo<T> v) {
    for (size_t i = 0; i < n; ++i)
        if (pshmem_i_counts(status, i) && !pshmem_i_cmp(pshmem_i_load(ivars + i), cmp, v.at(i)))
            return 0;
    return 1;
}

/* The index of an entry that takes part and holds, or SIZE_MAX. */
template <typename T>
__device__ inline size_t pshmem_i_test_any(T *ivars, size_t n, const int *status, int cmp,
                                           PshmemICmpTo<T> v) {
    for (size_t i = 0; i < n; ++i)
        if (pshmem_i_counts(status, i) && pshmem_i_cmp(pshmem_i_load(ivars + i), cmp, v.at(i)))
            return i;
    return SIZE_MAX;
}

/* How many entries that take part hold; their indices in `indices` (room for n). */
template <typename T>
__device__ inline size_t pshmem_i_test_some(T *ivars, size_t n, size_t *indices,
                                            const int *status, int cmp, PshmemICmpTo<T> v) {
    size_t k = 0;
    for (size_t i = 0; i < n; ++i)
        if (pshmem_i_counts(status, i) && pshmem_i_cmp(pshmem_i_load(ivars + i), cmp, v.at(i)))
            indices[k++] = i;
    return k;
}

/* Whether any entry takes part (the waits on "any" and "some" return at once when none does). */
__device__ __forceinline__ bool pshmem_i_any_counts(size_t n, const int *status) {
    for (size_t i = 0; i < n; ++i)
        if (pshmem_i_counts(status, i)) return true;
    return false;
}

/* Waits until every entry that takes part holds. */
template <typename T>
__device__ inline void pshmem_i_wait_all(T *ivars, size_t n, const int *status, int cmp,
                                         PshmemICmpTo<T> v) {
    pshmem_i_wait<6, 32>([&] { return pshmem_i_test_all(ivars, n, status, cmp, v) != 0; });
}

/* Waits until an entry that takes part holds; its index (SIZE_MAX when none takes part, or
 * when the wait ended on an error or the timeout, recorded). */
template <typename T>
__device__ inline size_t pshmem_i_wait_any(T *ivars, size_t n, const int *status, int cmp,
                                           PshmemICmpTo<T> v) {
    size_t i = SIZE_MAX;
    if (!pshmem_i_any_counts(n, status)) return i;
    pshmem_i_wait<6, 32>([&] {
        i = pshmem_i_test_any(ivars, n, status, cmp, v);
        return i != SIZE_MAX;
    });
    return i;
}

/* Waits until at least one entry that takes part holds; how many hold then, their indices in
 * `indices` (0 when none takes part, or after an error or the timeout). */
template <typename T>
__device__ inline size_t pshmem_i_wait_some(T *ivars, size_t n, size_t *indices,
                                            const int *status, int cmp, PshmemICmpTo<T> v) {
    size_t k = 0;
    if (!pshmem_i_any_counts(n, status)) return 0;
    pshmem_i_wait<6, 32>([&] {
        k = pshmem_i_test_some(ivars, n, indices, status, cmp, v);
        return k > 0;
    });
    return k;
}

__device__ inline uint64_t pshmem_signal_wait_until(uint64_t *sig, int cmp, uint64_t v) {
    return pshmem_i_wait_until(sig, cmp, v);
}

/* The value of a local signal word (acquire). */
__device__ inline uint64_t pshmem_signal_fetch(const uint64_t *sig) { return pshmem_i_load(sig); }

/* TYPE_wait_until and TYPE_test for NVSHMEM's point-to-point synchronization types, with
 * their vector forms (_all, _any, _some; _vector: a value per entry). */
#define PSHMEM_I_WAIT(NAME, T)                                                                 \
    __device__ inline T pshmem_##NAME##_wait_until(T *ivar, int cmp, T v) {                   \
        return pshmem_i_wait_until(ivar, cmp, v);                                              \
    }                                                                                          \
    __device__ inline int pshmem_##NAME##_test(T *ivar, int cmp, T v) {                       \
        return pshmem_i_test(ivar, cmp, v);                                                    \
    }                                                                                          \
    PSHMEM_I_WAIT_VECTOR(NAME, T, , T v, pshmem_i_to_one(v))                                   \
    PSHMEM_I_WAIT_VECTOR(NAME, T, _vector, T *vs, pshmem_i_to_each<T>(vs))
#define PSHMEM_I_WAIT_VECTOR(NAME, T, SUFFIX, PARAM, TO)                                       \
    __device__ inline void pshmem_##NAME##_wait_until_all##SUFFIX(                             \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                               \
        pshmem_i_wait_all(ivars, n, status, cmp, TO);                                          \
    }                                                                                          \
    __device__ inline size_t pshmem_##NAME##_wait_until_any##SUFFIX(                           \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                               \
        return pshmem_i_wait_any(ivars, n, status, cmp, TO);                                   \
    }                                                                                          \
    __device__ inline size_t pshmem_##NAME##_wait_until_some##SUFFIX(                          \
        T *ivars, size_t n, size_t *indices, const int *status, int cmp, PARAM) {              \
        return pshmem_i_wait_some(ivars, n, indices, status, cmp, TO);                         \
    }                                                                                          \
    __device__ inline int pshmem_##NAME##_test_all##SUFFIX(T *ivars, size_t n,                 \
                                                           const int *status, int cmp, PARAM) { \
        return pshmem_i_test_all(ivars, n, status, cmp, TO);                                   \
    }                                                                                          \
    __device__ inline size_t pshmem_##NAME##_test_any##SUFFIX(                                 \
        T *ivars, size_t n, const int *status, int cmp, PARAM) {                               \
        return pshmem_i_test_any(ivars, n, status, cmp, TO);                                   \
    }                                                                                          \
    __device__ inline size_t pshmem_##NAME##_test_some##SUFFIX(                                \
        T *ivars, size_t n, size_t *indices, const int *status, int cmp, PARAM) {              \
        return pshmem_i_test_some(ivars, n, indices, status, cmp, TO);                         \
    }
#define PSHMEM_I_WAIT_TYPES(X)                                                                 \
    X(short, short)                                                                            \
    X(int, int)                                                                                \
    X(long, long)                                                                              \
    X(longlong, long long)                                                                     \
    X(ushort, unsigned short)                                                                  \
    X(uint, unsigned int)                                                                      \
    X(ulong, unsigned long)                                                                    \
    X(ulonglong, unsigned long long)                                                           \
    X(int32, int32_t)                                                                          \
    X(int64, int64_t)                                                                          \
    X(uint32, uint32_t)                                                                        \
    X(uint64, uint64_t)                                                                        \
    X(size, size_t)                                                                            \
    X(ptrdiff, ptrdiff_t)
PSHMEM_I_WAIT_TYPES(PSHMEM_I_WAIT)

#endif /* PSHMEM_SIGNAL_CUH */
