/* Device API tests (pshmem-gpu-tests gpu-ops / gpu-kill): every operation on the peer PE, by
 * thread, warp and block, through NVLink/IPC or through the ring and proxy, whichever the
 * runtime chose. Kernels count what they find wrong in `errors`; the host also compares whole
 * buffers byte for byte. */
#include "pshmem/device.cuh"
#include "args.h"

__device__ __forceinline__ uint64_t t_mix(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Byte i of the pattern `seed` (the host computes the same). */
__device__ __forceinline__ unsigned char t_byte(uint64_t seed, uint64_t i) {
    return (unsigned char)(t_mix(seed ^ (i >> 3)) >> ((i & 7) * 8));
}

extern "C" __global__ void t_fill(const t_fill_args_t a) {
    unsigned char *buf = a.buf;
    const uint64_t n = a.n, seed = a.seed;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        buf[i] = t_byte(seed, i);
}

/* One put or get of `len` bytes with variant v: 0 thread, 1 thread nbi, 2 warp, 3 warp nbi,
 * 4 block, 5 block nbi (nbi ones are completed by quiet). One block. */
extern "C" __global__ void t_putget(const t_putget_args_t a) {
    const int put = a.put, v = a.v, pe = a.pe;
    char *dst = a.dst;
    const char *src = a.src;
    const unsigned long long len = a.len;
    unsigned t = threadIdx.x;
    switch (v) {
    case 0:
        if (t == 0) { if (put) pshmem_putmem(dst, src, len, pe); else pshmem_getmem(dst, src, len, pe); }
        break;
    case 1:
        if (t == 0) {
            if (put) pshmem_putmem_nbi(dst, src, len, pe); else pshmem_getmem_nbi(dst, src, len, pe);
            pshmem_quiet();
        }
        break;
    case 2:
        if (t < 32) { if (put) pshmemx_putmem_warp(dst, src, len, pe); else pshmemx_getmem_warp(dst, src, len, pe); }
        break;
    case 3:
        if (t < 32) {
            if (put) pshmemx_putmem_nbi_warp(dst, src, len, pe); else pshmemx_getmem_nbi_warp(dst, src, len, pe);
            if (t == 0) pshmem_quiet();
        }
        break;
    case 4:
        if (put) pshmemx_putmem_block(dst, src, len, pe); else pshmemx_getmem_block(dst, src, len, pe);
        break;
    default:
        if (put) pshmemx_putmem_nbi_block(dst, src, len, pe); else pshmemx_getmem_nbi_block(dst, src, len, pe);
        pshmemx_quiet_block();
        break;
    }
}

/* p of every type to the peer (thread i writes element i), then g of the peer's `gsrc`. */
extern "C" __global__ void t_pg(const t_pg_args_t a) {
    uint64_t *p64 = a.p64, *gout = a.gout;
    int *p32 = a.p32;
    char *p8 = a.p8;
    double *pd = a.pd;
    float *pf = a.pf;
    const uint64_t *gsrc = a.gsrc;
    const int n = a.n, pe = a.pe, me = a.me;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        pshmem_uint64_p(&p64[i], t_mix((uint64_t)me * 1000003u + i), pe);
        pshmem_int_p(&p32[i], -(me * 100000 + i), pe);
        pshmem_char_p(&p8[i], (char)(me * 31 + i), pe);
        pshmem_double_p(&pd[i], 0.5 * i + me, pe);
        pshmem_float_p(&pf[i], 0.25f * i - me, pe);
    }
    __syncthreads();
    if (threadIdx.x == 0) pshmem_quiet();
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) gout[i] = pshmem_uint64_g(&gsrc[i], pe);
}

/* Ordering of put-with-signal: block 0 sends `k` messages of `msg` bytes to `pe` (message j
 * into buf + j*msg, signal ADD 1 after each; variant 0 thread nbi, 1 block nbi, 2 thread
 * blocking); block 1 receives the peer's: after the signal reaches j+1, message j must be there
 * whole. */
extern "C" __global__ void t_put_signal(const t_put_signal_args_t a) {
    char *buf = a.buf;
    const char *src = a.src;
    const unsigned long long msg = a.msg, peer_seed = a.peer_seed;
    uint64_t *sig = a.sig;
    unsigned long long *errors = (unsigned long long *)a.errors;
    const int k = a.k, pe = a.pe, variant = a.variant;
    if (blockIdx.x == 0) {
        for (int j = 0; j < k; ++j) {
            char *d = buf + (uint64_t)j * msg;
            const char *s = src + (uint64_t)j * msg;
            if (variant == 1) {
                pshmemx_putmem_signal_nbi_block(d, s, msg, sig, 1, PSHMEM_SIGNAL_ADD, pe);
            } else if (threadIdx.x == 0) {
                if (variant == 0) pshmem_putmem_signal_nbi(d, s, msg, sig, 1, PSHMEM_SIGNAL_ADD, pe);
                else pshmem_putmem_signal(d, s, msg, sig, 1, PSHMEM_SIGNAL_ADD, pe);
            }
        }
        if (threadIdx.x == 0) pshmem_quiet();
        return;
    }
    __shared__ uint64_t seen;
    for (int j = 0; j < k; ++j) {
        if (threadIdx.x == 0) seen = pshmem_signal_wait_until(sig, PSHMEM_CMP_GE, (uint64_t)j + 1);
        __syncthreads();
        if (seen < (uint64_t)j + 1) {
            if (threadIdx.x == 0) atomicAdd(errors, 1000000ull); /* the wait ended on an error */
            return;
        }
        const volatile unsigned char *m = (const volatile unsigned char *)buf + (uint64_t)j * msg;
        unsigned long long bad = 0;
        for (uint64_t i = threadIdx.x; i < msg; i += blockDim.x)
            bad += m[i] != t_byte(peer_seed, (uint64_t)j * msg + i);
        if (bad) atomicAdd(errors, bad);
        __syncthreads();
    }
}

