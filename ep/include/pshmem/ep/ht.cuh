/* proxyshmem MoE expert parallelism, high-throughput ("normal") mode: layout, notify, dispatch
 * and combine, one node or several. Layout and arguments: pshmem/ep/ht.h. Written from the
 * algorithm description in the design notes (DeepEP's normal mode), with these choices of our
 * own:
 *
 * - Every transfer is a ring (ht.h) whose tail and head only grow by additions, so one code path
 *   serves mapped peers (stores, then a release add) and peers reached through the proxy (a
 *   counted put of the published slots, then a counted signal adding to the tail; credits are
 *   plain signals adding to the head: they cover no data). No count is ever visible before the
 *   data it covers, on any fabric, and no atomic relies on ordering behind data.
 * - A block's warps form groups, each serving a set of rings (tasks) round-robin and never
 *   blocking on one of them: a producer sends what fits (and publishes it at once), a consumer
 *   takes what has landed (and returns the credits at once). So no ring waits on a ring served
 *   later by the same warps, whatever the sizes, and every wait is bounded (PSHMEM_OP_TIMEOUT).
 * - Every operation ends drained (all credits back), so the next one starts from zeroed words
 *   (the reset kernel, before a barrier) with nothing in flight.
 * - Across nodes a token goes once per destination node, to the GPU of the same local index
 *   (an RDMA ring per (channel, node), one put per published chunk), and that GPU's forwarder
 *   copies it into the NVL ring of every local rank that wants it. Combine runs the rings
 *   backwards: the forwarder sums its node's partials, the origin sums the nodes'. */
#ifndef PSHMEM_EP_HT_CUH
#define PSHMEM_EP_HT_CUH

#include <cuda_bf16.h>

#include "pshmem/device.cuh"
#include "pshmem/ep/ht.h"

