/* proxyshmem: the values that C, CUDA and Rust share. The Rust side is the crate pshmem-abi
 * (abi/src/lib.rs); its build compiles a probe of this header and tests compare every value.
 *
 * AMO and comparison codes are NVSHMEM's where NVSHMEM has them (NVSHMEM_CMP_* 0..5,
 * NVSHMEM_SIGNAL_SET = 9, NVSHMEM_SIGNAL_ADD = 10 in NVSHMEM 3.x), so the compatibility headers
 * pass them through unchanged; the AMO sub-operation codes are our ring's own. */
#ifndef PSHMEM_ABI_H
#define PSHMEM_ABI_H

#include <stdint.h>

#ifdef __cplusplus
#define PSHMEM_STATIC_ASSERT static_assert
#else
#define PSHMEM_STATIC_ASSERT _Static_assert
#endif

/* AMO sub-operations (a ring slot's sub field, low nibble); PSHMEM_AMO_WIDE marks 64-bit
 * operands. */
enum pshmem_amo_op {
    PSHMEM_AMO_FETCH_ADD = 1,
    PSHMEM_AMO_ADD = 2,
    PSHMEM_AMO_SWAP = 3,
    PSHMEM_AMO_COMPARE_SWAP = 4,
    PSHMEM_AMO_FETCH = 5,
    PSHMEM_AMO_SET = 6,
    PSHMEM_AMO_FETCH_AND = 7,
    PSHMEM_AMO_AND = 8,
    PSHMEM_AMO_FETCH_OR = 9,
    PSHMEM_AMO_OR = 10,
    PSHMEM_AMO_FETCH_XOR = 11,
    PSHMEM_AMO_XOR = 12
};
#define PSHMEM_AMO_WIDE 0x10u

/* Signal operations: what a signal does to its 64-bit word (NVSHMEM 3.x values). */
enum pshmem_signal_op { PSHMEM_SIGNAL_SET = 9, PSHMEM_SIGNAL_ADD = 10 };

/* Comparisons of waits (NVSHMEM_CMP_* values). */
enum pshmem_cmp {
    PSHMEM_CMP_EQ = 0,
    PSHMEM_CMP_NE = 1,
    PSHMEM_CMP_GT = 2,
    PSHMEM_CMP_LE = 3,
    PSHMEM_CMP_LT = 4,
    PSHMEM_CMP_GE = 5
};

/* Reduction operators of the collectives (reduce, reducescatter). The bitwise ones are for the
 * integer types. */
enum pshmem_red_op {
    PSHMEM_RED_SUM = 0,
    PSHMEM_RED_PROD = 1,
    PSHMEM_RED_MIN = 2,
    PSHMEM_RED_MAX = 3,
    PSHMEM_RED_AND = 4,
    PSHMEM_RED_OR = 5,
    PSHMEM_RED_XOR = 6
};

/* Element types of the reductions (the host and on-stream calls pass them to one kernel). */
enum pshmem_dtype {
    PSHMEM_DT_INT32 = 0,
    PSHMEM_DT_INT64 = 1,
    PSHMEM_DT_UINT64 = 2,
    PSHMEM_DT_FLOAT = 3,
    PSHMEM_DT_DOUBLE = 4,
    PSHMEM_DT_HALF = 5,
    PSHMEM_DT_BFLOAT16 = 6,
    PSHMEM_DT_UINT32 = 7
};

/* Error words: 0 while healthy, else (code << 32) | PE, PE = PSHMEM_ERROR_NO_PE when none is
 * concerned. The ring's error word (raised by the proxy) uses codes 1..15; device calls record
 * theirs (16 and up) in the device state's error word beside the ring's. */
#define PSHMEM_ERROR_PEER_DEAD 1u    /* a peer died (PE named) */
#define PSHMEM_ERROR_OP_FAILED 2u    /* an operation to the PE failed at the transport */
#define PSHMEM_ERROR_PROXY 3u        /* the proxy failed or shut down */
#define PSHMEM_ERROR_BAD_ADDRESS 16u /* address outside the heap; shared memory to the proxy */
#define PSHMEM_ERROR_NO_CELLS 17u    /* no free result cell for a ring fetch */
#define PSHMEM_ERROR_TIMEOUT 18u     /* a wait outlasted PSHMEM_OP_TIMEOUT */
#define PSHMEM_ERROR_NO_PE 0xffffffffu
#define PSHMEM_ERROR_WORD(code, pe) (((uint64_t)(code) << 32) | (uint32_t)(pe))
#define PSHMEM_ERROR_CODE(e) ((uint32_t)((uint64_t)(e) >> 32))
#define PSHMEM_ERROR_PE(e) ((uint32_t)(e))

#endif /* PSHMEM_ABI_H */
