/* Unique-id init from a host program in C (gcc): rank 0 makes the id and writes it to a file,
 * the others read it, all join with nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID); the rank
 * and the count come from the command line, as a program with its own launcher would have
 * them. The kernel work is in kernel.cu.
 * Usage: uniqueid ID_FILE  (rank and count from PSHMEM_RANK/PSHMEM_WORLD_SIZE or RANK/WORLD_SIZE,
 * read here only to play the program's own launcher) */
#define _DEFAULT_SOURCE /* usleep */
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int run_kernel_part(void); /* kernel.cu: 0 on success */

static int env_int(const char *a, const char *b) {
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? atoi(v) : -1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s ID_FILE\n", argv[0]);
        return 2;
    }
    int rank = env_int("PSHMEM_RANK", "RANK"), nranks = env_int("PSHMEM_WORLD_SIZE", "WORLD_SIZE");
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (rank == 0) {
        if (nvshmemx_get_uniqueid(&id) != 0) return 3;
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1) return 3;
        fclose(f);
        rename(tmp, argv[1]);
    } else {
        FILE *f = NULL;
        for (int i = 0; i < 6000 && !f; ++i) {
            f = fopen(argv[1], "rb");
            if (!f) usleep(10000);
        }
        if (!f || fread(&id, sizeof id, 1, f) != 1) return 3;
        fclose(f);
    }
    /* the attributes are left uninitialised apart from the unique id, as programs do */
    nvshmemx_init_attr_t attr;
    nvshmemx_set_attr_uniqueid_args(rank, nranks, &id, &attr);
    if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
        printf("FAIL uniqueid rank=%d: init\n", rank);
        return 1;
    }
    if (nvshmem_my_pe() != rank || nvshmem_n_pes() != nranks) {
        printf("FAIL uniqueid rank=%d: pe %d of %d\n", rank, nvshmem_my_pe(), nvshmem_n_pes());
        return 1;
    }
    int rc = run_kernel_part();
    nvshmem_finalize();
    if (rc == 0) printf("OK uniqueid pe=%d n=%d\n", rank, nranks);
    return rc;
}
