/* proxyshmem MoE expert parallelism, high-throughput ("normal") mode: the arguments of the
 * kernels (ht.cuh) and the layout of the symmetric buffer they use. Plain C, shared with the
 * host; Rust mirror: ep/src/ht.rs (`HtArgs`, `HtLayout`), whose sizes and offsets a test
 * compares with these.
 *
 * Notation: T tokens at this rank, H hidden, K top-k, E experts, N ranks, El = E/N local
 * experts, G ranks per node (same host), R = N/G nodes, C channels (channel c owns the tokens
 * [c*ceil(T/C), (c+1)*ceil(T/C)) of every rank, clipped to T). Node of rank r: r / G, its local
 * index r % G (ranks of a node are contiguous).
 *
 * Rings. Every transfer goes through a ring: slots in the consumer's buffer, a tail word there
 * (the count of slots published, raised by the producer), a head word in the producer's buffer
 * (the count of slots consumed, raised by the consumer: the credits). Both words only grow by
 * additions, so the same code serves a mapped peer (stores and a release add) and a peer
 * reached through the proxy (a counted put of the slots from the producer's staging copy, then
 * a counted signal that adds to the tail: applied only once the slots landed, on any fabric).
 *   NVL rings   [C][N]: at a receiver, ring (c, s) carries source rank s's tokens of channel c;
 *               its producer is s (one node) or, across nodes, the forwarder of s's local
 *               index in the receiver's node. In combine the same rings run backwards.
 *   RDMA rings  [C][R] (R > 1 only): at the forwarder (node n, local i), ring (c, m) carries the
 *               tokens of channel c that rank (m, i) sends to node n, once per node.
 * Every ring's staging copy lives in its producer's buffer under the producer's key (the key of
 * its head word): NVL (c, consumer) in one node, (c, source node * G + consumer's local index)
 * across nodes; RDMA (c, consumer's node).
 *
 * One slot (slot_bytes, a multiple of 16: the operation's own kind, dispatch or combine; the
 * buffer gives every slot the larger): 16-byte header (int32 source token index, int32 mask
 * of the destination node's local ranks that want the token, 2 reserved), then K int32 expert
 * ids (global, -1 none) and K float weights, then at 16 + round16(8K) the row (H bytes FP8 or
 * 2H bytes bf16; combine: 2H bf16) and after it the dispatch's float scales. A combine slot
 * carries the weights where the dispatch slot has its expert ids.
 *
 * The buffer (offsets in HtLayout; every control word is cleared by the reset kernel, which the
 * host brackets with a barrier before each operation — every operation ends with all of its
 * rings drained and all of their credits returned, so nothing is in flight when it runs):
 *   ctrl   u64: nvl_tail [C][N], nvl_head [C][N], rdma_tail [C][R], rdma_head [C][R],
 *               inbox_flag [N]
 *   inbox  int32 [N][msg_ints]: the notify message of each source
 *   outbox int32 [N][msg_ints]: this rank's message to each destination
 *   nvl, nvl_stage    [C][N][nvl_slots][slot_bytes]
 *   rdma, rdma_stage  [C][R][rdma_slots][slot_bytes] (absent when R = 1)
 * A notify message from s to r: [N] s's tokens per rank, [C] s's tokens per channel for r,
 * [El] s's tokens per expert of r, [C] s's tokens per channel for r's node. */
#ifndef PSHMEM_EP_HT_H
#define PSHMEM_EP_HT_H

#include <stdint.h>
#include "pshmem/ring.h"

#define PSHMEM_EP_HT_MAX_RANKS 64     /* N limit (a token's ranks in one 64-bit mask) */
#define PSHMEM_EP_HT_MAX_NODE 32      /* G limit (a token's local ranks in one 32-bit mask) */
#define PSHMEM_EP_HT_MAX_CHANNELS 64  /* C limit */
#define PSHMEM_EP_HT_THREADS 512      /* threads per block of every HT kernel */
#define PSHMEM_EP_HT_MAX_TOPK 16      /* top-k limit */