namespace pshmem_ep_ht {

using Args = pshmem_ep_ht_args_t;
constexpr int NW = PSHMEM_EP_HT_THREADS / 32;
constexpr int MAXT = PSHMEM_EP_HT_MAX_RANKS; /* most tasks (rings) of one role */

struct Geo {
    int T, H, K, E, N, me, G, R, C, El, node, local;
    __device__ explicit Geo(const Args &a)
        : T(a.num_tokens), H(a.hidden), K(a.num_topk), E(a.num_experts), N(a.num_ranks),
          me(a.my_rank), G(a.node_size), R(a.num_ranks / a.node_size), C(a.num_channels),
          El(a.num_experts / a.num_ranks), node(a.my_rank / a.node_size),
          local(a.my_rank % a.node_size) {}
    /* Control words (ht.h). */
    __device__ uint64_t nvl_tail(int c, int k) const { return (uint64_t)c * N + k; }
    __device__ uint64_t nvl_head(int c, int k) const { return (uint64_t)C * N + (uint64_t)c * N + k; }
    __device__ uint64_t rdma_tail(int c, int k) const { return 2ull * C * N + (uint64_t)c * R + k; }
    __device__ uint64_t rdma_head(int c, int k) const {
        return 2ull * C * N + (uint64_t)C * R + (uint64_t)c * R + k;
    }
    __device__ uint64_t inbox_flag(int s) const { return 2ull * C * N + 2ull * C * R + s; }
};

/* Channel c's tokens (DeepEP's split: ceil(T/C) each, the last ones shorter or empty). */
__device__ __forceinline__ void channel_range(int T, int C, int c, int &t0, int &t1) {
    const int per = (T + C - 1) / C;
    t0 = min(c * per, T);
    t1 = min(t0 + per, T);
}

/* Byte offset of the row in a slot (after the header, ids and weights). */
__device__ __forceinline__ uint64_t row_offset(int K) { return 16 + ((8 * (uint64_t)K + 15) & ~15ull); }

/* A group of warps serving a set of tasks: `wpg` warps each, joined by named barrier 1 + id
 * (at most 8 groups of 2+ warps; one-warp groups use __syncwarp). */
struct Group {
    int id, n, wpg, w;
    bool lead;
    __device__ explicit Group(int ntasks) {
        const int warp = threadIdx.x / 32;
        wpg = max(1, NW / max(1, ntasks));
        n = NW / wpg;
        id = warp / wpg;
        w = warp % wpg;
        lead = w == 0 && pshmem_laneid() == 0;
    }
    __device__ bool active() const { return id < n; }
    __device__ void sync() const {
        if (wpg == 1) __syncwarp();
        else asm volatile("bar.sync %0, %1;" ::"r"(1 + id), "r"(wpg * 32) : "memory");
    }
};

/* Warp copy of n bytes (16-byte aligned, a multiple of 16). Loads bypass L1: the source may be
 * a ring slot a peer or the proxy rewrote since this SM last read it. */
__device__ __forceinline__ void warp_copy(void *dst, const void *src, uint64_t n) {
    int4 *d = (int4 *)dst;
    const int4 *s = (const int4 *)src;
    const uint64_t nv = n / 16;
    uint64_t i = pshmem_laneid();
    for (; i + 96 < nv; i += 128) {
        int4 x0 = __ldcg(s + i), x1 = __ldcg(s + i + 32), x2 = __ldcg(s + i + 64),
             x3 = __ldcg(s + i + 96);
        d[i] = x0;
        d[i + 32] = x1;
        d[i + 64] = x2;
        d[i + 96] = x3;
    }
    for (; i < nv; i += 32) d[i] = __ldcg(s + i);
}

/* A ring seen from its producer. */
struct Prod {
    uint8_t *slots;       /* symmetric address of the slots (the consumer's) */
    uint8_t *stage;       /* this PE's staging copy of them */
    uint8_t *direct;      /* the consumer's slots mapped here, or NULL */
    uint64_t *tail;       /* symmetric address of the consumer's tail word */
    const uint64_t *head; /* this PE's head word */
    int pe, S;
    uint64_t sb;
    const pshmem_ring_device_t *ring;
    __device__ Prod(uint8_t *slots_, uint8_t *stage_, uint64_t *tail_, const uint64_t *head_, int pe_,
                    int S_, uint64_t sb_, const pshmem_ring_device_t *ring_)
        : slots(slots_), stage(stage_), direct((uint8_t *)pshmem_ptr(slots_, pe_)), tail(tail_),
          head(head_), pe(pe_), S(S_), sb(sb_), ring(ring_) {}
    __device__ uint8_t *slot(uint32_t q) const { return (direct ? direct : stage) + (uint64_t)(q % S) * sb; }
    __device__ uint32_t credits() const { return (uint32_t)pshmem_ld_acquire_sys(head); }
    /* Publishes slots [from, to) (one thread; every writer fenced and joined before). */
    __device__ void publish(uint32_t from, uint32_t to) const {
        if (to == from) return;
        if (!direct) {
            const uint32_t a = from % S, n = to - from, first = min(n, (uint32_t)S - a);
            pshmem_i_put_counted(ring, slots + a * sb, stage + a * sb, first * sb, tail, pe, 0, 1);
            if (n > first) pshmem_i_put_counted(ring, slots, stage, (n - first) * sb, tail, pe, 0, 1);
        }
        pshmemx_signal_counted_on(ring, tail, to - from, PSHMEM_SIGNAL_ADD, pe);
    }
};

__device__ __forceinline__ const pshmem_ring_device_t *ring_for(const Args &a, int c) {
    return a.n_rings ? &a.rings[(uint32_t)c % a.n_rings] : NULL;
}

/* Returns n credits (slots consumed) to a producer's head word (one thread). A plain signal,
 * not a counted one: it covers no data (the slots were read before), so through the proxy it
 * needs no gate, and it goes on another ring than channel c's data (where there are several),
 * so that it never waits behind the gate of a tail. */
__device__ __forceinline__ void credit(const Args &a, int c, uint64_t *head, uint32_t n, int pe) {
    if (!n) return;
    const int skew = a.n_rings > 1 ? (int)a.n_rings / 2 : 0;
    pshmemx_signal_op_on(ring_for(a, c + skew), head, n, PSHMEM_SIGNAL_ADD, pe);
}

/* Keeps only the first `lim` set bits of `ball`; returns the count of tokens (bits) before
 * the first one dropped, or `end` when none is. */
__device__ __forceinline__ int keep_first(uint32_t &ball, uint32_t lim, int end) {
    uint32_t b = ball;
    for (uint32_t k = 0; k < lim && b; ++k) b &= b - 1;
    if (!b) return end;
    const int cut = __ffs(b) - 1;
    ball &= cut ? (0xffffffffu >> (32 - cut)) : 0u;
    return cut;
}

/* The group's loop over its tasks, with a bounded idle wait: `step(j)` (called by every thread
 * of the group) returns 0 when it did nothing, 1 on progress, 2 when task j is finished. */
template <typename Step>
__device__ __forceinline__ void serve(const Group &gr, int ntasks, Step step) {
    __shared__ uint8_t s_done[MAXT];
    __shared__ int s_exit[NW];
    for (int j = gr.id; j < ntasks; j += gr.n)
        if (gr.lead) s_done[j] = 0;
    gr.sync();
    uint64_t t0 = pshmem_globaltimer();
    for (;;) {
        bool all = true, moved = false;
        for (int j = gr.id; j < ntasks; j += gr.n) {
            if (s_done[j]) continue;
            const int r = step(j);
            if (r == 2 && gr.lead) s_done[j] = 1;
            moved |= r != 0;
            all &= r == 2;
        }
        if (gr.lead) {
            int ex = all ? 1 : 0;
            if (!ex) {
                if (moved) t0 = pshmem_globaltimer();
                else if (pshmem_i_wait_over(t0)) ex = 1; /* recorded: give up */
                else __nanosleep(64);
            }
            s_exit[gr.id] = ex;
        }
        gr.sync();
        const int ex = s_exit[gr.id];
        gr.sync();
        if (ex) return;
    }
}

/* Command the group's leader warp hands its group for one step. */
struct Cmd {
    int kind; /* 0 idle, 1 go, 2 finished */
    int base, end;
    uint32_t ball, at;
};

/* The group's half of a step the leader warp commanded in `cmd`: each warp copies its share of
 * the selected tokens (`copy(slot index, token)`, the i-th selected token going to slot `at +
 * i`), then the leader publishes them and moves the task's cursors past the window. */
template <typename Copy>
__device__ __forceinline__ Cmd copy_selected(const Group &gr, const Cmd *cmd, const Prod &p,
                                             uint32_t &sent, int &cur, Copy copy) {
    gr.sync();
    const Cmd k = *cmd;
    if (k.kind == 1 && k.ball) {
        uint32_t b = k.ball;
        for (int i = 0; b; ++i, b &= b - 1)
            if (i % gr.wpg == gr.w) copy(k.at + i, k.base + __ffs(b) - 1);
        __threadfence_system(); /* the slots before the tail that publishes them */
    }
    gr.sync();
    if (k.kind == 1 && gr.lead) {
        const uint32_t n = __popc(k.ball);
        p.publish(k.at, k.at + n);
        sent = k.at + n;
        cur = k.base + k.end;
    }
    return k;
}

/* ---- layout ---------------------------------------------------------------------------- */

/* Tokens per rank / node / expert and the token-in-rank matrix (outputs zeroed by the host).
 * One thread per token; counts gathered in shared memory first. */
__device__ inline void layout(const Args &a) {
    const Geo g(a);
    __shared__ int se[1024], sr[MAXT], sn[MAXT];
    const bool in_smem = g.E <= 1024;
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) se[i] = 0;
    for (int i = threadIdx.x; i < MAXT; i += blockDim.x) sr[i] = sn[i] = 0;
    __syncthreads();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < g.T) {
        uint64_t ranks = 0;
        for (int k = 0; k < g.K; ++k) {
            const int64_t e = a.topk_idx[(int64_t)t * g.K + k];
            if (e < 0 || e >= g.E) continue;
            if (in_smem) atomicAdd(&se[e], 1);
            else atomicAdd(&a.num_tokens_per_expert[e], 1);
            ranks |= 1ull << (e / g.El);
        }
        for (int r = 0; r < g.N; ++r) {
            const bool in = (ranks >> r) & 1;
            a.is_token_in_rank[(int64_t)t * g.N + r] = in;
            if (in) atomicAdd(&sr[r], 1);
        }
        const uint64_t lmask = g.G >= 64 ? ~0ull : (1ull << g.G) - 1;
        for (int n = 0; n < g.R; ++n)
            if ((ranks >> (n * g.G)) & lmask) atomicAdd(&sn[n], 1);
    }
    __syncthreads();
    if (in_smem)
        for (int e = threadIdx.x; e < g.E; e += blockDim.x)
            if (se[e]) atomicAdd(&a.num_tokens_per_expert[e], se[e]);
    for (int r = threadIdx.x; r < g.N; r += blockDim.x)
        if (sr[r]) atomicAdd(&a.num_tokens_per_rank[r], sr[r]);
    if (a.num_tokens_per_node)
        for (int n = threadIdx.x; n < g.R; n += blockDim.x)
            if (sn[n]) atomicAdd(&a.num_tokens_per_node[n], sn[n]);
}

