/* Reports the C layout of kernels/include/pshmem/ring.h to the Rust test that compares it with
 * gpu-queue/src/layout.rs (the header's own static asserts also run here, on every build). */
#include <stddef.h>
#include "pshmem/ring.h"

/* Sizes, offsets and constants, in a fixed order the Rust test knows. */
static const unsigned long long probe[] = {
    sizeof(pshmem_slot_t),
    offsetof(pshmem_slot_t, a),
    offsetof(pshmem_slot_t, b),
    offsetof(pshmem_slot_t, c),
    offsetof(pshmem_slot_t, pe),
    offsetof(pshmem_slot_t, ctrl),
    sizeof(pshmem_ring_ctrl_t),
    offsetof(pshmem_ring_ctrl_t, head),
    offsetof(pshmem_ring_ctrl_t, tail),
    offsetof(pshmem_ring_ctrl_t, completed),
    offsetof(pshmem_ring_ctrl_t, error),
    PSHMEM_OP_PUT, PSHMEM_OP_GET, PSHMEM_OP_P, PSHMEM_OP_AMO, PSHMEM_OP_SIGNAL,
    PSHMEM_OP_PUT_SIGNAL, PSHMEM_OP_FENCE,
    PSHMEM_AMO_FETCH_ADD, PSHMEM_AMO_ADD, PSHMEM_AMO_SWAP, PSHMEM_AMO_COMPARE_SWAP,
    PSHMEM_AMO_FETCH, PSHMEM_AMO_SET, PSHMEM_AMO_WIDE,
    PSHMEM_SIGNAL_SET, PSHMEM_SIGNAL_ADD,
    PSHMEM_FLAG_RAW_LOCAL,
    PSHMEM_CTRL_MAKE(PSHMEM_OP_PUT_SIGNAL, PSHMEM_FLAG_RAW_LOCAL, PSHMEM_SIGNAL_ADD, 2),
    PSHMEM_CTRL_COMMIT,
    PSHMEM_RING_COMMIT_BIT(5, 4),
    PSHMEM_RING_COMMIT_BIT(9, 4),
    PSHMEM_RING_MAX_SLOTS,
    PSHMEM_RING_ERROR_PEER_DEAD, PSHMEM_RING_ERROR_OP_FAILED, PSHMEM_RING_ERROR_PROXY,
};

const unsigned long long *pshmem_ring_layout_probe(size_t *n) {
    *n = sizeof(probe) / sizeof(probe[0]);
    return probe;
}
