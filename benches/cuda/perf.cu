/* pshmem-perf's device-initiated tests (run when the PEs have GPUs). */
#include "pshmem/device.cuh"
#include "perf_args.h"

/* `reps` puts (or gets) of `size` bytes to `pe`, split evenly over the grid's blocks (each a
 * block-wide nbi call), then quiet: the NVSHMEM perftest shape (one message per block). */
extern "C" __global__ void perf_bw(const perf_bw_args_t a) {
    char *dst = a.dst;
    const char *src = a.src;
    const unsigned long long size = a.size;
    const int reps = a.reps, pe = a.pe, get = a.get;
    unsigned long long per = (size + gridDim.x - 1) / gridDim.x;
    per = (per + 15) & ~15ull;
    unsigned long long off = (unsigned long long)blockIdx.x * per;
    unsigned long long len = off < size ? (size - off < per ? size - off : per) : 0;
    for (int r = 0; r < reps; ++r) {
        if (len) {
            if (get) pshmemx_getmem_nbi_block(dst + off, src + off, len, pe);
            else pshmemx_putmem_nbi_block(dst + off, src + off, len, pe);
        }
    }
    pshmemx_quiet_block();
}

/* p + wait_until ping-pong between PE 0 and PE 1 (one thread each); PE 0 writes the total
 * nanoseconds to *ns. */
extern "C" __global__ void perf_p_pingpong(const perf_p_pingpong_args_t a) {
    uint64_t *flag = a.flag, *ns = a.ns;
    const int iters = a.iters, me = a.me;
    const uint64_t base = a.base;
    int peer = 1 - me;
    uint64_t t0 = pshmem_globaltimer();
    for (int i = 1; i <= iters; ++i) {
        uint64_t v = base + (uint64_t)i;
        if (me == 0) {
            pshmem_uint64_p(flag, v, peer);
            if (pshmem_uint64_wait_until(flag, PSHMEM_CMP_GE, v) < v) return;
        } else {
            if (pshmem_uint64_wait_until(flag, PSHMEM_CMP_GE, v) < v) return;
            pshmem_uint64_p(flag, v, peer);
        }
    }
    if (me == 0) *ns = pshmem_globaltimer() - t0;
}

/* `iters` fetch_adds on `pe`'s word, one after the other (one thread). */
extern "C" __global__ void perf_amo(const perf_amo_args_t a) {
    uint64_t *word = a.word, *ns = a.ns;
    const int iters = a.iters, pe = a.pe;
    uint64_t t0 = pshmem_globaltimer();
    uint64_t sum = 0;
    for (int i = 0; i < iters; ++i) sum += pshmem_uint64_atomic_fetch_add(word, 1, pe);
    *ns = pshmem_globaltimer() - t0 + (sum == ~0ull);
}

/* Every thread sends `per_thread` 8-byte p's to `pe`, then quiet: message rate. */
extern "C" __global__ void perf_msg_rate(const perf_msg_rate_args_t a) {
    uint64_t *dst = a.dst;
    const int per_thread = a.per_thread, pe = a.pe;
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = 0; i < per_thread; ++i) pshmem_uint64_p(&dst[(t * 7 + i) % 4096], i, pe);
    pshmemx_quiet_block();
}

/* `iters` device barriers (one thread per PE). */
extern "C" __global__ void perf_barrier(const perf_barrier_args_t a) {
    const int iters = a.iters;
    uint64_t *ns = a.ns;
    uint64_t t0 = pshmem_globaltimer();
    for (int i = 0; i < iters; ++i) pshmem_barrier_all();
    *ns = pshmem_globaltimer() - t0;
}

/* Keeps the GPU busy for `ns` nanoseconds. Launched before a timed kernel's start event, so the
 * event is processed only after the host has enqueued the timed kernel: host-side launch costs
 * then stay out of the measurement (both harnesses of the comparison do the same). */
extern "C" __global__ void perf_spin(const perf_spin_args_t a) {
    const uint64_t ns = a.ns;
    uint64_t t0 = pshmem_globaltimer();
    while (pshmem_globaltimer() - t0 < ns) {
    }
}

/* `iters` collectives over the world team by one block (the NVSHMEM collective perftests' shape):
 * kind 0 sync, 1 broadcast (root 0), 2 fcollect, 3 alltoall (`n` bytes per member), 4 reduce and
 * 5 reducescatter (float sums of n / 4 elements per member). PE 0's time in *ns. */
extern "C" __global__ void __launch_bounds__(512) perf_coll(const perf_coll_args_t a) {
    const int kind = a.kind, iters = a.iters;
    char *dest = a.dest;
    const char *src = a.src;
    const unsigned long long n = a.n;
    uint64_t *ns = a.ns;
    uint64_t t0 = pshmem_globaltimer();
    for (int i = 0; i < iters; ++i) {
        switch (kind) {
        case 0: pshmemx_team_sync_block(0); break;
        case 1: pshmemx_broadcastmem_block(0, dest, src, n, 0); break;
        case 2: pshmemx_fcollectmem_block(0, dest, src, n); break;
        case 3: pshmemx_alltoallmem_block(0, dest, src, n); break;
        case 4: pshmemx_float_sum_reduce_block(0, (float *)dest, (const float *)src, n / 4); break;
        default:
            pshmemx_float_sum_reducescatter_block(0, (float *)dest, (const float *)src, n / 4);
        }
    }
    if (PSHMEM_I_TID == 0) *ns = pshmem_globaltimer() - t0;
}
