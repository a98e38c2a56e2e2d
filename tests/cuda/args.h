/* The arguments of the GPU test kernels (ring_test.cu, device_test.cu), one struct per kernel,
 * passed by value as its one parameter. Plain C: the Rust launchers' mirrors
 * (tests/src/kargs.rs) are compared field by field with this header as the C compiler sees it
 * (src/probe.c). Pointers are device (or mapped host) addresses. */
#ifndef PSHMEM_TEST_ARGS_H
#define PSHMEM_TEST_ARGS_H

#include <stdint.h>
#include "pshmem/ring.h"

/* ---- ring_test.cu ---- */
typedef struct pshmem_ring_stress_args {
    pshmem_ring_device_t r;
    uint64_t per_warp;
    uint64_t *status; /* one word per warp */
} pshmem_ring_stress_args_t;

typedef struct pshmem_ring_roundtrip_args {
    pshmem_ring_device_t r;
    uint64_t iters;
    uint64_t *cycles; /* iters words */
    uint64_t *status; /* one word */
    uint32_t pe;
    uint32_t _pad;
} pshmem_ring_roundtrip_args_t;

typedef struct pshmem_ring_rate_args {
    pshmem_ring_device_t r;
    uint64_t per_warp;
    uint64_t *status; /* one word per warp */
    uint32_t pe;
    uint32_t _pad;
} pshmem_ring_rate_args_t;

typedef struct pshmem_mailbox_args {
    uint64_t *to_cpu;
    uint64_t *to_gpu;
    uint64_t iters;
    uint64_t *cycles; /* iters words */
} pshmem_mailbox_args_t;

/* ---- device_test.cu ---- */
typedef struct t_fill_args {
    unsigned char *buf;
    uint64_t n;
    uint64_t seed;
} t_fill_args_t;

typedef struct t_putget_args {
    char *dst;
    const char *src;
    uint64_t len;
    int32_t put;
    int32_t v; /* 0 thread, 1 thread nbi, 2 warp, 3 warp nbi, 4 block, 5 block nbi */
    int32_t pe;
    int32_t _pad;
} t_putget_args_t;

typedef struct t_pg_args {
    uint64_t *p64;
    int32_t *p32;
    char *p8;
    double *pd;
    float *pf;
    uint64_t *gout;
    const uint64_t *gsrc;
    int32_t n;
    int32_t pe;
    int32_t me;
    int32_t _pad;
} t_pg_args_t;

typedef struct t_put_signal_args {
    char *buf;
    const char *src;
    uint64_t msg;
    uint64_t *sig;
    uint64_t peer_seed;
    uint64_t *errors;
    int32_t k;
    int32_t pe;
    int32_t variant; /* 0 thread nbi, 1 block nbi, 2 thread blocking */
    int32_t _pad;
} t_put_signal_args_t;

typedef struct t_atomics_args {
    uint64_t *c64;
    uint32_t *c32;
    int32_t iters;
    int32_t _pad;
} t_atomics_args_t;

typedef struct t_amo_semantics_args {
    uint64_t *x64;
    uint32_t *x32;
    uint64_t *errors;
    int32_t pe;
    int32_t _pad;
} t_amo_semantics_args_t;

typedef struct t_barrier_args {
    uint64_t *word;
    uint64_t *errors;
    int32_t rounds;
    int32_t pe;
} t_barrier_args_t;

typedef struct t_wait_args {
    uint64_t *sig;
    uint64_t *out; /* two words: the value seen, the error word */
} t_wait_args_t;

#endif
