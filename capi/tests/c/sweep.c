/* Every call of the C API (pshmem.h) with bad arguments, before init, during the job and after
 * finalize, run on several PEs by tests/capi.rs (issue 41's sweep): each must return its typed
 * error code (or NULL / -1 where the call returns a pointer or a number) with a message naming
 * what is wrong, and none may crash or hang. Prints one BAD line per call that does not, and
 * `SWEEP phase=... calls=N refused=N` per phase. Usage: sweep (no arguments). Built without a
 * GPU in mind: the GPU calls must refuse with PSHMEM_ERR_CUDA (PSHMEM_DISABLE_CUDA=1) or say
 * that the GPU path was not started. */
#include <pshmem/pshmem.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int calls, refused;

/* The message contains `word` (case-sensitive; "" accepts any non-empty message). */
static int names(const char *word) {
    const char *m = pshmem_last_error();
    return m != NULL && m[0] != '\0' && strstr(m, word) != NULL;
}

static void verdict(int ok, const char *what, long got) {
    ++calls;
    if (ok)
        ++refused;
    else
        printf("BAD %s got=%ld msg=%s\n", what, got, pshmem_last_error());
}

/* An int-returning call that must fail with `code`, naming `word`. */
#define RC(call, code, word)                                                                 \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        verdict(rc_ == (code) && names(word), #call, rc_);                                   \
    } while (0)