/* ---- notify ----------------------------------------------------------------------------- */

/* Zeroes this rank's control words (the host brackets it with a barrier). */
__device__ inline void reset(const Args &a) {
    const Geo g(a);
    const uint64_t words = g.inbox_flag(g.N);
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
         i += (uint64_t)gridDim.x * blockDim.x)
        a.ctrl[i] = 0;
}

/* Block j (one per destination rank): the channel prefix of the tokens for j (and for j's
 * node), and this rank's notify message to j in the outbox. */
__device__ inline void prefix(const Args &a) {
    const Geo g(a);
    const int j = blockIdx.x, jn = j / g.G;
    int32_t *msg = a.outbox + (int64_t)j * a.msg_ints;
    int acc = 0, nacc = 0;
    for (int c = 0; c < g.C; ++c) {
        int t0, t1;
        channel_range(g.T, g.C, c, t0, t1);
        int cnt = 0, ncnt = 0;
        for (int b = t0; b < t1; b += blockDim.x) {
            const int t = b + threadIdx.x;
            bool in = false, nin = false;
            if (t < t1) {
                const uint8_t *row = a.is_token_in_rank + (int64_t)t * g.N;
                in = row[j] != 0;
                for (int l = 0; l < g.G && !nin; ++l) nin = row[jn * g.G + l] != 0;
            }
            cnt += __syncthreads_count(in);
            ncnt += __syncthreads_count(nin);
        }
        acc += cnt;
        nacc += ncnt;
        if (threadIdx.x == 0) {
            a.channel_prefix[j * g.C + c] = acc;
            msg[g.N + c] = cnt;
            msg[g.N + g.C + g.El + c] = ncnt;
            if (g.R > 1 && j % g.G == 0) a.node_channel_prefix[jn * g.C + c] = nacc;
        }
    }
    for (int r = threadIdx.x; r < g.N; r += blockDim.x) msg[r] = a.num_tokens_per_rank[r];
    for (int e = threadIdx.x; e < g.El; e += blockDim.x)
        msg[g.N + g.C + e] = a.num_tokens_per_expert[j * g.El + e];
}

__device__ __forceinline__ int ldcg(const int32_t *p) { return __ldcg(p); }

/* One block: sends every rank its message (a counted put, then its flag), waits for every
 * source's, and derives what dispatch needs: the rank prefix matrix, the first row of every
 * (source, channel), the first forwarded row of every (node, channel), and the counters. */
__device__ inline void notify(const Args &a) {
    const Geo g(a);
    const int warp = threadIdx.x / 32, lane = pshmem_laneid();
    const uint64_t bytes = (uint64_t)a.msg_ints * 4;
    for (int j = warp; j < g.N; j += NW) {
        const pshmem_ring_device_t *ring = ring_for(a, j);
        uint64_t *flag = a.ctrl + g.inbox_flag(g.me);
        pshmemx_putmem_counted_nbi_warp_on(ring, a.inbox + (int64_t)g.me * a.msg_ints,
                                           a.outbox + (int64_t)j * a.msg_ints, bytes, flag, j);
        __threadfence_system();
        __syncwarp();
        if (lane == 0) pshmemx_signal_counted_on(ring, flag, 1, PSHMEM_SIGNAL_SET, j);
    }
    for (int s = threadIdx.x; s < g.N; s += blockDim.x) {
        const uint64_t *f = a.ctrl + g.inbox_flag(s);
        pshmem_i_wait<4, 64>([&] { return pshmem_ld_acquire_sys(f) != 0; });
    }
    __syncthreads();
    const int m = a.msg_ints;
    for (int j = threadIdx.x; j < g.N; j += blockDim.x) {
        int acc = 0;
        for (int i = 0; i < g.N; ++i) {
            acc += ldcg(a.inbox + (int64_t)i * m + j);
            a.rank_prefix[i * g.N + j] = acc;
        }
    }
    for (int e = threadIdx.x; e < g.El; e += blockDim.x) {
        int acc = 0;
        for (int s = 0; s < g.N; ++s) acc += ldcg(a.inbox + (int64_t)s * m + g.N + g.C + e);
        const int al = max(1, a.expert_alignment);
        a.counters[2 + e] = (acc + al - 1) / al * al;
    }
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int s = 0; s < g.N; ++s)
            for (int c = 0; c < g.C; ++c) {
                a.recv_prefix[s * g.C + c] = acc;
                acc += ldcg(a.inbox + (int64_t)s * m + g.N + c);
            }
        a.recv_prefix[g.N * g.C] = acc;
        a.counters[0] = acc;
        int facc = 0;
        if (g.R > 1)
            for (int sn = 0; sn < g.R; ++sn)
                for (int c = 0; c < g.C; ++c) {
                    a.recv_node_prefix[sn * g.C + c] = facc;
                    facc += ldcg(a.inbox + (int64_t)(sn * g.G + g.local) * m + g.N + g.C + g.El + c);
                }
        if (g.R > 1) a.recv_node_prefix[g.R * g.C] = facc;
        a.counters[1] = facc;
    }
}

