/* proxyshmem device API: header-only (no relocatable device code). Include it in a .cu file,
 * load the module through the runtime (`Gpu::load`, which fills `pshmem_dstate`), and call
 * these functions from kernels. Names and semantics follow NVSHMEM's device API without a
 * context argument (pshmem_ ~ nvshmem_, pshmemx_ ~ nvshmemx_).
 *
 * Routing, per call: a PE whose heap this GPU maps (itself, and same-host peers opened through
 * CUDA IPC) is reached by loads and stores (NVLink or PCIe peer access); any other PE — another
 * host, or every peer under PSHMEM_DISABLE_P2P=1 — through the command ring and the proxy.
 *
 * Memory ordering:
 * - direct stores to a peer are made visible system-wide by __threadfence_system() (fence,
 *   quiet) or by the release of a signal store (st.release.sys / atom.release.sys): a peer that
 *   observes the signal with an acquire load then sees the data;
 * - ring operations are ordered per target PE by the proxy (fence pushes a FENCE descriptor)
 *   and finish when `ctrl->completed` passes them (quiet); a signal of put_signal is applied
 *   by the target after the data (see proxy/src/engine.rs);
 * - every spin (ring space, quiet, waits, barrier) also watches the ring's error word, which
 *   the proxy raises when a peer dies or an operation fails: no wait hangs. The first error a
 *   thread meets is recorded in `*pshmem_dstate.dev_error` (device memory) for the host
 *   (`Gpu::check`), and `pshmem_error()` returns it so a kernel can stop early.
 */
#ifndef PSHMEM_DEVICE_CUH
#define PSHMEM_DEVICE_CUH

#include <stddef.h>
#include <stdint.h>
#include "pshmem/ring_device.cuh"

/* What the device API needs, filled by the runtime (mirror: runtime/src/gpu.rs, DeviceState). */
typedef struct pshmem_device_state {
    int32_t my_pe;
    int32_t n_pes;
    uint64_t heap_base;          /* device address of this PE's symmetric heap */
    uint64_t heap_size;          /* bytes */
    const uint64_t *peer_base;   /* [n_pes]: this GPU's address of each PE's heap, 0 = via ring */
    pshmem_ring_device_t ring;   /* the GPU's command ring (capacity 0: none) */
    unsigned int *cell_owner;    /* [n_cells]: fetch-result cells in use (device memory) */
    unsigned long long *cells;   /* [n_cells]: results of ring gets/fetches (device memory) */
    uint32_t n_cells;
    uint32_t any_ring;           /* some PE is reached through the ring */
    unsigned long long *barrier_epoch; /* device memory: barriers done by this PE */
    uint64_t barrier_off;        /* heap offset of n_pes 8-byte barrier words */
    unsigned long long *dev_error; /* device memory: first error met by a device call */
    uint64_t timeout_ns;           /* longest wait (PSHMEM_OP_TIMEOUT); then a timeout error */
} pshmem_device_state_t;

PSHMEM_STATIC_ASSERT(sizeof(pshmem_device_state_t) == 128, "device state is 128 bytes");

/* The module's copy of the state (each module loaded through the runtime gets it filled). */
__constant__ pshmem_device_state_t pshmem_dstate;

/* Error codes recorded in dev_error besides the ring's (PSHMEM_RING_ERROR_*), (code<<32)|pe. */
#define PSHMEM_DEV_ERROR_BAD_ADDRESS 16u /* an address outside the symmetric heap */
#define PSHMEM_DEV_ERROR_NO_CELLS 17u    /* no free result cell for a ring fetch */
#define PSHMEM_DEV_ERROR_TIMEOUT 18u     /* a wait outlasted PSHMEM_OP_TIMEOUT */

enum pshmem_cmp {
    PSHMEM_CMP_EQ = 0,
    PSHMEM_CMP_NE = 1,
    PSHMEM_CMP_GT = 2,
    PSHMEM_CMP_LE = 3,
    PSHMEM_CMP_LT = 4,
    PSHMEM_CMP_GE = 5
};