/* Contended atomics: every thread adds 1 to word 0 (64-bit fetch_add) and word 1 (64-bit add)
 * and to c32[0] (32-bit fetch_add) and c32[1] (32-bit add) of every PE, `iters` times; threads
 * below 4 also increment word 2 with a compare-swap loop. */
extern "C" __global__ void t_atomics(const t_atomics_args_t a) {
    uint64_t *c64 = a.c64;
    unsigned int *c32 = a.c32;
    const int iters = a.iters;
    int n = pshmem_n_pes();
    for (int it = 0; it < iters; ++it) {
        for (int pe = 0; pe < n; ++pe) {
            pshmem_uint64_atomic_fetch_add(&c64[0], 1, pe);
            pshmem_uint64_atomic_add(&c64[1], 1, pe);
            pshmem_uint32_atomic_fetch_add(&c32[0], 1u, pe);
            pshmem_uint32_atomic_add(&c32[1], 1u, pe);
            if (threadIdx.x < 4) {
                uint64_t old = pshmem_uint64_atomic_fetch(&c64[2], pe);
                for (int tries = 0; tries < 100000; ++tries) {
                    uint64_t got = pshmem_uint64_atomic_compare_swap(&c64[2], old, old + 1, pe);
                    if (got == old) break;
                    old = got;
                    if (pshmem_error()) return;
                }
            }
        }
    }
    pshmem_quiet();
}

/* The semantics of each AMO, one thread, on this PE's own word at the peer (`x64[me]`). */
extern "C" __global__ void t_amo_semantics(const t_amo_semantics_args_t a) {
    uint64_t *x64 = a.x64;
    unsigned int *x32 = a.x32;
    const int pe = a.pe;
    unsigned long long *errors = (unsigned long long *)a.errors;
    int me = pshmem_my_pe();
    uint64_t *w = &x64[me];
    unsigned int *v = &x32[me];
    unsigned long long bad = 0;
    pshmem_uint64_atomic_set(w, 5, pe);
    pshmem_quiet();
    bad += pshmem_uint64_atomic_fetch(w, pe) != 5;
    bad += pshmem_uint64_atomic_swap(w, 7, pe) != 5;
    bad += pshmem_uint64_atomic_compare_swap(w, 7, 9, pe) != 7;
    bad += pshmem_uint64_atomic_compare_swap(w, 8, 1, pe) != 9;
    bad += pshmem_uint64_atomic_fetch_add(w, 3, pe) != 9;
    bad += pshmem_uint64_atomic_fetch(w, pe) != 12;
    bad += pshmem_int64_atomic_fetch_add((int64_t *)w, -20, pe) != 12;
    bad += pshmem_int64_atomic_fetch((const int64_t *)w, pe) != -8;
    pshmem_uint32_atomic_set(v, 0xfffffff0u, pe);
    pshmem_quiet();
    bad += pshmem_uint32_atomic_fetch_add(v, 0x20u, pe) != 0xfffffff0u; /* wraps at 32 bits */
    bad += pshmem_uint32_atomic_fetch(v, pe) != 0x10u;
    bad += pshmem_uint32_atomic_swap(v, 3u, pe) != 0x10u;
    bad += pshmem_uint32_atomic_compare_swap(v, 3u, 4u, pe) != 3u;
    bad += pshmem_int_atomic_fetch((const int *)v, pe) != 4;
    /* A signal through signal_op, and wait_until on the peer's view of it. Two signal
     * operations are ordered by a fence (NVSHMEM's rule): on the host-staged path over an
     * unordered fabric (gated mode), the ADD may otherwise be applied first. */
    pshmemx_signal_op(&x64[8 + me], 40, PSHMEM_SIGNAL_SET, pe);
    pshmem_fence();
    pshmemx_signal_op(&x64[8 + me], 2, PSHMEM_SIGNAL_ADD, pe);
    pshmem_quiet();
    bad += pshmem_uint64_g(&x64[8 + me], pe) != 42;
    if (bad) atomicAdd(errors, bad);
}

/* Device barrier: round r stores r into the peer's word (p), barriers, and expects the word
 * written into this PE by its other neighbour to be r. One thread. */
extern "C" __global__ void t_barrier(const t_barrier_args_t a) {
    uint64_t *word = a.word;
    const int rounds = a.rounds, pe = a.pe;
    unsigned long long *errors = (unsigned long long *)a.errors;
    for (int r = 1; r <= rounds; ++r) {
        pshmem_uint64_p(word, (uint64_t)r, pe);
        pshmem_barrier_all();
        if (*(volatile uint64_t *)word != (uint64_t)r) atomicAdd(errors, 1ull);
        pshmem_barrier_all();
        if (pshmem_error()) return;
    }
}

/* Waits for a signal that may never come (the peer died): ends with the error recorded. */
extern "C" __global__ void t_wait(const t_wait_args_t a) {
    uint64_t *sig = a.sig, *out = a.out;
    out[0] = pshmem_signal_wait_until(sig, PSHMEM_CMP_GE, 1);
    out[1] = pshmem_error();
}
