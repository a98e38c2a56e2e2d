/* A program of two translation units that both include the device API (built with and
 * without -rdc): kernels.cu holds the kernel, this file the host part. Each TU has its own
 * device state, which the runtime fills. */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "../common.h"

void launch_shift(long *dest, int n, cudaStream_t s); /* kernels.cu */

__global__ void check_here(const long *dest, int n, int *bad) {
    /* this TU reads the state too (nvshmem_my_pe) */
    int me = nvshmem_my_pe(), prev = (me + nvshmem_n_pes() - 1) % nvshmem_n_pes();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (dest[i] != (long)prev * 1000 + i) *bad = i + 1;
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe();
    const int n = 1000;
    long *dest = (long *)nvshmem_calloc(n, sizeof(long));
    int *bad;
    CUDA_CHECK(cudaMallocManaged(&bad, sizeof(int)));
    *bad = 0;
    launch_shift(dest, n, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    check_here<<<1, 256>>>(dest, n, bad);
    CUDA_CHECK(cudaDeviceSynchronize());
    FAIL_IF(*bad != 0, "two_file", "element %d", *bad - 1);
    printf("OK two_file pe=%d\n", me);
    nvshmem_free(dest);
    nvshmem_finalize();
    return 0;
}
