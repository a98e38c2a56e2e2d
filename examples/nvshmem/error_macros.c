/* NVSHMEM's error-reporting macros and the headers nvshmemx.h makes reachable, as NVSHMEM's own
 * examples and perftests use them without including anything else: the CUDA driver API's types,
 * assert, INT_MAX, errno. Runs anywhere (no GPU, no job): each *_JMP macro must jump, and set
 * the status, exactly when its condition holds. build.sh compiles it with gcc -Werror and runs
 * it. */
#include <nvshmem.h>
#include <nvshmemx.h>

/* Returns the status each macro left: `v` drives the conditions. */
static int jumps(int v, int *where) {
    int status = v;
    void *p = v == 1 ? NULL : (void *)&status;
    *where = 0;
    NVSHMEMI_NULL_ERROR_JMP(p, status, NVSHMEMX_ERROR_OUT_OF_MEMORY, out, "p is NULL (v %d)", v);
    *where = 1;
    NVSHMEMI_EQ_ERROR_JMP(status, 2, NVSHMEMX_ERROR_INVALID_VALUE, out, "status is 2");
    *where = 2;
    NVSHMEMI_CHECK_ERROR_JMP(v == 3, status, NVSHMEMX_ERROR_SYMMETRY, out, "v is %d", v);
    *where = 3;
    NVSHMEMI_NZ_ERROR_JMP(status, NVSHMEMX_ERROR_INTERNAL, out, "status %d is not 0", status);
    *where = 4;
    NVSHMEMI_NE_ERROR_JMP(status, 0, NVSHMEMX_ERROR_INTERNAL, out, "unreachable");
    *where = 5;
    NVSHMEMI_ERROR_JMP(status, NVSHMEMX_ERROR_NOT_SUPPORTED, out, "always");
    *where = 6;
out:
    return status;
}

int main(void) {
    static const struct {
        int v, status, where;
    } want[] = {
        {0, NVSHMEMX_ERROR_NOT_SUPPORTED, 5},
        {1, NVSHMEMX_ERROR_OUT_OF_MEMORY, 0},
        {2, NVSHMEMX_ERROR_INVALID_VALUE, 1},
        {3, NVSHMEMX_ERROR_SYMMETRY, 2},
        {4, NVSHMEMX_ERROR_INTERNAL, 3},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        int where = -1;
        int status = jumps(want[i].v, &where);
        if (status != want[i].status || where != want[i].where) {
            printf("FAIL error_macros: v %d gave status %d at %d, expected %d at %d\n", want[i].v,
                   status, where, want[i].status, want[i].where);
            return 1;
        }
    }
    CUresult r = CUDA_SUCCESS; /* <cuda.h> through nvshmemx.h */
    assert(r == CUDA_SUCCESS);
    errno = 0;
    NVSHMEMI_NZ_EXIT(errno, "not taken");
    NVSHMEMI_NZ_SYSCHECK_EXIT(0, "not taken");
    NVSHMEMI_ERROR_PRINT("a report on stderr (%s)", "expected");
    NVSHMEMI_WARN_PRINT("a warning on stdout (%s)", "expected");
    if (NVSHMEMX_ERROR_SENTINEL != INT_MAX) {
        printf("FAIL error_macros: NVSHMEMX_ERROR_SENTINEL is %d\n", (int)NVSHMEMX_ERROR_SENTINEL);
        return 1;
    }
    printf("OK error_macros: every jump taken exactly when its condition held\n");
    return 0;
}
