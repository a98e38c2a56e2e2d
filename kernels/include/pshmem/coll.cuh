/* proxyshmem device API: collectives per team — broadcast, fcollect, alltoall, reduce (every
 * member gets the result) and reducescatter — for one thread, a warp (every lane calls) or a
 * block (every thread calls), NVSHMEM's semantics; sync and barrier are in sync.cuh.
 *
 * Each collective starts with a team sync (no member writes a destination another member still
 * reads from an earlier call) and ends with one, a barrier (quiet + sync) where it wrote into
 * peers: on return the results are complete everywhere and the source may be reused. Data
 * moves through the ordinary put and get paths, so members that this GPU maps are reached by
 * loads and stores and the others through the ring and the proxy, in any mix:
 *
 *   broadcast  the root puts into every member's destination (one-shot push);
 *   fcollect   every member puts its block into every member's destination (push);
 *   alltoall   block j goes to member j, at the sender's index (push);
 *   reduce     pull: every member reads the members' sources (mapped ones in place, the others
 *              fetched chunk by chunk into the team's scratch) and folds them in member order,
 *              so every member computes bit-identical results; 16-bit floating types fold in
 *              float and round once. An in-place reduce writes each chunk after a team sync;
 *   reducescatter  the same on the member's own block of every source.
 *
 * The host and on-stream forms run the block forms in one block (kernels/cuda/runtime.cu);
 * from 256 KiB per member among members this GPU all maps, the data part runs on a grid of up to
 * 132 blocks between team syncs (runtime/src/gpu/host_ops/sync.rs). */
#ifndef PSHMEM_COLL_CUH
#define PSHMEM_COLL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "pshmem/rma.cuh"
#include "pshmem/sync.cuh"

/* The cooperating group of a call: 0 one thread, 1 a warp, 2 a block. */
template <int G> struct pshmem_i_grp;
template <> struct pshmem_i_grp<0> {
    static __device__ __forceinline__ uint32_t t() { return 0; }
    static __device__ __forceinline__ uint32_t nt() { return 1; }
    static __device__ __forceinline__ void sync() {}
};
template <> struct pshmem_i_grp<1> {
    static __device__ __forceinline__ uint32_t t() { return pshmem_laneid(); }
    static __device__ __forceinline__ uint32_t nt() { return 32; }
    static __device__ __forceinline__ void sync() { __syncwarp(); }
};
template <> struct pshmem_i_grp<2> {
    static __device__ __forceinline__ uint32_t t() { return PSHMEM_I_TID; }
    static __device__ __forceinline__ uint32_t nt() { return PSHMEM_I_NT; }
    static __device__ __forceinline__ void sync() { __syncthreads(); }
};

/* The team's entry for a collective, or NULL (recorded) when this PE is not a member. */
__device__ __forceinline__ const pshmem_team_device_t *pshmem_i_coll_team(int team) {
    const pshmem_team_device_t *t = pshmem_i_team(team);
    if (!t || t->my_index < 0) {
        pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, PSHMEM_ERROR_NO_PE));
        return 0;
    }
    return t;
}

/* Team sync of the group (barrier: quiet first). Every thread's stores are fenced at system
 * scope before the leader's signals, which release them to the members. */
template <int G> __device__ __forceinline__ void pshmem_i_coll_sync(int team, bool barrier) {
    typedef pshmem_i_grp<G> g;
    __threadfence_system();
    g::sync();
    if (g::t() == 0) {
        if (barrier) pshmem_quiet();
        pshmem_team_sync(team);
    }
    g::sync();
}

/* ---- the low-latency protocol ------------------------------------------------------------------
 * For messages of at most PSHMEM_LL_BYTES per member when every member is mapped: each 4 bytes
 * travel in one 8-byte store beside the call's flag, into the receiver's slot for the sender, so
 * a message costs its stores and nothing else — no signal, no team sync. A receiver waits on
 * each word's flag. Two sets of slots alternate by call: a member cannot reach the call after
 * next before every member has sent it the next one, which each does only after finishing this
 * one, so a slot is never overwritten before it is read. fcollect, alltoall, reduce and
 * reducescatter use it (every member hears from every member); broadcast does not (the root
 * hears from no one, and could run ahead). */