/* ---- basics -------------------------------------------------------------------------------- */

__device__ __forceinline__ int pshmem_my_pe(void) { return pshmem_dstate.my_pe; }
__device__ __forceinline__ int pshmem_n_pes(void) { return pshmem_dstate.n_pes; }

/* The first error any device call of this PE met (0: none). */
__device__ __forceinline__ uint64_t pshmem_error(void) {
    return *(volatile unsigned long long *)pshmem_dstate.dev_error;
}

__device__ __forceinline__ void pshmem_i_record(uint64_t err) {
    atomicCAS(pshmem_dstate.dev_error, 0ull, (unsigned long long)err);
}

/* The ring's error word, recorded when raised. */
__device__ __forceinline__ uint64_t pshmem_i_ring_error(void) {
    if (pshmem_dstate.ring.capacity == 0) return 0;
    uint64_t e = pshmem_ld_relaxed_sys(&pshmem_dstate.ring.ctrl->error);
    if (e) pshmem_i_record(e);
    return e;
}

/* Nanoseconds of the GPU's global timer. */
__device__ __forceinline__ uint64_t pshmem_i_now(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Called every few spins of a wait that started at `t0`: true (with the error recorded) when
 * the ring's error word is raised, an earlier call failed, or the wait outlasted the timeout. */
__device__ __forceinline__ bool pshmem_i_wait_over(uint64_t t0) {
    if (pshmem_i_ring_error() || pshmem_error()) return true;
    if (pshmem_dstate.timeout_ns && pshmem_i_now() - t0 > pshmem_dstate.timeout_ns) {
        pshmem_i_record(((uint64_t)PSHMEM_DEV_ERROR_TIMEOUT << 32) | 0xffffffffu);
        return true;
    }
    return false;
}

/* Offset of a symmetric address in this PE's heap, or ~0 (recorded) when outside. */
__device__ __forceinline__ uint64_t pshmem_i_offset(const void *p, size_t len, int pe) {
    uint64_t off = (uint64_t)(uintptr_t)p - pshmem_dstate.heap_base;
    if (off > pshmem_dstate.heap_size || len > pshmem_dstate.heap_size - off) {
        pshmem_i_record(((uint64_t)PSHMEM_DEV_ERROR_BAD_ADDRESS << 32) | (uint32_t)pe);
        return ~0ull;
    }
    return off;
}

/* This GPU's address of `pe`'s copy of symmetric `p`, or NULL when reached through the ring. */
__device__ __forceinline__ void *pshmem_ptr(const void *p, int pe) {
    if ((unsigned)pe >= (unsigned)pshmem_dstate.n_pes) return NULL;
    uint64_t base = pshmem_dstate.peer_base[pe];
    if (!base) return NULL;
    return (void *)(uintptr_t)(base + ((uint64_t)(uintptr_t)p - pshmem_dstate.heap_base));
}

/* ---- ring helpers -------------------------------------------------------------------------- */

__device__ __forceinline__ pshmem_slot_t pshmem_i_slot(uint32_t op, uint32_t flags, uint32_t sub,
                                                      uint32_t nslots, uint32_t pe, uint64_t a,
                                                      uint64_t b, uint64_t c) {
    pshmem_slot_t s;
    s.a = a;
    s.b = b;
    s.c = c;
    s.pe = pe;
    s.ctrl = PSHMEM_CTRL_MAKE(op, flags, sub, nslots);
    return s;
}

/* Publishes; returns the index past the operation, or 0 after recording an error. */
__device__ __forceinline__ uint64_t pshmem_i_push(const pshmem_slot_t *ops, uint32_t n) {
    uint64_t end = 0;
    uint64_t err = pshmem_ring_push(&pshmem_dstate.ring, ops, n, &end);
    if (err) {
        pshmem_i_record(err);
        return 0;
    }
    return end;
}

/* Waits until the ring has completed everything below `end` (or an error). */
__device__ __forceinline__ void pshmem_i_wait_done(uint64_t end) {
    if (!end) return;
    uint64_t t0 = pshmem_i_now();
    while (pshmem_ld_acquire_sys(&pshmem_dstate.ring.ctrl->completed) < end) {
        if (pshmem_i_wait_over(t0)) return;
        __nanosleep(64);
    }
}

/* A result cell of device memory, claimed until released. */
__device__ __forceinline__ int pshmem_i_cell_claim(void) {
    uint32_t n = pshmem_dstate.n_cells;
    uint32_t start = (uint32_t)((blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u) % n;
    for (uint32_t spin = 0; spin < 64u * n; ++spin) {
        uint32_t i = (start + spin) % n;
        if (atomicCAS(&pshmem_dstate.cell_owner[i], 0u, 1u) == 0u) {
            __threadfence();
            return (int)i;
        }
        if ((spin % n) == n - 1) __nanosleep(256);
    }
    pshmem_i_record(((uint64_t)PSHMEM_DEV_ERROR_NO_CELLS << 32) | 0xffffffffu);
    return -1;
}

__device__ __forceinline__ void pshmem_i_cell_release(int i) {
    __threadfence();
    atomicExch(&pshmem_dstate.cell_owner[i], 0u);
}

/* ---- memory ordering ----------------------------------------------------------------------- */

/* Orders this thread's earlier operations to each PE before its later ones to that PE. */
__device__ inline void pshmem_fence(void) {
    __threadfence_system();
    if (pshmem_dstate.any_ring) {
        pshmem_slot_t s = pshmem_i_slot(PSHMEM_OP_FENCE, 0, 0, 1, 0, 0, 0, 0);
        pshmem_i_push(&s, 1);
    }
}

/* Completes every operation issued so far by this PE's GPU (direct stores visible system-wide,
 * ring operations finished at their targets). */
__device__ inline void pshmem_quiet(void) {
    __threadfence_system();
    if (pshmem_dstate.any_ring) {
        pshmem_i_wait_done(*(volatile unsigned long long *)pshmem_dstate.ring.head);
    }
}

/* ---- cooperative copies (direct path) ------------------------------------------------------ */

/* Copies n bytes with `nt` threads (this one is `t`): 16-byte vectors when both addresses and
 * the length allow, bytes otherwise. */
__device__ __forceinline__ void pshmem_i_copy(void *dst, const void *src, size_t n, uint32_t t,
                                              uint32_t nt) {
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (((d | s) & 15) == 0) {
        size_t nv = n / 16;
        int4 *dv = (int4 *)dst;
        const int4 *sv = (const int4 *)src;
        size_t i = t;
        /* Four independent 16-byte loads in flight per thread before the stores. */
        for (; i + 3 * (size_t)nt < nv; i += 4 * (size_t)nt) {
            int4 a = sv[i], b = sv[i + nt], c = sv[i + 2 * (size_t)nt], e = sv[i + 3 * (size_t)nt];
            dv[i] = a;
            dv[i + nt] = b;
            dv[i + 2 * (size_t)nt] = c;
            dv[i + 3 * (size_t)nt] = e;
        }
        for (; i < nv; i += nt) dv[i] = sv[i];
        for (size_t j = nv * 16 + t; j < n; j += nt) ((char *)dst)[j] = ((const char *)src)[j];
    } else {
        for (size_t j = t; j < n; j += nt) ((char *)dst)[j] = ((const char *)src)[j];
    }
}

/* ---- put / get ----------------------------------------------------------------------------- */

/* Shared by every put/get variant: `t` of `nt` cooperating threads; thread 0 publishes ring
 * work. Returns the ring index to wait for (0: none or direct). */
__device__ __forceinline__ uint64_t pshmem_i_putget(bool put, void *dest, const void *src,
                                                    size_t n, int pe, uint32_t t, uint32_t nt) {
    if (n == 0) return 0;
    const void *sym = put ? dest : src; /* the symmetric side */
    void *remote = pshmem_ptr(sym, pe);
    if (remote) {
        if (put) pshmem_i_copy(remote, src, n, t, nt);
        else pshmem_i_copy(dest, remote, n, t, nt);
        return 0;
    }
    if (t != 0) return 0;
    if ((unsigned)pe >= (unsigned)pshmem_dstate.n_pes) {
        pshmem_i_record(((uint64_t)PSHMEM_DEV_ERROR_BAD_ADDRESS << 32) | (uint32_t)pe);
        return 0;
    }
    uint64_t off = pshmem_i_offset(sym, n, pe);
    if (off == ~0ull) return 0;
    /* The local side goes as a device address (any device or mapped memory): the proxy copies
     * it through its staging buffers. */
    uint64_t local = (uint64_t)(uintptr_t)(put ? src : dest);
    pshmem_slot_t s = pshmem_i_slot(put ? PSHMEM_OP_PUT : PSHMEM_OP_GET, PSHMEM_FLAG_RAW_LOCAL, 0,
                                     1, (uint32_t)pe, off, local, n);
    return pshmem_i_push(&s, 1);
}

/* Blocking: on return the source may be reused (put) or the data is here (get). */
__device__ inline void pshmem_putmem(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_wait_done(pshmem_i_putget(true, dest, src, n, pe, 0, 1));
}
__device__ inline void pshmem_getmem(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_wait_done(pshmem_i_putget(false, dest, src, n, pe, 0, 1));
}
/* Non-blocking: complete with quiet. */
__device__ inline void pshmem_putmem_nbi(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(true, dest, src, n, pe, 0, 1);
}
__device__ inline void pshmem_getmem_nbi(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(false, dest, src, n, pe, 0, 1);
}

/* Warp variants: every lane of the warp calls with the same arguments. */
#define PSHMEM_I_WARP_LANE (threadIdx.x & 31u)
__device__ inline void pshmemx_putmem_warp(void *dest, const void *src, size_t n, int pe) {
    uint64_t end = pshmem_i_putget(true, dest, src, n, pe, PSHMEM_I_WARP_LANE, 32);
    if (PSHMEM_I_WARP_LANE == 0) pshmem_i_wait_done(end);
    __syncwarp();
}
__device__ inline void pshmemx_getmem_warp(void *dest, const void *src, size_t n, int pe) {
    uint64_t end = pshmem_i_putget(false, dest, src, n, pe, PSHMEM_I_WARP_LANE, 32);
    if (PSHMEM_I_WARP_LANE == 0) pshmem_i_wait_done(end);
    __syncwarp();
}
__device__ inline void pshmemx_putmem_nbi_warp(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(true, dest, src, n, pe, PSHMEM_I_WARP_LANE, 32);
    __syncwarp();
}
__device__ inline void pshmemx_getmem_nbi_warp(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(false, dest, src, n, pe, PSHMEM_I_WARP_LANE, 32);
    __syncwarp();
}

/* Block variants: every thread of the block calls with the same arguments. */
#define PSHMEM_I_TID (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))
#define PSHMEM_I_NT (blockDim.x * blockDim.y * blockDim.z)
__device__ inline void pshmemx_putmem_block(void *dest, const void *src, size_t n, int pe) {
    uint64_t end = pshmem_i_putget(true, dest, src, n, pe, PSHMEM_I_TID, PSHMEM_I_NT);
    if (PSHMEM_I_TID == 0) pshmem_i_wait_done(end);
    __syncthreads();
}
__device__ inline void pshmemx_getmem_block(void *dest, const void *src, size_t n, int pe) {
    uint64_t end = pshmem_i_putget(false, dest, src, n, pe, PSHMEM_I_TID, PSHMEM_I_NT);
    if (PSHMEM_I_TID == 0) pshmem_i_wait_done(end);
    __syncthreads();
}
__device__ inline void pshmemx_putmem_nbi_block(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(true, dest, src, n, pe, PSHMEM_I_TID, PSHMEM_I_NT);
    __syncthreads();
}
__device__ inline void pshmemx_getmem_nbi_block(void *dest, const void *src, size_t n, int pe) {
    pshmem_i_putget(false, dest, src, n, pe, PSHMEM_I_TID, PSHMEM_I_NT);
    __syncthreads();
}

/* ---- signals ------------------------------------------------------------------------------- */

/* Signal operations (as NVSHMEM_SIGNAL_SET / _ADD). */
#define PSHMEM_SIGNAL_SET_OP PSHMEM_SIGNAL_SET
#define PSHMEM_SIGNAL_ADD_OP PSHMEM_SIGNAL_ADD

/* Applies a signal to a directly reachable word with release semantics (earlier stores of this
 * thread are visible before the signal is). */
__device__ __forceinline__ void pshmem_i_signal_direct(uint64_t *p, uint64_t v, int op) {
    if (op == PSHMEM_SIGNAL_ADD) {
        asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    } else {
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    }
}

/* Returns the ring index to wait for (0: direct or error). */
__device__ __forceinline__ uint64_t pshmem_i_signal_op(uint64_t *sig, uint64_t v, int op, int pe) {
    uint64_t *remote = (uint64_t *)pshmem_ptr(sig, pe);
    if (remote) {
        pshmem_i_signal_direct(remote, v, op);
        return 0;
    }
    uint64_t off = pshmem_i_offset(sig, 8, pe);
    if (off == ~0ull || (unsigned)pe >= (unsigned)pshmem_dstate.n_pes) return 0;
    pshmem_slot_t s = pshmem_i_slot(PSHMEM_OP_SIGNAL, 0, (uint32_t)op, 1, (uint32_t)pe, off, v, 0);
    return pshmem_i_push(&s, 1);
}

/* Updates `pe`'s signal word (non-blocking; complete with quiet). */
__device__ inline void pshmemx_signal_op(uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_signal_op(sig, v, op, pe);
}

/* put-with-signal: the signal is never visible before the data. */
__device__ __forceinline__ uint64_t pshmem_i_put_signal(void *dest, const void *src, size_t n,
                                                        uint64_t *sig, uint64_t v, int op, int pe,
                                                        uint32_t t, uint32_t nt) {
    void *remote = pshmem_ptr(dest, pe);
    if (remote) {
        pshmem_i_copy(remote, src, n, t, nt);
        if (nt > 1) {
            /* Every cooperating thread's stores are ordered before thread 0's release. */
            __threadfence_system();
            if (nt == 32) __syncwarp(); else __syncthreads();
        }
        if (t == 0) pshmem_i_signal_direct((uint64_t *)pshmem_ptr(sig, pe), v, op);
        return 0;
    }
    if (t != 0) return 0;
    uint64_t off = pshmem_i_offset(dest, n, pe);
    uint64_t soff = pshmem_i_offset(sig, 8, pe);
    if (off == ~0ull || soff == ~0ull || (unsigned)pe >= (unsigned)pshmem_dstate.n_pes) return 0;
    pshmem_slot_t s[2];
    s[0] = pshmem_i_slot(PSHMEM_OP_PUT_SIGNAL, PSHMEM_FLAG_RAW_LOCAL, (uint32_t)op, 2, (uint32_t)pe,
                         off, (uint64_t)(uintptr_t)src, n);
    s[1] = pshmem_i_slot(0, 0, 0, 1, (uint32_t)pe, soff, v, 0);
    s[1].ctrl = 0;
    return pshmem_i_push(s, 2);
}

__device__ inline void pshmem_putmem_signal(void *dest, const void *src, size_t n, uint64_t *sig,
                                            uint64_t v, int op, int pe) {
    pshmem_i_wait_done(pshmem_i_put_signal(dest, src, n, sig, v, op, pe, 0, 1));
}
__device__ inline void pshmem_putmem_signal_nbi(void *dest, const void *src, size_t n,
                                                uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_put_signal(dest, src, n, sig, v, op, pe, 0, 1);
}
__device__ inline void pshmemx_putmem_signal_nbi_warp(void *dest, const void *src, size_t n,
                                                      uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_put_signal(dest, src, n, sig, v, op, pe, PSHMEM_I_WARP_LANE, 32);
    __syncwarp();
}
__device__ inline void pshmemx_putmem_signal_nbi_block(void *dest, const void *src, size_t n,
                                                       uint64_t *sig, uint64_t v, int op, int pe) {
    pshmem_i_put_signal(dest, src, n, sig, v, op, pe, PSHMEM_I_TID, PSHMEM_I_NT);
    __syncthreads();
}

__device__ __forceinline__ bool pshmem_i_cmp(uint64_t a, int cmp, uint64_t b) {
    switch (cmp) {
    case PSHMEM_CMP_EQ: return a == b;
    case PSHMEM_CMP_NE: return a != b;
    case PSHMEM_CMP_GT: return a > b;
    case PSHMEM_CMP_LE: return a <= b;
    case PSHMEM_CMP_LT: return a < b;
    default: return a >= b;
    }
}

__device__ __forceinline__ bool pshmem_i_cmp_signed(int64_t a, int cmp, int64_t b) {
    switch (cmp) {
    case PSHMEM_CMP_EQ: return a == b;
    case PSHMEM_CMP_NE: return a != b;
    case PSHMEM_CMP_GT: return a > b;
    case PSHMEM_CMP_LE: return a <= b;
    case PSHMEM_CMP_LT: return a < b;
    default: return a >= b;
    }
}

/* Loads with acquire at system scope: pairs with the release of a peer's signal store (NVLink)
 * or with the proxy's completed copy (which finished before the proxy moved on). */
__device__ __forceinline__ uint64_t pshmem_i_ld_acquire_u64(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t pshmem_i_ld_acquire_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Waits until `*sig cmp v` holds (a local symmetric word); returns its value. Ends early (with
 * the error recorded) when the ring's error word is raised. */
__device__ inline uint64_t pshmem_signal_wait_until(uint64_t *sig, int cmp, uint64_t v) {
    uint64_t t0 = pshmem_i_now();
    for (uint32_t spin = 0;; ++spin) {
        uint64_t x = pshmem_i_ld_acquire_u64(sig);
        if (pshmem_i_cmp(x, cmp, v)) return x;
        if ((spin & 63) == 63) {
            if (pshmem_i_wait_over(t0)) return x;
            __nanosleep(32);
        }
    }
}

#define PSHMEM_I_WAIT(NAME, T, LD, CMPF)                                                   \
    __device__ inline T pshmem_##NAME##_wait_until(T *ivar, int cmp, T v) {                \
        uint64_t t0 = pshmem_i_now();                                                      \
        for (uint32_t spin = 0;; ++spin) {                                                 \
            T x = (T)LD(ivar);                                                             \
            if (CMPF(x, cmp, v)) return x;                                                 \
            if ((spin & 63) == 63) {                                                       \
                if (pshmem_i_wait_over(t0)) return x;                                      \
                __nanosleep(32);                                                           \
            }                                                                              \
        }                                                                                  \
    }
#define PSHMEM_I_LD64(p) pshmem_i_ld_acquire_u64((const uint64_t *)(p))
#define PSHMEM_I_LD32(p) pshmem_i_ld_acquire_u32((const uint32_t *)(p))
PSHMEM_I_WAIT(uint64, uint64_t, PSHMEM_I_LD64, pshmem_i_cmp)
PSHMEM_I_WAIT(int64, int64_t, PSHMEM_I_LD64, pshmem_i_cmp_signed)
PSHMEM_I_WAIT(uint32, uint32_t, PSHMEM_I_LD32, pshmem_i_cmp)
PSHMEM_I_WAIT(int, int, PSHMEM_I_LD32, pshmem_i_cmp_signed)

/* ---- p / g --------------------------------------------------------------------------------- */

#define PSHMEM_I_PG(NAME, T)                                                               \
    __device__ inline void pshmem_##NAME##_p(T *dest, T v, int pe) {                      \
        T *remote = (T *)pshmem_ptr(dest, pe);                                             \
        if (remote) {                                                                      \
            *(volatile T *)remote = v;                                                     \
            return;                                                                        \
        }                                                                                  \
        uint64_t off = pshmem_i_offset(dest, sizeof(T), pe);                               \
        if (off == ~0ull || (unsigned)pe >= (unsigned)pshmem_dstate.n_pes) return;         \
        uint64_t bits = 0;                                                                 \
        memcpy(&bits, &v, sizeof(T));                                                      \
        pshmem_slot_t s = pshmem_i_slot(PSHMEM_OP_P, 0, 0, 1, (uint32_t)pe, off, bits,     \
                                        sizeof(T));                                        \
        pshmem_i_push(&s, 1);                                                              \
    }                                                                                      \
    __device__ inline T pshmem_##NAME##_g(const T *src, int pe) {                          \
        const T *remote = (const T *)pshmem_ptr(src, pe);                                  \
        if (remote) return *(const volatile T *)remote;                                    \
        T out;                                                                             \
        memset(&out, 0, sizeof(T));                                                        \
        int c = pshmem_i_cell_claim();                                                     \
        if (c < 0) return out;                                                             \
        unsigned long long *cell = &pshmem_dstate.cells[c];                                \
        pshmem_getmem(cell, src, sizeof(T), pe);                                           \
        unsigned long long bits = *(volatile unsigned long long *)cell;                    \
        memcpy(&out, &bits, sizeof(T));                                                    \
        pshmem_i_cell_release(c);                                                          \
        return out;                                                                        \
    }
