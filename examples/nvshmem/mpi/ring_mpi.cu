/* An MPI program on the NVSHMEM API, started by its users' launcher (mpirun -np N, or srun):
 * MPI starts first, then NVSHMEM joins over the MPI communicator — no proxyshmem variable
 * exported. Each PE passes its number to the next PE from a kernel (nvshmem_int_p), the ring
 * is checked, and every PE prints "[pe of n] run complete" and an OK line.
 * Usage: ring_mpi [attr|init]
 *   attr  nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM) with attr.mpi_comm = &comm (default)
 *   init  plain nvshmem_init() after MPI_Init: the job meets over MPI_COMM_WORLD */
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <string.h>

#include "../common.h"

__global__ void pass_to_next(int *dest, int me, int n) { nvshmem_int_p(dest, me, (me + 1) % n); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "attr";
    int rank = 0, size = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (strcmp(mode, "init") == 0) {
        nvshmem_init();
    } else {
        MPI_Comm comm = MPI_COMM_WORLD;
        nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
        attr.mpi_comm = &comm;
        int rc = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM, &attr);
        if (rc != NVSHMEMX_SUCCESS) {
            printf("FAIL ring_mpi rank=%d: nvshmemx_init_attr returned %d\n", rank, rc);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    FAIL_IF(me != rank || n != size, "ring_mpi", "PE %d of %d, but MPI rank %d of %d", me, n,
            rank, size);
    select_device();
    int *dest = (int *)nvshmem_malloc(sizeof(int));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    pass_to_next<<<1, 1, 0, s>>>(dest, me, n);
    nvshmemx_barrier_all_on_stream(s);
    int got = -1;
    CUDA_CHECK(cudaMemcpyAsync(&got, dest, sizeof got, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    FAIL_IF(got != (me + n - 1) % n, "ring_mpi", "got %d", got);
    printf("[%d of %d] run complete\n", me, n);
    printf("OK ring_mpi mode=%s pe=%d n=%d got=%d\n", mode, me, n, got);
    nvshmem_free(dest);
    CUDA_CHECK(cudaStreamDestroy(s));
    nvshmem_finalize();
    MPI_Finalize();
    return 0;
}
