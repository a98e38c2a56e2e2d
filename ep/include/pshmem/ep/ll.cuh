/* proxyshmem MoE expert parallelism, low-latency mode: dispatch and combine, each a send and
 * a receive phase of one kernel: both in one launch, or the receive phase in a later launch
 * (the "hook", so the transfers overlap other work with no SM held). Layout and arguments:
 * pshmem/ep/ll.h. Written from the algorithm description in the design notes (DeepEP's
 * low-latency mode), with these choices of our own:
 *
 * - A block owns destination experts, not tokens: it lists the tokens that chose its expert
 *   (a block-wide compaction over topk_idx, in token order), writes their messages and then
 *   knows the count with no cross-block counter. Row i of (expert, source) is the i-th token,
 *   so the order is deterministic, and combine can send expert outputs back contiguously.
 * - Both directions are packed by sending rank: at the receiver, rank r's rows for it lie
 *   together (its experts one after another; a dispatch's led by a header of the row count of
 *   each expert, since the receiver cannot know them in advance), so a batched operation sends
 *   one put and one flag per destination rank, not one per (expert, destination): fewer,
 *   larger messages, what a fabric with a per-message cost wants (issue 37's EFA model).
 * - Same-host peers (mapped) get the messages written straight into their receive area, then
 *   the flag with a release store after __threadfence_system. Other peers get counted puts
 *   (pshmem/counted.cuh): per token, or the one put, then one counted signal; the proxy never
 *   exposes a flag before the data it covers, on any fabric.
 * - Receive rows are packed by source rank (begin = the counts of the ranks before), so the
 *   output is the same whatever order the counts arrive in.
 * - The receivers clear the words they consumed (the last block to read them), so the buffer
 *   is clean for its next use without another launch. */
#ifndef PSHMEM_EP_LL_CUH
#define PSHMEM_EP_LL_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "pshmem/device.cuh"
#include "pshmem/ep/ll.h"

