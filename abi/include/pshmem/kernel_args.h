/* proxyshmem: the arguments of the runtime's own kernels (kernels/cuda/runtime.cu), one struct
 * per kernel, passed by value as its one parameter. Plain C, shared with the host: the Rust
 * launcher's mirrors (runtime/src/gpu/kargs.rs) are compared field by field with this header as
 * the C compiler sees it (pshmem-abi-probe), and a kernel whose parameter does not have its
 * struct's size is refused when it is loaded. Pointers are device (or mapped host) addresses;
 * padding is written out so both sides agree on every byte. */
#ifndef PSHMEM_KERNEL_ARGS_H
#define PSHMEM_KERNEL_ARGS_H

#include <stdint.h>
#include "pshmem/abi.h"

/* pshmem_k_amo: one AMO that a proxy applies to its GPU's memory for a remote initiator. */
typedef struct pshmem_k_amo_args {
    uint64_t addr;     /* device address of the word */
    uint64_t operand;
    uint64_t compare;
    uint64_t *result;  /* pinned host cell for the old value */
    uint32_t sub;      /* PSHMEM_AMO_* | PSHMEM_AMO_WIDE */
    uint32_t _pad;
} pshmem_k_amo_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_amo_args_t) == 40, "pshmem_k_amo_args_t is 40 bytes");

/* pshmem_k_rma: a host put (put != 0) or get of n bytes with pe; nbi: complete at a later quiet. */
typedef struct pshmem_k_rma_args {
    void *dest;
    const void *src;
    uint64_t n;
    int32_t pe;
    int32_t put;
    int32_t nbi;
    int32_t _pad;
} pshmem_k_rma_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_rma_args_t) == 40, "pshmem_k_rma_args_t is 40 bytes");

/* pshmem_k_put_signal: a host put-with-signal. */
typedef struct pshmem_k_put_signal_args {
    void *dest;
    const void *src;
    uint64_t n;
    uint64_t *sig;
    uint64_t value;
    int32_t op;        /* PSHMEM_SIGNAL_* */
    int32_t pe;
    int32_t nbi;
    int32_t _pad;
} pshmem_k_put_signal_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_put_signal_args_t) == 56,
                     "pshmem_k_put_signal_args_t is 56 bytes");

/* pshmem_k_signal_op: a host signal update (complete at quiet). */
typedef struct pshmem_k_signal_op_args {
    uint64_t *sig;
    uint64_t value;
    int32_t op;
    int32_t pe;
} pshmem_k_signal_op_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_signal_op_args_t) == 24,
                     "pshmem_k_signal_op_args_t is 24 bytes");

/* pshmem_k_signal_wait: a stream waits until *sig cmp value; with reset, the word is then set
 * to `to`. */
typedef struct pshmem_k_signal_wait_args {
    uint64_t *sig;
    uint64_t value;
    uint64_t to;
    int32_t cmp;       /* PSHMEM_CMP_* */
    int32_t reset;
} pshmem_k_signal_wait_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_signal_wait_args_t) == 32,
                     "pshmem_k_signal_wait_args_t is 32 bytes");

/* pshmem_k_host_amo: an AMO of the host on pe's word at dest; the old value to *result. */
typedef struct pshmem_k_host_amo_args {
    void *dest;
    uint64_t operand;
    uint64_t compare;
    uint64_t *result;  /* pinned host cell */
    uint32_t sub;      /* PSHMEM_AMO_* | PSHMEM_AMO_WIDE */
    int32_t pe;
} pshmem_k_host_amo_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_host_amo_args_t) == 40,
                     "pshmem_k_host_amo_args_t is 40 bytes");

/* pshmem_k_team_sync: a team's sync, or (barrier != 0) its barrier. */
typedef struct pshmem_k_team_sync_args {
    int32_t team;
    int32_t barrier;
} pshmem_k_team_sync_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_team_sync_args_t) == 8,
                     "pshmem_k_team_sync_args_t is 8 bytes");

/* pshmem_k_coll and pshmem_k_coll_wide: a collective of the host or on a stream. kind 0
 * broadcast (n bytes, arg the root), 1 fcollect, 2 alltoall (n bytes), 3 reduce and
 * 4 reducescatter (n elements of dtype, arg the operator). */
typedef struct pshmem_k_coll_args {
    void *dest;
    const void *src;
    uint64_t n;
    int32_t kind;
    int32_t team;
    int32_t arg;
    int32_t dtype;     /* PSHMEM_DT_* */
} pshmem_k_coll_args_t;
PSHMEM_STATIC_ASSERT(sizeof(pshmem_k_coll_args_t) == 40, "pshmem_k_coll_args_t is 40 bytes");

#endif
