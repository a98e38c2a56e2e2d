/* proxyshmem command ring, device side: a GPU producer of the protocol in ring.h.
 *
 * Memory ordering: the eight steps of ring.h, ring/src/ring.rs and docs/PROTOCOLS.md, with the
 * GPU as producer. Steps 1-4 are pshmem_ring_push, step 8 pshmem_ring_quiet (the device API's
 * pshmem_quiet does the same through pshmem_i_wait_done, with the timeout); steps 5-7 are the
 * proxy's.
 * 1. Reserve: one thread reserves [idx, idx + n) with atomicAdd on the head counter in DEVICE
 *    memory.
 * 2. Room: while idx + n - tail_cache > capacity it waits. Every 8th turn it re-reads ctrl->tail
 *    from host memory with ld.acquire.sys (pairs with the proxy's release store of tail, step 6,
 *    which follows its copy-out of those slots), publishes what it saw to tail_cache (atomicMax,
 *    device memory) and reads ctrl->error: a raised error ends the wait. The other turns read
 *    only tail_cache, which every producer of the ring refreshes. Both of the producer's atomics
 *    (steps 1 and 2) are on device memory; no GPU atomic ever touches host memory.
 * 3. Write: for each slot from the last to the first, it writes a and b (one 16-byte store) and
 *    c with weak stores, and the {pe, ctrl} word of a continuation slot with a volatile store.
 * 4. Publish: last, the first slot's {pe, ctrl} word with st.release.sys: the release makes
 *    every earlier store of this thread visible system-wide before the commit bit is, which is
 *    what the proxy's acquire load of ctrl (step 5) waits for (an aligned 8-byte store is
 *    single-copy atomic, so the consumer never sees half of it).
 * 8. Quiet: read the head (device memory), then wait until ctrl->completed (ld.acquire.sys,
 *    pairs with the proxy's release store of step 7) reaches it, reading ctrl->error on every
 *    turn: a raised error ends the wait.
 */
#ifndef PSHMEM_RING_DEVICE_CUH
#define PSHMEM_RING_DEVICE_CUH

#include <stdint.h>
#include "pshmem/ptx.cuh"
#include "pshmem/ring.h"

/* Writes a slot's first 24 bytes (a, b: one 16-byte store; c) with weak stores. Together with
 * the 8-byte word {pe, ctrl} that is three PCIe writes per slot instead of five. */
__device__ __forceinline__ void pshmem_slot_write_payload(pshmem_slot_t *s, const pshmem_slot_t *v) {
    asm volatile("st.v2.u64 [%0], {%1, %2};" ::"l"(s), "l"(v->a), "l"(v->b) : "memory");
    asm volatile("st.u64 [%0], %1;" ::"l"(&s->c), "l"(v->c) : "memory");
}

PSHMEM_STATIC_ASSERT(__builtin_offsetof(pshmem_slot_t, pe) + 4 == __builtin_offsetof(pshmem_slot_t, ctrl),
                     "pe and ctrl form one little-endian 8-byte word");

/* Publishes one operation of `nslots` (1 or 2) slots; the first slot's ctrl carries op, flags,
 * sub and the slot count (PSHMEM_CTRL_MAKE), without the commit bit. Returns 0, or the ring's
 * nonzero error word (the ring is then unusable). `*end` receives the index just past the
 * operation (it has finished once ctrl->completed reaches it). Call from one thread. */
__device__ inline uint64_t pshmem_ring_push(const pshmem_ring_device_t *r,
                                            const pshmem_slot_t *ops, uint32_t nslots,
                                            uint64_t *end) {
    uint64_t idx = atomicAdd(r->head, (unsigned long long)nslots);
    uint64_t stop = idx + nslots;
    uint64_t tail = *(volatile unsigned long long *)r->tail_cache;
    for (uint32_t spin = 0; stop - tail > r->capacity; ++spin) {
        /* Read the host's tail (a PCIe round trip) only every 8th turn: with many waiting
         * warps, the device-memory cache that others refresh is usually enough. */
        if ((spin & 7) == 0) {
            tail = pshmem_ld_acquire_sys(&r->ctrl->tail);
            atomicMax(r->tail_cache, (unsigned long long)tail);
            if (stop - tail <= r->capacity) break;
            uint64_t err = pshmem_ld_relaxed_sys(&r->ctrl->error);
            if (err) return err;
        } else {
            tail = *(volatile unsigned long long *)r->tail_cache;
        }
        __nanosleep(64);
    }
    uint64_t mask = r->capacity - 1;
    for (int i = (int)nslots - 1; i >= 0; --i) {
        uint64_t at = idx + (uint64_t)i;
        pshmem_slot_t *s = &r->slots[at & mask];
        pshmem_slot_write_payload(s, &ops[i]);
        uint32_t ctrl = (ops[i].ctrl & ~PSHMEM_CTRL_COMMIT) |
                        (uint32_t)PSHMEM_RING_COMMIT_BIT(at, r->capacity);
        uint64_t word = ((uint64_t)ctrl << 32) | ops[i].pe;
        if (i == 0) {
            /* Release (step 4): every store above (continuation slots included) is visible
             * system-wide before the commit bit is. */
            pshmem_st_release_sys_u64((uint64_t *)&s->pe, word);
        } else {
            *(volatile uint64_t *)&s->pe = word; /* ordered by the first slot's release */
        }
    }
    *end = stop;
    return 0;
}

/* Waits until every operation reserved on the ring so far has finished (quiet), or until an
 * error is raised (returned). Call from one thread. */
__device__ inline uint64_t pshmem_ring_quiet(const pshmem_ring_device_t *r) {
    uint64_t target = *(volatile unsigned long long *)r->head;
    while (pshmem_ld_acquire_sys(&r->ctrl->completed) < target) {
        uint64_t err = pshmem_ld_relaxed_sys(&r->ctrl->error);
        if (err) return err;
        __nanosleep(128);
    }
    return 0;
}

#endif /* PSHMEM_RING_DEVICE_CUH */
