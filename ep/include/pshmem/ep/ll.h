/* proxyshmem MoE expert parallelism, low-latency mode: the arguments of the kernels (ll.cuh) and
 * the layout of the symmetric buffer they use. Plain C, shared with the host; Rust mirror:
 * ep/src/lib.rs (`LlArgs`, `LlLayout`), whose sizes and offsets a test compares with these.
 *
 * Notation: T tokens at this rank (<= Tmax), H hidden, K top-k, E experts, N ranks, El = E/N
 * local experts. Expert e lives on rank e / El as its local expert e % El.
 *
 * One LL buffer (there are two, used alternately; every dispatch and every combine flips):
 *   sig   u64 words: [0, N)            dispatch flags, word src = -n-1 once src's n rows for
 *                                      this rank (all of its experts) and its header have
 *                                      landed ([N, E) unused)
 *                    [E, E + N)        combine flags, word E + r = 1 once rank r's expert
 *                                      outputs for this rank have landed ([E + N, 2E) unused)
 *                    [2E]              this rank's own: dispatch recv blocks done
 *                                      ([2E + 1, 2E + El) unused)
 *                    [2E + El]         this rank's own: combine recv blocks done
 *                    [2E + El + 1, 2E + El + 1 + N)  this rank's own: dispatch send blocks
 *                                      done per destination rank ([.. + N, 3E + El + 1) unused)
 *                    [3E + El + 1, 3E + El + 1 + N)  this rank's own: combine send pairs done
 *                                      per destination rank
 *   send  area bytes                   dispatch: staged as at the receiver, destination d's
 *                                      region at region(d); combine: rows of 2H bytes,
 *                                      [El][N * Tmax][H] bf16 (the zero-copy view), or (batched,
 *                                      staged) [N][El * Tmax] packed as at the receiver
 *   recv  area bytes                   dispatch: N regions, source s's at region(s) =
 *                                      s * (hdr + El * Tmax * msg_bytes), hdr = 4 El rounded up
 *                                      to 16: El int32 counts (rows per local expert), then the
 *                                      rows of expert 0, expert 1, ... packed at the call's
 *                                      slot stride (one put carries a source's header and rows);
 *                                      combine: [N][El * Tmax] rows of 2H bytes: rank r's region
 *                                      holds its experts' rows for this rank packed, expert
 *                                      r * El first; row i of expert g is the i-th token this
 *                                      rank sent to g (so one put per rank carries them all)
 *   area bytes = 16 E + E * Tmax * msg_bytes, rounded up to 128 (N headers take at most
 *   16 E bytes, since N <= E).
 * A dispatch message: 16-byte header (int32 source token index, 3 reserved), then H FP8 e4m3
 * bytes and H/128 float scales (1/scale: x ~= fp8 * scale_inv), or 2H bytes of bf16.
 * A slot holds one message rounded up to 16 bytes (FP8 slots are packed tighter than BF16
 * ones, so a batched put carries no padding); msg_bytes = 16 + max(2H, H + 4H/128), rounded
 * up to 16, is the largest, which sizes the areas.
 *
 * The flag words are cleared by their consumer (the receive kernels, after every
 * block read them), so the buffer is clean for its next use with no separate launch. */
#ifndef PSHMEM_EP_LL_H
#define PSHMEM_EP_LL_H

#include <stdint.h>
#include "pshmem/ring.h"

#define PSHMEM_EP_MAX_TOKENS 1024 /* Tmax limit (one shared-memory list per expert) */
#define PSHMEM_EP_MAX_RANKS 512   /* N limit (shared-memory counts per source) */
#define PSHMEM_EP_THREADS 512     /* threads per block of every LL kernel */
#define PSHMEM_EP_MAX_TOPK 16     /* top-k limit (combine holds a token's rows a lane each) */
#define PSHMEM_EP_MAX_EXPERTS 4096 /* E limit (combine counts a rank's rows per expert in shared
                                      memory) */