/* Whether the protocol serves a call of `nbytes` per member message. The same on every member
 * (same arguments; mappings are symmetric), so that all take the same path and their sequence
 * counters stay equal. */
__device__ __forceinline__ bool pshmem_i_ll_ok(const pshmem_team_device_t *t, size_t nbytes) {
    if (nbytes == 0 || nbytes > PSHMEM_LL_BYTES) return false;
    const void *probe = (const void *)(uintptr_t)(pshmem_dstate.heap_base + t->ll_off);
    for (int j = 0; j < t->size; ++j)
        if (!pshmem_ptr(probe, t->members[j])) return false;
    return true;
}

/* This PE's slot (set `parity`) for messages from member `from`. */
__device__ __forceinline__ uint64_t *pshmem_i_ll_slot(const pshmem_team_device_t *t, int parity,
                                                      int from) {
    return (uint64_t *)(uintptr_t)(pshmem_dstate.heap_base + t->ll_off) +
           ((size_t)parity * t->size + from) * (PSHMEM_LL_BYTES / 4);
}

/* The call's sequence number (this PE's count of low-latency calls on the team, the same on
 * every member), read by every thread of the group before the leader advances it. */
template <int G> __device__ __forceinline__ uint64_t pshmem_i_ll_begin(const pshmem_team_device_t *t) {
    typedef pshmem_i_grp<G> g;
    g::sync();
    uint64_t seq = *(volatile unsigned long long *)t->ll_seq + 1;
    g::sync();
    if (g::t() == 0) *(volatile unsigned long long *)t->ll_seq = seq;
    return seq;
}

/* A flag that is never 0 (the slots' initial value) and differs between consecutive calls. */
__device__ __forceinline__ uint32_t pshmem_i_ll_flag(uint64_t seq) {
    return (uint32_t)((seq - 1) % 0xffffffffull) + 1;
}

/* Word `w` of a message (the last one zero-padded). */
__device__ __forceinline__ uint32_t pshmem_i_ll_word(const char *src, size_t nbytes, size_t w) {
    size_t at = w * 4;
    if (((uintptr_t)(src + at) & 3) == 0 && at + 4 <= nbytes) return *(const uint32_t *)(src + at);
    uint32_t d = 0;
    for (size_t b = 0; b < 4 && at + b < nbytes; ++b)
        d |= (uint32_t)(unsigned char)src[at + b] << (8 * b);
    return d;
}

/* Sends `nbytes` at `src` to member `m`'s slot for this PE. */
template <int G>
__device__ __forceinline__ void pshmem_i_ll_send(const pshmem_team_device_t *t, uint64_t seq,
                                                 int m, const void *src, size_t nbytes) {
    typedef pshmem_i_grp<G> g;
    uint64_t *dst =
        (uint64_t *)pshmem_ptr(pshmem_i_ll_slot(t, (int)(seq & 1), t->my_index), t->members[m]);
    uint64_t flag = (uint64_t)pshmem_i_ll_flag(seq) << 32;
    size_t words = (nbytes + 3) / 4;
    for (size_t w = g::t(); w < words; w += g::nt())
        pshmem_st_relaxed_sys_u64(dst + w, flag | pshmem_i_ll_word((const char *)src, nbytes, w));
}

/* Receives member `from`'s `nbytes` into `out` (local memory); false when a wait failed
 * (recorded). */
template <int G>
__device__ __forceinline__ bool pshmem_i_ll_recv(const pshmem_team_device_t *t, uint64_t seq,
                                                 int from, void *out, size_t nbytes) {
    typedef pshmem_i_grp<G> g;
    const uint64_t *slot = pshmem_i_ll_slot(t, (int)(seq & 1), from);
    uint32_t flag = pshmem_i_ll_flag(seq);
    size_t words = (nbytes + 3) / 4;
    char *o = (char *)out;
    bool ok = true;
    for (size_t w = g::t(); w < words && ok; w += g::nt()) {
        uint64_t v = 0;
        ok = pshmem_i_wait<4, 64>([&] {
            v = pshmem_ld_relaxed_sys(slot + w);
            return (uint32_t)(v >> 32) == flag;
        });
        uint32_t d = (uint32_t)v;
        size_t at = w * 4;
        if (((uintptr_t)(o + at) & 3) == 0 && at + 4 <= nbytes) {
            *(uint32_t *)(o + at) = d;
        } else {
            for (size_t b = 0; b < 4 && at + b < nbytes; ++b) o[at + b] = (char)(d >> (8 * b));
        }
    }
    return ok;
}