/* ---- dispatch ----------------------------------------------------------------------------- */

/* Writes token t of the input as a dispatch slot (the warp). */
__device__ __forceinline__ void write_token(uint8_t *slot, const Args &a, const Geo &g, int t, int mask) {
    const int lane = pshmem_laneid();
    if (lane == 0) *(int4 *)slot = make_int4(t, mask, 0, 0);
    if (lane < g.K) {
        ((int32_t *)(slot + 16))[lane] = a.topk_idx ? (int32_t)a.topk_idx[(int64_t)t * g.K + lane] : -1;
        ((float *)(slot + 16))[g.K + lane] = a.topk_weights ? a.topk_weights[(int64_t)t * g.K + lane] : 0.f;
    }
    const uint64_t xb = (uint64_t)g.H * a.x_elem_bytes, xo = row_offset(g.K);
    warp_copy(slot + xo, (const uint8_t *)a.x + (int64_t)t * xb, xb);
    float *sc = (float *)(slot + xo + xb);
    for (int i = lane; i < a.num_scales; i += 32) sc[i] = a.x_scales[(int64_t)t * a.num_scales + i];
}

/* The local ranks of node n that want token t (bit l: rank n*G + l). */
__device__ __forceinline__ int node_mask(const Args &a, const Geo &g, int t, int n) {
    const uint8_t *row = a.is_token_in_rank + (int64_t)t * g.N + n * g.G;
    int m = 0;
    for (int l = 0; l < g.G; ++l) m |= (row[l] ? 1 : 0) << l;
    return m;
}

/* Sender of channel c: one task per destination rank (one node) or destination node. */
__device__ inline void dispatch_send(const Args &a, const Geo &g, int c) {
    const bool inter = g.R > 1;
    const int ntasks = inter ? g.R : g.N;
    const Group gr(ntasks);
    if (!gr.active()) return;
    __shared__ int s_cur[MAXT];
    __shared__ uint32_t s_sent[MAXT];
    __shared__ Cmd s_cmd[NW];
    int t0, t1;
    channel_range(g.T, g.C, c, t0, t1);
    for (int j = gr.id; j < ntasks; j += gr.n)
        if (gr.lead) s_cur[j] = t0, s_sent[j] = 0;
    gr.sync();
    const int chunk = max(1, min(32, inter ? a.rdma_chunk : a.nvl_chunk));
    const int S = inter ? a.rdma_slots : a.nvl_slots;
    const pshmem_ring_device_t *ring = ring_for(a, c);
    const int lane = pshmem_laneid();
    serve(gr, ntasks, [&](int j) -> int {
        uint8_t *slots, *stage;
        uint64_t *tail, *head;
        int pe;
        if (inter) {
            slots = a.rdma + ((uint64_t)c * g.R + g.node) * S * a.slot_bytes;
            stage = a.rdma_stage + ((uint64_t)c * g.R + j) * S * a.slot_bytes;
            tail = a.ctrl + g.rdma_tail(c, g.node);
            head = a.ctrl + g.rdma_head(c, j);
            pe = j * g.G + g.local;
        } else {
            slots = a.nvl + ((uint64_t)c * g.N + g.me) * S * a.slot_bytes;
            stage = a.nvl_stage + ((uint64_t)c * g.N + j) * S * a.slot_bytes;
            tail = a.ctrl + g.nvl_tail(c, g.me);
            head = a.ctrl + g.nvl_head(c, j);
            pe = j;
        }
        const Prod p(slots, stage, tail, head, pe, S, a.slot_bytes, ring);
        Cmd *cmd = &s_cmd[gr.id];
        if (gr.w == 0) {
            const int tb = s_cur[j];
            const uint32_t sent = s_sent[j];
            Cmd k = {0, tb, 0, 0, sent};
            if (tb >= t1) {
                k.kind = p.credits() >= sent ? 2 : 0;
            } else {
                const int t = tb + lane;
                bool sel = false;
                if (t < t1) sel = inter ? node_mask(a, g, t, j) != 0 : a.is_token_in_rank[(int64_t)t * g.N + j] != 0;
                uint32_t ball = __ballot_sync(0xffffffffu, sel);
                const uint32_t space = (uint32_t)S - (sent - p.credits());
                const int end = keep_first(ball, min(space, (uint32_t)chunk), min(32, t1 - tb));
                if (lane < end && !((ball >> lane) & 1)) a.send_head[(int64_t)(tb + lane) * ntasks + j] = -1;
                k.kind = end > 0 ? 1 : 0;
                k.end = end;
                k.ball = ball;
            }
            if (lane == 0) *cmd = k;
        }
        const Cmd k = copy_selected(gr, cmd, p, s_sent[j], s_cur[j], [&](uint32_t q, int t) {
            write_token(p.slot(q), a, g, t, inter ? node_mask(a, g, t, j) : 0);
            if (lane == 0) a.send_head[(int64_t)t * ntasks + j] = (int32_t)q;
        });
        return k.kind;
    });
}

