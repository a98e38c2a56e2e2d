/* proxyshmem device API: ordering and synchronization — fence, quiet, barrier_all (one thread
 * or a whole block). */
#ifndef PSHMEM_SYNC_CUH
#define PSHMEM_SYNC_CUH

#include "pshmem/signal.cuh"

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

#endif /* PSHMEM_SYNC_CUH */
