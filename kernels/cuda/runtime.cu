/* Kernels the runtime itself launches: the target-side AMO that a proxy applies to its GPU heap
 * for a remote initiator (the CPU never does atomics on GPU memory: no GDRCopy), and the host's
 * operations and on-stream quiet and barrier. Each takes one struct of pshmem/kernel_args.h by
 * value (the runtime's launcher, runtime/src/gpu/kargs.rs, mirrors them). */
#include "pshmem/device.cuh"
#include "pshmem/kernel_args.h"

/* One AMO on this GPU's memory at `addr` (system scope, so that it is atomic with respect to
 * kernels' atomics, local or through NVLink). The old value goes to `*result` (pinned host
 * memory the proxy reads after synchronizing its stream). One thread. */
extern "C" __global__ void pshmem_k_amo(const pshmem_k_amo_args_t a) {
    unsigned int op = a.sub & 0xfu;
    unsigned long long old;
    if (a.sub & PSHMEM_AMO_WIDE) {
        old = pshmem_i_amo_here<unsigned long long>((unsigned long long *)a.addr, op, a.operand,
                                                    a.compare);
    } else {
        old = pshmem_i_amo_here<unsigned int>((unsigned int *)a.addr, op, (unsigned int)a.operand,
                                              (unsigned int)a.compare);
    }
    /* The proxy synchronizes the stream before reading, which orders this store. */
    *(volatile unsigned long long *)a.result = old;
    __threadfence_system();
}

/* Host on-stream variants: one thread. */
extern "C" __global__ void pshmem_k_quiet(void) { pshmem_quiet(); }
extern "C" __global__ void pshmem_k_barrier_all(void) { pshmem_barrier_all(); }

/* ---- host-initiated operations on the GPU heap (the C API and the NVSHMEM layer) ----------- *
 * One block runs the device API's block variants, so a host call takes the same path as a
 * kernel's (loads and stores to mapped peers, the ring to the others). */

/* put (put != 0) or get of n bytes with `pe`; nbi: leave completion to a later quiet. */
extern "C" __global__ void pshmem_k_rma(const pshmem_k_rma_args_t a) {
    if (a.put) {
        if (a.nbi) pshmemx_putmem_nbi_block(a.dest, a.src, a.n, a.pe);
        else pshmemx_putmem_block(a.dest, a.src, a.n, a.pe);
    } else {
        if (a.nbi) pshmemx_getmem_nbi_block(a.dest, a.src, a.n, a.pe);
        else pshmemx_getmem_block(a.dest, a.src, a.n, a.pe);
    }
}

/* put-with-signal; nbi as above. */
extern "C" __global__ void pshmem_k_put_signal(const pshmem_k_put_signal_args_t a) {
    if (a.nbi) pshmemx_putmem_signal_nbi_block(a.dest, a.src, a.n, a.sig, a.value, a.op, a.pe);
    else pshmemx_putmem_signal_block(a.dest, a.src, a.n, a.sig, a.value, a.op, a.pe);
}

/* A signal update (complete at quiet). One thread. */
extern "C" __global__ void pshmem_k_signal_op(const pshmem_k_signal_op_args_t a) {
    pshmemx_signal_op(a.sig, a.value, a.op, a.pe);
}

/* A wait on a local signal word, launched on an application stream so the work after it on
 * that stream runs once `*sig cmp v` holds (bounded like every device wait); with `reset`, the
 * word is then set to `to` (a consumed signal, so a CUDA graph can replay the same wait
 * without a kernel of its own to clear it). One thread. */
extern "C" __global__ void pshmem_k_signal_wait(const pshmem_k_signal_wait_args_t a) {
    pshmem_signal_wait_until(a.sig, a.cmp, a.value);
    /* Plain store: the next update of this word comes from a peer that learned of this one
     * through a later message, and that message cannot pass the kernel's end. */
    if (a.reset) *(volatile uint64_t *)a.sig = a.to;
}

/* An AMO of the host: `sub` as a ring slot's (PSHMEM_AMO_* | PSHMEM_AMO_WIDE); the old value
 * goes to *result (pinned host memory, read after the stream is synchronized). One thread. */
extern "C" __global__ void pshmem_k_host_amo(const pshmem_k_host_amo_args_t a) {
    unsigned int op = a.sub & 0xfu;
    unsigned long long old;
    if (a.sub & PSHMEM_AMO_WIDE) {
        old = pshmem_i_atomic<unsigned long long>((unsigned long long *)a.dest, op, a.operand,
                                                  a.compare, a.pe);
    } else {
        old = pshmem_i_atomic<unsigned int>((unsigned int *)a.dest, op, (unsigned int)a.operand,
                                            (unsigned int)a.compare, a.pe);
    }
    *(volatile unsigned long long *)a.result = old;
    __threadfence_system();
}

/* A team's sync (barrier != 0: barrier, that is quiet first). One thread. */
extern "C" __global__ void pshmem_k_team_sync(const pshmem_k_team_sync_args_t a) {
    if (a.barrier) pshmem_barrier(a.team);
    else pshmem_team_sync(a.team);
}

/* A collective of the host or on a stream, in one block (the block forms of coll.cuh): kind 0
 * broadcast (n bytes, arg the root), 1 fcollect, 2 alltoall (n bytes), 3 reduce and
 * 4 reducescatter (n elements of `dtype`, arg the operator). */