/* Forwarder of channel c (several nodes): task (source node sn, local rank l) moves the tokens
 * of RDMA ring (c, sn) that l wants into l's NVL ring for source (sn, this local index). The
 * RDMA slots are returned once every local rank's task has passed them. */
__device__ inline void dispatch_forward(const Args &a, const Geo &g, int c) {
    const int ntasks = g.N;
    const Group gr(ntasks);
    __shared__ int s_cur[MAXT];
    __shared__ uint32_t s_sent[MAXT];
    __shared__ int s_ret[MAXT];
    __shared__ Cmd s_cmd[NW];
    if (threadIdx.x < MAXT) s_cur[threadIdx.x] = 0, s_sent[threadIdx.x] = 0, s_ret[threadIdx.x] = 0;
    __syncthreads(); /* every task's cursor is read by its node's other tasks */
    if (!gr.active()) return;
    const int chunk = max(1, min(32, a.nvl_chunk));
    const int S = a.nvl_slots, SR = a.rdma_slots;
    const uint64_t sb = a.slot_bytes;
    const pshmem_ring_device_t *ring = ring_for(a, c);
    const int lane = pshmem_laneid();
    serve(gr, ntasks, [&](int j) -> int {
        const int sn = j / g.G, l = j % g.G;
        const int fbase = a.recv_node_prefix[sn * g.C + c];
        const int n = a.recv_node_prefix[sn * g.C + c + 1] - fbase;
        const uint8_t *rslots = a.rdma + ((uint64_t)c * g.R + sn) * SR * sb;
        const uint64_t *rtail = a.ctrl + g.rdma_tail(c, sn);
        const int key = sn * g.G + g.local;
        const Prod p(a.nvl + ((uint64_t)c * g.N + key) * S * sb,
                     a.nvl_stage + ((uint64_t)c * g.N + sn * g.G + l) * S * sb,
                     a.ctrl + g.nvl_tail(c, key), a.ctrl + g.nvl_head(c, sn * g.G + l),
                     g.node * g.G + l, S, sb, ring);
        Cmd *cmd = &s_cmd[gr.id];
        if (gr.w == 0) {
            const int cur = s_cur[j];
            const uint32_t sent = s_sent[j];
            Cmd k = {0, cur, 0, 0, sent};
            if (cur >= n) {
                k.kind = p.credits() >= sent ? 2 : 0;
            } else {
                int avail = 0;
                if (lane == 0) avail = (int)min((uint64_t)n, pshmem_ld_acquire_sys(rtail)) - cur;
                avail = min(32, __shfl_sync(0xffffffffu, avail, 0));
                int mask = 0;
                if (lane < avail) mask = __ldcg((const int *)(rslots + (uint64_t)((cur + lane) % SR) * sb) + 1);
                uint32_t ball = __ballot_sync(0xffffffffu, lane < avail && ((mask >> l) & 1));
                const uint32_t space = (uint32_t)S - (sent - p.credits());
                const int end = keep_first(ball, min(space, (uint32_t)chunk), avail);
                if (l == 0 && lane < end) {
                    const int row = fbase + cur + lane;
                    if (row < a.max_fwd) a.fwd_mask[row] = mask;
                    else pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, g.me));
                }
                k.kind = end > 0 ? 1 : 0;
                k.end = end;
                k.ball = ball;
            }
            if (lane == 0) *cmd = k;
        }
        const Cmd k = copy_selected(gr, cmd, p, s_sent[j], s_cur[j], [&](uint32_t q, int r) {
            warp_copy(p.slot(q), rslots + (uint64_t)(r % SR) * sb, sb);
        });
        if (k.kind == 1 && gr.lead) {
            /* The RDMA slots every local rank's task has passed go back to their producer. */
            int low = k.base + k.end;
            for (int l2 = 0; l2 < g.G; ++l2) low = min(low, ((volatile int *)s_cur)[sn * g.G + l2]);
            const int old = atomicMax(&s_ret[sn], low);
            if (low > old)
                credit(a, c, a.ctrl + g.rdma_head(c, g.node), (uint32_t)(low - old), sn * g.G + g.local);
        }
        return k.kind;
    });
}

/* Receiver of channel c: one task per source rank; copies what landed in NVL ring (c, s) to
 * the rows of s's channel c. Also pads rows past the received ones (num_worst_tokens). */
