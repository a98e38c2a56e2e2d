/* proxyshmem device API: ordering and synchronization — fence, quiet, barriers and syncs over
 * all PEs or a team (thread, warp and block variants).
 *
 * barrier = quiet + sync: a sync only waits for every member to arrive; a barrier first
 * completes this PE's GPU's operations. Team syncs run over the team's sync words in the heap
 * (one per member, in the region the runtime reserved): each member fences, stores its sync
 * count into its word at every other member (a relaxed store or a signal through the ring),
 * then waits for every other member's word to reach that count (acquire). A team's handle
 * indexes the device team table; calls on one team must not overlap within a PE. */
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
        /* What the proxies completed (a get into this PE's heap, a put another PE reads) is
         * ordered before this thread's later stores: the barrier's relaxed arrivals need this
         * fence after the wait's acquire to release it. Nothing of ours is in flight here, so
         * it does not wait on NVLink. */
        __threadfence_system();
    }
}

/* One PE's part of a sync over `n` members whose words are `words` (member i's word at index i):
 * store `v` into this PE's word at every other member, then wait for every other member's word
 * to reach `v`. The caller has just fenced at system scope, so each arrival is a relaxed store:
 * fence then strong store is a release pattern. A release store per member would fence before
 * each, and a fence issued after a store to a peer waits for that store's NVLink acknowledgement
 * (the barrier across 2 H200s took 3.1 µs that way, storing its own word last). No PE stores or
 * waits on its own word. `members`: the world PE of each member (NULL: member i is PE i).
 * A wait that runs out of time records it and ends the sync. */
__device__ __forceinline__ void pshmem_i_sync_words(uint64_t *words, int me, int n,
                                                    const int32_t *members, uint64_t v) {
    for (int i = 1; i < n; ++i) {
        int m = (me + i) % n, pe = members ? members[m] : m;
        uint64_t *remote = (uint64_t *)pshmem_ptr(&words[me], pe);
        if (remote) pshmem_st_relaxed_sys_u64(remote, v);
        else pshmem_i_signal_op(&words[me], v, PSHMEM_SIGNAL_SET, pe); /* after the fence too */
    }
    for (int i = 1; i < n; ++i) {
        int m = (me + i) % n;
        if (pshmem_signal_wait_until(&words[m], PSHMEM_CMP_GE, v) < v) return;
    }
    /* The ring's signals are complete once seen; direct ones need nothing more. */
}

/* Every PE's operations so far are complete and every PE has arrived. Called by ONE thread of
 * the PE (all other threads of the grid must not be issuing meanwhile); the block variant below
 * is called by a whole block. Each PE stores its epoch into its word at every other PE, then
 * waits for every other PE's word to reach the epoch (acquire); quiet's fence releases. */
__device__ inline void pshmem_barrier_all(void) {
    pshmem_quiet();
    uint64_t epoch = atomicAdd(pshmem_dstate.barrier_epoch, 1ull) + 1;
    uint64_t *words = (uint64_t *)(uintptr_t)(pshmem_dstate.heap_base + pshmem_dstate.barrier_off);
    pshmem_i_sync_words(words, pshmem_dstate.my_pe, pshmem_dstate.n_pes, NULL, epoch);
}

__device__ inline void pshmemx_barrier_all_block(void) {
    __syncthreads();
    if (PSHMEM_I_TID == 0) pshmem_barrier_all();
    __syncthreads();
}

__device__ inline void pshmemx_barrier_all_warp(void) {
    __syncwarp();
    if (pshmem_laneid() == 0) pshmem_barrier_all();
    __syncwarp();
}

/* Quiet for a warp (every lane's operations are complete on return). */
__device__ inline void pshmemx_quiet_warp(void) {
    __syncwarp();
    if (pshmem_laneid() == 0) pshmem_quiet();
    __syncwarp();
}

/* Quiet for a whole block (every thread's operations are complete on return). */
__device__ inline void pshmemx_quiet_block(void) {
    __syncthreads();
    if (PSHMEM_I_TID == 0) pshmem_quiet();
    __syncthreads();
}