namespace pshmem_ep {

/* A block's place in its phase's grid: one launch runs the send phase on a grid of nx * ny
 * blocks and, when both phases run in it, the receive phase on another (see ep.cu). */
struct Blk {
    int x, y, nx, ny;
};

struct Geo {
    int T, Tmax, H, K, E, N, me, El;
    __device__ explicit Geo(const pshmem_ep_ll_args_t &a)
        : T(a.num_tokens), Tmax(a.max_tokens), H(a.hidden), K(a.num_topk), E(a.num_experts),
          N(a.num_ranks), me(a.my_rank), El(a.num_experts / a.num_ranks) {}
};

/* The ring of everything a dispatch or combine sends to `rank` (a counted signal covers only
 * the counted puts of its own ring). Per token, spread by destination over the rings and proxy threads
 * (thousands of puts); batched, ring 0 for every destination: one proxy thread posts the few
 * large puts one after another, so each NIC serves them in turn and every receiver's data
 * ends as early as the order allows, where several threads' queues would share each NIC and
 * delay them all (benches/results/efa-model). */
__device__ __forceinline__ const pshmem_ring_device_t *ring_to(const pshmem_ep_ll_args_t &a,
                                                               int rank) {
    if (!a.n_rings) return NULL;
    return (a.flags & PSHMEM_EP_PER_TOKEN) ? &a.rings[(uint32_t)rank % a.n_rings] : &a.rings[0];
}

/* Rows of one (local expert dl, source) pair: the count in layout_range. */
__device__ __forceinline__ uint64_t pair_rows(const pshmem_ep_ll_args_t &a, int dl, int src) {
    return (uint64_t)(a.layout_range[(int64_t)dl * a.num_ranks + src] & 0xffffffff);
}

/* Bytes of a dispatch message as sent (the slot stride may be larger). */
__device__ __forceinline__ uint64_t msg_len(const pshmem_ep_ll_args_t &a) {
    uint64_t H = (uint64_t)a.hidden;
    return (a.flags & PSHMEM_EP_FP8) ? 16 + H + H / 128 * 4 : 16 + 2 * H;
}

/* The slot stride of a dispatch message in this call's layout: the message rounded up to 16
 * bytes (an FP8 dispatch packs its slots tighter than a BF16 one, so a batched put carries no
 * padding; the area is sized for the BF16 stride, `msg_bytes`). */
__device__ __forceinline__ uint64_t msg_stride(const pshmem_ep_ll_args_t &a) {
    return (msg_len(a) + 15) & ~15ull;
}

/* Waits until the 64-bit word at `p` (written by a peer, or by this GPU's proxy) is nonzero;
 * returns it (0 after a recorded error or timeout). */
__device__ __forceinline__ uint64_t wait_nonzero(const uint64_t *p) {
    uint64_t v = 0;
    pshmem_i_wait<4, 32>([&] {
        v = pshmem_ld_acquire_sys(p);
        return v != 0;
    });
    return v;
}

/* The warp writes token `row` of x (bf16 [*][H]) as a dispatch message at `m`. FP8: lanes
 * 0-15 and 16-31 each cover one group of 128 channels per step (8 channels a lane), the amax
 * is reduced over the 16 lanes of the group. */
__device__ __forceinline__ void write_message(uint8_t *m, const __nv_bfloat16 *row, int token,
                                              int H, uint32_t flags) {
    const int lane = (int)pshmem_laneid();
    if (lane == 0) *(int4 *)m = make_int4(token, 0, 0, 0);
    uint8_t *payload = m + 16;
    if (!(flags & PSHMEM_EP_FP8)) {
        const int4 *src = (const int4 *)row;
        int4 *dst = (int4 *)payload;
        for (int i = lane; i < H / 8; i += 32) dst[i] = src[i];
        return;
    }
    float *scales = (float *)(payload + H);
    /* Four 16-byte loads in flight per lane before the reductions (latency, not bandwidth,
     * bounds one warp). */
    for (int c0 = lane * 8; c0 < H; c0 += 4 * 256) {
        int4 raw[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (c0 + u * 256 < H) raw[u] = *(const int4 *)(row + c0 + u * 256);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int c = c0 + u * 256;
            if (c >= H) break; /* uniform across the warp: H is a multiple of 256 */
            const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&raw[u];
            float v[8];
            float amax = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float2 f = __bfloat1622float2(h2[j]);
                v[2 * j] = f.x;
                v[2 * j + 1] = f.y;
                amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
            }
#pragma unroll
            for (int o = 8; o >= 1; o >>= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            amax = fmaxf(amax, 1e-4f);
            float scale_inv = amax / 448.f;
            if (flags & PSHMEM_EP_ROUND_SCALE) scale_inv = exp2f(ceilf(log2f(scale_inv)));
            float scale = 1.f / scale_inv;
            uint64_t packed = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(
                    make_float2(v[2 * j] * scale, v[2 * j + 1] * scale), __NV_SATFINITE,
                    __NV_E4M3);
                packed |= (uint64_t)two << (16 * j);
            }
            *(uint64_t *)(payload + c) = packed;
            if ((lane & 15) == 0) scales[c / 128] = scale_inv;
        }
    }
}

/* Bytes of a dispatch region's header: El int32 row counts, padded to 16 bytes. */
__device__ __forceinline__ uint64_t header_bytes(const Geo &g) {
    return ((uint64_t)g.El * 4 + 15) & ~15ull;
}

/* Offset of source s's dispatch region in a receive area (and of destination s's in the send
 * area, staged the same way): the header, then room for El * Tmax slots of the largest
 * stride (ll.h). */
__device__ __forceinline__ uint64_t region_at(const pshmem_ep_ll_args_t &a, const Geo &g, int s) {
    return (uint64_t)s * (header_bytes(g) + (uint64_t)g.El * g.Tmax * a.msg_bytes);
}

/* Dispatch, send phase. Grid: (blocks sharing the experts, parts per expert),
 * PSHMEM_EP_THREADS threads. Every block of an expert lists the tokens that chose it and
 * counts the rows this rank sends to the expert's rank for its lower experts (where this
 * expert's rows start in the region) and for all of them; part p writes every parts-th of the
 * messages, part 0 the header's count. The last of the El * parts blocks of a destination
 * rank (a done counter in this rank's own signal words) sends its one put (header and every
 * row; per token, the header alone) and the flag. Never waits for a peer (only for ring
 * space). */