__device__ inline void dispatch_recv(const Args &a, const Geo &g, int c) {
    const int num_recv = a.counters[0];
    for (int r = num_recv + c * blockDim.x + threadIdx.x; r < a.max_recv; r += g.C * blockDim.x) {
        for (int k = 0; k < g.K && a.recv_topk_idx; ++k) {
            a.recv_topk_idx[(int64_t)r * g.K + k] = -1;
            if (a.recv_topk_weights) a.recv_topk_weights[(int64_t)r * g.K + k] = 0.f;
        }
        a.recv_src_idx[r] = -1;
    }
    const bool inter = g.R > 1;
    const Group gr(g.N);
    if (!gr.active()) return;
    __shared__ int s_cur[MAXT];
    __shared__ Cmd s_cmd[NW];
    for (int j = gr.id; j < g.N; j += gr.n)
        if (gr.lead) s_cur[j] = 0;
    gr.sync();
    const int S = a.nvl_slots;
    const uint64_t sb = a.slot_bytes, xb = (uint64_t)g.H * a.x_elem_bytes, xo = row_offset(g.K);
    const int lane = pshmem_laneid();
    serve(gr, g.N, [&](int s) -> int {
        const int rbase = a.recv_prefix[s * g.C + c];
        const int n = a.recv_prefix[s * g.C + c + 1] - rbase;
        const uint8_t *slots = a.nvl + ((uint64_t)c * g.N + s) * S * sb;
        Cmd *cmd = &s_cmd[gr.id];
        if (gr.w == 0) {
            const int cur = s_cur[s];
            Cmd k = {0, cur, 0, 0, 0};
            if (cur >= n) k.kind = 2;
            else {
                int avail = 0;
                if (lane == 0)
                    avail = (int)min((uint64_t)n, pshmem_ld_acquire_sys(a.ctrl + g.nvl_tail(c, s))) - cur;
                avail = __shfl_sync(0xffffffffu, avail, 0);
                k.kind = avail > 0 ? 1 : 0;
                k.end = avail;
            }
            if (lane == 0) *cmd = k;
        }
        gr.sync();
        const Cmd k = *cmd;
        if (k.kind == 1) {
            for (int i = gr.w; i < k.end; i += gr.wpg) {
                const uint8_t *slot = slots + (uint64_t)((k.base + i) % S) * sb;
                const int64_t row = rbase + k.base + i;
                if (row >= a.max_recv) {
                    if (lane == 0) pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, g.me));
                    continue;
                }
                if (lane == 0) a.recv_src_idx[row] = __ldcg((const int *)slot);
                if (lane < g.K && a.recv_topk_idx) {
                    const int e = __ldcg((const int *)(slot + 16) + lane);
                    const int le = e - g.me * g.El;
                    const bool mine = e >= 0 && le >= 0 && le < g.El;
                    a.recv_topk_idx[row * g.K + lane] = mine ? le : -1;
                    if (a.recv_topk_weights)
                        a.recv_topk_weights[row * g.K + lane] =
                            mine ? __ldcg((const float *)(slot + 16) + g.K + lane) : 0.f;
                }
                warp_copy((uint8_t *)a.recv_x + row * xb, slot + xo, xb);
                const float *sc = (const float *)(slot + xo + xb);
                for (int i2 = lane; i2 < a.num_scales; i2 += 32)
                    a.recv_scales[row * a.num_scales + i2] = __ldcg(sc + i2);
            }
        }
        gr.sync(); /* every copy's loads done before the slots go back */
        if (k.kind == 1 && gr.lead) {
            const int pe = inter ? g.node * g.G + s % g.G : s;
            const int hk = inter ? (s / g.G) * g.G + g.local : g.me;
            credit(a, c, a.ctrl + g.nvl_head(c, hk), (uint32_t)k.end, pe);
            s_cur[s] = k.base + k.end;
        }
        return k.kind;
    });
}

/* Grid: (2 or 3) x C blocks: senders, [forwarders,] receivers. Every block must be resident at
 * once on every rank (they wait for each other), which the host's grid sizing ensures. */
__device__ inline void dispatch(const Args &a) {
    const Geo g(a);
    const int role = blockIdx.x / g.C, c = blockIdx.x % g.C;
    if (role == 0) dispatch_send(a, g, c);
    else if (role == 1 && g.R > 1) dispatch_forward(a, g, c);
    else dispatch_recv(a, g, c);
}

/* ---- combine ------------------------------------------------------------------------------ */

/* Sender of channel c: task s sends the rows received from s in channel c back, in the order
 * they came, to the rank that sent them (one node) or that forwarded them. */
__device__ inline void combine_send(const Args &a, const Geo &g, int c) {
    const bool inter = g.R > 1;
    const Group gr(g.N);
    if (!gr.active()) return;
    __shared__ uint32_t s_sent[MAXT];
    __shared__ Cmd s_cmd[NW];
    for (int j = gr.id; j < g.N; j += gr.n)
        if (gr.lead) s_sent[j] = 0;
    gr.sync();
    const int S = a.nvl_slots;
    const int chunk = max(1, min(32, a.nvl_chunk));
    const uint64_t sb = a.slot_bytes, rb = 2 * (uint64_t)g.H, xo = row_offset(g.K);
    const pshmem_ring_device_t *ring = ring_for(a, c);
    const int lane = pshmem_laneid();
    serve(gr, g.N, [&](int s) -> int {
        const int rbase = a.recv_prefix[s * g.C + c];
        const uint32_t n = (uint32_t)(a.recv_prefix[s * g.C + c + 1] - rbase);
        const int key = inter ? (s / g.G) * g.G + g.local : g.me;
        const int pe = inter ? g.node * g.G + s % g.G : s;
        const Prod p(a.nvl + ((uint64_t)c * g.N + key) * S * sb,
                     a.nvl_stage + ((uint64_t)c * g.N + s) * S * sb, a.ctrl + g.nvl_tail(c, key),
                     a.ctrl + g.nvl_head(c, s), pe, S, sb, ring);
        Cmd *cmd = &s_cmd[gr.id];
        if (gr.lead) {
            const uint32_t sent = s_sent[s];
            Cmd k = {0, 0, 0, 0, sent};
            if (sent >= n) k.kind = p.credits() >= n ? 2 : 0;
            else {
                const uint32_t space = (uint32_t)S - (sent - p.credits());
                k.end = (int)min(min(n - sent, space), (uint32_t)chunk);
                k.kind = k.end > 0 ? 1 : 0;
            }
            *cmd = k;
        }
        gr.sync();
        const Cmd k = *cmd;
        if (k.kind == 1) {
            for (int i = gr.w; i < k.end; i += gr.wpg) {
                const int64_t row = rbase + k.at + i;
                uint8_t *slot = p.slot(k.at + i);
                if (lane == 0) *(int4 *)slot = make_int4((int)row, 0, 0, 0);
                if (lane < g.K)
                    ((float *)(slot + 16))[lane] =
                        a.topk_weights ? a.topk_weights[row * g.K + lane] : 0.f;
                warp_copy(slot + xo, (const uint8_t *)a.x + row * rb, rb);
            }
            __threadfence_system();
        }
        gr.sync();
        if (k.kind == 1 && gr.lead) {
            p.publish(k.at, k.at + k.end);
            s_sent[s] = k.at + k.end;
        }
        return k.kind;
    });
}