/* Every member's message to every member: `src_of(m)` is what goes to member m, `out_of(j)`
 * where member j's lands. */
template <int G, typename Src, typename Out>
__device__ __forceinline__ int pshmem_i_ll_exchange(const pshmem_team_device_t *t, size_t nbytes,
                                                    Src src_of, Out out_of) {
    typedef pshmem_i_grp<G> g;
    uint64_t seq = pshmem_i_ll_begin<G>(t);
    for (int k = 1; k <= t->size; ++k) {
        int m = (t->my_index + k) % t->size;
        pshmem_i_ll_send<G>(t, seq, m, src_of(m), nbytes);
    }
    bool ok = true;
    for (int k = 0; k < t->size; ++k) {
        int j = (t->my_index + t->size - k) % t->size; /* own first, then the others */
        ok = pshmem_i_ll_recv<G>(t, seq, j, out_of(j), nbytes) && ok;
    }
    g::sync();
    return ok ? 0 : -1;
}

template <int G>
__device__ inline int pshmem_i_broadcast(int team, void *dest, const void *src, size_t nbytes,
                                         int root) {
    typedef pshmem_i_grp<G> g;
    const pshmem_team_device_t *t = pshmem_i_coll_team(team);
    if (!t) return -1;
    if (root < 0 || root >= t->size) {
        if (g::t() == 0)
            pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, PSHMEM_ERROR_NO_PE));
        return -1;
    }
    pshmem_i_coll_sync<G>(team, false);
    if (t->my_index == root && nbytes)
        for (int k = 1; k <= t->size; ++k)
            pshmem_i_putget(true, dest, src, nbytes, t->members[(root + k) % t->size], g::t(),
                            g::nt());
    pshmem_i_coll_sync<G>(team, true);
    return 0;
}

template <int G>
__device__ inline int pshmem_i_fcollect(int team, void *dest, const void *src, size_t nbytes) {
    typedef pshmem_i_grp<G> g;
    const pshmem_team_device_t *t = pshmem_i_coll_team(team);
    if (!t) return -1;
    if (pshmem_i_ll_ok(t, nbytes))
        return pshmem_i_ll_exchange<G>(
            t, nbytes, [&](int) { return src; },
            [&](int j) { return (char *)dest + (size_t)j * nbytes; });
    pshmem_i_coll_sync<G>(team, false);
    char *at = (char *)dest + (size_t)t->my_index * nbytes;
    if (nbytes)
        for (int k = 1; k <= t->size; ++k)
            pshmem_i_putget(true, at, src, nbytes, t->members[(t->my_index + k) % t->size],
                            g::t(), g::nt());
    pshmem_i_coll_sync<G>(team, true);
    return 0;
}

template <int G>
__device__ inline int pshmem_i_alltoall(int team, void *dest, const void *src, size_t nbytes) {
    typedef pshmem_i_grp<G> g;
    const pshmem_team_device_t *t = pshmem_i_coll_team(team);
    if (!t) return -1;
    if (pshmem_i_ll_ok(t, nbytes))
        return pshmem_i_ll_exchange<G>(
            t, nbytes, [&](int m) { return (const char *)src + (size_t)m * nbytes; },
            [&](int j) { return (char *)dest + (size_t)j * nbytes; });
    pshmem_i_coll_sync<G>(team, false);
    char *at = (char *)dest + (size_t)t->my_index * nbytes;
    if (nbytes)
        for (int k = 1; k <= t->size; ++k) {
            int j = (t->my_index + k) % t->size;
            pshmem_i_putget(true, at, (const char *)src + (size_t)j * nbytes, nbytes,
                            t->members[j], g::t(), g::nt());
        }
    pshmem_i_coll_sync<G>(team, true);
    return 0;
}

/* ---- reductions ----------------------------------------------------------------------------- */

