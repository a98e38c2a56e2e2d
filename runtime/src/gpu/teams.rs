//! The device side of teams: a table in device memory that kernels index by team handle
//! (`pshmem_team_device_t`, abi/include/pshmem/state.h), each entry with the team's members,
//! this PE's index, a sync counter and the heap offset of the team's sync words (one per member,
//! in a region of the GPU heap allocated at init, `max_teams × n_pes × 8` bytes), the heap
//! offset of its low-latency collective buffers (after the sync words) and their sequence
//! counter, and a device scratch buffer for its collectives.
//!
//! An entry is written when its team is made (host code, before any kernel can be given the
//! handle) and cleared when it is destroyed (collective: no member uses it any more). A cleared
//! entry's sync words, low-latency buffers and counters are zeroed by their own PE, so that a reused handle starts
//! from zero everywhere: no member writes them before the split that reuses the handle, which
//! every member of the new team takes part in after its own destroy.

use std::sync::Arc;

use cudarc::driver::{CudaContext, sys};

use super::{Gpu, cu, mem::DevAlloc};
use crate::{
    cuda::{CudaError, check},
    error::{Error, Result},
    team::Team,
};

/// `pshmem_team_device_t` (checked against the C header by `team_entry_matches_the_c_header`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TeamEntry {
    pub size: i32,
    pub my_index: i32,
    pub members: u64,
    pub sync_off: u64,
    pub epoch: u64,
    pub scratch: u64,
    pub scratch_bytes: u64,
    pub ll_off: u64,
    pub ll_seq: u64,
}

const _: () = assert!(std::mem::size_of::<TeamEntry>() == 64);

/// `PSHMEM_LL_BYTES`: the largest per-member message of the low-latency collectives.
pub(crate) const LL_BYTES: usize = 2048;

/// Bytes of one team's low-latency buffers on each PE of an `n`-PE job: two alternating sets
/// of one 8-byte word (4 data bytes and the call's sequence) per 4 bytes, per member.
const fn ll_team_bytes(n: usize) -> usize {
    2 * n * (LL_BYTES / 4) * 8
}

/// Bytes of device memory per team for its collectives: chunks pulled from members reached
/// through the proxy, and in-place results (kernels/include/pshmem/coll.cuh).
pub(crate) const SCRATCH: usize = 1 << 20;

/// The table and what its entries point to.
pub(super) struct TeamTable {
    mem: DevAlloc,
    max: usize,
    n: usize,
    /// Heap offset of the sync words of team 0 (team t's are `n × 8 × t` bytes further).
    sync_base: u64,
}

impl TeamTable {
    /// A zeroed table of `max` entries for `n` PEs, sync words from heap offset `sync_base`.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        max: usize,
        n: usize,
        sync_base: u64,
    ) -> Result<Self, CudaError> {
        let bytes = Self::scratch_base(max, n) + max * SCRATCH;
        Ok(Self {
            mem: DevAlloc::new(ctx, bytes)?,
            max,
            n,
            sync_base,
        })
    }

    /// Bytes of GPU heap the sync words and low-latency buffers of `max` teams of `n` PEs
    /// take.
    pub(super) fn sync_bytes(max: usize, n: usize) -> u64 {
        (max * n * 8 + max * ll_team_bytes(n)) as u64
    }

    /// The device address of the table.
    pub(super) fn entries(&self) -> u64 {
        self.mem.ptr
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    fn entry_addr(&self, t: usize) -> u64 {
        self.mem.ptr + (t * size_of::<TeamEntry>()) as u64
    }

    fn members_addr(&self, t: usize) -> u64 {
        self.mem.ptr + (self.max * size_of::<TeamEntry>() + t * self.n * 4) as u64
    }

    fn epoch_addr(&self, t: usize) -> u64 {
        self.mem.ptr + (self.max * (size_of::<TeamEntry>() + self.n * 4) + t * 8) as u64
    }

    fn ll_seq_addr(&self, t: usize) -> u64 {
        self.mem.ptr + (self.max * (size_of::<TeamEntry>() + self.n * 4 + 8) + t * 8) as u64
    }

    /// Where the scratch buffers start in the table's allocation (256-byte aligned, for the
    /// vector loads of the collectives).
    fn scratch_base(max: usize, n: usize) -> usize {
        (max * (size_of::<TeamEntry>() + n * 4 + 16)).next_multiple_of(256)
    }

    fn scratch_addr(&self, t: usize) -> u64 {
        self.mem.ptr + (Self::scratch_base(self.max, self.n) + t * SCRATCH) as u64
    }

    fn sync_off(&self, t: usize) -> u64 {
        self.sync_base + (t * self.n * 8) as u64
    }

    fn ll_off(&self, t: usize) -> u64 {
        self.sync_base + (self.max * self.n * 8 + t * ll_team_bytes(self.n)) as u64
    }
}

impl Gpu {
    fn team_index(&self, op: &'static str, team: Team) -> Result<usize> {
        usize::try_from(team)
            .ok()
            .filter(|&t| t < self.teams.max())
            .ok_or(Error::InvalidTeam {
                me: self.me,
                op,
                team,
            })
    }

    /// Writes team `team`'s entry: its members (world PEs) and this PE's index among them.
    pub(crate) fn set_team(&self, team: Team, members: &[usize], my_index: usize) -> Result<()> {
        let op = "team (device table)";
        let t = self.team_index(op, team)?;
        let _live = self.live(op)?;
        let list: Vec<i32> = members.iter().map(|&m| m as i32).collect();
        let entry = TeamEntry {
            size: members.len() as i32,
            my_index: my_index as i32,
            members: self.teams.members_addr(t),
            sync_off: self.teams.sync_off(t),
            epoch: self.teams.epoch_addr(t),
            scratch: self.teams.scratch_addr(t),
            scratch_bytes: SCRATCH as u64,
            ll_off: self.teams.ll_off(t),
            ll_seq: self.teams.ll_seq_addr(t),
        };
        // Both inside the table (members ≤ n); the sources are live until the copies finished.
        self.sync_copy(
            self.teams.members_addr(t),
            list.as_ptr() as u64,
            list.len() * 4,
            op,
        )?;
        self.sync_copy(
            self.teams.entry_addr(t),
            &entry as *const TeamEntry as u64,
            size_of::<TeamEntry>(),
            op,
        )
    }

    /// Clears team `team`'s entry and zeroes this PE's sync words and counter of it.
    pub(crate) fn clear_team(&self, team: Team) -> Result<()> {
        let op = "team_destroy (device table)";
        let t = self.team_index(op, team)?;
        let _live = self.live(op)?;
        let st = self.stream.cu_stream();
        let zero = |addr: u64, len: usize| {
            // SAFETY: each range lies in the table or in the team's sync words of this PE's heap.
            let rc = unsafe { sys::cuMemsetD8Async(addr, 0, len, st) };
            check(rc, "cuMemsetD8Async").map_err(cu(self.me, op))
        };
        zero(self.teams.entry_addr(t), size_of::<TeamEntry>())?;
        zero(self.teams.epoch_addr(t), 8)?;
        zero(self.teams.ll_seq_addr(t), 8)?;
        zero(
            self.state.heap_base + self.teams.ll_off(t),
            ll_team_bytes(self.teams.n),
        )?;
        zero(
            self.state.heap_base + self.teams.sync_off(t),
            self.teams.n * 8,
        )?;
        self.sync_stream(op)
    }
}
