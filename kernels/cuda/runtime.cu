/* Kernels the runtime itself launches: the target-side AMO that a proxy applies to its GPU heap
 * for a remote initiator (the CPU never does atomics on GPU memory: no GDRCopy), and the host's
 * on-stream quiet and barrier. */
#include "pshmem/device.cuh"

/* One AMO on this GPU's memory at `addr` (system scope, so that it is atomic with respect to
 * kernels' atomics, local or through NVLink). The old value goes to `*result` (pinned host
 * memory the proxy reads after synchronizing its stream). One thread. */
extern "C" __global__ void pshmem_k_amo(unsigned long long addr, unsigned int sub,
                                        unsigned long long operand, unsigned long long compare,
                                        unsigned long long *result) {
    unsigned int op = sub & 0xfu;
    bool wide = (sub & PSHMEM_AMO_WIDE) != 0;
    unsigned long long old = 0;
    if (wide) {
        unsigned long long *p = (unsigned long long *)addr;
        switch (op) {
        case PSHMEM_AMO_FETCH_ADD:
        case PSHMEM_AMO_ADD: old = atomicAdd_system(p, operand); break;
        case PSHMEM_AMO_SWAP:
        case PSHMEM_AMO_SET: old = atomicExch_system(p, operand); break;
        case PSHMEM_AMO_COMPARE_SWAP: old = atomicCAS_system(p, compare, operand); break;
        default: old = atomicAdd_system(p, 0ull); break;
        }
    } else {
        unsigned int *p = (unsigned int *)addr;
        unsigned int v = (unsigned int)operand, c = (unsigned int)compare;
        switch (op) {
        case PSHMEM_AMO_FETCH_ADD:
        case PSHMEM_AMO_ADD: old = atomicAdd_system(p, v); break;
        case PSHMEM_AMO_SWAP:
        case PSHMEM_AMO_SET: old = atomicExch_system(p, v); break;
        case PSHMEM_AMO_COMPARE_SWAP: old = atomicCAS_system(p, c, v); break;
        default: old = atomicAdd_system(p, 0u); break;
        }
    }
    /* The proxy synchronizes the stream before reading, which orders this store. */
    *(volatile unsigned long long *)result = old;
    __threadfence_system();
}

/* Host on-stream variants: one thread. */
extern "C" __global__ void pshmem_k_quiet(void) { pshmem_quiet(); }
extern "C" __global__ void pshmem_k_barrier_all(void) { pshmem_barrier_all(); }
