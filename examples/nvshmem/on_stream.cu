/* On-stream operations captured in a CUDA graph: a put to the next PE and a barrier, replayed
 * several times; each replay's data is checked. */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define WORDS 4096

__global__ void stamp(int *src, int me, int round) {
    for (int i = threadIdx.x; i < WORDS; i += blockDim.x) src[i] = round * 1000000 + me * 10000 + i;
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    int *src = (int *)nvshmem_malloc(WORDS * sizeof(int));
    int *dst = (int *)nvshmem_calloc(WORDS, sizeof(int));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *h = (int *)malloc(WORDS * sizeof(int));
    for (int r = 0; r < 3; ++r) {
        stamp<<<1, 256, 0, s>>>(src, me, r);
        nvshmemx_barrier_all_on_stream(s);
        nvshmemx_putmem_on_stream(dst, src, WORDS * sizeof(int), next, s);
        nvshmemx_barrier_all_on_stream(s);
        CUDA_CHECK(cudaMemcpyAsync(h, dst, WORDS * sizeof(int), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < WORDS; ++i)
            FAIL_IF(h[i] != r * 1000000 + prev * 10000 + i, "on_stream", "round %d word %d: %d", r,
                    i, h[i]);
    }
    /* the same sequence captured once in a graph and replayed */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    nvshmemx_barrier_all_on_stream(s);
    nvshmemx_putmem_on_stream(dst, src, WORDS * sizeof(int), next, s);
    nvshmemx_barrier_all_on_stream(s);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 3; r < 6; ++r) {
        stamp<<<1, 256, 0, s>>>(src, me, r);
        CUDA_CHECK(cudaGraphLaunch(ge, s));
        CUDA_CHECK(cudaMemcpyAsync(h, dst, WORDS * sizeof(int), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < WORDS; ++i)
            FAIL_IF(h[i] != r * 1000000 + prev * 10000 + i, "on_stream",
                    "graph replay %d word %d: %d", r, i, h[i]);
    }
    printf("OK on_stream pe=%d graph_replays=3\n", me);
    CUDA_CHECK(cudaGraphExecDestroy(ge));
    CUDA_CHECK(cudaGraphDestroy(g));
    free(h);
    nvshmem_free(dst);
    nvshmem_free(src);
    nvshmem_finalize();
    return 0;
}
