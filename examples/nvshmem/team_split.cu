/* Splits the world into evens and odds in one call (each PE passes its own team's triple),
 * checks the team numbering on the host and in a kernel, syncs the team from a kernel, and
 * runs an alltoall in each team (nvshmem_alltoallmem and its on-stream form). */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define BYTES 256

__global__ void check_team(nvshmem_team_t t, int *out) {
    out[0] = nvshmem_team_my_pe(t);
    out[1] = nvshmem_team_n_pes(t);
    out[2] = nvshmem_team_translate_pe(t, out[0], NVSHMEM_TEAM_WORLD);
    nvshmem_team_sync(t);
    nvshmem_barrier(t);
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int parity = me % 2, size = (n - parity + 1) / 2;
    char *src = (char *)nvshmem_malloc((size_t)BYTES * n);
    char *dst = (char *)nvshmem_calloc((size_t)BYTES * n, 1);
    nvshmem_team_t t = NVSHMEM_TEAM_INVALID;
    int rc = nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, parity, 2, size, NULL, 0, &t);
    FAIL_IF(rc != 0 || t == NVSHMEM_TEAM_INVALID, "team_split", "split failed (%d)", rc);
    FAIL_IF(nvshmem_team_my_pe(t) != me / 2 || nvshmem_team_n_pes(t) != size, "team_split",
            "host numbering %d of %d", nvshmem_team_my_pe(t), nvshmem_team_n_pes(t));
    int *out;
    CUDA_CHECK(cudaMallocManaged(&out, 3 * sizeof(int)));
    check_team<<<1, 1>>>(t, out);
    CUDA_CHECK(cudaDeviceSynchronize());
    FAIL_IF(out[0] != me / 2 || out[1] != size || out[2] != me, "team_split",
            "device numbering %d of %d (world %d)", out[0], out[1], out[2]);
    char *h = (char *)malloc((size_t)BYTES * n);
    for (int round = 0; round < 2; ++round) {
        for (int j = 0; j < size; ++j)
            memset(h + (size_t)j * BYTES, (me * 16 + j + round) & 0x7f, BYTES);
        CUDA_CHECK(cudaMemcpy(src, h, (size_t)BYTES * size, cudaMemcpyHostToDevice));
        if (round == 0) {
            FAIL_IF(nvshmem_alltoallmem(t, dst, src, BYTES) != 0, "team_split", "alltoall");
        } else {
            cudaStream_t s;
            CUDA_CHECK(cudaStreamCreate(&s));
            FAIL_IF(nvshmemx_alltoallmem_on_stream(t, dst, src, BYTES, s) != 0, "team_split",
                    "alltoall on stream");
            CUDA_CHECK(cudaStreamSynchronize(s));
            CUDA_CHECK(cudaStreamDestroy(s));
        }
        CUDA_CHECK(cudaMemcpy(h, dst, (size_t)BYTES * size, cudaMemcpyDeviceToHost));
        for (int i = 0; i < size; ++i) {
            int from = parity + 2 * i;
            for (int k = 0; k < BYTES; ++k)
                FAIL_IF(h[(size_t)i * BYTES + k] != (char)((from * 16 + me / 2 + round) & 0x7f),
                        "team_split", "round %d: byte %d from member %d", round, k, i);
        }
        /* Every member has read dst before anyone starts the next round's puts into it. */
        nvshmem_barrier_all();
    }
    nvshmem_team_destroy(t);
    /* a 2-D split: rows of 2 PEs, and the columns across them */
    nvshmem_team_t row = NVSHMEM_TEAM_INVALID, col = NVSHMEM_TEAM_INVALID;
    FAIL_IF(nvshmem_team_split_2d(NVSHMEM_TEAM_WORLD, 2, NULL, 0, &row, NULL, 0, &col) != 0,
            "team_split", "2-D split");
    FAIL_IF(nvshmem_team_my_pe(row) != me % 2 || nvshmem_team_my_pe(col) != me / 2 ||
                nvshmem_team_n_pes(col) != (n - me % 2 + 1) / 2,
            "team_split", "2-D numbering %d %d", nvshmem_team_my_pe(row), nvshmem_team_my_pe(col));
    nvshmem_team_destroy(row);
    nvshmem_team_destroy(col);
    printf("OK team_split pe=%d team=%d member=%d of %d\n", me, (int)t, me / 2, size);
    free(h);
    nvshmem_free(dst);
    nvshmem_free(src);
    nvshmem_finalize();
    return 0;
}
