/* Each PE writes its number into the next PE's symmetric int from a kernel (nvshmem_int_p),
 * then every PE checks it received its predecessor's. */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

__global__ void send_to_next(int *dest) {
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    nvshmem_int_p(dest, me, (me + 1) % n);
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int *dest = (int *)nvshmem_malloc(sizeof(int));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    send_to_next<<<1, 1, 0, s>>>(dest);
    nvshmemx_barrier_all_on_stream(s);
    int got = -1;
    CUDA_CHECK(cudaMemcpyAsync(&got, dest, sizeof got, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    FAIL_IF(got != (me + n - 1) % n, "ring", "got %d", got);
    printf("OK ring pe=%d n=%d got=%d\n", me, n, got);
    nvshmem_free(dest);
    CUDA_CHECK(cudaStreamDestroy(s));
    nvshmem_finalize();
    return 0;
}