PSHMEM_I_PG(char, char)
PSHMEM_I_PG(int, int)
PSHMEM_I_PG(uint32, uint32_t)
PSHMEM_I_PG(int64, int64_t)
PSHMEM_I_PG(uint64, uint64_t)
PSHMEM_I_PG(float, float)
PSHMEM_I_PG(double, double)

/* ---- atomics ------------------------------------------------------------------------------- */

/* One AMO through the ring; fetching ones wait and return the old value. */
__device__ __forceinline__ uint64_t pshmem_i_amo_ring(const void *dest, uint32_t sub, bool wide,
                                                      uint64_t operand, uint64_t compare,
                                                      bool fetch, int pe) {
    uint64_t off = pshmem_i_offset(dest, wide ? 8 : 4, pe);
    if (off == ~0ull || (unsigned)pe >= (unsigned)pshmem_dstate.n_pes) return 0;
    int c = fetch ? pshmem_i_cell_claim() : -1;
    if (fetch && c < 0) return 0;
    pshmem_slot_t s[2];
    s[0] = pshmem_i_slot(PSHMEM_OP_AMO, 0, sub | (wide ? PSHMEM_AMO_WIDE : 0u), 2, (uint32_t)pe,
                         off, operand, compare);
    s[1] = pshmem_i_slot(0, 0, 0, 1, (uint32_t)pe,
                         fetch ? (uint64_t)(uintptr_t)&pshmem_dstate.cells[c] : 0, 0, 0);
    s[1].ctrl = 0;
    uint64_t end = pshmem_i_push(s, 2);
    if (!fetch) return 0;
    pshmem_i_wait_done(end);
    uint64_t v = *(volatile unsigned long long *)&pshmem_dstate.cells[c];
    pshmem_i_cell_release(c);
    return v;
}

