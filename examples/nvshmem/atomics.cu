/* Every thread of every PE adds to, and sets its bit in, counters on PE 0 (fetch_add, add, or,
 * inc); one thread per PE flips its bit with xor and clears it with fetch_and in words PE 0
 * set from the host; the PEs then take turns with compare_swap; PE 0 checks the totals; then
 * host-side fetch_add and fetch. Last, a timed run: every thread of every PE fetch-adds one word
 * on PE 0 (all PEs at once, contended), and each PE prints its rate. */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define THREADS 256
#define RATE_ITERS 16 /* fetch-adds per thread in the timed run */

__global__ void hammer(unsigned long long *c, int me) {
    nvshmem_ulonglong_atomic_fetch_add(&c[0], 1ull, 0);
    nvshmem_ulonglong_atomic_add(&c[1], 2ull, 0);
    nvshmem_uint64_atomic_or((uint64_t *)&c[2], 1ull << (me % 64), 0);
    nvshmem_int_atomic_inc((int *)&c[3], 0);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        nvshmem_uint64_atomic_xor((uint64_t *)&c[4], 1ull << (me % 64), 0);
        (void)nvshmem_uint64_atomic_fetch_and((uint64_t *)&c[5], ~(1ull << (me % 64)), 0);
    }
}

__global__ void take_turn(int *turn, int me, int n, int *seen) {
    /* wait until the word holds our number, then pass it on with compare_swap */
    while (nvshmem_int_atomic_fetch(turn, 0) != me) {
    }
    *seen = nvshmem_int_atomic_compare_swap(turn, me, me + 1, 0);
    (void)n;
}

__global__ void fetch_add_rate(unsigned long long *w, int iters) {
    for (int i = 0; i < iters; ++i) (void)nvshmem_ulonglong_atomic_fetch_add(w, 1ull, 0);
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    unsigned long long *c = (unsigned long long *)nvshmem_calloc(7, sizeof(unsigned long long));
    int *turn = (int *)nvshmem_calloc(1, sizeof(int));
    int *seen;
    CUDA_CHECK(cudaMallocManaged(&seen, sizeof(int)));
    if (me == 0) nvshmem_uint64_atomic_set((uint64_t *)&c[5], ~0ull, 0); /* host AMO */
    nvshmem_barrier_all();
    hammer<<<4, THREADS>>>(c, me);
    CUDA_CHECK(cudaDeviceSynchronize());
    take_turn<<<1, 1>>>(turn, me, n, seen);
    CUDA_CHECK(cudaDeviceSynchronize());
    FAIL_IF(*seen != me, "atomics", "compare_swap saw %d", *seen);
    nvshmem_barrier_all();
    if (me == 0) {
        unsigned long long h[6];
        CUDA_CHECK(cudaMemcpy(h, c, sizeof h, cudaMemcpyDeviceToHost));
        unsigned long long threads = 4ull * THREADS * (unsigned long long)n;
        unsigned long long bits = n >= 64 ? ~0ull : (1ull << n) - 1;
        FAIL_IF(h[0] != threads || h[1] != 2 * threads || h[2] != bits ||
                    (unsigned)h[3] != (unsigned)threads,
                "atomics", "counters %llu %llu %llx %u", h[0], h[1], h[2], (unsigned)h[3]);
        FAIL_IF(h[4] != bits || h[5] != ~bits, "atomics", "xor %llx and %llx", h[4], h[5]);
        int t = -1;
        CUDA_CHECK(cudaMemcpy(&t, turn, sizeof t, cudaMemcpyDeviceToHost));
        FAIL_IF(t != n, "atomics", "turn ended at %d", t);
    }
    nvshmem_barrier_all(); /* PE 0 has read the counters */
    /* host-side atomics on the GPU heap too */
    unsigned long long old = nvshmem_ulonglong_atomic_fetch_add(&c[0], 5ull, 0);
    (void)old;
    nvshmem_barrier_all();
    unsigned long long total = nvshmem_ulonglong_atomic_fetch(&c[0], 0);
    FAIL_IF(total != 4ull * THREADS * n + 5ull * n, "atomics", "host fetch_add total %llu", total);
    /* The timed run (c[6]): one untimed iteration first (loads the kernel, warms the path). */
    fetch_add_rate<<<4, THREADS>>>(&c[6], 1);
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    CUDA_CHECK(cudaEventRecord(t0));
    fetch_add_rate<<<4, THREADS>>>(&c[6], RATE_ITERS);
    CUDA_CHECK(cudaEventRecord(t1));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    nvshmem_barrier_all();
    unsigned long long rate_total = nvshmem_ulonglong_atomic_fetch(&c[6], 0);
    FAIL_IF(rate_total != 4ull * THREADS * n * (RATE_ITERS + 1), "atomics", "timed total %llu",
            rate_total);
    double mops = 4.0 * THREADS * RATE_ITERS / (ms * 1e3);
    printf("OK atomics pe=%d n=%d fetch_add_Mops=%.2f\n", me, n, mops);
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    nvshmem_free(turn);
    nvshmem_free(c);
    nvshmem_finalize();
    return 0;
}
