/* The CUDA half of the unique-id example: a sum over every PE with atomics into PE 0. */
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdio.h>

__global__ void add_mine(int *sum) { nvshmem_int_atomic_add(sum, nvshmem_my_pe() + 1, 0); }

extern "C" int run_kernel_part(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 4;
    cudaSetDevice(nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE) % devices);
    int *sum = (int *)nvshmem_calloc(1, sizeof(int));
    add_mine<<<1, 1>>>(sum);
    if (cudaDeviceSynchronize() != cudaSuccess) return 5;
    nvshmem_barrier_all();
    int n = nvshmem_n_pes(), me = nvshmem_my_pe(), got = 0;
    if (me == 0) cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost);
    nvshmem_free(sum);
    if (me == 0 && got != n * (n + 1) / 2) {
        printf("FAIL uniqueid pe=0: sum %d\n", got);
        return 1;
    }
    return 0;
}