#define PSHMEM_I_AMO(NAME, T, U, WIDE)                                                        \
    __device__ inline T pshmem_##NAME##_atomic_fetch_add(T *dest, T v, int pe) {              \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicAdd_system(r, (U)v);                                           \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_FETCH_ADD, WIDE, (uint64_t)(U)v, 0, true, \
                                    pe);                                                      \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_add(T *dest, T v, int pe) {                 \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) {                                                                              \
            atomicAdd_system(r, (U)v);                                                        \
            return;                                                                           \
        }                                                                                     \
        pshmem_i_amo_ring(dest, PSHMEM_AMO_ADD, WIDE, (uint64_t)(U)v, 0, false, pe);          \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_swap(T *dest, T v, int pe) {                   \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicExch_system(r, (U)v);                                          \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_SWAP, WIDE, (uint64_t)(U)v, 0, true, pe); \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_compare_swap(T *dest, T cond, T v, int pe) {   \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicCAS_system(r, (U)cond, (U)v);                                  \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_COMPARE_SWAP, WIDE, (uint64_t)(U)v,      \
                                    (uint64_t)(U)cond, true, pe);                             \
    }                                                                                         \
    __device__ inline T pshmem_##NAME##_atomic_fetch(const T *dest, int pe) {                 \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) return (T)atomicAdd_system(r, (U)0);                                           \
        return (T)pshmem_i_amo_ring(dest, PSHMEM_AMO_FETCH, WIDE, 0, 0, true, pe);            \
    }                                                                                         \
    __device__ inline void pshmem_##NAME##_atomic_set(T *dest, T v, int pe) {                 \
        U *r = (U *)pshmem_ptr(dest, pe);                                                     \
        if (r) {                                                                              \
            atomicExch_system(r, (U)v);                                                       \
            return;                                                                           \
        }                                                                                     \
        pshmem_i_amo_ring(dest, PSHMEM_AMO_SET, WIDE, (uint64_t)(U)v, 0, false, pe);          \
    }
