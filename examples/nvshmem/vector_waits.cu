/* The vector waits and tests (nvshmem_TYPE_wait_until_{all,any,some}[_vector],
 * nvshmem_TYPE_test_{all,any,some}[_vector]) and half / bfloat16 RMA. Every PE sets 8 int flags
 * of its right neighbour, last to first, with nvshmem_int_p, while waiting on its own flags for
 * its left neighbour's: any (half of them excluded by status), all (one value per flag), some;
 * then the tests against the flags' final values, and the edge cases OpenSHMEM defines (every
 * flag excluded: any gives SIZE_MAX, some 0, test_all 1). Then halves and bfloat16s go to the
 * right neighbour by device put and p, and by the host's p and on-stream put, and come back by
 * g; each PE checks what its left neighbour sent. */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define FLAGS 8

/* out[0]: the first failed check's number (0: all passed); out[1]: the index any returned. */
__global__ void waits(int *flags, int right, long long *out) {
    const int none[FLAGS] = {1, 1, 1, 1, 1, 1, 1, 1};
    const int upper[FLAGS] = {1, 1, 1, 1, 0, 0, 0, 0}; /* only flags 4..7 take part */
    int want[FLAGS], half_want[FLAGS];
    size_t idx[FLAGS];
    for (int i = 0; i < FLAGS; ++i) {
        want[i] = i + 1;
        half_want[i] = i % 2 ? 0 : i + 1; /* the even flags hold these */
    }
    for (int i = FLAGS - 1; i >= 0; --i) nvshmem_int_p(&flags[i], i + 1, right);
    nvshmem_quiet();
    int bad = 0;
    size_t a = nvshmem_int_wait_until_any(flags, FLAGS, upper, NVSHMEM_CMP_GE, 1);
    out[1] = (long long)a;
    if (a < 4 || a >= FLAGS) bad = bad ? bad : 1;
    nvshmem_int_wait_until_all_vector(flags, FLAGS, NULL, NVSHMEM_CMP_EQ, want);
    for (int i = 0; i < FLAGS; ++i)
        if (flags[i] != i + 1) bad = bad ? bad : 2;
    if (nvshmem_int_wait_until_some(flags, FLAGS, idx, NULL, NVSHMEM_CMP_GE, 1) != FLAGS)
        bad = bad ? bad : 3;
    for (int i = 0; i < FLAGS; ++i)
        if (idx[i] != (size_t)i) bad = bad ? bad : 4;
    nvshmem_int_wait_until_all(flags, FLAGS, upper, NVSHMEM_CMP_GT, 4);
    if (!nvshmem_int_test_all(flags, FLAGS, NULL, NVSHMEM_CMP_GE, 1)) bad = bad ? bad : 5;
    if (nvshmem_int_test_all(flags, FLAGS, NULL, NVSHMEM_CMP_GT, 1)) bad = bad ? bad : 6;
    if (nvshmem_int_test_any(flags, FLAGS, NULL, NVSHMEM_CMP_EQ, 3) != 2) bad = bad ? bad : 7;
    if (nvshmem_int_test_some_vector(flags, FLAGS, idx, NULL, NVSHMEM_CMP_EQ, half_want) != 4 ||
        idx[0] != 0 || idx[3] != 6)
        bad = bad ? bad : 8;
    if (nvshmem_int_test_any_vector(flags, FLAGS, upper, NVSHMEM_CMP_LT, want) != SIZE_MAX)
        bad = bad ? bad : 9;
    if (!nvshmem_int_test_all_vector(flags, FLAGS, NULL, NVSHMEM_CMP_LE, want)) bad = bad ? bad : 10;
    if (nvshmem_int_test_some(flags, FLAGS, idx, upper, NVSHMEM_CMP_NE, 5) != 3) bad = bad ? bad : 11;
    /* Nothing takes part. */
    if (nvshmem_int_wait_until_any(flags, FLAGS, none, NVSHMEM_CMP_EQ, -1) != SIZE_MAX)
        bad = bad ? bad : 12;
    if (nvshmem_int_wait_until_some_vector(flags, FLAGS, idx, none, NVSHMEM_CMP_EQ, want) != 0)
        bad = bad ? bad : 13;
    nvshmem_int_wait_until_all(flags, FLAGS, none, NVSHMEM_CMP_EQ, -1); /* returns at once */
    if (!nvshmem_int_test_all(flags, FLAGS, none, NVSHMEM_CMP_EQ, -1)) bad = bad ? bad : 14;
    out[0] = bad;
}