__device__ inline void dispatch_send(const pshmem_ep_ll_args_t &a, const Blk &b) {
    __shared__ int list[PSHMEM_EP_MAX_TOKENS];
    __shared__ int wsum[3][PSHMEM_EP_THREADS / 32];
    __shared__ bool last;
    const Geo g(a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const int part = b.y, parts = b.ny;
    const uint64_t len = msg_len(a), stride = msg_stride(a), head = header_bytes(g);
    const bool per_token = (a.flags & PSHMEM_EP_PER_TOKEN) != 0;
    const __nv_bfloat16 *x = (const __nv_bfloat16 *)a.x;
    for (int e0 = b.x; e0 < g.E; e0 += b.nx) {
        /* Staggered: each rank starts with the next rank's experts, so that the ranks' first
         * messages do not all go to rank 0. */
        const int e = (e0 + (g.me + 1) * g.El) % g.E;
        const int dst = e / g.El, dl = e % g.El, first = dst * g.El;
        /* The tokens that chose e, in token order, and the rows for dst's lower experts and
         * for all of its experts. A token that names an expert twice sends it one row (both
         * of its top-k slots point at it, so the combine adds it with both weights): counting
         * every naming would place the rows after it past their room. */
        int count = 0, lower = 0, all = 0;
        for (int base = 0; base < g.T; base += blockDim.x) {
            int t = base + threadIdx.x, lo = 0, in = 0;
            uint32_t k_sel = 0; /* the top-k slots naming e (K <= PSHMEM_EP_MAX_TOPK) */
            if (t < g.T)
                for (int k = 0; k < g.K; ++k) {
                    const int64_t *row = a.topk_idx + (int64_t)t * g.K;
                    const int64_t c = row[k];
                    bool again = false;
                    for (int j = 0; j < k; ++j) again |= row[j] == c;
                    if (c == e) k_sel |= 1u << k;
                    if (again) continue;
                    lo += c >= first && c < e;
                    in += c >= first && c < first + g.El;
                }
            for (int o = 16; o >= 1; o >>= 1) {
                lo += __shfl_xor_sync(0xffffffffu, lo, o);
                in += __shfl_xor_sync(0xffffffffu, in, o);
            }
            unsigned ballot = __ballot_sync(0xffffffffu, k_sel != 0);
            if (lane == 0) {
                wsum[0][warp] = __popc(ballot);
                wsum[1][warp] = lo;
                wsum[2][warp] = in;
            }
            __syncthreads();
            int before = count, total = 0;
            for (int w = 0; w < nw; ++w) {
                if (w < warp) before += wsum[0][w];
                total += wsum[0][w];
                lower += wsum[1][w];
                all += wsum[2][w];
            }
            if (k_sel) {
                int i = before + __popc(ballot & ((1u << lane) - 1));
                list[i] = t;
                if (part == 0)
                    for (uint32_t m = k_sel; m; m &= m - 1)
                        a.slot_map[(int64_t)t * g.K + __ffs(m) - 1] = i;
            }
            count += total;
            __syncthreads();
        }
        /* Where the messages go: this rank's region of the destination's receive area, after
         * the header and the rows of the lower experts; staged alike in the send area. */
        uint8_t *region = a.recv + region_at(a, g, g.me);
        uint8_t *peer = (uint8_t *)pshmem_ptr(region, dst);
        uint8_t *staged = a.send + region_at(a, g, dst);
        uint8_t *rows = (peer ? peer : staged) + head + (uint64_t)lower * stride;
        uint8_t *there = region + head + (uint64_t)lower * stride;
        uint64_t *flag = a.sig + g.me;
        const pshmem_ring_device_t *ring = ring_to(a, dst);
        if (part == 0 && threadIdx.x == 0) ((int *)(peer ? peer : staged))[dl] = count;
        for (int i = part * nw + warp; i < count; i += parts * nw) {
            int t = list[i];
            uint8_t *m = rows + (uint64_t)i * stride;
            write_message(m, x + (int64_t)t * g.H, t, g.H, a.flags);
            if (!peer && per_token) {
                /* Every lane's bytes are visible system-wide before lane 0 publishes. */
                __threadfence_system();
                __syncwarp();
                pshmemx_putmem_counted_nbi_warp_on(ring, there + (uint64_t)i * stride, m, len,
                                                   flag, dst);
            }
        }
        /* Every thread's stores (messages, count, slot_map, and in per-token mode the
         * published puts) before the done count; the destination's last block then sees all
         * of them. */
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long *done =
                (unsigned long long *)(a.sig + 2 * (uint64_t)g.E + g.El + 1 + dst);
            const unsigned long long blocks = (unsigned long long)g.El * parts;
            last = blocks == 1 || atomicAdd(done, 1ull) == blocks - 1;
            if (last && blocks > 1) {
                *done = 0;
                __threadfence_system(); /* acquire side of the other blocks' fences */
            }
            if (last) {
                /* No rows: the flag says so and the header is not read. */
                if (!peer && all > 0)
                    pshmem_i_put_counted(ring, region, staged,
                                         head + (per_token ? 0 : (uint64_t)all * stride), flag,
                                         dst, 0, 1);
                pshmemx_signal_counted_on(ring, flag, (uint64_t)(-(int64_t)all - 1),
                                          PSHMEM_SIGNAL_SET, dst);
            }
        }
        __syncthreads(); /* `list` and `wsum` are reused */
    }
}

