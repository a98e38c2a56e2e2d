/* proxyshmem device API: atomics (fetch, set, swap, compare_swap, fetch_add, add, inc and
 * fetch_inc, and the bitwise and/or/xor with their fetching forms) on 32- and 64-bit words. A mapped peer gets system-scope atomics on its heap; any other PE a ring
 * descriptor that its proxy applies with the target GPU's own atomics (a one-thread kernel),
 * so every AMO on a word is atomic with respect to every other, whatever path it took. */
#ifndef PSHMEM_AMO_CUH
#define PSHMEM_AMO_CUH

#include "pshmem/state.cuh"

/* One AMO through the ring; fetching ones wait and return the old value. */
__device__ __forceinline__ uint64_t pshmem_i_amo_ring(const void *dest, uint32_t sub, bool wide,
                                                      uint64_t operand, uint64_t compare,
                                                      bool fetch, int pe) {
    if (!pshmem_i_valid_pe(pe)) return 0;
    uint64_t off = pshmem_i_offset(dest, wide ? 8 : 4, pe);
    if (off == ~0ull) return 0;
    int c = fetch ? pshmem_i_cell_claim() : -1;
    if (fetch && c < 0) return 0;
    pshmem_slot_t s[2];
    s[0] = pshmem_i_slot(PSHMEM_OP_AMO, 0, sub | (wide ? PSHMEM_AMO_WIDE : 0u), 2, (uint32_t)pe,
                         off, operand, compare);
    s[1] = pshmem_i_cont((uint32_t)pe, fetch ? (uint64_t)(uintptr_t)&pshmem_dstate.cells[c] : 0,
                         0);
    uint64_t end = pshmem_i_push(s, 2);
    if (!fetch) return 0;
    pshmem_i_wait_done(end);
    uint64_t v = *(volatile unsigned long long *)&pshmem_dstate.cells[c];
    pshmem_i_cell_release(c);
    return v;
}

/* The unsigned word of a 4- or 8-byte type. */
template <unsigned N> struct pshmem_i_word;
template <> struct pshmem_i_word<4> { typedef unsigned int type; };
template <> struct pshmem_i_word<8> { typedef unsigned long long type; };

__device__ __forceinline__ bool pshmem_i_amo_fetches(uint32_t op) {
    return op != PSHMEM_AMO_ADD && op != PSHMEM_AMO_SET && op != PSHMEM_AMO_AND &&
           op != PSHMEM_AMO_OR && op != PSHMEM_AMO_XOR;
}

/* One AMO (PSHMEM_AMO_*) on a word this GPU addresses (its heap or a mapped peer's), with
 * system-scope atomics so that it is atomic with respect to every other path's: the direct
 * path here and the target-side kernel a proxy launches (runtime.cu) share it. Returns the
 * old value. */
template <typename U>
__device__ __forceinline__ U pshmem_i_amo_here(U *r, uint32_t op, U x, U c) {
    switch (op) {
    case PSHMEM_AMO_FETCH_ADD:
    case PSHMEM_AMO_ADD: return atomicAdd_system(r, x);
    case PSHMEM_AMO_SWAP:
    case PSHMEM_AMO_SET: return atomicExch_system(r, x);
    case PSHMEM_AMO_COMPARE_SWAP: return atomicCAS_system(r, c, x);
    case PSHMEM_AMO_FETCH_AND:
    case PSHMEM_AMO_AND: return atomicAnd_system(r, x);
    case PSHMEM_AMO_FETCH_OR:
    case PSHMEM_AMO_OR: return atomicOr_system(r, x);
    case PSHMEM_AMO_FETCH_XOR:
    case PSHMEM_AMO_XOR: return atomicXor_system(r, x);
    default: return atomicAdd_system(r, (U)0); /* FETCH */
    }
}

/* Any AMO (PSHMEM_AMO_*) on a 4- or 8-byte word of any type: system-scope atomics on a mapped
 * heap, a ring descriptor otherwise. Returns the old value (fetching operations; 0 for the
 * others, which complete at quiet). Bitwise operations are for integer types. */
