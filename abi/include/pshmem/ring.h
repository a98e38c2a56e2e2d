/* proxyshmem command ring: the layout shared by GPU producers (device code), CPU producers and
 * the proxy. Rust mirror: ring/src/layout.rs. pshmem-abi's build compiles this header with
 * the host C compiler and a test compares every size, offset and constant with the Rust side.
 *
 * A ring is `capacity` (a power of two) 32-byte slots in host memory that the GPU can write
 * (pinned, DEVICEMAP|PORTABLE), plus a control block in host memory. An operation takes 1 or 2
 * consecutive slots (PSHMEM_RING_MAX_SLOTS).
 *
 * One operation takes eight steps, numbered alike in docs/PROTOCOLS.md, ring/src/ring.rs and
 * pshmem/ring_device.cuh.
 *
 * Producer (any CPU thread, or any GPU thread):
 *   1. reserve    idx = atomic fetch-add(head, nslots)        GPU: head lives in device memory
 *   2. room       while idx + nslots - tail_cache > capacity: re-read ctrl->tail (ACQUIRE) into
 *                 tail_cache, and watch ctrl->error            (GPU: tail_cache in device memory)
 *   3. write      a, b, c, pe of every slot, and ctrl of      plain (weak / relaxed) stores
 *                 every continuation slot
 *   4. publish    ctrl of the first slot with RELEASE          st.release.sys on the GPU; the
 *                 (op | flags | sub | nslots | commit bit)     release orders every store of
 *                                                              step 3 before it
 * Consumer (the proxy), at position p:
 *   5. consume    load the first slot's ctrl with ACQUIRE; when its commit bit equals
 *                 PSHMEM_RING_COMMIT_BIT(p), every store of steps 3 and 4 is visible (the
 *                 release/acquire pair); copy the operation out (each continuation slot's
 *                 commit bit must match its own index too)
 *   6. hand back  store ctrl->tail (RELEASE) in batches: slots below tail may be overwritten
 *                 (a producer's step 2 acquires it)
 *   7. complete   as operations finish (out of order), store ctrl->completed (RELEASE) = the
 *                 lowest index not yet finished
 * Waiter:
 *   8. quiet      read the head, then wait until ctrl->completed (ACQUIRE) >= it
 *
 * commit bit of index i = PSHMEM_RING_COMMIT_BIT(i, capacity): set on even laps, clear on odd
 * ones, so zeroed memory is never mistaken for a slot and no slot ever needs clearing.
 * A nonzero ctrl->error (an error word, see pshmem/abi.h) ends the waits of steps 2 and 8.
 * No GPU atomic ever touches host memory: the GPU producer's atomics (the fetch-add of step 1,
 * the atomicMax on tail_cache of step 2) are on device memory.
 */
#ifndef PSHMEM_RING_H
#define PSHMEM_RING_H

#include <stdint.h>
#include "pshmem/abi.h"

/* Operations (ctrl bits 0..7). Offsets are byte offsets into the symmetric heap. */
enum pshmem_ring_op {
    PSHMEM_OP_NOP = 0,
    PSHMEM_OP_PUT = 1,        /* a = remote offset, b = local source, c = bytes */
    PSHMEM_OP_GET = 2,        /* a = remote offset, b = local destination, c = bytes */
    PSHMEM_OP_P = 3,          /* a = remote offset, b = value (inline), c = bytes (1, 2, 4, 8) */
    PSHMEM_OP_AMO = 4,        /* a = remote offset, b = operand, c = compare;
                                 slot 2: a = address of the 8-byte result (0: none) */
    PSHMEM_OP_SIGNAL = 5,     /* a = signal offset, b = value; sub = signal op */
    PSHMEM_OP_PUT_SIGNAL = 6, /* as PUT; slot 2: a = signal offset, b = value; sub = signal op */
    PSHMEM_OP_FENCE = 7,      /* later operations to a PE land after earlier ones to that PE */
    PSHMEM_OP_PUT_COUNTED = 8,   /* as PUT; slot 2: a = offset of the signal word it counts for */
    PSHMEM_OP_SIGNAL_COUNTED = 9 /* as SIGNAL, applied at the target only after every
                                    PUT_COUNTED for this signal word, published before it on
                                    this ring to this PE, has landed (no ordering assumed) */
};

/* AMO sub-operations and signal operations: pshmem/abi.h. */

