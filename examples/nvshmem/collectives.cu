/* Collectives from kernels (one thread, a warp, a block) and from the host (blocking and on a
 * stream): int sum and max reductions (in place too; large, and small ones that take the
 * low-latency protocol on mapped members, five in a row), a bfloat16 sum, reducescatter,
 * broadcast, fcollect and alltoall, on the world and on an even/odd split; every result is
 * checked against its closed form, on the world, an even/odd split, every third PE, one-PE
 * teams and the rows and columns of a 2-D split. The arrays are larger than the scratch chunk, so that
 * members reached through the proxy are pulled in several chunks. Last, a timed run on the world
 * from the host on a stream: barriers, then 1 KiB sum reductions; each PE prints the time per
 * call. */
#include <cuda_bf16.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "common.h"

#define N 70000 /* elements per reduction */

/* group: 0 one thread, 1 a warp, 2 a block (the launch has 128 threads) */
__global__ void reduce_all(int group, nvshmem_team_t team, int *dst, const int *src, int *mx,
                           __nv_bfloat16 *bdst, const __nv_bfloat16 *bsrc) {
    if (group == 0) {
        if (threadIdx.x == 0) {
            nvshmem_int_sum_reduce(team, dst, src, N);
            nvshmem_int_max_reduce(team, mx, mx, N); /* in place */
            nvshmem_bfloat16_sum_reduce(team, bdst, bsrc, 64);
        }
    } else if (group == 1) {
        if (threadIdx.x < 32) {
            nvshmemx_int_sum_reduce_warp(team, dst, src, N);
            nvshmemx_int_max_reduce_warp(team, mx, mx, N);
            nvshmemx_bfloat16_sum_reduce_warp(team, bdst, bsrc, 64);
        }
    } else {
        nvshmemx_int_sum_reduce_block(team, dst, src, N);
        nvshmemx_int_max_reduce_block(team, mx, mx, N);
        nvshmemx_bfloat16_sum_reduce_block(team, bdst, bsrc, 64);
    }
}

/* Small messages: the low-latency path where every member is mapped (33 ints, in place too). */
__global__ void small_reduce(nvshmem_team_t team, int *dst, int *src) {
    nvshmemx_int_sum_reduce_block(team, dst, src, 33);
    nvshmemx_int_max_reduce_block(team, src, src, 33);
}

__global__ void move_all(nvshmem_team_t team, int root, long *bc, const long *bsrc, long *fc,
                         long *a2a_dst, const long *a2a_src, int *rs_dst, const int *rs_src) {
    nvshmemx_long_broadcast_block(team, bc, bsrc, 1000, root);
    nvshmemx_long_fcollect_block(team, fc, bsrc, 1000);
    nvshmemx_long_alltoall_block(team, a2a_dst, a2a_src, 100);
    nvshmemx_int_sum_reducescatter_block(team, rs_dst, rs_src, 300);
}

/* Symmetric buffers, allocated once over the world (sized for the largest team). */
struct bufs {
    int *src, *dst, *mx, *rs_src, *rs_dst;
    __nv_bfloat16 *bsrc, *bdst;
    long *bc, *bs, *fc, *a2s, *a2d;
    int *big; /* n x N */
};

static struct bufs alloc_bufs(int n) {
    struct bufs b;
    b.src = (int *)nvshmem_malloc(N * sizeof(int));
    b.dst = (int *)nvshmem_malloc(N * sizeof(int));
    b.mx = (int *)nvshmem_malloc(N * sizeof(int));
    b.bsrc = (__nv_bfloat16 *)nvshmem_malloc(64 * sizeof(__nv_bfloat16));
    b.bdst = (__nv_bfloat16 *)nvshmem_malloc(64 * sizeof(__nv_bfloat16));
    b.bc = (long *)nvshmem_malloc(1000 * sizeof(long));
    b.bs = (long *)nvshmem_malloc(1000 * sizeof(long));
    b.fc = (long *)nvshmem_malloc(1000 * sizeof(long) * n);
    b.a2s = (long *)nvshmem_malloc(100 * sizeof(long) * n);
    b.a2d = (long *)nvshmem_malloc(100 * sizeof(long) * n);
    b.rs_src = (int *)nvshmem_malloc(300 * sizeof(int) * n);
    b.rs_dst = (int *)nvshmem_malloc(300 * sizeof(int));
    b.big = (int *)nvshmem_malloc((size_t)N * sizeof(int) * n);
    return b;
}