template <typename T>
__device__ __forceinline__ T pshmem_i_atomic(T *dest, uint32_t op, T operand, T compare, int pe) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics are on 4- or 8-byte words");
    typedef typename pshmem_i_word<sizeof(T)>::type U;
    U x, c, old = 0;
    memcpy(&x, &operand, sizeof(T));
    memcpy(&c, &compare, sizeof(T));
    U *r = (U *)pshmem_ptr(dest, pe);
    if (r) {
        old = pshmem_i_amo_here<U>(r, op, x, c);
    } else {
        old = (U)pshmem_i_amo_ring(dest, op, sizeof(T) == 8, (uint64_t)x, (uint64_t)c,
                                   pshmem_i_amo_fetches(op), pe);
    }
    T out;
    memcpy(&out, &old, sizeof(T));
    return out;
}

/* The typed atomics (NVSHMEM's names with pshmem_): every type gets fetch, set, swap and
 * compare_swap; integer types also add, inc and the bitwise operations. */
#define PSHMEM_I_AMO_STD(NAME, T)                                                             \
    __device__ inline T pshmem_##NAME##_atomic_fetch(const T *d, int pe) {                   \
        return pshmem_i_atomic<T>((T *)d, PSHMEM_AMO_FETCH, (T)0, (T)0, pe);                  \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_set(T *d, T v, int pe) {                    \
        pshmem_i_atomic<T>(d, PSHMEM_AMO_SET, v, v, pe);                                      \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_swap(T *d, T v, int pe) {                      \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_SWAP, v, v, pe);                              \
    }
#define PSHMEM_I_AMO_INT(NAME, T)                                                             \
    PSHMEM_I_AMO_STD(NAME, T)                                                                 \
    __device__ inline T pshmem_##NAME##_atomic_compare_swap(T *d, T cond, T v, int pe) {      \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_COMPARE_SWAP, v, cond, pe);                   \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch_add(T *d, T v, int pe) {                 \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_FETCH_ADD, v, v, pe);                         \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_add(T *d, T v, int pe) {                    \
        pshmem_i_atomic<T>(d, PSHMEM_AMO_ADD, v, v, pe);                                      \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch_inc(T *d, int pe) {                      \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_FETCH_ADD, (T)1, (T)1, pe);                   \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_inc(T *d, int pe) {                         \
        pshmem_i_atomic<T>(d, PSHMEM_AMO_ADD, (T)1, (T)1, pe);                                \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch_and(T *d, T v, int pe) {                 \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_FETCH_AND, v, v, pe);                         \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_and(T *d, T v, int pe) {                    \
        pshmem_i_atomic<T>(d, PSHMEM_AMO_AND, v, v, pe);                                      \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch_or(T *d, T v, int pe) {                  \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_FETCH_OR, v, v, pe);                          \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_or(T *d, T v, int pe) {                     \
        pshmem_i_atomic<T>(d, PSHMEM_AMO_OR, v, v, pe);                                       \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch_xor(T *d, T v, int pe) {                 \
        return pshmem_i_atomic<T>(d, PSHMEM_AMO_FETCH_XOR, v, v, pe);                         \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_xor(T *d, T v, int pe) {                    \
        pshmem_i_atomic<T>(d, PSHMEM_AMO_XOR, v, v, pe);                                      \
    }
PSHMEM_I_AMO_INT(int, int)
PSHMEM_I_AMO_INT(long, long)
PSHMEM_I_AMO_INT(longlong, long long)
PSHMEM_I_AMO_INT(uint, unsigned int)
PSHMEM_I_AMO_INT(ulong, unsigned long)
PSHMEM_I_AMO_INT(ulonglong, unsigned long long)
PSHMEM_I_AMO_INT(int32, int32_t)
PSHMEM_I_AMO_INT(int64, int64_t)
PSHMEM_I_AMO_INT(uint32, uint32_t)
PSHMEM_I_AMO_INT(uint64, uint64_t)
PSHMEM_I_AMO_INT(size, size_t)
PSHMEM_I_AMO_INT(ptrdiff, ptrdiff_t)
PSHMEM_I_AMO_STD(float, float)
PSHMEM_I_AMO_STD(double, double)

#endif /* PSHMEM_AMO_CUH */