/* The type a reduction folds in: 16-bit floating types in float. */
template <typename T> struct pshmem_i_acc {
    typedef T type;
    static __device__ __forceinline__ T in(T x) { return x; }
    static __device__ __forceinline__ T out(T a) { return a; }
};
template <> struct pshmem_i_acc<__half> {
    typedef float type;
    static __device__ __forceinline__ float in(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half out(float a) { return __float2half_rn(a); }
};
template <> struct pshmem_i_acc<__nv_bfloat16> {
    typedef float type;
    static __device__ __forceinline__ float in(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 out(float a) { return __float2bfloat16_rn(a); }
};

/* A load that bypasses the L1 (peers' memory and the scratch are written by others). */
template <typename T> __device__ __forceinline__ T pshmem_i_ldcv(const T *p) {
    T r;
    if (sizeof(T) == 1) {
        unsigned char v = __ldcv((const unsigned char *)p);
        memcpy(&r, &v, 1);
    } else if (sizeof(T) == 2) {
        unsigned short v = __ldcv((const unsigned short *)p);
        memcpy(&r, &v, 2);
    } else if (sizeof(T) == 4) {
        unsigned int v = __ldcv((const unsigned int *)p);
        memcpy(&r, &v, 4);
    } else {
        unsigned long long v = __ldcv((const unsigned long long *)p);
        memcpy(&r, &v, 8);
    }
    return r;
}

template <typename A>
__device__ __forceinline__ A pshmem_i_bitop(int op, A a, A b, std::true_type) {
    return op == PSHMEM_RED_AND ? (A)(a & b) : op == PSHMEM_RED_OR ? (A)(a | b) : (A)(a ^ b);
}
template <typename A>
__device__ __forceinline__ A pshmem_i_bitop(int, A a, A, std::false_type) {
    return a; /* bitwise operators are refused for floating types before any data moves */
}

template <typename A> __device__ __forceinline__ A pshmem_i_fold(int op, A a, A b) {
    switch (op) {
    case PSHMEM_RED_SUM: return a + b;
    case PSHMEM_RED_PROD: return a * b;
    case PSHMEM_RED_MIN: return b < a ? b : a;
    case PSHMEM_RED_MAX: return a < b ? b : a;
    default: return pshmem_i_bitop(op, a, b, std::is_integral<A>());
    }
}

/* The vector part of pshmem_i_fold_range: the first len / V * V elements, by 16-byte vectors
 * (all sources and `out` 16-byte aligned), EV vectors per thread per round, the next member's
 * loads in flight while this one's fold. Returns how many elements it did. Only 4- and 8-byte
 * types take it. With 16-bit floats it gave wrong sums on 2 H200s: the memcpy of the results
 * below becomes 16 byte stores, and CUDA 13.0's ptxas turns the low byte of a converted half
 * into F2I.U8.F16 (the value's integer part, not its bits: 3.0, 0x4200, becomes 0x4203).
 * The 4- and 8-byte types' bytes come from moves and are right (ops.py checks them on the GPU;
 * scripts/sass-check.sh scans for the pattern), but they are stored a byte at a time too.
 * Next, to be run on a GPU: bit-cast the results into a uint4 register and store it whole,
 * then let 16-bit types take this path again. Registers: a block reduce kernel of 4- or 8-byte
 * elements takes 92-96 on sm_90 (80 before), so blocks of up to 672 threads. */
#define PSHMEM_I_FOLD_VECS 2
template <typename T, typename SrcOf>
__device__ __forceinline__ size_t pshmem_i_fold_vec(int op, int n, SrcOf src_of, T *out,
                                                    size_t len, uint32_t t, uint32_t nt,
                                                    std::true_type) {
    typedef pshmem_i_acc<T> acc;
    typedef typename acc::type A;
    constexpr int V = 16 / sizeof(T), EV = PSHMEM_I_FOLD_VECS;
    const size_t nv = len / V;
    for (size_t base = 0; base < nv; base += (size_t)EV * nt) {
        uint4 cur[EV] = {}, nxt[EV] = {};
        A a[EV * V];
        const uint4 *p = (const uint4 *)src_of(0);
#pragma unroll
        for (int e = 0; e < EV; ++e) {
            size_t v = base + (size_t)e * nt + t;
            if (v < nv) cur[e] = __ldcv(p + v);
        }
#pragma unroll 1
        for (int j = 0; j < n; ++j) {
            if (j + 1 < n) {
                const uint4 *q = (const uint4 *)src_of(j + 1);
#pragma unroll
                for (int e = 0; e < EV; ++e) {
                    size_t v = base + (size_t)e * nt + t;
                    if (v < nv) nxt[e] = __ldcv(q + v);
                }
            }
#pragma unroll
            for (int e = 0; e < EV; ++e) {
                T x[V];
                memcpy(x, &cur[e], 16);
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    A y = acc::in(x[k]);
                    a[e * V + k] = j == 0 ? y : pshmem_i_fold(op, a[e * V + k], y);
                }
                cur[e] = nxt[e];
            }
        }
#pragma unroll
        for (int e = 0; e < EV; ++e) {
            size_t v = base + (size_t)e * nt + t;
            if (v < nv) {
                T y[V];
#pragma unroll
                for (int k = 0; k < V; ++k) y[k] = acc::out(a[e * V + k]);
                memcpy((uint4 *)out + v, y, 16);
            }
        }
    }
    return nv * V;
}
template <typename T, typename SrcOf>
__device__ __forceinline__ size_t pshmem_i_fold_vec(int, int, SrcOf, T *, size_t, uint32_t,
                                                    uint32_t, std::false_type) {
    return 0;
}

/* out[i] = the fold of src_of(0)[i], ..., src_of(n - 1)[i] in member order, for i < len, by
 * thread t of nt: by vectors where the types and alignment allow, element by element after.
 * One block reading its peer over NVLink is bound by its loads in flight, not by the link: a
 * 64 KiB float sum in one block of 512 threads took 29 µs element by element on 2 H200s, and
 * 29 µs by vectors as well. The host and on-stream calls gained: 50 -> 37 µs at 64 KiB (their
 * one block of 256 threads), 56 -> 40 µs from 256 KiB to 4 MiB (their grid). */
template <typename T, typename SrcOf>
__device__ __forceinline__ void pshmem_i_fold_range(int op, int n, SrcOf src_of, T *out,
                                                    size_t len, uint32_t t, uint32_t nt) {
    typedef pshmem_i_acc<T> acc;
    typedef typename acc::type A;
    bool aligned = ((uintptr_t)out & 15) == 0;
    for (int j = 0; j < n && aligned; ++j) aligned = ((uintptr_t)src_of(j) & 15) == 0;
    size_t done = 0;
    if (aligned)
        done = pshmem_i_fold_vec<T>(op, n, src_of, out, len, t, nt,
                                    std::integral_constant<bool, (sizeof(T) >= 4)>());
    /* Element by element, E per thread per round (each member's E loads in flight together). */
    const int E = 4;
    for (size_t base = done; base < len; base += (size_t)E * nt) {
        A a[E];
#pragma unroll 1
        for (int j = 0; j < n; ++j) {
            const T *p = src_of(j);
#pragma unroll
            for (int e = 0; e < E; ++e) {
                size_t i = base + (size_t)e * nt + t;
                if (i < len) {
                    A x = acc::in(pshmem_i_ldcv(p + i));
                    a[e] = j == 0 ? x : pshmem_i_fold(op, a[e], x);
                }
            }
        }
#pragma unroll
        for (int e = 0; e < E; ++e) {
            size_t i = base + (size_t)e * nt + t;
            if (i < len) out[i] = acc::out(a[e]);
        }
    }
}

/* reduce (scatter = false) or reducescatter (scatter = true) of `nelems` elements by `op`. */
template <int G, typename T>
__device__ inline int pshmem_i_reduce(int team, int op, T *dest, const T *src, size_t nelems,
                                      bool scatter) {
    typedef pshmem_i_grp<G> g;
    typedef pshmem_i_acc<T> acc;
    const pshmem_team_device_t *t = pshmem_i_coll_team(team);
    if (!t) return -1;
    if (op >= PSHMEM_RED_AND && !std::is_integral<T>::value) {
        if (g::t() == 0)
            pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, PSHMEM_ERROR_NO_PE));
        return -1;
    }
    const int n = t->size;
    T *scratch = (T *)t->scratch;
    if (pshmem_i_ll_ok(t, nelems * sizeof(T)) && (size_t)n * nelems * sizeof(T) <= t->scratch_bytes) {
        /* Every member's contribution (its block for member m, scattering) into the scratch,
         * then the fold in member order. */
        const size_t nb = nelems * sizeof(T);
        int rc = pshmem_i_ll_exchange<G>(
            t, nb, [&](int m) { return scatter ? src + (size_t)m * nelems : src; },
            [&](int j) { return (char *)scratch + (size_t)j * nb; });
        for (size_t i = g::t(); i < nelems; i += g::nt()) {
            typename acc::type a = acc::in(scratch[i]);
            for (int j = 1; j < n; ++j) a = pshmem_i_fold(op, a, acc::in(scratch[(size_t)j * nelems + i]));
            dest[i] = acc::out(a);
        }
        g::sync();
        return rc;
    }
    const T *block = scatter ? src + (size_t)t->my_index * nelems : src;
    const size_t src_elems = scatter ? (size_t)n * nelems : nelems;
    const bool in_place = nelems && (uintptr_t)dest < (uintptr_t)(src + src_elems) &&
                          (uintptr_t)src < (uintptr_t)(dest + nelems);
    /* The scratch holds one chunk per member and, in place, the chunk's results: chunks are
     * 16-byte multiples so that every member's slice stays aligned. */
    size_t per = t->scratch_bytes / (size_t)(n + 1) / 16 * 16 / sizeof(T);
    if (per == 0) per = 1;
    pshmem_i_coll_sync<G>(team, false);
    for (size_t at = 0; at < nelems; at += per) {
        size_t len = nelems - at < per ? nelems - at : per;
        /* Members reached through the proxy: their chunks into the scratch, by the leader. */
        if (g::t() == 0) {
            uint64_t last = 0;
            for (int j = 0; j < n; ++j)
                if (!pshmem_ptr(block + at, t->members[j])) {
                    uint64_t e = pshmem_i_putget(false, scratch + (size_t)j * per, block + at,
                                                 len * sizeof(T), t->members[j], 0, 1);
                    if (e > last) last = e;
                }
            pshmem_i_wait_done(last);
        }
        g::sync();
        T *out = in_place ? scratch + (size_t)n * per : dest + at;
        pshmem_i_fold_range<T>(
            op, n,
            [&](int j) {
                const T *p = (const T *)pshmem_ptr(block + at, t->members[j]);
                return p ? p : (const T *)scratch + (size_t)j * per;
            },
            out, len, g::t(), g::nt());
        if (in_place) {
            /* Every member has read this chunk of every source: now it may be overwritten. */
            pshmem_i_coll_sync<G>(team, false);
            for (size_t i = g::t(); i < len; i += g::nt()) dest[at + i] = out[i];
        }
        g::sync();
    }
    /* No member returns (and reuses its source) before every member has read it. */
    pshmem_i_coll_sync<G>(team, false);
    return 0;
}

