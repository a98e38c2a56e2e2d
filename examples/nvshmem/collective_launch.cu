/* A kernel that synchronizes with the other PEs' kernels (device barriers between its phases)
 * needs every PE's grid resident at once: nvshmemx_collective_launch. Each phase writes into
 * the next PE with a block put and checks what the previous PE wrote in the phase before. The
 * put's source is symmetric memory too: on a network path NVSHMEM requires registered memory
 * (never a block's shared memory). */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define PHASES 8
#define WORDS 1024

__global__ void phases(int *buf, int *bad) {
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    int *src = buf + 2 * WORDS;
    for (int p = 0; p < PHASES; ++p) {
        if (blockIdx.x == 0)
            for (int i = threadIdx.x; i < WORDS; i += blockDim.x) src[i] = p * 100000 + me * 1000 + i % 1000;
        __syncthreads();
        if (blockIdx.x == 0) nvshmemx_putmem_block(buf + (p % 2) * WORDS, src, WORDS * sizeof(int), next);
        nvshmemx_barrier_all_block();
        if (blockIdx.x == 0)
            for (int i = threadIdx.x; i < WORDS; i += blockDim.x)
                if (buf[(p % 2) * WORDS + i] != p * 100000 + prev * 1000 + i % 1000) *bad = p + 1;
        nvshmemx_barrier_all_block();
    }
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe();
    int *buf = (int *)nvshmem_calloc(3 * WORDS, sizeof(int));
    int *bad;
    CUDA_CHECK(cudaMallocManaged(&bad, sizeof(int)));
    *bad = 0;
    void *args[] = {&buf, &bad};
    int rc = nvshmemx_collective_launch((const void *)phases, dim3(1), dim3(256), args, 0, 0);
    FAIL_IF(rc != NVSHMEMX_SUCCESS, "collective_launch", "launch failed (%d)", rc);
    CUDA_CHECK(cudaDeviceSynchronize());
    FAIL_IF(*bad != 0, "collective_launch", "phase %d saw wrong data", *bad - 1);
    int grid = 0;
    rc = nvshmemx_collective_launch_query_gridsize((const void *)phases, dim3(256), args, 0, &grid);
    FAIL_IF(rc != 0 || grid < 1, "collective_launch", "query gridsize %d (%d)", grid, rc);
    printf("OK collective_launch pe=%d phases=%d max_grid=%d\n", me, PHASES, grid);
    nvshmem_free(buf);
    nvshmem_finalize();
    return 0;
}
