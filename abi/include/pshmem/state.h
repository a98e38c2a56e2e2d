/* proxyshmem: the state the device API reads, filled by the runtime (host and device
 * compilers both see this plain struct; Rust mirror: runtime/src/gpu/mod.rs, DeviceState,
 * checked against this header by the pshmem-abi-probe test crate's probe). Everything that changes after init lives in device
 * memory behind the pointers. */
#ifndef PSHMEM_STATE_H
#define PSHMEM_STATE_H

#include <stdint.h>
#include "pshmem/ring.h"

/* One team as this PE knows it (device memory; written by the runtime when a team is made or
 * destroyed, never while a kernel may use that entry). */
typedef struct pshmem_team_device {
    int32_t size;                      /* members (0: no such team here) */
    int32_t my_index;                  /* this PE's index among them (-1: not a member) */
    const int32_t *members;            /* [size]: world PE of each member */
    uint64_t sync_off;                 /* heap offset of the team's sync words, one per member */
    unsigned long long *epoch;         /* device memory: team syncs done by this PE */
    void *scratch;                     /* device memory of this PE: the team's collectives' */
    uint64_t scratch_bytes;            /* (pulled chunks of proxied members, in-place results) */
    uint64_t ll_off;                   /* heap offset of the team's low-latency buffers */
    unsigned long long *ll_seq;        /* device memory: low-latency collectives done here */
} pshmem_team_device_t;

/* Largest per-member message of the collectives' low-latency protocol (coll.cuh): each 4 bytes
 * travel in one 8-byte store with the call's sequence number beside them. A team's buffers on
 * each PE: 2 (alternate calls) x members x PSHMEM_LL_BYTES / 4 words of 8 bytes. */
#define PSHMEM_LL_BYTES 2048

PSHMEM_STATIC_ASSERT(sizeof(pshmem_team_device_t) == 64, "team entry is 64 bytes");

typedef struct pshmem_device_state {
    int32_t my_pe;
    int32_t n_pes;
    uint64_t heap_base;                /* device address of this PE's symmetric heap */
    uint64_t heap_size;                /* bytes */
    const uint64_t *peer_base;         /* [n_pes]: this GPU's address of each PE's heap, 0 = via ring */
    pshmem_ring_device_t ring;         /* the GPU's command ring (capacity 0: none) */
    unsigned int *cell_owner;          /* [n_cells]: fetch-result cells in use (device memory) */
    unsigned long long *cells;         /* [n_cells]: results of ring gets/fetches (device memory) */
    uint32_t n_cells;
    uint32_t any_ring;                 /* some PE is reached through the ring */
    unsigned long long *barrier_epoch; /* device memory: barriers done by this PE */
    uint64_t barrier_off;              /* heap offset of n_pes 8-byte barrier words */
    unsigned long long *dev_error;     /* device memory: first error word met by a device call */
    uint64_t timeout_ns;               /* longest wait (PSHMEM_OP_TIMEOUT); then a timeout error */
    const pshmem_team_device_t *teams; /* [max_teams]: team table (device memory) */
    uint32_t max_teams;
    uint32_t version;                  /* PSHMEM_STATE_VERSION of the runtime that filled it */
} pshmem_device_state_t;

/* Bumped whenever this struct changes: a module built against other headers is refused. */
#define PSHMEM_STATE_VERSION 2u

PSHMEM_STATIC_ASSERT(sizeof(pshmem_device_state_t) == 144, "device state is 144 bytes");

#endif /* PSHMEM_STATE_H */
