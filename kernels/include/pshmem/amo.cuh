/* proxyshmem device API: atomics (fetch_add, add, swap, compare_swap, fetch, set) on 32- and
 * 64-bit words. A mapped peer gets system-scope atomics on its heap; any other PE a ring
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

#define PSHMEM_I_AMO(NAME, T, U, WIDE)                                                        \
    __device__ inline T pshmem_##NAME##_atomic_fetch_add(T *dest, T v, int pe) {              \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicAdd_system(r, (U)v);                                           \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_FETCH_ADD, WIDE, (uint64_t)(U)v, 0, true, \
                                    pe);                                                      \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_add(T *dest, T v, int pe) {                 \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) {                                                                              \
            atomicAdd_system(r, (U)v);                                                        \
            return;                                                                           \
        }                                                                                     \
        pshmem_i_amo_ring(dest, PSHMEM_AMO_ADD, WIDE, (uint64_t)(U)v, 0, false, pe);          \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_swap(T *dest, T v, int pe) {                   \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicExch_system(r, (U)v);                                          \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_SWAP, WIDE, (uint64_t)(U)v, 0, true, pe); \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_compare_swap(T *dest, T cond, T v, int pe) {   \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicCAS_system(r, (U)cond, (U)v);                                  \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_COMPARE_SWAP, WIDE, (uint64_t)(U)v,      \
                                    (uint64_t)(U)cond, true, pe);                             \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch(const T *dest, int pe) {                 \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicAdd_system(r, (U)0);                                           \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_FETCH, WIDE, 0, 0, true, pe);            \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_set(T *dest, T v, int pe) {                 \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) {                                                                              \
            atomicExch_system(r, (U)v);                                                       \
            return;                                                                           \
        }                                                                                     \
        pshmem_i_amo_ring(dest, PSHMEM_AMO_SET, WIDE, (uint64_t)(U)v, 0, false, pe);          \
    }
PSHMEM_I_AMO(uint32, uint32_t, unsigned int, false)
PSHMEM_I_AMO(int, int, unsigned int, false)
PSHMEM_I_AMO(uint64, uint64_t, unsigned long long, true)
PSHMEM_I_AMO(int64, int64_t, unsigned long long, true)

#endif /* PSHMEM_AMO_CUH */