/* A pointer-returning call that must return NULL, naming `word`. */
#define NUL(call, word)                                                                      \
    do {                                                                                     \
        void *p_ = (void *)(call);                                                           \
        verdict(p_ == NULL && names(word), #call, (long)(uintptr_t)p_);                      \
    } while (0)

/* A number-returning call that must return -1, naming `word`. */
#define NEG(call, word)                                                                      \
    do {                                                                                     \
        int v_ = (call);                                                                     \
        verdict(v_ == -1 && names(word), #call, v_);                                         \
    } while (0)

static void phase_done(const char *phase) {
    printf("SWEEP phase=%s calls=%d refused=%d\n", phase, calls, refused);
    calls = refused = 0;
}

/* Every call that needs a running job, with harmless arguments: each must say the job is not
 * running (`word`). */
static void without_a_job(const char *word, uint64_t *sym) {
    const int E = PSHMEM_ERR_NOT_INITIALIZED;
    uint64_t local[2] = {0, 0}, v = 0;
    uint32_t v32 = 0;
    pshmem_team_t t = PSHMEM_TEAM_INVALID, t2 = PSHMEM_TEAM_INVALID;
    NEG(pshmem_my_pe(), word);
    NEG(pshmem_n_pes(), word);
    NEG(pshmem_team_my_pe(PSHMEM_TEAM_WORLD), word);
    NEG(pshmem_team_n_pes(PSHMEM_TEAM_WORLD), word);
    NEG(pshmem_team_translate_pe(PSHMEM_TEAM_WORLD, 0, PSHMEM_TEAM_WORLD), word);
    RC(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, 0, 1, 1, &t), E, word);
    RC(pshmem_team_split_2d(PSHMEM_TEAM_WORLD, 1, &t, &t2), E, word);
    RC(pshmem_team_destroy(4), E, word);
    RC(pshmem_team_sync(PSHMEM_TEAM_WORLD), E, word);
    RC(pshmem_team_barrier(PSHMEM_TEAM_WORLD), E, word);
    NUL(pshmem_malloc(8), word);
    NUL(pshmem_calloc(1, 8), word);
    NUL(pshmem_align(64, 8), word);
    RC(pshmem_free(sym), E, word);
    NUL(pshmem_ptr(sym, 0), word);
    RC(pshmemx_gpu_init(0), E, word);
    NUL(pshmemx_gpu_malloc(8), word);
    NUL(pshmemx_gpu_calloc(1, 8), word);
    NUL(pshmemx_gpu_align(64, 8), word);
    RC(pshmemx_gpu_free(sym), E, word);
    RC(pshmem_putmem(sym, local, 8, 0), E, word);
    RC(pshmem_getmem(local, sym, 8, 0), E, word);
    RC(pshmem_putmem_nbi(sym, local, 8, 0), E, word);
    RC(pshmem_getmem_nbi(local, sym, 8, 0), E, word);
    RC(pshmem_putmem_signal(sym, local, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, 0), E, word);
    RC(pshmem_putmem_signal_nbi(sym, local, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, 0), E, word);
    RC(pshmem_signal_op(sym, 1, PSHMEM_SIGNAL_ADD, 0), E, word);
    RC(pshmem_signal_fetch(sym, &v), E, word);
    RC(pshmem_signal_wait_until(sym, PSHMEM_CMP_GE, 0, &v), E, word);
    RC(pshmem_uint64_wait_until(sym, PSHMEM_CMP_GE, 0, &v), E, word);
    RC(pshmem_uint32_wait_until((uint32_t *)sym, PSHMEM_CMP_GE, 0, &v32), E, word);
    RC(pshmem_atomic64(PSHMEM_AMO_ADD, sym, 1, 0, 0, NULL), E, word);
    RC(pshmem_atomic32(PSHMEM_AMO_ADD, (uint32_t *)sym, 1, 0, 0, NULL), E, word);
    RC(pshmem_quiet(), E, word);
    RC(pshmem_fence(), E, word);
    RC(pshmem_barrier_all(), E, word);
    RC(pshmem_sync_all(), E, word);
    RC(pshmem_broadcastmem(PSHMEM_TEAM_WORLD, sym, sym + 1, 8, 0), E, word);
    RC(pshmem_fcollectmem(PSHMEM_TEAM_WORLD, sym, sym + 1, 8), E, word);
    RC(pshmem_alltoallmem(PSHMEM_TEAM_WORLD, sym, sym + 1, 8), E, word);
    RC(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym, sym + 1, 1), E,
       word);
    RC(pshmem_reducescatter(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym, sym + 1, 1),
       E, word);
    RC(pshmemx_quiet_on_stream(NULL), E, word);
    RC(pshmemx_barrier_all_on_stream(NULL), E, word);
    RC(pshmemx_sync_all_on_stream(NULL), E, word);
    RC(pshmemx_team_sync_on_stream(PSHMEM_TEAM_WORLD, NULL), E, word);
    RC(pshmemx_barrier_on_stream(PSHMEM_TEAM_WORLD, NULL), E, word);
    RC(pshmemx_putmem_on_stream(sym, local, 8, 0, NULL), E, word);
    RC(pshmemx_getmem_on_stream(local, sym, 8, 0, NULL), E, word);
    RC(pshmemx_putmem_nbi_on_stream(sym, local, 8, 0, NULL), E, word);
    RC(pshmemx_getmem_nbi_on_stream(local, sym, 8, 0, NULL), E, word);
    RC(pshmemx_putmem_signal_on_stream(sym, local, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, 0, NULL), E,
       word);
    RC(pshmemx_signal_op_on_stream(sym, 1, PSHMEM_SIGNAL_SET, 0, NULL), E, word);
    RC(pshmemx_alltoallmem_on_stream(PSHMEM_TEAM_WORLD, sym, sym + 1, 8, NULL), E, word);
    RC(pshmemx_broadcastmem_on_stream(PSHMEM_TEAM_WORLD, sym, sym + 1, 8, 0, NULL), E, word);
    RC(pshmemx_fcollectmem_on_stream(PSHMEM_TEAM_WORLD, sym, sym + 1, 8, NULL), E, word);
    RC(pshmemx_reduce_on_stream(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym, sym + 1,
                                1, NULL),
       E, word);
    RC(pshmemx_reducescatter_on_stream(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym,
                                       sym + 1, 1, NULL),
       E, word);
    RC(pshmemx_cumodule_init(local), E, word);
    RC(pshmemx_cumodule_finalize(local), E, word);
    RC(pshmemx_culibrary_init(local), E, word);
    RC(pshmemx_culibrary_finalize(local), E, word);
    RC(pshmem_finalize(), E, word);
}

/* Bad starts: each refused at once, leaving nothing behind (init still works afterwards). */
static void bad_starts(void) {
    const int A = PSHMEM_ERR_INVALID_ARG;
    pshmem_uniqueid_t id;
    int provided = -1;
    memset(&id, 0, sizeof id);
    RC(pshmem_init_thread(PSHMEM_THREAD_MULTIPLE + 1, &provided), A, "thread level");
    RC(pshmem_init_thread(-1, &provided), A, "thread level");
    RC(pshmemx_init_flags(0x80u), A, "flags");
    RC(pshmem_uniqueid_get(NULL), A, "NULL");
    RC(pshmem_init_uniqueid(NULL, 0, 2), A, "NULL");
    RC(pshmem_init_uniqueid(&id, 2, 2), A, "rank");
    RC(pshmem_init_uniqueid(&id, -1, 2), A, "rank");
    RC(pshmem_init_uniqueid(&id, 0, 0), A, "nranks");
    RC(pshmemx_init_uniqueid(&id, 0, 2, 0x80u), A, "flags");
    RC(pshmemx_init_mpi_comm(NULL, 0x80u), A, "flags");
    /* NULL is MPI_COMM_WORLD; this program has no MPI. */
    RC(pshmemx_init_mpi_comm(NULL, 0), PSHMEM_ERR_UNSUPPORTED, "MPI");
    ++calls;
    if (pshmem_init_status() == 0)
        ++refused;
    else
        printf("BAD init_status after bad starts: %d\n", pshmem_init_status());
}

