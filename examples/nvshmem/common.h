/* Shared by the examples: checked CUDA calls and a result line. Each example prints
 * "OK <name> ..." on every PE when its checks pass, "FAIL <name> ..." otherwise, and exits
 * non-zero on failure. */
#ifndef EXAMPLES_COMMON_H
#define EXAMPLES_COMMON_H
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(e_));                                                 \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

#define FAIL_IF(cond, name, ...)                                                             \
    do {                                                                                     \
        if (cond) {                                                                          \
            printf("FAIL %s pe=%d: ", name, nvshmem_my_pe());                               \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
            fflush(stdout);                                                                  \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* NVSHMEM's documented start: one GPU per PE of the node, chosen before the first heap call. */
static inline void select_device(void) {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    CUDA_CHECK(cudaSetDevice(nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE) % devices));
}
#endif
