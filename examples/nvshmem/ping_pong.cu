/* put-with-signal ping-pong between PE 0 and PE 1 (the others wait): each round carries a
 * payload that the receiver checks, signalled with NVSHMEM_SIGNAL_SET and waited for with
 * nvshmem_signal_wait_until; then a p ping-pong (nvshmem_int_p + nvshmem_int_wait_until) timed
 * in the kernel by the global timer, and a put bandwidth loop (16 MiB, 32 blocks of 512
 * threads) timed by CUDA events. Prints the latencies and the
 * bandwidth (the perf table of the closing note compares them with pshmem-perf). */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define ROUNDS 1000
#define PAYLOAD 4096

__global__ void signal_ping_pong(char *buf, char *src, uint64_t *sig, int me, int *bad) {
    int peer = 1 - me;
    for (int r = 1; r <= ROUNDS; ++r) {
        if ((me == 0) == (r % 2 == 1)) {
            for (int i = 0; i < PAYLOAD; ++i) src[i] = (char)(r + i);
            nvshmem_putmem_signal(buf, src, PAYLOAD, sig, (uint64_t)r, NVSHMEM_SIGNAL_SET, peer);
        } else {
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, (uint64_t)r);
            for (int i = 0; i < PAYLOAD; ++i)
                if (buf[i] != (char)(r + i)) *bad = r;
        }
    }
}

__device__ unsigned long long now_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void p_ping_pong(int *flag, int me, int iters, unsigned long long *ns) {
    int peer = 1 - me;
    unsigned long long t0 = now_ns();
    for (int i = 1; i <= iters; ++i) {
        if (me == 0) {
            nvshmem_int_p(flag, i, peer);
            nvshmem_int_wait_until(flag, NVSHMEM_CMP_EQ, i);
        } else {
            nvshmem_int_wait_until(flag, NVSHMEM_CMP_EQ, i);
            nvshmem_int_p(flag, i, peer);
        }
    }
    *ns = now_ns() - t0;
}

/* Each block puts its slice of the message (the grid shape of pshmem-perf's put_bw: blocks of
 * 512 threads, one slice each), then quiets. */
__global__ void put_loop(char *dest, const char *src, size_t bytes, int iters, int peer) {
    size_t slice = bytes / gridDim.x, off = slice * blockIdx.x;
    for (int i = 0; i < iters; ++i) nvshmemx_putmem_nbi_block(dest + off, src + off, slice, peer);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    char *buf = (char *)nvshmem_calloc(PAYLOAD, 1);
    char *src = (char *)nvshmem_malloc(PAYLOAD);
    uint64_t *sig = (uint64_t *)nvshmem_calloc(1, sizeof(uint64_t));
    int *flag = (int *)nvshmem_calloc(1, sizeof(int));
    const size_t big = 16 << 20;
    const int blocks = 32; /* pshmem-perf's put_bw shape at 16 MiB: size / 64 KiB, at most 32 */
    char *bdest = (char *)nvshmem_malloc(big), *bsrc = (char *)nvshmem_malloc(big);
    int *bad;
    unsigned long long *ns;
    CUDA_CHECK(cudaMallocManaged(&bad, sizeof(int)));
    CUDA_CHECK(cudaMallocManaged(&ns, sizeof(unsigned long long)));
    *bad = 0;
    nvshmem_barrier_all();
    if (me < 2) {
        signal_ping_pong<<<1, 1>>>(buf, src, sig, me, bad);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    FAIL_IF(*bad != 0, "ping_pong", "payload of round %d was wrong", *bad);
    nvshmem_barrier_all();
    double p_us = 0;
    if (me < 2) {
        p_ping_pong<<<1, 1>>>(flag, me, 100, ns); /* warm-up */
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    nvshmem_barrier_all();
    if (me < 2) CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    nvshmem_barrier_all();
    if (me < 2) {
        const int iters = 10000;
        p_ping_pong<<<1, 1>>>(flag, me, iters, ns);
        CUDA_CHECK(cudaDeviceSynchronize());
        /* one round trip per iteration; half of it is the one-way latency */
        p_us = (double)*ns * 1e-3 / iters / 2.0;
    }
    nvshmem_barrier_all();
    double gbps = 0;
    if (me == 0) {
        cudaEvent_t a, b;
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
        put_loop<<<blocks, 512>>>(bdest, bsrc, big, 2, 1); /* warm-up */
        CUDA_CHECK(cudaEventRecord(a));
        put_loop<<<blocks, 512>>>(bdest, bsrc, big, 10, 1);
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        gbps = 10.0 * big / (ms * 1e-3) / 1e9;
    }
    nvshmem_barrier_all();
    printf("OK ping_pong pe=%d n=%d rounds=%d p_latency_us=%.3f put_bw_GBps=%.1f bytes=%zu "
           "blocks=%d\n", me, n, ROUNDS, p_us, gbps, big, blocks);
    nvshmem_free(bsrc);
    nvshmem_free(bdest);
    nvshmem_free(flag);
    nvshmem_free(sig);
    nvshmem_free(src);
    nvshmem_free(buf);
    nvshmem_finalize();
    return 0;
}