__global__ void send_halves(__half *h, __nv_bfloat16 *b, int me, int right) {
    __half hs[2] = {__float2half(me + 0.5f), __float2half(me + 1.5f)};
    __half *src = h + 8; /* a symmetric staging slot of this PE */
    src[0] = hs[0];
    src[1] = hs[1];
    nvshmem_half_put(h, src, 2, right);
    nvshmem_bfloat16_p(b, __float2bfloat16(me + 2.5f), right);
    nvshmem_quiet();
}

__global__ void get_halves(__half *h, __nv_bfloat16 *b, int left, float *got) {
    got[0] = __half2float(nvshmem_half_g(h + 8, left));
    got[1] = __bfloat162float(nvshmem_bfloat16_g(b, left));
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    int *flags = (int *)nvshmem_calloc(FLAGS, sizeof(int));
    __half *h = (__half *)nvshmem_calloc(16, sizeof(__half));
    __nv_bfloat16 *b = (__nv_bfloat16 *)nvshmem_calloc(16, sizeof(__nv_bfloat16));
    long long *out;
    float *got;
    CUDA_CHECK(cudaMallocManaged(&out, 2 * sizeof(long long)));
    CUDA_CHECK(cudaMallocManaged(&got, 2 * sizeof(float)));
    waits<<<1, 1>>>(flags, right, out);
    CUDA_CHECK(cudaDeviceSynchronize());
    FAIL_IF(out[0] != 0, "vector_waits", "check %lld failed (any returned %lld)", out[0], out[1]);

    send_halves<<<1, 1>>>(h, b, me, right);
    CUDA_CHECK(cudaDeviceSynchronize());
    /* From the host: p of one half, an on-stream put of one bfloat16. */
    nvshmem_half_p(h + 4, __float2half(me + 3.5f), right);
    __nv_bfloat16 *bsrc = b + 8;
    __nv_bfloat16 one = __float2bfloat16(me + 4.5f);
    CUDA_CHECK(cudaMemcpy(bsrc, &one, sizeof one, cudaMemcpyHostToDevice));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    nvshmemx_bfloat16_put_on_stream(b + 4, bsrc, 1, right, st);
    nvshmemx_quiet_on_stream(st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    nvshmem_barrier_all();
    __half hv[5];
    __nv_bfloat16 bv[5];
    CUDA_CHECK(cudaMemcpy(hv, h, sizeof hv, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(bv, b, sizeof bv, cudaMemcpyDeviceToHost));
    FAIL_IF(__half2float(hv[0]) != left + 0.5f || __half2float(hv[1]) != left + 1.5f,
            "vector_waits", "device half put from PE %d: %g %g", left, __half2float(hv[0]),
            __half2float(hv[1]));
    FAIL_IF(__bfloat162float(bv[0]) != left + 2.5f, "vector_waits", "device bfloat16 p: %g",
            __bfloat162float(bv[0]));
    FAIL_IF(__half2float(hv[4]) != left + 3.5f, "vector_waits", "host half p: %g",
            __half2float(hv[4]));
    FAIL_IF(__bfloat162float(bv[4]) != left + 4.5f, "vector_waits", "on-stream bfloat16 put: %g",
            __bfloat162float(bv[4]));
    get_halves<<<1, 1>>>(h, b, left, got);
    CUDA_CHECK(cudaDeviceSynchronize());
    /* The left neighbour's own staging slot and its b[0] (which its left neighbour wrote). */
    FAIL_IF(got[0] != left + 0.5f, "vector_waits", "device half g: %g", got[0]);
    FAIL_IF(got[1] != (left + n - 1) % n + 2.5f, "vector_waits", "device bfloat16 g: %g", got[1]);
    float hg = __half2float(nvshmem_half_g(h + 9, left));
    FAIL_IF(hg != left + 1.5f, "vector_waits", "host half g: %g", hg);
    nvshmem_barrier_all();
    printf("OK vector_waits pe=%d of %d: any gave flag %lld; half and bfloat16 RMA checked\n", me,
           n, out[1]);
    CUDA_CHECK(cudaStreamDestroy(st));
    nvshmem_free(b);
    nvshmem_free(h);
    nvshmem_free(flags);
    nvshmem_finalize();
    return 0;
}
