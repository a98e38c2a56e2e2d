/* proxyshmem device API: counted puts and counted signals (pshmemx_ extensions; NVSHMEM has no
 * equivalent). Many puts, then ONE signal that is never visible before any of them, with no
 * fence or quiet per put and no ordering assumed of the fabric — the pattern of MoE dispatch
 * (tokens, then a count per (expert, source)).
 *
 *   put_counted(dest, src, n, sig, pe)   a put that counts towards the signal word `sig` on pe
 *   signal_counted(sig, v, op, pe)       updates sig on pe once every counted put for sig,
 *                                        published before it on the same ring to the same PE
 *                                        (since the previous counted signal of sig), landed
 *
 * Through the ring, the proxy keeps the promise whatever the fabric: with remote CQ data the
 * target's proxy counts the writes tagged with that word and round before it applies the
 * signal; on the host-staged path the signal waits for the puts' completions (a target ack
 * means the copy into its GPU heap is done); ordered transports carry it behind them. A put
 * and its signal must use the same ring (the `_on` variants take one from the table
 * `Gpu::ring_table` gives, so that descriptors spread over rings and proxy threads; the plain
 * ones use ring 0).
 *
 * Direct (mapped) PEs: the put is a copy and the signal a release store/add at system scope,
 * ordered after this thread's writes; when several threads wrote the data, each of them must
 * __threadfence_system() and then join (__syncwarp/__syncthreads) before one of them signals. */
#ifndef PSHMEM_COUNTED_CUH
#define PSHMEM_COUNTED_CUH

#include "pshmem/signal.cuh"

/* Publishes on ring `r` (NULL: ring 0); returns the index past the operation, or 0 after
 * recording an error. */
__device__ __forceinline__ uint64_t pshmem_i_push_on(const pshmem_ring_device_t *r,
                                                     const pshmem_slot_t *ops, uint32_t n) {
    if (r == NULL) return pshmem_i_push(ops, n);
    uint64_t end = 0;
    uint64_t err = pshmem_ring_push(r, ops, n, &end);
    if (err) {
        pshmem_i_record(err);
        return 0;
    }
    return end;
}

/* A counted put by `t` of `nt` cooperating threads (thread 0 publishes; the caller made the
 * source's bytes visible to it, see above). Non-blocking: the source may be reused once the
 * signal was observed at the target, or after quiet on the ring. */
__device__ __forceinline__ void pshmem_i_put_counted(const pshmem_ring_device_t *r, void *dest,
                                                     const void *src, size_t n, uint64_t *sig,
                                                     int pe, uint32_t t, uint32_t nt) {
    if (n == 0) return;
    void *remote = pshmem_ptr(dest, pe);
    if (remote) {
        pshmem_i_copy(remote, src, n, t, nt);
        return;
    }
    if (t != 0 || !pshmem_i_valid_pe(pe)) return;
    uint64_t off = pshmem_i_offset(dest, n, pe);
    uint64_t soff = pshmem_i_offset(sig, 8, pe);
    if (off == ~0ull || soff == ~0ull) return;
    if (__isShared(src) || __isLocal(src)) {
        pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, (uint32_t)pe));
        return;
    }
    pshmem_slot_t s[2];
    s[0] = pshmem_i_slot(PSHMEM_OP_PUT_COUNTED, PSHMEM_FLAG_RAW_LOCAL, 0, 2, (uint32_t)pe, off,
                         (uint64_t)(uintptr_t)src, n);
    s[1] = pshmem_i_cont((uint32_t)pe, soff, 0);
    pshmem_i_push_on(r, s, 2);
}

/* One thread. */
__device__ inline void pshmemx_putmem_counted_nbi(void *dest, const void *src, size_t n,
                                                  uint64_t *sig, int pe) {
    pshmem_i_put_counted(NULL, dest, src, n, sig, pe, 0, 1);
}
/* Every lane of the warp calls with the same arguments. */
__device__ inline void pshmemx_putmem_counted_nbi_warp_on(const pshmem_ring_device_t *r,
                                                          void *dest, const void *src, size_t n,
                                                          uint64_t *sig, int pe) {
    pshmem_i_put_counted(r, dest, src, n, sig, pe, pshmem_laneid(), 32);
    __syncwarp();
}
__device__ inline void pshmemx_putmem_counted_nbi_warp(void *dest, const void *src, size_t n,
                                                       uint64_t *sig, int pe) {
    pshmemx_putmem_counted_nbi_warp_on(NULL, dest, src, n, sig, pe);
}

/* A signal of kind `opcode` (counted, or plain) on ring `r` (one thread): direct where the
 * word is reachable, else one slot for the proxy. */
__device__ __forceinline__ void pshmem_i_signal_on(const pshmem_ring_device_t *r, uint32_t opcode,
                                                   uint64_t *sig, uint64_t v, int op, int pe) {
    uint64_t *remote = (uint64_t *)pshmem_ptr(sig, pe);
    if (remote) {
        pshmem_i_signal_direct(remote, v, op);
        return;
    }
    if (!pshmem_i_valid_pe(pe)) return;
    uint64_t off = pshmem_i_offset(sig, 8, pe);
    if (off == ~0ull) return;
    pshmem_slot_t s = pshmem_i_slot(opcode, 0, (uint32_t)op, 1, (uint32_t)pe, off, v, 0);
    pshmem_i_push_on(r, &s, 1);
}

/* The counted signal (one thread). */
__device__ inline void pshmemx_signal_counted_on(const pshmem_ring_device_t *r, uint64_t *sig,
                                                 uint64_t v, int op, int pe) {
    pshmem_i_signal_on(r, PSHMEM_OP_SIGNAL_COUNTED, sig, v, op, pe);
}
__device__ inline void pshmemx_signal_counted(uint64_t *sig, uint64_t v, int op, int pe) {
    pshmemx_signal_counted_on(NULL, sig, v, op, pe);
}

/* A plain signal (pshmemx_signal_op: ordered after nothing) published on ring `r` (one
 * thread), e.g. a credit that covers no data, kept off the ring whose counted signals gate. */
__device__ inline void pshmemx_signal_op_on(const pshmem_ring_device_t *r, uint64_t *sig,
                                            uint64_t v, int op, int pe) {
    pshmem_i_signal_on(r, PSHMEM_OP_SIGNAL, sig, v, op, pe);
}

#endif /* PSHMEM_COUNTED_CUH */
