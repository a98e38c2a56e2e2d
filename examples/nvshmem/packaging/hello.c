/* A host-only NVSHMEM program in C, built through the tree's pkg-config file or its CMake
 * package: started without a launcher it is a job of one PE; the GPU part of the two-stage
 * init is never needed, so it runs on machines without a GPU. */
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdio.h>

int main(void) {
    nvshmem_init();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int major = 0, minor = 0;
    nvshmem_info_get_version(&major, &minor);
    if (me != 0 || n != 1 || major != NVSHMEM_MAJOR_VERSION) {
        printf("FAIL packaging pe=%d n=%d version %d.%d\n", me, n, major, minor);
        return 1;
    }
    nvshmem_finalize();
    printf("OK packaging pe=%d n=%d version %d.%d\n", me, n, major, minor);
    return 0;
}