/* ---- the typed names (NVSHMEM's with pshmem_) ------------------------------------------------ */

#define PSHMEM_I_BYTES_COLL(PFX, SUF, G)                                                        \
    __device__ inline int pshmem##PFX##_broadcastmem##SUF(int team, void *dest, const void *src, \
                                                         size_t nbytes, int root) {             \
        return pshmem_i_broadcast<G>(team, dest, src, nbytes, root);                            \
    }                                                                                           \
    __device__ inline int pshmem##PFX##_fcollectmem##SUF(int team, void *dest, const void *src, \
                                                        size_t nbytes) {                        \
        return pshmem_i_fcollect<G>(team, dest, src, nbytes);                                   \
    }                                                                                           \
    __device__ inline int pshmem##PFX##_alltoallmem##SUF(int team, void *dest, const void *src, \
                                                        size_t nbytes) {                        \
        return pshmem_i_alltoall<G>(team, dest, src, nbytes);                                   \
    }
PSHMEM_I_BYTES_COLL(, , 0)
PSHMEM_I_BYTES_COLL(x, _warp, 1)
PSHMEM_I_BYTES_COLL(x, _block, 2)

/* Typed broadcast, fcollect, alltoall (counts in elements). */
#define PSHMEM_I_TYPED_COLL_G(NAME, T, PFX, SUF, G)                                             \
    __device__ inline int pshmem##PFX##_##NAME##_broadcast##SUF(int team, T *dest, const T *src, \
                                                               size_t nelems, int root) {       \
        return pshmem_i_broadcast<G>(team, dest, src, nelems * sizeof(T), root);                \
    }                                                                                           \
    __device__ inline int pshmem##PFX##_##NAME##_fcollect##SUF(int team, T *dest, const T *src, \
                                                              size_t nelems) {                  \
        return pshmem_i_fcollect<G>(team, dest, src, nelems * sizeof(T));                       \
    }                                                                                           \
    __device__ inline int pshmem##PFX##_##NAME##_alltoall##SUF(int team, T *dest, const T *src, \
                                                              size_t nelems) {                  \
        return pshmem_i_alltoall<G>(team, dest, src, nelems * sizeof(T));                       \
    }