/* ---- teams --------------------------------------------------------------------------------- */

/* The team's entry, or NULL (recorded as a bad address) when `team` names no team here. */
__device__ __forceinline__ const pshmem_team_device_t *pshmem_i_team(int team) {
    if ((unsigned)team < pshmem_dstate.max_teams && pshmem_dstate.teams[team].size > 0)
        return &pshmem_dstate.teams[team];
    return NULL;
}

/* This PE's number in `team` (-1: not a member, or no such team). */
__device__ inline int pshmem_team_my_pe(int team) {
    const pshmem_team_device_t *t = pshmem_i_team(team);
    return t ? t->my_index : -1;
}

/* The number of PEs in `team` (-1: no such team). */
__device__ inline int pshmem_team_n_pes(int team) {
    const pshmem_team_device_t *t = pshmem_i_team(team);
    return t ? t->size : -1;
}

/* PE `pe` of `src` as numbered in `dest` (-1 when it is not in both). */
__device__ inline int pshmem_team_translate_pe(int src, int pe, int dest) {
    const pshmem_team_device_t *s = pshmem_i_team(src), *d = pshmem_i_team(dest);
    if (!s || !d || pe < 0 || pe >= s->size) return -1;
    int world = s->members[pe];
    for (int i = 0; i < d->size; ++i)
        if (d->members[i] == world) return i;
    return -1;
}

/* Every member of `team` has arrived (no operation is completed). One thread of the PE. */
__device__ inline void pshmem_team_sync(int team) {
    const pshmem_team_device_t *t = pshmem_i_team(team);
    if (!t || t->my_index < 0) {
        pshmem_i_record(PSHMEM_ERROR_WORD(PSHMEM_ERROR_BAD_ADDRESS, PSHMEM_ERROR_NO_PE));
        return;
    }
    uint64_t round = atomicAdd(t->epoch, 1ull) + 1;
    uint64_t *words = (uint64_t *)(uintptr_t)(pshmem_dstate.heap_base + t->sync_off);
    /* Release: this thread's earlier stores are visible before its arrival is. */
    __threadfence_system();
    pshmem_i_sync_words(words, t->my_index, t->size, t->members, round);
}

/* quiet + team_sync. One thread of the PE. */
__device__ inline void pshmem_barrier(int team) {
    pshmem_quiet();
    pshmem_team_sync(team);
}

/* Every PE has arrived (sync over the world team). One thread of the PE. */
__device__ inline void pshmem_sync_all(void) { pshmem_team_sync(0); }

#define PSHMEM_I_GROUP_SYNC(NAME, CALL, LEADER, SYNC)                                           \
    __device__ inline void NAME {                                                               \
        SYNC;                                                                                   \
        if (LEADER) CALL;                                                                       \
        SYNC;                                                                                   \
    }
PSHMEM_I_GROUP_SYNC(pshmemx_team_sync_warp(int team), pshmem_team_sync(team),
                    pshmem_laneid() == 0, __syncwarp())
PSHMEM_I_GROUP_SYNC(pshmemx_team_sync_block(int team), pshmem_team_sync(team),
                    PSHMEM_I_TID == 0, __syncthreads())
PSHMEM_I_GROUP_SYNC(pshmemx_barrier_warp(int team), pshmem_barrier(team), pshmem_laneid() == 0,
                    __syncwarp())
PSHMEM_I_GROUP_SYNC(pshmemx_barrier_block(int team), pshmem_barrier(team), PSHMEM_I_TID == 0,
                    __syncthreads())
PSHMEM_I_GROUP_SYNC(pshmemx_sync_all_warp(void), pshmem_sync_all(), pshmem_laneid() == 0,
                    __syncwarp())
PSHMEM_I_GROUP_SYNC(pshmemx_sync_all_block(void), pshmem_sync_all(), PSHMEM_I_TID == 0,
                    __syncthreads())

#endif /* PSHMEM_SYNC_CUH */