typedef struct pshmem_ep_ht_args {
    int32_t num_tokens;   /* T */
    int32_t hidden;       /* H */
    int32_t num_topk;     /* K */
    int32_t num_experts;  /* E */
    int32_t num_ranks;    /* N */
    int32_t my_rank;
    int32_t node_size;    /* G */
    int32_t num_channels; /* C */
    int32_t nvl_slots;    /* slots per NVL ring */
    int32_t rdma_slots;   /* slots per RDMA ring */
    int32_t nvl_chunk;    /* most tokens a producer publishes at once on an NVL ring (<= 32) */
    int32_t rdma_chunk;   /* ... on an RDMA ring */
    int32_t x_elem_bytes; /* dispatch: 1 (FP8, with scales) or 2 (bf16) */
    int32_t num_scales;   /* dispatch: floats of scales per row (0 without) */
    int32_t expert_alignment;
    int32_t max_recv;     /* rows the receive tensors have (received rows, or num_worst_tokens) */
    int32_t max_fwd;      /* rows of fwd_mask */
    int32_t msg_ints;     /* int32 words of a notify message */
    uint64_t slot_bytes;
    uint64_t *ctrl;       /* the control words (symmetric) */
    int32_t *inbox;       /* symmetric */
    int32_t *outbox;      /* symmetric */
    uint8_t *nvl;         /* symmetric */
    uint8_t *nvl_stage;   /* symmetric */
    uint8_t *rdma;        /* symmetric (NULL when R = 1) */
    uint8_t *rdma_stage;  /* symmetric (NULL when R = 1) */
    const pshmem_ring_device_t *rings; /* the GPU's ring table (Gpu::ring_table) */
    uint32_t n_rings;
    uint32_t _pad;
    /* layout and notify */
    const int64_t *topk_idx;          /* [T][K], -1: none (dispatch: NULL in a cached one) */
    const float *topk_weights;        /* dispatch: [T][K] (or NULL); combine: [max_recv][K] */
    uint8_t *is_token_in_rank;        /* bool [T][N] */
    int32_t *num_tokens_per_rank;     /* [N] */
    int32_t *num_tokens_per_node;     /* [R] (or NULL) */
    int32_t *num_tokens_per_expert;   /* [E] */
    int32_t *channel_prefix;          /* [N][C]: tokens for rank r in channels <= c */
    int32_t *node_channel_prefix;     /* [R][C]: tokens for node n in channels <= c (R > 1) */
    int32_t *rank_prefix;             /* [N][N]: sum over sources s <= i of tokens s -> j */
    int32_t *recv_prefix;             /* [N * C + 1]: first row of (source, channel), s-major */
    int32_t *recv_node_prefix;        /* [R * C + 1]: first forwarded row of (node, channel) */
    int32_t *counters;                /* [2 + El]: rows received, rows forwarded, per local
                                         expert rows (rounded up to expert_alignment) */
    /* dispatch (in) and combine (out) */
    const void *x;                    /* dispatch: [T][H] fp8 or bf16; combine: bf16
                                         [max_recv][H] */
    const float *x_scales;            /* dispatch: [T][num_scales] */
    void *recv_x;                     /* dispatch: [max_recv][H]; combine: bf16 [T][H] */
    float *recv_scales;               /* dispatch: [max_recv][num_scales] */
    int64_t *recv_topk_idx;           /* dispatch: [max_recv][K] (local expert ids, -1), or
                                         NULL (a cached dispatch) */
    float *recv_topk_weights;         /* dispatch: [max_recv][K]; combine: [T][K] (or NULL) */
    int32_t *recv_src_idx;            /* dispatch: [max_recv] */
    int32_t *send_head;               /* [T][N] (one node) or [T][R]: the token's position in
                                         the ring it was sent on, -1 when not sent */
    int32_t *fwd_mask;                /* [max_fwd]: local ranks each forwarded token went to */
    const void *bias0;                /* combine: bf16 [T][H] or NULL */
    const void *bias1;                /* combine: bf16 [T][H] or NULL */
} pshmem_ep_ht_args_t;

PSHMEM_STATIC_ASSERT(sizeof(pshmem_ep_ht_args_t) == 336, "HT args are 336 bytes");

#endif /* PSHMEM_EP_HT_H */
