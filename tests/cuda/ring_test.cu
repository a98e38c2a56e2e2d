/* Ring tests on the GPU: every warp of every block publishes descriptors whose payload is a
 * function of (warp, sequence), one- and two-slot operations mixed, and then quiets. The host
 * consumer checks that none is lost, duplicated or torn. */
#include "pshmem/ring_device.cuh"
#include "args.h"

__device__ __forceinline__ uint64_t pshmem_test_mix(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Lane 0 of every warp pushes `per_warp` operations and quiets; `status[warp]` gets 0, or the
 * ring's error word. */
extern "C" __global__ void pshmem_ring_stress(const pshmem_ring_stress_args_t a) {
    pshmem_ring_device_t r = a.r;
    const uint64_t per_warp = a.per_warp;
    uint64_t *status = a.status;
    if ((threadIdx.x & 31) != 0) return;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t err = 0, end = 0;
    for (uint64_t seq = 0; seq < per_warp && !err; ++seq) {
        uint64_t key = (warp << 40) | seq;
        pshmem_slot_t s[2];
        uint32_t n = (pshmem_test_mix(key) % 8 == 0) ? 2 : 1;
        s[0].a = key;
        s[0].b = pshmem_test_mix(key);
        s[0].c = ~key;
        s[0].pe = (uint32_t)warp;
        s[0].ctrl = PSHMEM_CTRL_MAKE(PSHMEM_OP_PUT, 0, 0, n);
        s[1].a = pshmem_test_mix(key ^ 1);
        s[1].b = pshmem_test_mix(key ^ 2);
        s[1].c = 0;
        s[1].pe = (uint32_t)warp;
        s[1].ctrl = PSHMEM_CTRL_MAKE(PSHMEM_OP_NOP, 0, 0, 1);
        err = pshmem_ring_push(&r, s, n, &end);
    }
    if (!err) err = pshmem_ring_quiet(&r);
    status[warp] = err;
}

/* Latency of one descriptor: publish a `p` and wait until the proxy has completed it, `iters`
 * times; cycles per round trip go to `cycles[i]`. One thread. */
extern "C" __global__ void pshmem_ring_roundtrip(const pshmem_ring_roundtrip_args_t a) {
    pshmem_ring_device_t r = a.r;
    const uint32_t pe = a.pe;
    const uint64_t iters = a.iters;
    uint64_t *cycles = a.cycles, *status = a.status;
    uint64_t err = 0, end = 0;
    for (uint64_t i = 0; i < iters && !err; ++i) {
        pshmem_slot_t s[1];
        s[0].a = 64;
        s[0].b = i;
        s[0].c = 8;
        s[0].pe = pe;
        s[0].ctrl = PSHMEM_CTRL_MAKE(PSHMEM_OP_P, 0, 0, 1);
        uint64_t t0 = clock64();
        err = pshmem_ring_push(&r, s, 1, &end);
        while (!err && pshmem_ld_acquire_sys(&r.ctrl->completed) < end) {
            err = pshmem_ld_relaxed_sys(&r.ctrl->error);
        }
        cycles[i] = clock64() - t0;
    }
    status[0] = err;
}

/* Throughput: lane 0 of every warp publishes `per_warp` `p` descriptors for `pe`, then quiets. */
extern "C" __global__ void pshmem_ring_rate(const pshmem_ring_rate_args_t a) {
    pshmem_ring_device_t r = a.r;
    const uint32_t pe = a.pe;
    const uint64_t per_warp = a.per_warp;
    uint64_t *status = a.status;
    if ((threadIdx.x & 31) != 0) return;
    uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    uint64_t err = 0, end = 0;
    for (uint64_t i = 0; i < per_warp && !err; ++i) {
        pshmem_slot_t s[1];
        s[0].a = 8 * (i % 512);
        s[0].b = i;
        s[0].c = 8;
        s[0].pe = pe;
        s[0].ctrl = PSHMEM_CTRL_MAKE(PSHMEM_OP_P, 0, 0, 1);
        err = pshmem_ring_push(&r, s, 1, &end);
    }
    if (!err) err = pshmem_ring_quiet(&r);
    status[warp] = err;
}

/* The physical floor of a GPU -> CPU -> GPU exchange through pinned host memory: the GPU stores
 * i into `to_cpu` (release, system scope), a CPU thread that spins on it stores i into
 * `to_gpu`, and the GPU spins (acquire) until it sees i. One thread; cycles per round trip go
 * to `cycles[i]`. The CPU side stops when it reads ~0. */
extern "C" __global__ void pshmem_mailbox(const pshmem_mailbox_args_t a) {
    uint64_t *to_cpu = a.to_cpu, *to_gpu = a.to_gpu, *cycles = a.cycles;
    const uint64_t iters = a.iters;
    for (uint64_t i = 1; i <= iters; ++i) {
        uint64_t t0 = clock64();
        pshmem_st_release_sys_u64((uint64_t *)to_cpu, i);
        while (pshmem_ld_acquire_sys((const uint64_t *)to_gpu) != i) {
        }
        cycles[i - 1] = clock64() - t0;
    }
    pshmem_st_release_sys_u64((uint64_t *)to_cpu, ~0ull);
}
