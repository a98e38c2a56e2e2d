//! The symmetric allocator: deterministic first-fit over heap offsets, so that the same sequence
//! of calls gives the same offsets on every PE. The runtime checks, through the bootstrap, that
//! every PE made the same call with the same arguments and got the same result, so that calls
//! that differ across PEs are reported everywhere instead of corrupting memory.

use std::collections::{BTreeMap, HashMap};

/// Offsets below this are the runtime's own (barrier words and other internal state).
pub const RESERVED: u64 = 4096;
/// Every allocation is aligned at least this much (cache line).
pub const MIN_ALIGN: u64 = 64;

/// Free and used blocks of the user part of the heap.
#[derive(Debug)]
pub struct Allocator {
    free: BTreeMap<u64, u64>,
    used: HashMap<u64, u64>,
}

impl Allocator {
    /// An allocator for `RESERVED..heap_len`.
    pub fn new(heap_len: u64) -> Self {
        let mut free = BTreeMap::new();
        if heap_len > RESERVED {
            free.insert(RESERVED, heap_len - RESERVED);
        }
        Self {
            free,
            used: HashMap::new(),
        }
    }

    /// Allocates `size` bytes (at least 1) aligned to `align` (a power of two); the lowest
    /// address that fits.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let align = align.max(MIN_ALIGN);
        let size = size.max(1).checked_next_multiple_of(MIN_ALIGN)?;
        let (start, len, at) = self.free.iter().find_map(|(&start, &len)| {
            let at = start.checked_next_multiple_of(align)?;
            (at.checked_add(size)? <= start + len).then_some((start, len, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + size;
        if end < start + len {
            self.free.insert(end, start + len - end);
        }
        self.used.insert(at, size);
        Some(at)
    }

    /// Frees the allocation at `at`; `None` if there is none.
    pub fn free(&mut self, at: u64) -> Option<u64> {
        let size = self.used.remove(&at)?;
        let (mut start, mut len) = (at, size);
        if let Some((&ps, &pl)) = self.free.range(..at).next_back()
            && ps + pl == at
        {
            self.free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(&nl) = self.free.get(&(at + size)) {
            self.free.remove(&(at + size));
            len += nl;
        }
        self.free.insert(start, len);
        Some(size)
    }

    /// The largest free block.
    pub fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Size of the allocation at `at`.
    pub fn size_of(&self, at: u64) -> Option<u64> {
        self.used.get(&at).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_alignment_and_coalescing() {
        let mut a = Allocator::new(RESERVED + 4096);
        let x = a.alloc(100, 8).unwrap();
        assert_eq!(x, RESERVED);
        let y = a.alloc(1, 1024).unwrap();
        assert_eq!(y % 1024, 0);
        assert!(y >= x + 128);
        let z = a.alloc(64, 64).unwrap();
        assert_eq!(z, x + 128, "the gap before the aligned block is reused");
        assert_eq!(a.alloc(1 << 20, 64), None);
        assert_eq!(a.free(x), Some(128));
        assert_eq!(a.free(x), None);
        assert_eq!(a.free(y), Some(64));
        assert_eq!(a.free(z), Some(64));
        assert_eq!(a.largest_free(), 4096, "everything coalesced");
        assert_eq!(a.alloc(4096, 64), Some(RESERVED));
    }

    #[test]
    fn same_calls_same_offsets() {
        let run = || {
            let mut a = Allocator::new(1 << 20);
            let mut out = Vec::new();
            for i in 1..50u64 {
                out.push(a.alloc(i * 37, 1 << (i % 8)));
                if i % 3 == 0 {
                    a.free(out[(i / 2) as usize].unwrap());
                }
            }
            out
        };
        assert_eq!(run(), run());
    }
}