int main(void) {
    /* A static word stands in for a symmetric address where there is no job. */
    static uint64_t not_symmetric[4];
    bad_starts();
    phase_done("bad-init");
    without_a_job("not initialized", not_symmetric);
    phase_done("before-init");

    if (pshmem_init() != PSHMEM_SUCCESS) {
        printf("ERR init: %s\n", pshmem_last_error());
        return 1;
    }
    const int A = PSHMEM_ERR_INVALID_ARG;
    int me = pshmem_my_pe(), n = pshmem_n_pes(), next = (me + 1) % n;
    uint64_t *sym = (uint64_t *)pshmem_calloc(16, sizeof(uint64_t));
    uint64_t local[16] = {0}, v = 0;
    uint32_t v32 = 0;
    pshmem_team_t t = PSHMEM_TEAM_INVALID, t2 = PSHMEM_TEAM_INVALID;
    if (sym == NULL) {
        printf("ERR calloc: %s\n", pshmem_last_error());
        return 1;
    }

    /* PEs, teams and memory. */
    NEG(pshmem_team_my_pe(77), "team");
    NEG(pshmem_team_n_pes(-5), "team");
    NEG(pshmem_team_translate_pe(PSHMEM_TEAM_WORLD, n, PSHMEM_TEAM_WORLD), "PE");
    NEG(pshmem_team_translate_pe(PSHMEM_TEAM_WORLD, -1, PSHMEM_TEAM_WORLD), "PE");
    NEG(pshmem_team_translate_pe(88, 0, PSHMEM_TEAM_WORLD), "team");
    RC(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, 0, 1, n, NULL), A, "NULL");
    RC(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, n, 1, 1, &t), A, "start");
    RC(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, -1, 1, 1, &t), A, "start");
    RC(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, 0, 1, n + 1, &t), A, "size");
    RC(pshmem_team_split_strided(PSHMEM_TEAM_WORLD, 0, 0, 2, &t), A, "stride");
    RC(pshmem_team_split_strided(99, 0, 1, 1, &t), A, "team");
    RC(pshmem_team_split_2d(PSHMEM_TEAM_WORLD, 0, &t, &t2), A, "xrange");
    RC(pshmem_team_split_2d(PSHMEM_TEAM_WORLD, 1, NULL, &t2), A, "NULL");
    RC(pshmem_team_split_2d(99, 1, &t, &t2), A, "team");
    RC(pshmem_team_destroy(PSHMEM_TEAM_WORLD), A, "team");
    RC(pshmem_team_destroy(12345), A, "team");
    RC(pshmem_team_sync(12345), A, "team");
    RC(pshmem_team_barrier(-7), A, "team");
    NUL(pshmem_malloc((size_t)1 << 62), "heap");
    NUL(pshmem_calloc(SIZE_MAX / 2, 4), "overflow");
    NUL(pshmem_align(48, 8), "align");
    NUL(pshmem_align(0, 8), "align");
    RC(pshmem_free(local), A, "heap");
    RC(pshmem_free((char *)sym + 8), A, "allocation");
    NUL(pshmem_ptr(sym, n), "PE");
    NUL(pshmem_ptr(local, me), "heap");

    /* The GPU path without a GPU. */
    RC(pshmemx_gpu_init(0), PSHMEM_ERR_CUDA, "");
    NUL(pshmemx_gpu_malloc(8), "gpu_init");
    NUL(pshmemx_gpu_calloc(1, 8), "gpu_init");
    NUL(pshmemx_gpu_align(64, 8), "gpu_init");
    RC(pshmemx_gpu_free(sym), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_cumodule_init(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_cumodule_finalize(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_culibrary_init(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_culibrary_finalize(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_quiet_on_stream(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_barrier_all_on_stream(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_sync_all_on_stream(NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_team_sync_on_stream(PSHMEM_TEAM_WORLD, NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_barrier_on_stream(PSHMEM_TEAM_WORLD, NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_putmem_on_stream(sym, local, 8, next, NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_getmem_on_stream(local, sym, 8, next, NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_putmem_nbi_on_stream(sym, local, 8, next, NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_getmem_nbi_on_stream(local, sym, 8, next, NULL), PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_putmem_signal_on_stream(sym, local, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, next, NULL),
       PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_signal_op_on_stream(sym, 1, PSHMEM_SIGNAL_SET, next, NULL), PSHMEM_ERR_CUDA,
       "gpu_init");
    RC(pshmemx_alltoallmem_on_stream(PSHMEM_TEAM_WORLD, sym, sym + 8, 8, NULL), PSHMEM_ERR_CUDA,
       "gpu_init");
    RC(pshmemx_broadcastmem_on_stream(PSHMEM_TEAM_WORLD, sym, sym + 8, 8, 0, NULL),
       PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_fcollectmem_on_stream(PSHMEM_TEAM_WORLD, sym, sym + 8, 8, NULL), PSHMEM_ERR_CUDA,
       "gpu_init");
    RC(pshmemx_reduce_on_stream(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym, sym + 8,
                                1, NULL),
       PSHMEM_ERR_CUDA, "gpu_init");
    RC(pshmemx_reducescatter_on_stream(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym,
                                       sym + 8, 1, NULL),
       PSHMEM_ERR_CUDA, "gpu_init");

    /* RMA, signals and atomics: a PE outside the job, an address outside the heap, a range
     * past its end, a NULL buffer, an unknown operation or comparison, a misaligned word. */
    char *end = (char *)sym + 64; /* a range running far past the heap's end */
    size_t huge = (size_t)1 << 40;
    RC(pshmem_putmem(sym, local, 8, n), A, "PE");
    RC(pshmem_putmem(sym, local, 8, -1), A, "PE");
    RC(pshmem_putmem(local, local, 8, next), A, "symmetric");
    RC(pshmem_putmem(end, local, huge, next), A, "range");
    RC(pshmem_putmem(sym, NULL, 8, next), A, "NULL");
    RC(pshmem_getmem(local, sym, 8, n), A, "PE");
    RC(pshmem_getmem(local, local, 8, next), A, "symmetric");
    RC(pshmem_getmem(local, end, huge, next), A, "range");
    RC(pshmem_getmem(NULL, sym, 8, next), A, "NULL");
    RC(pshmem_putmem_nbi(sym, local, 8, n), A, "PE");
    RC(pshmem_putmem_nbi(local, local, 8, next), A, "symmetric");
    RC(pshmem_putmem_nbi(sym, NULL, 8, next), A, "NULL");
    RC(pshmem_getmem_nbi(local, sym, 8, -3), A, "PE");
    RC(pshmem_getmem_nbi(local, local, 8, next), A, "symmetric");
    RC(pshmem_getmem_nbi(NULL, sym, 8, next), A, "NULL");
    RC(pshmem_putmem_signal(sym, local, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, n), A, "PE");
    RC(pshmem_putmem_signal(sym, local, 8, local + 1, 1, PSHMEM_SIGNAL_SET, next), A, "symmetric");
    RC(pshmem_putmem_signal(sym, local, 8, sym + 1, 1, 42, next), A, "signal op");
    RC(pshmem_putmem_signal(sym, local, 8, (uint64_t *)((char *)sym + 12), 1, PSHMEM_SIGNAL_SET,
                            next),
       A, "align");
    RC(pshmem_putmem_signal(sym, NULL, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, next), A, "NULL");
    RC(pshmem_putmem_signal_nbi(sym, local, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, n), A, "PE");
    RC(pshmem_putmem_signal_nbi(sym, local, 8, sym + 1, 1, -1, next), A, "signal op");
    RC(pshmem_putmem_signal_nbi(sym, NULL, 8, sym + 1, 1, PSHMEM_SIGNAL_SET, next), A, "NULL");
    RC(pshmem_signal_op(sym, 1, 77, next), A, "signal op");
    RC(pshmem_signal_op(sym, 1, PSHMEM_SIGNAL_SET, n), A, "PE");
    RC(pshmem_signal_op(local, 1, PSHMEM_SIGNAL_SET, next), A, "symmetric");
    RC(pshmem_signal_fetch(local, &v), A, "symmetric");
    RC(pshmem_signal_fetch(sym, NULL), A, "NULL");
    RC(pshmem_signal_wait_until(sym, 99, 0, &v), A, "comparison");
    RC(pshmem_signal_wait_until(local, PSHMEM_CMP_GE, 0, &v), A, "symmetric");
    RC(pshmem_uint64_wait_until(sym, -2, 0, &v), A, "comparison");
    RC(pshmem_uint64_wait_until(local, PSHMEM_CMP_EQ, 0, &v), A, "symmetric");
    RC(pshmem_uint32_wait_until((uint32_t *)sym, 99, 0, &v32), A, "comparison");
    RC(pshmem_uint32_wait_until((uint32_t *)((char *)sym + 2), PSHMEM_CMP_EQ, 0, &v32), A, "align");
    RC(pshmem_atomic64(1234, sym, 1, 0, next, NULL), A, "op");
    RC(pshmem_atomic64(PSHMEM_AMO_ADD, sym, 1, 0, n, NULL), A, "PE");
    RC(pshmem_atomic64(PSHMEM_AMO_ADD, local, 1, 0, next, NULL), A, "symmetric");
    RC(pshmem_atomic64(PSHMEM_AMO_ADD, (uint64_t *)((char *)sym + 4), 1, 0, next, NULL), A,
       "align");
    RC(pshmem_atomic32(-1, (uint32_t *)sym, 1, 0, next, NULL), A, "op");
    RC(pshmem_atomic32(PSHMEM_AMO_ADD, (uint32_t *)sym, 1, 0, -1, NULL), A, "PE");
    RC(pshmem_atomic32(PSHMEM_AMO_ADD, (uint32_t *)((char *)sym + 2), 1, 0, next, NULL), A,
       "align");

    /* Collectives, called alike on every PE (so a check that needed the others could not
     * hang): each is refused on every PE. */
    RC(pshmem_broadcastmem(12345, sym, sym + 8, 8, 0), A, "team");
    RC(pshmem_broadcastmem(PSHMEM_TEAM_WORLD, sym, sym + 8, 8, n), A, "root");
    RC(pshmem_broadcastmem(PSHMEM_TEAM_WORLD, local, sym + 8, 8, 0), A, "symmetric");
    RC(pshmem_fcollectmem(PSHMEM_TEAM_WORLD, sym, local, 8), A, "symmetric");
    RC(pshmem_fcollectmem(PSHMEM_TEAM_WORLD, end, sym, huge), A, "range");
    RC(pshmem_alltoallmem(-9, sym, sym + 8, 8), A, "team");
    RC(pshmem_alltoallmem(PSHMEM_TEAM_WORLD, local, sym + 8, 8), A, "symmetric");
    RC(pshmem_reduce(PSHMEM_TEAM_WORLD, 99, PSHMEM_RED_SUM, sym, sym + 8, 1), A, "type");
    RC(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, 99, sym, sym + 8, 1), A, "op");
    RC(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_FLOAT, PSHMEM_RED_XOR, sym, sym + 8, 1), A,
       "xor");
    RC(pshmem_reduce(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, local, sym + 8, 1), A,
       "symmetric");
    RC(pshmem_reduce(31, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym, sym + 8, 1), A, "team");
    RC(pshmem_reducescatter(PSHMEM_TEAM_WORLD, 99, PSHMEM_RED_SUM, sym, sym + 8, 1), A, "type");
    RC(pshmem_reducescatter(PSHMEM_TEAM_WORLD, PSHMEM_DT_UINT64, PSHMEM_RED_SUM, sym, local, 1),
       A, "symmetric");
    RC(pshmemx_buffer_register_symmetric(local, 8, 0), PSHMEM_ERR_UNSUPPORTED, "");
    RC(pshmemx_buffer_unregister_symmetric(local, 8), PSHMEM_ERR_UNSUPPORTED, "");
    phase_done("running");

    /* The job still works after all of that. */
    local[0] = 1000 + (uint64_t)me;
    if (pshmem_putmem(sym, local, 8, next) != PSHMEM_SUCCESS || pshmem_barrier_all() != 0 ||
        sym[0] != 1000 + (uint64_t)((me + n - 1) % n)) {
        printf("ERR the job after the sweep: %s\n", pshmem_last_error());
        return 1;
    }
    printf("OK job after sweep pe=%d\n", me);
    if (pshmem_finalize() != PSHMEM_SUCCESS) {
        printf("ERR finalize: %s\n", pshmem_last_error());
        return 1;
    }
    /* After finalize the C API is as before init (a later pshmem_init starts a new job). */
    without_a_job("not initialized", sym);
    phase_done("after-finalize");
    printf("OK done\n");
    return 0;
}