static void free_bufs(struct bufs *b) {
    void *all[] = {b->big, b->rs_dst, b->rs_src, b->a2d, b->a2s, b->fc, b->bs, b->bc,
                   b->bdst, b->bsrc, b->mx, b->dst, b->src};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; ++i) nvshmem_free(all[i]);
}

/* Every collective on `team`, by its members only (the others do not call it). */
static int check_team(nvshmem_team_t team, const char *label, cudaStream_t s, struct bufs *b) {
    int me = nvshmem_team_my_pe(team), n = nvshmem_team_n_pes(team);
    int wme = nvshmem_my_pe();
    int *src = b->src, *dst = b->dst, *mx = b->mx;
    __nv_bfloat16 *bsrc = b->bsrc, *bdst = b->bdst;
    int *h = (int *)malloc(N * sizeof(int) > 300 * sizeof(int) * n ? N * sizeof(int) : 300 * sizeof(int) * n);
    __nv_bfloat16 hb[64];
    for (int group = 0; group < 3; ++group) {
        for (int i = 0; i < N; ++i) h[i] = me + i;
        CUDA_CHECK(cudaMemcpy(src, h, N * sizeof(int), cudaMemcpyHostToDevice));
        for (int i = 0; i < N; ++i) h[i] = (i % n == me) ? 1000 + i : i;
        CUDA_CHECK(cudaMemcpy(mx, h, N * sizeof(int), cudaMemcpyHostToDevice));
        for (int i = 0; i < 64; ++i) hb[i] = __float2bfloat16((float)(me + 1) * 0.5f);
        CUDA_CHECK(cudaMemcpy(bsrc, hb, sizeof hb, cudaMemcpyHostToDevice));
        nvshmem_team_sync(team);
        reduce_all<<<1, 128, 0, s>>>(group, team, dst, src, mx, bdst, bsrc);
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaMemcpy(h, dst, N * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; ++i)
            FAIL_IF(h[i] != n * (n - 1) / 2 + n * i, "collectives", "%s group %d sum[%d] = %d",
                    label, group, i, h[i]);
        CUDA_CHECK(cudaMemcpy(h, mx, N * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; ++i)
            FAIL_IF(h[i] != 1000 + i, "collectives", "%s group %d max[%d] = %d", label, group, i,
                    h[i]);
        CUDA_CHECK(cudaMemcpy(hb, bdst, sizeof hb, cudaMemcpyDeviceToHost));
        float want = 0.5f * n * (n + 1) / 2;
        for (int i = 0; i < 64; ++i)
            FAIL_IF(__bfloat162float(hb[i]) != want, "collectives", "%s group %d bf16 %f", label,
                    group, __bfloat162float(hb[i]));
    }
    for (int round = 0; round < 5; ++round) {
        for (int i = 0; i < 33; ++i) h[i] = me * 3 + i + round;
        CUDA_CHECK(cudaMemcpy(src, h, 33 * sizeof(int), cudaMemcpyHostToDevice));
        small_reduce<<<1, 96, 0, s>>>(team, dst, src);
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaMemcpy(h, dst, 33 * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < 33; ++i)
            FAIL_IF(h[i] != 3 * n * (n - 1) / 2 + n * (i + round), "collectives",
                    "%s small sum[%d] = %d (round %d)", label, i, h[i], round);
        CUDA_CHECK(cudaMemcpy(h, src, 33 * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < 33; ++i)
            FAIL_IF(h[i] != 3 * (n - 1) + i + round, "collectives", "%s small max[%d] = %d",
                    label, i, h[i]);
    }
    for (int i = 0; i < N; ++i) h[i] = me + i; /* src again, for the host forms below */
    CUDA_CHECK(cudaMemcpy(src, h, N * sizeof(int), cudaMemcpyHostToDevice));
    /* broadcast, fcollect, alltoall and reducescatter from a block */
    long *bc = b->bc, *bs = b->bs, *fc = b->fc, *a2s = b->a2s, *a2d = b->a2d;
    int *rs_src = b->rs_src, *rs_dst = b->rs_dst;
    long *hl = (long *)malloc(1000 * sizeof(long) * n);
    for (int i = 0; i < 1000; ++i) hl[i] = (long)me * 100000 + i;
    CUDA_CHECK(cudaMemcpy(bs, hl, 1000 * sizeof(long), cudaMemcpyHostToDevice));
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < 100; ++i) hl[j * 100 + i] = (long)me * 1000000 + j * 1000 + i;
    CUDA_CHECK(cudaMemcpy(a2s, hl, 100 * sizeof(long) * n, cudaMemcpyHostToDevice));
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < 300; ++i) h[j * 300 + i] = me * 7 + j * 300 + i;
    CUDA_CHECK(cudaMemcpy(rs_src, h, 300 * sizeof(int) * n, cudaMemcpyHostToDevice));
    nvshmem_team_sync(team);
    int root = n - 1;
    move_all<<<1, 128, 0, s>>>(team, root, bc, bs, fc, a2d, a2s, rs_dst, rs_src);
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(hl, bc, 1000 * sizeof(long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1000; ++i)
        FAIL_IF(hl[i] != (long)root * 100000 + i, "collectives", "%s broadcast[%d]", label, i);
    CUDA_CHECK(cudaMemcpy(hl, fc, 1000 * sizeof(long) * n, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < 1000; ++i)
            FAIL_IF(hl[j * 1000 + i] != (long)j * 100000 + i, "collectives", "%s fcollect", label);
    CUDA_CHECK(cudaMemcpy(hl, a2d, 100 * sizeof(long) * n, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < 100; ++i)
            FAIL_IF(hl[j * 100 + i] != (long)j * 1000000 + me * 1000 + i, "collectives",
                    "%s alltoall", label);
    CUDA_CHECK(cudaMemcpy(h, rs_dst, 300 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 300; ++i)
        FAIL_IF(h[i] != 7 * n * (n - 1) / 2 + n * (me * 300 + i), "collectives",
                "%s reducescatter[%d] = %d", label, i, h[i]);
    /* host forms: blocking, then on the stream */
    /* (large: among mapped members these run on a grid between team syncs) */
    nvshmem_int_sum_reduce(team, dst, src, N);
    CUDA_CHECK(cudaMemcpy(h, dst, N * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; ++i)
        FAIL_IF(h[i] != n * (n - 1) / 2 + n * i, "collectives", "%s host reduce[%d] = %d", label,
                i, h[i]);
    nvshmem_int_fcollect(team, b->big, src, N);
    int *hb2 = (int *)malloc((size_t)N * sizeof(int) * n);
    CUDA_CHECK(cudaMemcpy(hb2, b->big, (size_t)N * sizeof(int) * n, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < N; ++i)
            FAIL_IF(hb2[(size_t)j * N + i] != j + i, "collectives", "%s host fcollect", label);
    free(hb2);
    CUDA_CHECK(cudaMemset(dst, 0, N * sizeof(int)));
    nvshmemx_int_sum_reduce_on_stream(team, dst, src, N, s);
    nvshmemx_long_fcollect_on_stream(team, fc, bs, 1000, s);
    CUDA_CHECK(cudaMemcpyAsync(h, dst, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; ++i)
        FAIL_IF(h[i] != n * (n - 1) / 2 + n * i, "collectives", "%s on-stream reduce[%d]", label, i);
    nvshmem_long_broadcast(team, bc, bs, 1000, 0);
    CUDA_CHECK(cudaMemcpy(hl, bc, sizeof(long), cudaMemcpyDeviceToHost));
    FAIL_IF(hl[0] != 0, "collectives", "%s host broadcast", label);
    nvshmem_team_sync(team);
    printf("checked collectives pe=%d team=%s member=%d of %d\n", wme, label, me, n);
    free(hl);
    free(h);
    return 0;
}

/* Time per call of `reps` world barriers, then of `reps` 256-int sum reductions, all enqueued on
 * the stream at once (as a training step enqueues them) and timed by CUDA events. */
#define TIMED_REPS 200
static void time_world(cudaStream_t s, struct bufs *b, double *barrier_us, double *reduce_us) {
    cudaEvent_t e[3];
    for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaEventCreate(&e[i]));
    nvshmemx_barrier_all_on_stream(s); /* warm-up, and the PEs start together */
    nvshmemx_int_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, b->dst, b->src, 256, s);
    nvshmemx_barrier_all_on_stream(s);
    CUDA_CHECK(cudaEventRecord(e[0], s));
    for (int i = 0; i < TIMED_REPS; ++i) nvshmemx_barrier_all_on_stream(s);
    CUDA_CHECK(cudaEventRecord(e[1], s));
    for (int i = 0; i < TIMED_REPS; ++i)
        nvshmemx_int_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, b->dst, b->src, 256, s);
    CUDA_CHECK(cudaEventRecord(e[2], s));
    CUDA_CHECK(cudaEventSynchronize(e[2]));
    float ms0 = 0, ms1 = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms0, e[0], e[1]));
    CUDA_CHECK(cudaEventElapsedTime(&ms1, e[1], e[2]));
    *barrier_us = ms0 * 1e3 / TIMED_REPS;
    *reduce_us = ms1 * 1e3 / TIMED_REPS;
    for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaEventDestroy(e[i]));
}

int main(void) {
    nvshmem_init();
    select_device();
    int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct bufs b = alloc_bufs(n);
    check_team(NVSHMEM_TEAM_WORLD, "world", s, &b);
    /* Evens and odds in one split (each PE passes its own team's triple); both halves run
     * their collectives at once. */
    nvshmem_team_t half_team = NVSHMEM_TEAM_INVALID, third = NVSHMEM_TEAM_INVALID;
    nvshmem_team_t single = NVSHMEM_TEAM_INVALID, row = NVSHMEM_TEAM_INVALID;
    nvshmem_team_t col = NVSHMEM_TEAM_INVALID;
    int parity = me % 2;
    nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, parity, 2, (n - parity + 1) / 2, NULL, 0,
                               &half_team);
    /* Every third PE from 1 (the others are outside it), one-PE teams, and the rows and
     * columns of a 2-D split with rows of 3. */
    nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, 1, 3, (n + 1) / 3, NULL, 0, &third);
    nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, me, 1, 1, NULL, 0, &single);
    nvshmem_team_split_2d(NVSHMEM_TEAM_WORLD, 3, NULL, 0, &row, NULL, 0, &col);
    check_team(half_team, parity ? "odds" : "evens", s, &b);
    if (third != NVSHMEM_TEAM_INVALID) check_team(third, "strided", s, &b);
    check_team(single, "single", s, &b);
    check_team(row, "row", s, &b);
    check_team(col, "column", s, &b);
    nvshmem_barrier_all();
    double barrier_us = 0, reduce_us = 0;
    time_world(s, &b, &barrier_us, &reduce_us);
    nvshmem_barrier_all();
    nvshmem_team_t teams[] = {half_team, third, single, row, col};
    for (int i = 0; i < 5; ++i)
        if (teams[i] != NVSHMEM_TEAM_INVALID) nvshmem_team_destroy(teams[i]);
    free_bufs(&b);
    CUDA_CHECK(cudaStreamDestroy(s));
    printf("OK collectives pe=%d all barrier_us=%.2f reduce_1KiB_us=%.2f\n", me, barrier_us,
           reduce_us);
    nvshmem_finalize();
    return 0;
}