PSHMEM_I_AMO(uint32, uint32_t, unsigned int, false)
PSHMEM_I_AMO(int, int, unsigned int, false)
PSHMEM_I_AMO(uint64, uint64_t, unsigned long long, true)
PSHMEM_I_AMO(int64, int64_t, unsigned long long, true)

/* ---- barrier ------------------------------------------------------------------------------- */

/* Every PE's operations so far are complete and every PE has arrived. Called by ONE thread of
 * the PE (all other threads of the grid must not be issuing meanwhile); the block variant below
 * is called by a whole block. Each PE stores its epoch into its word at every PE (release), then
 * waits for every PE's word to reach the epoch (acquire). */
__device__ inline void pshmem_barrier_all(void) {
    pshmem_quiet();
    uint64_t epoch = atomicAdd(pshmem_dstate.barrier_epoch, 1ull) + 1;
    int me = pshmem_dstate.my_pe, n = pshmem_dstate.n_pes;
    uint64_t *words = (uint64_t *)(uintptr_t)(pshmem_dstate.heap_base + pshmem_dstate.barrier_off);
    for (int i = 1; i <= n; ++i) {
        int pe = (me + i) % n;
        pshmem_i_signal_op(&words[me], epoch, PSHMEM_SIGNAL_SET, pe);
    }
    for (int pe = 0; pe < n; ++pe) {
        if (pshmem_signal_wait_until(&words[pe], PSHMEM_CMP_GE, epoch) < epoch) return;
    }
    /* The ring's signals are complete once seen; direct ones need nothing more. */
}

__device__ inline void pshmemx_barrier_all_block(void) {
    __syncthreads();
    if (PSHMEM_I_TID == 0) pshmem_barrier_all();
    __syncthreads();
}

/* Quiet for a whole block (every thread's operations are complete on return). */
__device__ inline void pshmemx_quiet_block(void) {
    __syncthreads();
    if (PSHMEM_I_TID == 0) pshmem_quiet();
    __syncthreads();
}

#endif /* PSHMEM_DEVICE_CUH */