/* Dispatch, receive phase. Grid: (El, parts); every block of local expert dl waits for every
 * source's flag, reads its expert's count and offset from the sources' headers, packs the
 * rows by source rank and copies its share of them. */
__device__ inline void dispatch_recv(const pshmem_ep_ll_args_t &a, const Blk &b) {
    __shared__ int cnt[PSHMEM_EP_MAX_RANKS];
    __shared__ int off[PSHMEM_EP_MAX_RANKS];
    __shared__ int beg[PSHMEM_EP_MAX_RANKS + 1];
    const Geo g(a);
    const int dl = b.x, part = b.y, parts = b.ny;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    uint64_t *flags = a.sig;
    /* A warp per source: lane 0 waits for the flag, the lanes sum the header's lower
     * counts. */
    const uint64_t t0 = pshmem_globaltimer();
    for (int s = warp; s < g.N; s += nw) {
        uint64_t v = lane == 0 ? wait_nonzero(&flags[s]) : 0;
        v = __shfl_sync(0xffffffffu, v, 0);
        /* Lane 0's acquire, then the warp's memory barrier: the other lanes' header reads are
         * ordered after the flag (a shuffle orders execution, not memory). */
        __syncwarp();
        const int all = v ? (int)(-(int64_t)v - 1) : 0;
        int o = 0, c = 0;
        if (all > 0) {
            const int *head = (const int *)(a.recv + region_at(a, g, s));
            for (int d = lane; d < dl; d += 32) o += head[d];
            for (int k = 16; k >= 1; k >>= 1) o += __shfl_xor_sync(0xffffffffu, o, k);
            c = head[dl];
        }
        if (lane == 0) {
            cnt[s] = c;
            off[s] = o;
            if (part == 0 && a.wait_stats)
                atomicAdd((unsigned long long *)&a.wait_stats[s],
                          (unsigned long long)(pshmem_globaltimer() - t0));
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int b = 0;
        for (int s = 0; s < g.N; ++s) {
            beg[s] = b;
            b += cnt[s];
        }
        beg[g.N] = b;
        /* The last receiving block (of any expert) to have read the flags clears them. */
        unsigned long long *done = (unsigned long long *)(a.sig + 2 * (uint64_t)g.E);
        if (atomicAdd(done, 1ull) == (unsigned long long)g.El * parts - 1) {
            for (int s = 0; s < g.N; ++s) flags[s] = 0;
            *done = 0;
        }
    }
    __syncthreads();
    const int total = beg[g.N];
    if (part == 0) {
        for (int s = threadIdx.x; s < g.N; s += blockDim.x)
            a.layout_range[(int64_t)dl * g.N + s] = ((int64_t)beg[s] << 32) | (int64_t)cnt[s];
        if (threadIdx.x == 0) {
            a.recv_count[dl] = total;
            if (a.cum_stats) atomicAdd(&a.cum_stats[dl], total);
        }
    }
    const int64_t rows = (int64_t)g.N * g.Tmax;
    const bool fp8 = (a.flags & PSHMEM_EP_FP8) != 0;
    const int H = g.H;
    const uint64_t head = header_bytes(g), stride = msg_stride(a);
    for (int r = part * nw + warp; r < total; r += parts * nw) {
        int s = 0;
        while (s + 1 < g.N && beg[s + 1] <= r) ++s;
        const int i = r - beg[s];
        const uint8_t *m = a.recv + region_at(a, g, s) + head + (uint64_t)(off[s] + i) * stride;
        const int64_t row = dl * rows + r;
        if (lane == 0) a.src_info[row] = *(const int *)m;
        /* pshmem_i_copy keeps four vectors in flight per lane (a plain loop waited for each
         * load before the next). */
        if (fp8) {
            pshmem_i_copy((uint8_t *)a.out_x + row * H, m + 16, (size_t)H, lane, 32);
            const float *sc = (const float *)(m + 16 + H);
            if (a.flags & PSHMEM_EP_UE8M0) {
                /* The scales are powers of two (ROUND_SCALE): their exponent bytes, four
                 * groups to an int32 (group 4j + b in byte b of int j), ints column-major. */
                uint8_t *e8 = (uint8_t *)a.out_scales;
                for (int c = lane; c < H / 128; c += 32)
                    e8[4 * (((int64_t)dl * (H / 512) + c / 4) * rows + r) + c % 4] =
                        (uint8_t)(__float_as_uint(sc[c]) >> 23);
            } else {
                for (int c = lane; c < H / 128; c += 32)
                    a.out_scales[((int64_t)dl * (H / 128) + c) * rows + r] = sc[c];
            }
        } else {
            pshmem_i_copy((uint8_t *)a.out_x + row * 2 * H, m + 16, 2 * (size_t)H, lane, 32);
        }
    }
}

/* Combine, send phase. Grid: any number of blocks (they share the (local expert, source)
 * pairs). A pair's rows go to the source's receive area at this rank's region, after the rows
 * of this rank's lower experts for that source. The last block to finish a source's El pairs
 * (a done counter) sends the flag, and in batched mode first the one put of all the source's
 * rows, staged together; per token, or zero-copy (the rows stay where the caller wrote
 * them), each pair's rows go as their own counted puts. */
__device__ inline void combine_send(const pshmem_ep_ll_args_t &a, const Blk &b) {
    __shared__ uint64_t before_s, total_s;
    const Geo g(a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const uint64_t row_bytes = 2 * (uint64_t)g.H;
    const bool per_token = (a.flags & PSHMEM_EP_PER_TOKEN) != 0;
    const bool zero_copy = (a.flags & PSHMEM_EP_ZERO_COPY) != 0;
    const bool bulk = !per_token && !zero_copy;
    const uint8_t *x = (const uint8_t *)a.x;
    const uint64_t rows = (uint64_t)g.N * g.Tmax;
    const uint64_t region = (uint64_t)g.El * g.Tmax; /* rows of one sending rank */
    uint8_t *mine = a.recv + (uint64_t)g.me * region * row_bytes;
    uint64_t *flag = a.sig + g.E + g.me;
    for (int p = b.x; p < g.E; p += b.nx) {
        /* Staggered: each rank starts with the next one, so that the ranks' first puts do
         * not all go to rank 0. */
        const int dl = p / g.N, src = (p % g.N + g.me + 1) % g.N;
        const int64_t range = a.layout_range[(int64_t)dl * g.N + src];
        const uint64_t begin = (uint64_t)(range >> 32);
        const int n = (int)(range & 0xffffffff);
        /* The source's rows of this rank's lower experts (where this pair's go) and of all of
         * them: warp 0 loads the counts side by side rather than one after another. */
        if (warp == 0) {
            uint64_t b = 0, t = 0;
            for (int d = lane; d < g.El; d += 32) {
                const uint64_t c = pair_rows(a, d, src);
                t += c;
                if (d < dl) b += c;
            }
            for (int o = 16; o >= 1; o >>= 1) {
                b += __shfl_xor_sync(0xffffffffu, b, o);
                t += __shfl_xor_sync(0xffffffffu, t, o);
            }
            if (lane == 0) {
                before_s = b;
                total_s = t;
            }
        }
        __syncthreads();
        const uint64_t before = before_s, total = total_s;
        uint8_t *there = mine + before * row_bytes;
        uint8_t *peer = (uint8_t *)pshmem_ptr(there, src);
        const pshmem_ring_device_t *ring = ring_to(a, src);
        const uint64_t first = dl * rows + begin; /* row index in [El][N * Tmax] */
        uint8_t *staged =
            a.send + (bulk ? (uint64_t)src * region + before : first) * row_bytes;
        for (int i = warp; i < n; i += nw) {
            const uint8_t *row = x + (first + i) * row_bytes;
            if (peer) {
                pshmem_i_copy(peer + (uint64_t)i * row_bytes, row, row_bytes, pshmem_laneid(), 32);
                continue;
            }
            uint8_t *out = staged + (uint64_t)i * row_bytes;
            if (!zero_copy) pshmem_i_copy(out, row, row_bytes, pshmem_laneid(), 32);
            if (per_token) {
                __threadfence_system();
                __syncwarp();
                pshmemx_putmem_counted_nbi_warp_on(ring, there + (uint64_t)i * row_bytes, out,
                                                   row_bytes, flag, src);
            }
        }
        /* Every thread's stores (rows, and the puts published) before the done count; the
         * last block of the source then sees all of them. */
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            if (!peer && zero_copy && !per_token && n > 0) {
                pshmem_i_put_counted(ring, there, staged, (uint64_t)n * row_bytes, flag, src, 0,
                                     1);
                __threadfence_system(); /* that put's slot before the done count */
            }
            unsigned long long *done =
                (unsigned long long *)(a.sig + 3 * (uint64_t)g.E + g.El + 1 + src);
            const bool last =
                g.El == 1 || atomicAdd(done, 1ull) == (unsigned long long)(g.El - 1);
            if (last) {
                if (g.El > 1) {
                    *done = 0;
                    __threadfence_system(); /* acquire side of the other blocks' fences */
                }
                if (!peer && bulk && total > 0)
                    pshmem_i_put_counted(ring, mine, a.send + (uint64_t)src * region * row_bytes,
                                         total * row_bytes, flag, src, 0, 1);
                pshmemx_signal_counted_on(ring, flag, 1, PSHMEM_SIGNAL_SET, src);
            }
        }
        __syncthreads(); /* before_s and total_s are rewritten for the next pair */
    }
}

/* Combine, receive phase. Grid: any number of blocks; each counts this rank's tokens per
 * expert (where each expert's rows start in its rank's region), waits for every rank's flag,
 * then warps reduce slices of tokens: out[t] = sum_k w[t,k] * y[e_k][slot], in FP32, rounded
 * once to bf16. */
__device__ inline void combine_recv(const pshmem_ep_ll_args_t &a, const Blk &b) {
    __shared__ int start[PSHMEM_EP_MAX_EXPERTS];
    const Geo g(a);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    for (int e = threadIdx.x; e < g.E; e += blockDim.x) start[e] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < g.T * g.K; j += blockDim.x) {
        const int64_t e = a.topk_idx[j];
        bool again = false; /* a token's expert named twice got one row (dispatch_send) */
        for (int k = j - j % g.K; k < j; ++k) again |= a.topk_idx[k] == e;
        if (e >= 0 && !again) atomicAdd(&start[e], 1);
    }
    __syncthreads();
    for (int r = threadIdx.x; r < g.N; r += blockDim.x) {
        int run = 0;
        for (int d = 0; d < g.El; ++d) {
            const int c = start[r * g.El + d];
            start[r * g.El + d] = run;
            run += c;
        }
    }
    uint64_t *flags = a.sig + g.E;
    for (int r = threadIdx.x; r < g.N; r += blockDim.x) wait_nonzero(&flags[r]);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long *done = (unsigned long long *)(a.sig + 2 * (uint64_t)g.E + g.El);
        if (atomicAdd(done, 1ull) == (unsigned long long)(b.nx - 1)) {
            for (int r = 0; r < g.N; ++r) flags[r] = 0;
            *done = 0;
        }
    }
    const uint64_t row_bytes = 2 * (uint64_t)g.H;
    __nv_bfloat16 *out = (__nv_bfloat16 *)a.out_x;
    /* A warp's unit is 256 channels of one token (a 16-byte vector a lane), so that every
     * block has work (a warp a token left most SMs idle and read its rows one dependent step
     * after another). Lane k holds the token's k-th row and weight; then up to CHUNK rows'
     * vectors are in flight per lane. The rows are summed in top-k order, as one warp per
     * token did. */
    constexpr int CHUNK = 8;
    const int slices = g.H / 256, units = g.T * slices;
    for (int u = b.x * nw + warp; u < units; u += b.nx * nw) {
        const int t = u / slices, c = (u % slices) * 256 + lane * 8;
        const uint8_t *mine = NULL;
        float w = 0.f;
        if (lane < g.K) {
            const int64_t e = a.topk_idx[(int64_t)t * g.K + lane];
            if (e >= 0) {
                /* Rank e / El's region, then its expert's start, then the token's slot. */
                const uint64_t r = (uint64_t)(e - e % g.El) * g.Tmax + start[e] +
                                   a.slot_map[(int64_t)t * g.K + lane];
                mine = a.recv + r * row_bytes;
                w = a.topk_weights[(int64_t)t * g.K + lane];
            }
        }
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k0 = 0; k0 < g.K; k0 += CHUNK) {
            /* A missing row (no expert, or past K) loads as zeros with weight 0: adding +0
             * leaves the sum as it was. */
            int4 raw[CHUNK];
#pragma unroll
            for (int v = 0; v < CHUNK; ++v) {
                const uint8_t *row = (const uint8_t *)__shfl_sync(
                    0xffffffffu, (unsigned long long)mine, (k0 + v) & 31);
                raw[v] = row && k0 + v < g.K ? *(const int4 *)(row + 2 * (uint64_t)c)
                                              : make_int4(0, 0, 0, 0);
            }
#pragma unroll
            for (int v = 0; v < CHUNK; ++v) {
                const float wv = __shfl_sync(0xffffffffu, w, (k0 + v) & 31);
                const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&raw[v];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float2 f = __bfloat1622float2(h2[j]);
                    acc[2 * j] += wv * f.x;
                    acc[2 * j + 1] += wv * f.y;
                }
            }
        }
        int4 res;
        __nv_bfloat162 *r2 = (__nv_bfloat162 *)&res;
