/* A host-only program on the C API (pshmem.h), run on several PEs by tests/capi.rs: every
 * call family, checked; prints OK lines, and ERR with pshmem_last_error() on any failure.
 * Usage: host_api [direct|proxied] */
#include <pshmem/pshmem.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != PSHMEM_SUCCESS) {                                                         \
            printf("ERR %s rc=%d msg=%s\n", #call, rc_, pshmem_last_error());                \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

#define EXPECT(cond, what)                                                                   \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            printf("ERR %s: %s (line %d)\n", what, #cond, __LINE__);                         \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    int direct = argc > 1 && strcmp(argv[1], "direct") == 0;
    int provided = -1;
    EXPECT(pshmem_my_pe() == -1, "my_pe before init");
    EXPECT(pshmem_malloc(8) == NULL && strstr(pshmem_last_error(), "not initialized") != NULL,
           "malloc before init");
    CHECK(pshmem_init_thread(PSHMEM_THREAD_MULTIPLE, &provided));
    EXPECT(provided == PSHMEM_THREAD_MULTIPLE, "thread level");
    EXPECT(pshmem_init_status() == 1, "init status");
    int me = pshmem_my_pe(), n = pshmem_n_pes();
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    EXPECT(n >= 2 && me >= 0 && me < n, "PE numbers");

    /* put-with-signal around the ring, then get back */
    uint64_t *buf = (uint64_t *)pshmem_calloc(64, sizeof(uint64_t));
    uint64_t *sig = (uint64_t *)pshmem_calloc(1, sizeof(uint64_t));
    EXPECT(buf && sig, "calloc");
    uint64_t src[64], back[64], seen = 0;
    for (int i = 0; i < 64; ++i) src[i] = (uint64_t)me * 1000 + (uint64_t)i;
    CHECK(pshmem_putmem_signal(buf, src, sizeof src, sig, 1, PSHMEM_SIGNAL_ADD, next));
    CHECK(pshmem_signal_wait_until(sig, PSHMEM_CMP_GE, 1, &seen));
    EXPECT(seen == 1, "signal value");
    for (int i = 0; i < 64; ++i) EXPECT(buf[i] == (uint64_t)prev * 1000 + (uint64_t)i, "put data");
    CHECK(pshmem_barrier_all());
    CHECK(pshmem_getmem(back, buf, sizeof back, next));
    for (int i = 0; i < 64; ++i) EXPECT(back[i] == (uint64_t)me * 1000 + (uint64_t)i, "get data");
    CHECK(pshmem_putmem_nbi(buf + 1, src, 8, next));
    CHECK(pshmem_quiet());
    printf("OK rma pe=%d\n", me);

    /* atomics: everyone adds to PE 0's counter and sets its bit there */
    uint64_t *ctr = (uint64_t *)pshmem_calloc(2, sizeof(uint64_t));
    uint32_t *w32 = (uint32_t *)pshmem_calloc(1, sizeof(uint32_t));
    CHECK(pshmem_barrier_all());
    uint64_t old = 0;
    CHECK(pshmem_atomic64(PSHMEM_AMO_FETCH_ADD, &ctr[0], (uint64_t)me + 1, 0, 0, &old));
    CHECK(pshmem_atomic64(PSHMEM_AMO_OR, &ctr[1], 1ull << me, 0, 0, NULL));
    uint32_t o32 = 7;
    CHECK(pshmem_atomic32(PSHMEM_AMO_COMPARE_SWAP, w32, (uint32_t)me + 1, 0, 0, &o32));
    CHECK(pshmem_barrier_all());
    if (me == 0) {
        EXPECT(ctr[0] == (uint64_t)n * (n + 1) / 2, "fetch_add sum");
        EXPECT(ctr[1] == (n == 64 ? ~0ull : (1ull << n) - 1), "or bits");
        EXPECT(*w32 >= 1 && *w32 <= (uint32_t)n, "compare_swap winner");
    }
    uint64_t x = 0;
    CHECK(pshmem_atomic64(PSHMEM_AMO_FETCH, &ctr[0], 0, 0, 0, &x));
    EXPECT(x == (uint64_t)n * (n + 1) / 2, "atomic fetch");
    printf("OK atomics pe=%d\n", me);

    /* teams: evens and odds in one split, an alltoall in each, then destroyed and re-split */
    pshmem_team_t t = PSHMEM_TEAM_INVALID;
    int parity = me % 2, count = (n - parity + 1) / 2;
    CHECK(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, parity, 2, count, &t));
    EXPECT(t != PSHMEM_TEAM_INVALID, "a team");
    EXPECT(pshmem_team_my_pe(t) == me / 2, "team rank");
    EXPECT(pshmem_team_n_pes(t) == count, "team size");
    EXPECT(pshmem_team_translate_pe(t, me / 2, PSHMEM_TEAM_WORLD) == me, "translate");
    EXPECT(pshmem_team_n_pes(PSHMEM_TEAM_WORLD) == n, "world size");
    const size_t nb = 16;
    unsigned char *a_src = (unsigned char *)pshmem_malloc(nb * (size_t)n);
    unsigned char *a_dst = (unsigned char *)pshmem_calloc(nb, (size_t)n);
    EXPECT(a_src && a_dst, "alltoall buffers");
    for (int j = 0; j < count; ++j)
        for (size_t k = 0; k < nb; ++k) a_src[(size_t)j * nb + k] = (unsigned char)(me * 16 + j);
    CHECK(pshmem_alltoallmem(t, a_dst, a_src, nb));
    for (int i = 0; i < count; ++i) {
        int from = parity + 2 * i; /* world PE of member i */
        for (size_t k = 0; k < nb; ++k)
            EXPECT(a_dst[(size_t)i * nb + k] == (unsigned char)(from * 16 + me / 2), "alltoall");
    }
    CHECK(pshmem_team_sync(t));
    CHECK(pshmem_team_destroy(t));
    pshmem_team_t all = PSHMEM_TEAM_INVALID;
    CHECK(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, 0, 1, n, &all));
    EXPECT(pshmem_team_my_pe(all) == me, "second split");
    CHECK(pshmem_team_barrier(all));
    CHECK(pshmem_team_destroy(all));
    /* a 2-D split: rows of 2 */
    pshmem_team_t row = PSHMEM_TEAM_INVALID, col = PSHMEM_TEAM_INVALID;
    CHECK(pshmem_team_split_2d(PSHMEM_TEAM_WORLD, 2, &row, &col));
    EXPECT(pshmem_team_my_pe(row) == me % 2 && pshmem_team_my_pe(col) == me / 2, "2-D split");
    EXPECT(pshmem_team_n_pes(col) == (n - me % 2 + 1) / 2, "2-D column size");
    CHECK(pshmem_team_destroy(row));
    CHECK(pshmem_team_destroy(col));
    printf("OK teams pe=%d team=%d\n", me, (int)t);

    /* collectives on the host heap */
    int32_t *c_src = (int32_t *)pshmem_malloc(4 * (size_t)n * 8);
    int32_t *c_dst = (int32_t *)pshmem_calloc(4 * (size_t)n, 8);
    EXPECT(c_src && c_dst, "collective buffers");
    for (int k = 0; k < 4; ++k) c_src[k] = me * 10 + k;
    CHECK(pshmem_broadcastmem(PSHMEM_TEAM_WORLD, c_dst, c_src, 16, n - 1));
    for (int k = 0; k < 4; ++k) EXPECT(c_dst[k] == (n - 1) * 10 + k, "broadcast");
    CHECK(pshmem_fcollectmem(PSHMEM_TEAM_WORLD, c_dst, c_src, 16));
    for (int j = 0; j < n; ++j)
        for (int k = 0; k < 4; ++k) EXPECT(c_dst[j * 4 + k] == j * 10 + k, "fcollect");
    CHECK(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_INT32, PSHMEM_RED_SUM, c_dst, c_src, 4));
    for (int k = 0; k < 4; ++k) EXPECT(c_dst[k] == 10 * n * (n - 1) / 2 + n * k, "reduce");
    CHECK(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_INT32, PSHMEM_RED_MAX, c_src, c_src, 4));
    for (int k = 0; k < 4; ++k) EXPECT(c_src[k] == (n - 1) * 10 + k, "in-place max");
    for (int j = 0; j < n; ++j) c_src[j] = me + j; /* block j (1 element) for member j */
    CHECK(pshmem_reducescatter(PSHMEM_TEAM_WORLD, PSHMEM_DT_INT32, PSHMEM_RED_SUM, c_dst, c_src,
                               1));
    EXPECT(c_dst[0] == n * (n - 1) / 2 + n * me, "reducescatter");
    EXPECT(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_FLOAT, PSHMEM_RED_XOR, c_dst, c_src, 1) ==
               PSHMEM_ERR_INVALID_ARG,
           "xor of floats refused");
    EXPECT(pshmem_reduce(PSHMEM_TEAM_WORLD, 99, PSHMEM_RED_SUM, c_dst, c_src, 1) ==
               PSHMEM_ERR_INVALID_ARG,
           "unknown type refused");
    CHECK(pshmem_free(c_dst));
    CHECK(pshmem_free(c_src));
    printf("OK collectives pe=%d\n", me);

    /* pointers and errors */
    EXPECT(pshmem_ptr(buf, me) == buf, "ptr to itself");
    EXPECT((pshmem_ptr(buf, next) != NULL) == direct, "ptr to a peer");
    EXPECT(pshmem_putmem(buf, src, 8, n) == PSHMEM_ERR_INVALID_ARG, "PE outside the job");
    EXPECT(strstr(pshmem_last_error(), "PE") != NULL, "the message names the PE");
    EXPECT(pshmem_putmem(src, src, 8, next) == PSHMEM_ERR_INVALID_ARG, "not symmetric");
    EXPECT(pshmem_signal_op(sig, 1, 77, next) == PSHMEM_ERR_INVALID_ARG, "bad signal op");
    /* A NULL local buffer with bytes to move is an error, not a SIGSEGV (issue 41, item 4);
     * with none it is a no-op. */
    EXPECT(pshmem_putmem(buf, NULL, 8, next) == PSHMEM_ERR_INVALID_ARG, "NULL source");
    EXPECT(strstr(pshmem_last_error(), "NULL") != NULL, "the message says NULL");
    EXPECT(pshmem_getmem(NULL, buf, 8, next) == PSHMEM_ERR_INVALID_ARG, "NULL destination");
    EXPECT(pshmem_putmem_nbi(buf, NULL, 8, next) == PSHMEM_ERR_INVALID_ARG, "NULL nbi source");
    EXPECT(pshmem_getmem_nbi(NULL, buf, 8, next) == PSHMEM_ERR_INVALID_ARG, "NULL nbi destination");
    EXPECT(pshmem_putmem_signal(buf, NULL, 8, sig, 1, PSHMEM_SIGNAL_SET, next) == PSHMEM_ERR_INVALID_ARG,
           "NULL put-with-signal source");
    EXPECT(pshmem_putmem(buf, NULL, 0, next) == PSHMEM_SUCCESS, "NULL and empty");
    EXPECT(pshmem_team_my_pe(12345) == -1, "no such team");
    EXPECT(pshmemx_buffer_register_symmetric(src, 8, 0) == PSHMEM_ERR_UNSUPPORTED, "unsupported");
    printf("OK errors pe=%d\n", me);

    CHECK(pshmem_free(a_src));
    CHECK(pshmem_free(a_dst));
    CHECK(pshmem_free(w32));
    CHECK(pshmem_free(ctr));
    CHECK(pshmem_free(sig));
    CHECK(pshmem_free(buf));
    CHECK(pshmem_finalize());
    EXPECT(pshmem_my_pe() == -1, "my_pe after finalize");
    printf("OK done pe=%d\n", me);
    return 0;
}