/* flags */
#define PSHMEM_EP_FP8 0x1u         /* dispatch: FP8 e4m3 + per-128-channel scales (else bf16) */
#define PSHMEM_EP_ROUND_SCALE 0x2u /* dispatch: scales are powers of two */
#define PSHMEM_EP_PER_TOKEN 0x4u   /* proxied peers: one message per token (else one per
                                      destination rank: fewer, larger messages) */
#define PSHMEM_EP_ZERO_COPY 0x8u   /* combine: x is the send buffer's view, already written */
#define PSHMEM_EP_UE8M0 0x10u      /* dispatch FP8 with ROUND_SCALE: out_scales holds the scales'
                                      exponent bytes (UE8M0), four groups per int32,
                                      [El][H / 512][N * Tmax] int32 */

/* phases of one launch */
#define PSHMEM_EP_PHASE_SEND 0x1u
#define PSHMEM_EP_PHASE_RECV 0x2u

typedef struct pshmem_ep_ll_args {
    int32_t num_tokens;  /* T */
    int32_t max_tokens;  /* Tmax */
    int32_t hidden;      /* H */
    int32_t num_topk;    /* K */
    int32_t num_experts; /* E */
    int32_t num_ranks;   /* N */
    int32_t my_rank;
    uint32_t flags;
    uint64_t *sig;       /* this buffer's signal words (symmetric) */
    uint8_t *send;       /* this buffer's send area (symmetric) */
    uint8_t *recv;       /* this buffer's receive area (symmetric) */
    uint64_t msg_bytes;  /* largest dispatch slot (the BF16 one): sizes the areas */
    const pshmem_ring_device_t *rings; /* the GPU's ring table (Gpu::ring_table) */
    uint32_t n_rings;
    uint32_t _pad;
    const void *x;              /* dispatch: bf16 [T][H]; combine: bf16 [El][N * Tmax][H] */
    const int64_t *topk_idx;    /* [T][K], -1: none */
    const float *topk_weights;  /* combine: [T][K] */
    int32_t *slot_map;          /* [T][K]: the token's row among those sent to that expert
                                   (dispatch writes it, combine reads it) */
    void *out_x;                /* dispatch: [El][N * Tmax][H] fp8 or bf16; combine: bf16 [T][H] */
    float *out_scales;          /* dispatch FP8: [El][H / 128][N * Tmax] (UE8M0: see the flag) */
    int32_t *recv_count;        /* dispatch: [El] rows received per local expert */
    int32_t *src_info;          /* dispatch: [El][N * Tmax] source token index of each row */
    int64_t *layout_range;      /* dispatch: [El][N] (begin << 32) | count per source */
    int32_t *cum_stats;         /* dispatch: [El] += rows received, or NULL */
    int64_t *wait_stats;        /* dispatch: [N] += ns from the receive phase's start until
                                 * each source's flag was seen (a warp serving two sources sees
                                 * the second after the first), or NULL */
    /* What one launch of pshmem_ep::ll::dispatch or ::combine (cuda/ep.cu) runs: the phases named, each on its
     * own grid of x * y blocks (block i of the launch is the phase's block (i % x, i / x);
     * blocks past a phase's grid skip it). Filled by the launcher. Both phases in one launch
     * need every block resident at once, since a receive phase waits for the send phases of
     * all ranks, this launch's later blocks included: the host sizes the grids so, or
     * launches the phases one after the other. */
    int32_t send_x, send_y;
    int32_t recv_x, recv_y;
    uint32_t phases;
    uint32_t _pad2;
} pshmem_ep_ll_args_t;

PSHMEM_STATIC_ASSERT(sizeof(pshmem_ep_ll_args_t) == 192, "LL args are 192 bytes");

/* pshmem_ep_ll_clean: zeroes `words` signal words at `sig`. */
typedef struct pshmem_ep_ll_clean_args {
    uint64_t *sig;
    uint64_t words;
} pshmem_ep_ll_clean_args_t;

PSHMEM_STATIC_ASSERT(sizeof(pshmem_ep_ll_clean_args_t) == 16, "LL clean args are 16 bytes");

#endif /* PSHMEM_EP_LL_H */