template <typename T>
__device__ void pshmem_i_k_reduce(int kind, int team, void *dest, const void *src,
                                  unsigned long long n, int op) {
    pshmem_i_reduce<2, T>(team, op, (T *)dest, (const T *)src, n, kind == 4);
}
extern "C" __global__ void pshmem_k_coll(const pshmem_k_coll_args_t a) {
    const int kind = a.kind, team = a.team, arg = a.arg, dtype = a.dtype;
    void *dest = a.dest;
    const void *src = a.src;
    const unsigned long long n = a.n;
    switch (kind) {
    case 0: pshmem_i_broadcast<2>(team, dest, src, n, arg); return;
    case 1: pshmem_i_fcollect<2>(team, dest, src, n); return;
    case 2: pshmem_i_alltoall<2>(team, dest, src, n); return;
    default: break;
    }
    switch (dtype) {
    case PSHMEM_DT_INT32: pshmem_i_k_reduce<int32_t>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_INT64: pshmem_i_k_reduce<int64_t>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_UINT64: pshmem_i_k_reduce<uint64_t>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_UINT32: pshmem_i_k_reduce<uint32_t>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_FLOAT: pshmem_i_k_reduce<float>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_DOUBLE: pshmem_i_k_reduce<double>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_HALF: pshmem_i_k_reduce<__half>(kind, team, dest, src, n, arg); break;
    case PSHMEM_DT_BFLOAT16: pshmem_i_k_reduce<__nv_bfloat16>(kind, team, dest, src, n, arg); break;
    default:
        if (PSHMEM_I_TID == 0)
            pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, PSHMEM_ERROR_NO_PE));
    }
}

/* The data part of a large collective of the host or on a stream over a team whose members
 * this GPU all maps, spread over the grid (the team syncs before and after are separate
 * launches on the same stream, pshmem_k_team_sync): each block copies, or folds in member
 * order, its own slice. Kinds as pshmem_k_coll's; reductions are never in place here. */
template <typename T>
__device__ void pshmem_i_k_fold_slice(const pshmem_team_device_t *t, int op, T *dest,
                                      const T *src, unsigned long long n, bool scatter) {
    const T *block = scatter ? src + (size_t)t->my_index * n : src;
    /* Slices of whole 16-byte vectors, so that every slice folds by vectors where the call's
     * buffers are aligned. */
    const size_t V = 16 / sizeof(T);
    size_t per = ((n + gridDim.x - 1) / gridDim.x + V - 1) / V * V;
    size_t lo = (size_t)blockIdx.x * per;
    if (lo >= n) return;
    size_t len = n - lo < per ? n - lo : per;
    pshmem_i_fold_range<T>(
        op, t->size, [&](int j) { return (const T *)pshmem_ptr(block, t->members[j]) + lo; },
        dest + lo, len, threadIdx.x, blockDim.x);
}

/* Copies this block's slice of `n` bytes at `src` to `dest` on member m (mapped). */
__device__ __forceinline__ void pshmem_i_k_copy_slice(const pshmem_team_device_t *t, int m,
                                                      char *dest, const char *src,
                                                      unsigned long long n) {
    size_t per = ((n + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
    size_t lo = (size_t)blockIdx.x * per;
    if (lo >= n) return;
    size_t len = n - lo < per ? n - lo : per;
    char *r = (char *)pshmem_ptr(dest, t->members[m]);
    pshmem_i_copy(r + lo, src + lo, len, threadIdx.x, blockDim.x);
}

extern "C" __global__ void pshmem_k_coll_wide(const pshmem_k_coll_args_t a) {
    const int kind = a.kind, arg = a.arg, dtype = a.dtype;
    void *dest = a.dest;
    const void *src = a.src;
    const unsigned long long n = a.n;
    const pshmem_team_device_t *t = pshmem_i_team(a.team);
    if (!t || t->my_index < 0) return; /* the sync launches record it */
    const int me = t->my_index, size = t->size;
    char *d = (char *)dest;
    const char *s = (const char *)src;
    switch (kind) {
    case 0:
        if (me == arg)
            for (int k = 1; k <= size; ++k) pshmem_i_k_copy_slice(t, (me + k) % size, d, s, n);
        return;
    case 1:
        for (int k = 1; k <= size; ++k)
            pshmem_i_k_copy_slice(t, (me + k) % size, d + (size_t)me * n, s, n);
        return;
    case 2:
        for (int k = 1; k <= size; ++k) {
            int m = (me + k) % size;
            pshmem_i_k_copy_slice(t, m, d + (size_t)me * n, s + (size_t)m * n, n);
        }
        return;
    default: break;
    }
    bool sc = kind == 4;
    switch (dtype) {
    case PSHMEM_DT_INT32: pshmem_i_k_fold_slice<int32_t>(t, arg, (int32_t *)dest, (const int32_t *)src, n, sc); break;
    case PSHMEM_DT_INT64: pshmem_i_k_fold_slice<int64_t>(t, arg, (int64_t *)dest, (const int64_t *)src, n, sc); break;
    case PSHMEM_DT_UINT64: pshmem_i_k_fold_slice<uint64_t>(t, arg, (uint64_t *)dest, (const uint64_t *)src, n, sc); break;
    case PSHMEM_DT_UINT32: pshmem_i_k_fold_slice<uint32_t>(t, arg, (uint32_t *)dest, (const uint32_t *)src, n, sc); break;
    case PSHMEM_DT_FLOAT: pshmem_i_k_fold_slice<float>(t, arg, (float *)dest, (const float *)src, n, sc); break;
    case PSHMEM_DT_DOUBLE: pshmem_i_k_fold_slice<double>(t, arg, (double *)dest, (const double *)src, n, sc); break;
    case PSHMEM_DT_HALF: pshmem_i_k_fold_slice<__half>(t, arg, (__half *)dest, (const __half *)src, n, sc); break;
    case PSHMEM_DT_BFLOAT16: pshmem_i_k_fold_slice<__nv_bfloat16>(t, arg, (__nv_bfloat16 *)dest, (const __nv_bfloat16 *)src, n, sc); break;
    default: break;
    }
}