#define PSHMEM_I_TYPED_COLL(NAME, T)                                                            \
    PSHMEM_I_TYPED_COLL_G(NAME, T, , , 0)                                                       \
    PSHMEM_I_TYPED_COLL_G(NAME, T, x, _warp, 1)                                                 \
    PSHMEM_I_TYPED_COLL_G(NAME, T, x, _block, 2)
PSHMEM_RMA_TYPES(PSHMEM_I_TYPED_COLL)
PSHMEM_I_TYPED_COLL(half, __half)
PSHMEM_I_TYPED_COLL(bfloat16, __nv_bfloat16)

/* Reductions: NAME_OP_reduce and NAME_OP_reducescatter. */
#define PSHMEM_I_RED_G(NAME, T, OPN, OP, PFX, SUF, G)                                           \
    __device__ inline int pshmem##PFX##_##NAME##_##OPN##_reduce##SUF(int team, T *dest,         \
                                                                    const T *src, size_t n) {   \
        return pshmem_i_reduce<G, T>(team, OP, dest, src, n, false);                            \
    }                                                                                           \
    __device__ inline int pshmem##PFX##_##NAME##_##OPN##_reducescatter##SUF(                    \
        int team, T *dest, const T *src, size_t n) {                                            \
        return pshmem_i_reduce<G, T>(team, OP, dest, src, n, true);                             \
    }
