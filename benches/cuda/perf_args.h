/* The arguments of pshmem-perf's device-initiated kernels (perf.cu), one struct per kernel,
 * passed by value as its one parameter. Plain C: the Rust launchers' mirrors
 * (benches/src/kargs.rs) are compared field by field with this header as the C compiler sees
 * it (src/probe.c). */
#ifndef PSHMEM_PERF_ARGS_H
#define PSHMEM_PERF_ARGS_H

#include <stdint.h>

typedef struct perf_bw_args {
    char *dst;
    const char *src;
    uint64_t size;
    int32_t reps;
    int32_t pe;
    int32_t get;
    int32_t _pad;
} perf_bw_args_t;

typedef struct perf_p_pingpong_args {
    uint64_t *flag;
    uint64_t base;
    uint64_t *ns;
    int32_t iters;
    int32_t me;
} perf_p_pingpong_args_t;

typedef struct perf_amo_args {
    uint64_t *word;
    uint64_t *ns;
    int32_t iters;
    int32_t pe;
} perf_amo_args_t;

typedef struct perf_msg_rate_args {
    uint64_t *dst;
    int32_t per_thread;
    int32_t pe;
} perf_msg_rate_args_t;

typedef struct perf_barrier_args {
    uint64_t *ns;
    int32_t iters;
    int32_t _pad;
} perf_barrier_args_t;

typedef struct perf_spin_args {
    uint64_t ns;
} perf_spin_args_t;

typedef struct perf_coll_args {
    char *dest;
    const char *src;
    uint64_t n;
    uint64_t *ns;
    int32_t kind; /* 0 sync, 1 broadcast, 2 fcollect, 3 alltoall, 4 reduce, 5 reducescatter */
    int32_t iters;
} perf_coll_args_t;

#endif
