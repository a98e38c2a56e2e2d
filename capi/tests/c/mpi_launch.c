/* An MPI program that initialises proxyshmem the ways NVSHMEM's MPI users do, run under mpirun
 * by tests/mpi.rs (host mode: the host heap, no GPU). Usage: mpi_launch MODE
 *   world  MPI_Init, then plain pshmem_init(): the job meets over MPI_COMM_WORLD
 *   attr   MPI_Init, then nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM) with attr.mpi_comm
 *          pointing to a copy of MPI_COMM_WORLD (NVSHMEM's mpi-based-init pattern)
 *   split  the same with each half of MPI_COMM_WORLD (even and odd ranks): two jobs
 *   shmem  nvshmemx_init_attr(NVSHMEMX_INIT_WITH_SHMEM) must be refused
 * Then a put-with-signal around the job's ring proves the PEs are one job; every rank prints
 * "[pe of n] run complete" and an OK line, or ERR with pshmem_last_error(). */
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != 0) {                                                                      \
            printf("ERR %s rc=%d msg=%s\n", #call, rc_, pshmem_last_error());                \
            fflush(stdout);                                                                  \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
        }                                                                                    \
    } while (0)

static int ring(const char *mode, int rank) {
    int me = pshmem_my_pe(), n = pshmem_n_pes();
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    uint64_t *buf = (uint64_t *)pshmem_calloc(8, sizeof(uint64_t));
    uint64_t *sig = (uint64_t *)pshmem_calloc(1, sizeof(uint64_t));
    uint64_t src[8], seen = 0;
    if (!buf || !sig) {
        printf("ERR calloc: %s\n", pshmem_last_error());
        return 1;
    }
    for (int i = 0; i < 8; ++i) src[i] = (uint64_t)me * 100 + (uint64_t)i;
    CHECK(pshmem_putmem_signal(buf, src, sizeof src, sig, 1, PSHMEM_SIGNAL_ADD, next));
    CHECK(pshmem_signal_wait_until(sig, PSHMEM_CMP_GE, 1, &seen));
    for (int i = 0; i < 8; ++i) {
        if (buf[i] != (uint64_t)prev * 100 + (uint64_t)i) {
            printf("ERR ring data at %d: %llu\n", i, (unsigned long long)buf[i]);
            return 1;
        }
    }
    printf("[%d of %d] run complete\n", me, n);
    printf("OK mpi mode=%s rank=%d pe=%d n=%d\n", mode, rank, me, n);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "world";
    int rank = 0, size = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    MPI_Comm comm = MPI_COMM_WORLD;
    if (strcmp(mode, "shmem") == 0) {
        int rc = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_SHMEM, &attr);
        printf("%s shmem refused rc=%d\n", rc == NVSHMEMX_ERROR_NOT_SUPPORTED ? "OK" : "ERR", rc);
        MPI_Finalize();
        return rc == NVSHMEMX_ERROR_NOT_SUPPORTED ? 0 : 1;
    }
    if (strcmp(mode, "world") == 0) {
        CHECK(pshmem_init());
    } else {
        if (strcmp(mode, "split") == 0) MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comm);
        else MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        attr.mpi_comm = &comm;
        int rc = nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM, &attr);
        if (rc != NVSHMEMX_SUCCESS) {
            printf("ERR nvshmemx_init_attr rc=%d msg=%s\n", rc, pshmem_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        int want_n = strcmp(mode, "split") == 0 ? (size + 1 - rank % 2) / 2 : size;
        int want_pe = strcmp(mode, "split") == 0 ? rank / 2 : rank;
        if (nvshmem_n_pes() != want_n || nvshmem_my_pe() != want_pe) {
            printf("ERR pe %d of %d, wanted %d of %d\n", nvshmem_my_pe(), nvshmem_n_pes(),
                   want_pe, want_n);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    int bad = ring(mode, rank);
    /* Every PE's ring value arrived before anyone tears down. */
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(pshmem_finalize());
    if (comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
    MPI_Finalize();
    return bad;
}