#define PSHMEM_I_RED_OP(NAME, T, OPN, OP)                                                       \
    PSHMEM_I_RED_G(NAME, T, OPN, OP, , , 0)                                                     \
    PSHMEM_I_RED_G(NAME, T, OPN, OP, x, _warp, 1)                                               \
    PSHMEM_I_RED_G(NAME, T, OPN, OP, x, _block, 2)
#define PSHMEM_I_RED_ARITH(NAME, T)                                                             \
    PSHMEM_I_RED_OP(NAME, T, sum, PSHMEM_RED_SUM)                                               \
    PSHMEM_I_RED_OP(NAME, T, prod, PSHMEM_RED_PROD)                                             \
    PSHMEM_I_RED_OP(NAME, T, min, PSHMEM_RED_MIN)                                               \
    PSHMEM_I_RED_OP(NAME, T, max, PSHMEM_RED_MAX)
#define PSHMEM_I_RED_INT(NAME, T)                                                               \
    PSHMEM_I_RED_ARITH(NAME, T)                                                                 \
    PSHMEM_I_RED_OP(NAME, T, and, PSHMEM_RED_AND)                                               \
    PSHMEM_I_RED_OP(NAME, T, or, PSHMEM_RED_OR)                                                 \
    PSHMEM_I_RED_OP(NAME, T, xor, PSHMEM_RED_XOR)

/* NVSHMEM's reduction types: every integer type gets the bitwise operators too. */
#define PSHMEM_I_RED_INT_DT(NAME, T, DT) PSHMEM_I_RED_INT(NAME, T)
PSHMEM_RED_WIDE_INT_TYPES(PSHMEM_I_RED_INT_DT)
PSHMEM_RED_NARROW_INT_TYPES(PSHMEM_I_RED_INT)
#define PSHMEM_I_RED_FLOAT_TYPES(X)                                                             \
    X(float, float)                                                                             \
    X(double, double)                                                                           \
    X(half, __half)                                                                             \
    X(bfloat16, __nv_bfloat16)
PSHMEM_I_RED_FLOAT_TYPES(PSHMEM_I_RED_ARITH)

#endif /* PSHMEM_COLL_CUH */
