/* proxyshmem device API: the state every call reads, error recording, the one wait loop, and
 * the translation of symmetric addresses (direct peer pointers, heap offsets, ring slots).
 *
 * Memory ordering of errors: the proxy raises the ring's error word (host memory) when a peer
 * dies or an operation fails; every wait reads it, so no wait outlives a failure. The first
 * error a thread meets is recorded in `*pshmem_dstate.dev_error` (device memory) for the host
 * (`Gpu::check`), and `pshmem_error()` returns it so a kernel can stop early. */
#ifndef PSHMEM_STATE_CUH
#define PSHMEM_STATE_CUH

#include <stddef.h>
#include <stdint.h>
#include "pshmem/ptx.cuh"
#include "pshmem/ring_device.cuh"
#include "pshmem/state.h"

/* This translation unit's copy of the state. `static`, so that any number of translation units
 * of one program or library, built with or without -rdc, can include the device API: each has
 * its own copy, and the runtime fills every copy — modules it loads itself through
 * cuModuleGetGlobal, the application's translation units through the registration below.
 * An -rdc module loaded by the application and handed to pshmemx_cumodule_init() cannot be
 * searched for static names: build it with -DPSHMEM_MODULE_STATE in every translation unit and
 * -DPSHMEM_DEFINE_STATE in exactly one. */
#if defined(PSHMEM_MODULE_STATE) && !defined(PSHMEM_DEFINE_STATE)
extern __constant__ pshmem_device_state_t pshmem_dstate;
#elif defined(PSHMEM_MODULE_STATE)
__constant__ pshmem_device_state_t pshmem_dstate;
#else
static __constant__ pshmem_device_state_t pshmem_dstate;
#endif

/* Registration (host compilation of a .cu file only): a static initializer gives the runtime
 * (libpshmem) a function that finds this copy with cudaGetSymbolAddress in the application's
 * own CUDA runtime (static or shared); the runtime calls it once its GPU part is up, and again
 * for translation units loaded later (a library dlopen'ed after init), at the next call into
 * it (init, allocation, barrier, collective launch). Registration itself does nothing with
 * CUDA. Define PSHMEM_NO_STATE_REGISTRATION for code loaded only as a module. */
#if defined(__CUDACC__) && !defined(__CUDA_ARCH__) && !defined(PSHMEM_NO_STATE_REGISTRATION)
#include <cuda_runtime.h>
extern "C" int pshmemi_register_state(void *(*addr)(void), unsigned size, unsigned version);
extern "C" void pshmemi_unregister_state(int id);
static void *pshmemi_state_addr(void) {
    void *p = 0;
    return cudaGetSymbolAddress(&p, pshmem_dstate) == cudaSuccess ? p : 0;
}
namespace {
struct pshmemi_state_registrar {
    int id;
    pshmemi_state_registrar()
        : id(pshmemi_register_state(&pshmemi_state_addr, (unsigned)sizeof(pshmem_device_state_t),
                                    PSHMEM_STATE_VERSION)) {}
    ~pshmemi_state_registrar() { pshmemi_unregister_state(id); }
};
static pshmemi_state_registrar pshmemi_state_registrar_instance;
} // namespace
#endif

__device__ __forceinline__ int pshmem_my_pe(void) { return pshmem_dstate.my_pe; }
__device__ __forceinline__ int pshmem_n_pes(void) { return pshmem_dstate.n_pes; }

/* The first error any device call of this PE met (0: none; else an error word of abi.h). */
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

/* True (with the error recorded) when the ring's error word is raised, an earlier call failed,
 * or a wait that started at `t0` outlasted the timeout. */
__device__ __forceinline__ bool pshmem_i_wait_over(uint64_t t0) {
    if (pshmem_i_ring_error() || pshmem_error()) return true;
    if (pshmem_dstate.timeout_ns && pshmem_globaltimer() - t0 > pshmem_dstate.timeout_ns) {
        pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_TIMEOUT, PSHMEM_ERROR_NO_PE));
        return true;
    }
    return false;
}

/* The one wait loop of the device API: spins until `done()` holds (returns true), or until
 * the wait is over (an error or the timeout, recorded; returns false). Every 2^CHECK_LOG2-th
 * spin looks for errors and naps SLEEP_NS nanoseconds. */
template <unsigned CHECK_LOG2, unsigned SLEEP_NS, typename Done>
__device__ __forceinline__ bool pshmem_i_wait(Done done) {
    uint64_t t0 = pshmem_globaltimer();
    for (uint32_t spin = 1;; ++spin) {
        if (done()) return true;
        if ((spin & ((1u << CHECK_LOG2) - 1)) == 0) {
            if (pshmem_i_wait_over(t0)) return false;
            __nanosleep(SLEEP_NS);
        }
    }
}

/* Offset of a symmetric address in this PE's heap, or ~0 (recorded) when outside. */
__device__ __forceinline__ uint64_t pshmem_i_offset(const void *p, size_t len, int pe) {
    uint64_t off = (uint64_t)(uintptr_t)p - pshmem_dstate.heap_base;
    if (off > pshmem_dstate.heap_size || len > pshmem_dstate.heap_size - off) {
        pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, pe));
        return ~0ull;
    }
    return off;
}

/* Whether `pe` is a PE of the job (recorded when not). */
__device__ __forceinline__ bool pshmem_i_valid_pe(int pe) {
    if ((unsigned)pe < (unsigned)pshmem_dstate.n_pes) return true;
    pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, pe));
    return false;
}

/* This GPU's address of `pe`'s copy of symmetric `p`, or NULL when reached through the ring. */
__device__ __forceinline__ void *pshmem_ptr(const void *p, int pe) {
    if ((unsigned)pe >= (unsigned)pshmem_dstate.n_pes) return NULL;
    uint64_t base = pshmem_dstate.peer_base[pe];
    if (!base) return NULL;
    return (void *)(uintptr_t)(base + ((uint64_t)(uintptr_t)p - pshmem_dstate.heap_base));
}

/* ---- the ring ------------------------------------------------------------------------------ */

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

/* A continuation slot (its ctrl stays 0: the first slot's carries the operation). */
__device__ __forceinline__ pshmem_slot_t pshmem_i_cont(uint32_t pe, uint64_t a, uint64_t b) {
    pshmem_slot_t s = pshmem_i_slot(0, 0, 0, 1, pe, a, b, 0);
    s.ctrl = 0;
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
    const uint64_t *completed = &pshmem_dstate.ring.ctrl->completed;
    pshmem_i_wait<0, 64>([&] { return pshmem_ld_acquire_sys(completed) >= end; });
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
    pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_NO_CELLS, PSHMEM_ERROR_NO_PE));
    return -1;
}

__device__ __forceinline__ void pshmem_i_cell_release(int i) {
    __threadfence();
    atomicExch(&pshmem_dstate.cell_owner[i], 0u);
}

/* ---- cooperating threads ------------------------------------------------------------------- */

/* A thread's rank and the size of its block (any block shape). */
#define PSHMEM_I_TID (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))
#define PSHMEM_I_NT (blockDim.x * blockDim.y * blockDim.z)

#endif /* PSHMEM_STATE_CUH */
