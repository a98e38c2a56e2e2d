/* The kernel half of the two-file example. */
#include <nvshmem.h>

__global__ void shift(long *dest, int n) {
    int me = nvshmem_my_pe(), next = (me + 1) % nvshmem_n_pes();
    for (int i = threadIdx.x; i < n; i += blockDim.x) nvshmem_long_p(&dest[i], (long)me * 1000 + i, next);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

void launch_shift(long *dest, int n, cudaStream_t s) { shift<<<1, 256, 0, s>>>(dest, n); }
