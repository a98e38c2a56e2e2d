/* proxyshmem device code: the PTX the other headers use, written once.
 *
 * Loads and stores at system scope (.sys) order against the CPU and against peer GPUs. Every
 * address they take is in the global state space: device memory, a peer's heap mapped through
 * CUDA IPC (NVLink), and pinned host memory mapped for the device (the ring). */
#ifndef PSHMEM_PTX_CUH
#define PSHMEM_PTX_CUH

#include <stdint.h>

/* Acquire: later loads and stores of this thread happen after it; pairs with a release store
 * (the proxy's, the CPU's or a peer GPU's) of the same word. */
__device__ __forceinline__ uint64_t pshmem_ld_acquire_sys(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t pshmem_ld_acquire_sys_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint16_t pshmem_ld_acquire_sys_u16(const uint16_t *p) {
    uint16_t v;
    asm volatile("ld.acquire.sys.global.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
    return v;
}

/* Relaxed but coherent at system scope: a word another agent writes (an error flag). */
__device__ __forceinline__ uint64_t pshmem_ld_relaxed_sys(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* Relaxed but coherent at system scope: one 8-byte store that a peer sees whole or not at all
 * (the low-latency collectives' data-and-flag word). */
__device__ __forceinline__ void pshmem_st_relaxed_sys_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Release: every earlier store of this thread is visible system-wide before this one. */
__device__ __forceinline__ void pshmem_st_release_sys_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Atomic add with release semantics (a signal's ADD). */
__device__ __forceinline__ void pshmem_red_release_sys_add_u64(uint64_t *p, uint64_t v) {
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Nanoseconds of the GPU's global timer. */
__device__ __forceinline__ uint64_t pshmem_globaltimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* This thread's lane in its warp (whatever the block's shape). */
__device__ __forceinline__ uint32_t pshmem_laneid(void) {
    uint32_t l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

#endif /* PSHMEM_PTX_CUH */
