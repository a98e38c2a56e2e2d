//! The GPU heap's size: what `PSHMEM_GPU_SYMMETRIC_SIZE` gives the program, and what the
//! runtime adds for itself.

use super::{GpuSetup, teams::TeamTable};
use crate::alloc::RESERVED;

impl GpuSetup<'_> {
    /// Bytes of the GPU heap's device allocation: `PSHMEM_GPU_SYMMETRIC_SIZE` counts what the
    /// program may allocate (as NVSHMEM counts `NVSHMEM_SYMMETRIC_SIZE`: its perftests set it to
    /// exactly the bytes they allocate), so the runtime's own part — the reserved first page and
    /// the teams' sync words, rounded to 2 MiB so the program's part starts aligned — and 2 MiB
    /// for alignment padding between the program's allocations come on top; the program's part
    /// is rounded up to 2 MiB.
    pub(crate) fn heap_bytes(&self) -> usize {
        heap_bytes(self.cfg.gpu.heap_size, self.cfg.max_teams, self.n)
    }
}

/// [`GpuSetup::heap_bytes`] from its inputs.
pub(crate) fn heap_bytes(user: usize, max_teams: usize, n: usize) -> usize {
    const MIB2: u64 = 2 << 20;
    let own = (RESERVED + TeamTable::sync_bytes(max_teams, n)).div_ceil(MIB2);
    // Whole 2 MiB pages: DMA-BUF export wants a page-aligned size, whatever the program's.
    ((own + 1) * MIB2) as usize + user.next_multiple_of(MIB2 as usize)
}

#[cfg(test)]
mod tests {
    use super::{RESERVED, TeamTable, heap_bytes};
    use crate::alloc::Allocator;

    /// The program may allocate the whole of `PSHMEM_GPU_SYMMETRIC_SIZE`, as NVSHMEM's
    /// collective perftests do: a small allocation or two, then two page-aligned buffers that
    /// together are exactly the size they set.
    #[test]
    fn the_program_gets_the_whole_symmetric_size() {
        for n in [1, 2, 8, 64] {
            for user in [0u64, 8192, 1_000_003, 8 << 20, 1 << 30] {
                let total = heap_bytes(user as usize, 32, n) as u64;
                let mut a = Allocator::new(total);
                let sync = a
                    .alloc(TeamTable::sync_bytes(32, n), 256)
                    .expect("sync words");
                assert!(
                    sync >= RESERVED,
                    "n {n}: the sync words overlap the reserved page"
                );
                for _ in 0..2 {
                    a.alloc(8, 256).expect("small allocation");
                }
                let half = user / 2;
                if half > 0 {
                    a.alloc(half, 4096).expect("first half, page-aligned");
                    a.alloc(half, 4096).expect("second half, page-aligned");
                }
                // No more than the slack, the runtime's own part and the rounding.
                assert!(total - user <= (6 << 20) + RESERVED + TeamTable::sync_bytes(32, n));
                assert_eq!(total % (2 << 20), 0, "a whole number of 2 MiB pages");
            }
        }
    }
}