/* Sums `n` bf16 rows (at `rows[i] + off`) in FP32 into `out` (bf16 [H]), plus optional bias
 * rows; the warp. */
__device__ __forceinline__ void sum_rows(__nv_bfloat16 *out, const uint8_t *const *rows, int n,
                                         uint64_t off, int H, const __nv_bfloat16 *b0,
                                         const __nv_bfloat16 *b1) {
    constexpr int CHUNK = 4; /* rows' 16-byte vectors in flight per lane (latency bound) */
    for (int c = pshmem_laneid() * 8; c < H; c += 256) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i0 = 0; i0 < n; i0 += CHUNK) {
            int4 raw[CHUNK];
#pragma unroll
            for (int u = 0; u < CHUNK; ++u)
                if (i0 + u < n) raw[u] = __ldcg((const int4 *)(rows[i0 + u] + off + 2 * (uint64_t)c));
#pragma unroll
            for (int u = 0; u < CHUNK; ++u) {
                if (i0 + u >= n) break;
                const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&raw[u];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float2 f = __bfloat1622float2(h2[q]);
                    acc[2 * q] += f.x;
                    acc[2 * q + 1] += f.y;
                }
            }
        }
        const __nv_bfloat16 *bias[2] = {b0, b1};
        for (int j = 0; j < 2; ++j) {
            const __nv_bfloat16 *b = bias[j];
            if (!b) continue;
            const int4 raw = *(const int4 *)(b + c);
            const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&raw;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float2 f = __bfloat1622float2(h2[q]);
                acc[2 * q] += f.x;
                acc[2 * q + 1] += f.y;
            }
        }
        int4 res;
        __nv_bfloat162 *r2 = (__nv_bfloat162 *)&res;
#pragma unroll
        for (int q = 0; q < 4; ++q) r2[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
        *(int4 *)(out + c) = res;
    }
}

/* Forwarder of channel c (several nodes): task sn sums, token by token in the order they were
 * forwarded, the partials this node's ranks sent back, and sends the sums to their origin
 * (sn, this local index) on RDMA ring (c, this node) there. */
__device__ inline void combine_forward(const Args &a, const Geo &g, int c) {
    const Group gr(g.R);
    if (!gr.active()) return;
    __shared__ int s_cur[MAXT];
    __shared__ int s_pos[MAXT][PSHMEM_EP_HT_MAX_NODE];
    __shared__ Cmd s_cmd[NW];
    __shared__ const uint8_t *s_rows[NW][PSHMEM_EP_HT_MAX_NODE];
    for (int j = gr.id; j < g.R; j += gr.n)
        if (gr.lead) {
            s_cur[j] = 0;
            for (int l = 0; l < g.G; ++l) s_pos[j][l] = 0;
        }
    gr.sync();
    const int S = a.nvl_slots, SR = a.rdma_slots;
    const int chunk = max(1, min(32, a.rdma_chunk));
    const uint64_t sb = a.slot_bytes, xo = row_offset(g.K);
    const pshmem_ring_device_t *ring = ring_for(a, c);
    const int lane = pshmem_laneid(), warp = threadIdx.x / 32;
    serve(gr, g.R, [&](int sn) -> int {
        const int fbase = a.recv_node_prefix[sn * g.C + c];
        const int n = a.recv_node_prefix[sn * g.C + c + 1] - fbase;
        const Prod p(a.rdma + ((uint64_t)c * g.R + g.node) * SR * sb,
                     a.rdma_stage + ((uint64_t)c * g.R + sn) * SR * sb, a.ctrl + g.rdma_tail(c, g.node),
                     a.ctrl + g.rdma_head(c, sn), sn * g.G + g.local, SR, sb, ring);
        /* Partials of local rank l for this node's tokens: NVL ring (c, sn * G + l) here. */
        auto part = [&](int l, int q) {
            return a.nvl + (((uint64_t)c * g.N + sn * g.G + l) * S + (uint64_t)(q % S)) * sb;
        };
        Cmd *cmd = &s_cmd[gr.id];
        const int cur = s_cur[sn];
        /* Every warp of the group: the masks of the next (up to 32) tokens, one per lane. */
        const int b0 = min(32, n - cur);
        const int mask = lane < b0 ? __ldcg(a.fwd_mask + fbase + cur + lane) : 0;
        if (gr.w == 0) {
            Cmd k = {0, cur, 0, 0, 0};
            if (cur >= n) k.kind = p.credits() >= (uint32_t)n ? 2 : 0;
            else {
                const uint32_t space = (uint32_t)SR - ((uint32_t)cur - p.credits());
                bool ok = lane < b0;
                for (int l = 0; l < g.G; ++l) {
                    const uint32_t bl = __ballot_sync(0xffffffffu, (mask >> l) & 1);
                    uint64_t tl = 0;
                    if (lane == 0 && bl) tl = pshmem_ld_acquire_sys(a.ctrl + g.nvl_tail(c, sn * g.G + l));
                    tl = __shfl_sync(0xffffffffu, tl, 0);
                    const uint32_t q = s_pos[sn][l] + __popc(bl & ((1u << lane) - 1));
                    if ((mask >> l) & 1) ok &= q < tl;
                }
                const uint32_t okb = __ballot_sync(0xffffffffu, ok);
                const int ready = __ffs(~okb) - 1; /* leading ready tokens (okb has bit 31 clear
                                                       unless all 32 are ready) */
                k.end = min(min(ready < 0 ? 32 : ready, (int)space), chunk);
                k.kind = k.end > 0 ? 1 : 0;
            }
            if (lane == 0) *cmd = k;
        }
        gr.sync();
        const Cmd k = *cmd;
        if (k.kind == 1) {
            for (int i = gr.w; i < k.end; i += gr.wpg) {
                const int mi = __shfl_sync(0xffffffffu, mask, i);
                int nr = 0;
                for (int l = 0; l < g.G; ++l) {
                    const uint32_t bl = __ballot_sync(0xffffffffu, (mask >> l) & 1);
                    if (!((mi >> l) & 1)) continue;
                    const int q = s_pos[sn][l] + __popc(bl & ((1u << i) - 1));
                    if (lane == 0) s_rows[warp][nr] = part(l, q);
                    ++nr;
                }
                __syncwarp();
                uint8_t *slot = p.slot(k.base + i);
                if (lane == 0) *(int4 *)slot = make_int4(k.base + i, mi, 0, 0);
                if (lane < g.K) {
                    float w = 0.f;
                    for (int r = 0; r < nr; ++r) w += __ldcg((const float *)(s_rows[warp][r] + 16) + lane);
                    ((float *)(slot + 16))[lane] = w;
                }
                sum_rows((__nv_bfloat16 *)(slot + xo), s_rows[warp], nr, xo, g.H, NULL, NULL);
                __syncwarp();
            }
            __threadfence_system();
        }
        gr.sync();
        if (k.kind == 1 && gr.lead) {
            p.publish(k.base, k.base + k.end);
            s_cur[sn] = k.base + k.end;
        }
        if (k.kind == 1 && gr.w == 0) {
            /* The partials consumed go back to each local rank. */
            for (int l = 0; l < g.G; ++l) {
                const uint32_t bl = __ballot_sync(0xffffffffu, lane < k.end && ((mask >> l) & 1));
                if (lane == 0 && bl) {
                    credit(a, c, a.ctrl + g.nvl_head(c, sn * g.G + g.local), __popc(bl), g.node * g.G + l);
                    s_pos[sn][l] += __popc(bl);
                }
            }
        }
        gr.sync();
        return k.kind;
    });
}