/* Flags (ctrl bits 8..15). */
#define PSHMEM_FLAG_RAW_LOCAL 0x01u /* b is an address in the producer's process (not a heap
                                       offset): the proxy stages it through registered memory */

/* ctrl packing: op 0..7, flags 8..15, sub 16..23, nslots - 1 in 24..27, commit bit 31. */
#define PSHMEM_CTRL_OP(ctrl)     ((ctrl) & 0xffu)
#define PSHMEM_CTRL_FLAGS(ctrl)  (((ctrl) >> 8) & 0xffu)
#define PSHMEM_CTRL_SUB(ctrl)    (((ctrl) >> 16) & 0xffu)
#define PSHMEM_CTRL_NSLOTS(ctrl) ((((ctrl) >> 24) & 0xfu) + 1u)
#define PSHMEM_CTRL_COMMIT       0x80000000u
#define PSHMEM_CTRL_MAKE(op, flags, sub, nslots) \
    ((uint32_t)(op) | ((uint32_t)(flags) << 8) | ((uint32_t)(sub) << 16) | (((uint32_t)(nslots) - 1u) << 24))
#define PSHMEM_RING_MAX_SLOTS 2u

/* The commit bit that marks slot index `index` as written on its lap. */
#define PSHMEM_RING_COMMIT_BIT(index, capacity) \
    ((((uint64_t)(index) / (uint64_t)(capacity)) & 1u) ? 0u : PSHMEM_CTRL_COMMIT)

/* ctrl->error: 0 while healthy, else an error word (pshmem/abi.h, PSHMEM_ERROR_*). */

typedef struct pshmem_slot {
    uint64_t a;
    uint64_t b;
    uint64_t c;
    uint32_t pe;
    uint32_t ctrl; /* the first slot's: written last, with release; carries the commit bit */
} pshmem_slot_t;

/* The ring's control block (host memory). Each word on its own 64-byte line, so that the
 * producers' head, the consumer's tail and the completion counter never share a line. */
typedef struct pshmem_ring_ctrl {
    uint64_t head;      /* CPU producers' reservation counter (GPU producers keep theirs on the GPU) */
    uint64_t _pad0[7];
    uint64_t tail;      /* consumer: slots below this index may be reused (release, in batches) */
    uint64_t _pad1[7];
    uint64_t completed; /* consumer: operations below this index have finished (release) */
    uint64_t _pad2[7];
    uint64_t error;     /* consumer: sticky error word, see pshmem/abi.h */
    uint64_t _pad3[7];
} pshmem_ring_ctrl_t;

PSHMEM_STATIC_ASSERT(sizeof(pshmem_slot_t) == 32, "slot is 32 bytes");
PSHMEM_STATIC_ASSERT(__builtin_offsetof(pshmem_slot_t, pe) == 24, "pe at 24");
PSHMEM_STATIC_ASSERT(__builtin_offsetof(pshmem_slot_t, ctrl) == 28, "ctrl at 28");
PSHMEM_STATIC_ASSERT(sizeof(pshmem_ring_ctrl_t) == 256, "ring ctrl is 4 lines");
PSHMEM_STATIC_ASSERT(__builtin_offsetof(pshmem_ring_ctrl_t, tail) == 64, "tail at 64");
PSHMEM_STATIC_ASSERT(__builtin_offsetof(pshmem_ring_ctrl_t, completed) == 128, "completed at 128");
PSHMEM_STATIC_ASSERT(__builtin_offsetof(pshmem_ring_ctrl_t, error) == 192, "error at 192");

/* What a kernel needs to produce into one ring (passed by value; Rust mirror:
 * pshmem::cuda::RingDeviceHandle, checked against this by pshmem-abi's probe). */
typedef struct pshmem_ring_device {
    pshmem_slot_t *slots;           /* capacity slots, pinned host memory, device-mapped */
    pshmem_ring_ctrl_t *ctrl;       /* control block, pinned host memory, device-mapped */
    unsigned long long *head;       /* reservation counter, device memory */
    unsigned long long *tail_cache; /* last tail seen by any producer, device memory */
    unsigned long long capacity;    /* a power of two */
} pshmem_ring_device_t;

PSHMEM_STATIC_ASSERT(sizeof(pshmem_ring_device_t) == 40, "ring device handle is 40 bytes");

#endif /* PSHMEM_RING_H */
