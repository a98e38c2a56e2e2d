/* Every block of a kernel puts its slice of a buffer into the next PE with
 * nvshmemx_putmem_block; after a barrier each PE checks every byte it received, and reads it
 * back from the next PE with nvshmem_getmem from the host. */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define N (1 << 20)

__global__ void fill(unsigned *src, int me) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x)
        src[i] = (unsigned)me * 2654435761u + (unsigned)i;
}

__global__ void put_slices(unsigned *dest, const unsigned *src, int pe) {
    size_t per = N / gridDim.x;
    size_t at = blockIdx.x * per;
    nvshmemx_putmem_block(dest + at, src + at, per * sizeof(unsigned), pe);
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    unsigned *src = (unsigned *)nvshmem_malloc(N * sizeof(unsigned));
    unsigned *dest = (unsigned *)nvshmem_calloc(N, sizeof(unsigned));
    fill<<<64, 256>>>(src, me);
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    put_slices<<<32, 256>>>(dest, src, next);
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    unsigned *host = (unsigned *)malloc(N * sizeof(unsigned));
    CUDA_CHECK(cudaMemcpy(host, dest, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; ++i)
        FAIL_IF(host[i] != (unsigned)prev * 2654435761u + (unsigned)i, "put_block",
                "word %d is %u", i, host[i]);
    nvshmem_getmem(host, dest, N * sizeof(unsigned), next);
    for (int i = 0; i < N; ++i)
        FAIL_IF(host[i] != (unsigned)me * 2654435761u + (unsigned)i, "put_block",
                "read back word %d is %u", i, host[i]);
    printf("OK put_block pe=%d bytes=%zu\n", me, (size_t)N * sizeof(unsigned));
    free(host);
    nvshmem_free(dest);
    nvshmem_free(src);
    nvshmem_finalize();
    return 0;
}