#pragma unroll
        for (int j = 0; j < 4; ++j) r2[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
        *(int4 *)(out + (int64_t)t * g.H + c) = res;
    }
}

/* This block's place in a phase's grid of nx * ny blocks, or false when the launch has more
 * blocks than the phase. */
__device__ __forceinline__ bool place(int nx, int ny, Blk &b) {
    const int i = blockIdx.x;
    if (i >= nx * ny) return false;
    b = Blk{i % nx, i / nx, nx, ny};
    return true;
}

/* One launch: the send phase, then the receive phase, those `a.phases` names (ll.h). */
template <void (*Send)(const pshmem_ep_ll_args_t &, const Blk &),
          void (*Recv)(const pshmem_ep_ll_args_t &, const Blk &)>
__device__ inline void run(const pshmem_ep_ll_args_t &a) {
    Blk b;
    if ((a.phases & PSHMEM_EP_PHASE_SEND) && place(a.send_x, a.send_y, b)) Send(a, b);
    if ((a.phases & PSHMEM_EP_PHASE_RECV) && place(a.recv_x, a.recv_y, b)) Recv(a, b);
}

/* Clears both buffers' signal words (the host brackets it with barriers). */
__device__ inline void clean(uint64_t *sig, uint64_t words) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
         i += (uint64_t)gridDim.x * blockDim.x)
        sig[i] = 0;
}

} // namespace pshmem_ep

#endif /* PSHMEM_EP_LL_CUH */