/* Receiver (origin) of channel c: every warp reduces one token at a time, waiting for its
 * partial from every rank (one node) or node it went to; the slots go back after each round. */
__device__ inline void combine_recv(const Args &a, const Geo &g, int c) {
    const bool inter = g.R > 1;
    const int ns = inter ? g.R : g.N;
    const int S = inter ? a.rdma_slots : a.nvl_slots;
    __shared__ int s_max[MAXT], s_ret[MAXT];
    __shared__ const uint8_t *s_rows[NW][MAXT];
    if (threadIdx.x < MAXT) s_max[threadIdx.x] = -1, s_ret[threadIdx.x] = 0;
    __syncthreads();
    int t0, t1;
    channel_range(g.T, g.C, c, t0, t1);
    const uint64_t sb = a.slot_bytes, xo = row_offset(g.K);
    const int lane = pshmem_laneid(), warp = threadIdx.x / 32;
    auto slots = [&](int r) {
        return inter ? a.rdma + ((uint64_t)c * g.R + r) * S * sb : a.nvl + ((uint64_t)c * g.N + r) * S * sb;
    };
    auto tail = [&](int r) { return a.ctrl + (inter ? g.rdma_tail(c, r) : g.nvl_tail(c, r)); };
    for (int tb = t0; tb < t1; tb += NW) {
        const int t = tb + warp;
        if (t < t1) {
            int nr = 0;
            for (int r0 = 0; r0 < ns; r0 += 32) {
                const int r = r0 + lane;
                int h = -1;
                if (r < ns) h = a.send_head[(int64_t)t * ns + r];
                if (h >= 0) {
                    const uint64_t *tw = tail(r);
                    pshmem_i_wait<4, 32>([&] { return pshmem_ld_acquire_sys(tw) > (uint64_t)h; });
                    atomicMax(&s_max[r], h);
                }
                const uint32_t bh = __ballot_sync(0xffffffffu, h >= 0);
                if (h >= 0) s_rows[warp][nr + __popc(bh & ((1u << lane) - 1))] = slots(r) + (uint64_t)(h % S) * sb;
                nr += __popc(bh);
            }
            __syncwarp();
            if (a.recv_topk_weights && lane < g.K) {
                float w = 0.f;
                for (int i = 0; i < nr; ++i) w += __ldcg((const float *)(s_rows[warp][i] + 16) + lane);
                a.recv_topk_weights[(int64_t)t * g.K + lane] = w;
            }
            const __nv_bfloat16 *b0 = (const __nv_bfloat16 *)a.bias0, *b1 = (const __nv_bfloat16 *)a.bias1;
            sum_rows((__nv_bfloat16 *)a.recv_x + (int64_t)t * g.H, s_rows[warp], nr, xo, g.H,
                     b0 ? b0 + (int64_t)t * g.H : NULL, b1 ? b1 + (int64_t)t * g.H : NULL);
        }
        __syncthreads(); /* every read of this round's slots done */
        for (int r = threadIdx.x; r < ns; r += blockDim.x) {
            const int upto = s_max[r] + 1;
            if (upto > s_ret[r]) {
                const int pe = inter ? r * g.G + g.local : r;
                uint64_t *head = a.ctrl + (inter ? g.rdma_head(c, g.node) : g.nvl_head(c, g.me));
                credit(a, c, head, (uint32_t)(upto - s_ret[r]), pe);
                s_ret[r] = upto;
            }
        }
        __syncthreads();
    }
}

/* Grid: (2 or 3) x C blocks: senders, [forwarders,] origin receivers. */
__device__ inline void combine(const Args &a) {
    const Geo g(a);
    const int role = blockIdx.x / g.C, c = blockIdx.x % g.C;
    if (role == 0) combine_send(a, g, c);
    else if (role == 1 && g.R > 1) combine_forward(a, g, c);
    else combine_recv(a, g, c);
}

} // namespace pshmem_ep_ht

#endif /* PSHMEM_EP_HT_CUH */
