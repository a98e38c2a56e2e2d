//! In-order completion from out-of-order finishes: the proxy consumes operations in ring order,
//! they finish in any order, and the ring's `completed` counter may only move past an operation
//! once it and every operation before it have finished.

use std::collections::VecDeque;

/// Tracks the operations of one ring between consumption and completion.
#[derive(Debug, Default)]
pub struct Completions {
    /// Sequence number of `pending[0]`.
    base: u64,
    /// (index just past the operation, finished), in consumption order.
    pending: VecDeque<(u64, bool)>,
    /// Everything below this ring index has finished.
    completed: u64,
}

impl Completions {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the next consumed operation, which ends at ring index `end`; returns its
    /// sequence number for [`Completions::finish`].
    pub fn push(&mut self, end: u64) -> u64 {
        debug_assert!(self.pending.back().is_none_or(|(e, _)| *e < end));
        self.pending.push_back((end, false));
        self.base + self.pending.len() as u64 - 1
    }

    /// Marks operation `seq` finished.
    ///
    /// # Panics
    /// If `seq` is not pending (a bookkeeping bug in the caller).
    pub fn finish(&mut self, seq: u64) {
        let i = seq
            .checked_sub(self.base)
            .expect("finished an operation twice") as usize;
        let entry = &mut self.pending[i];
        assert!(!entry.1, "finished an operation twice");
        entry.1 = true;
    }

    /// The full sequence number of a pending operation from its low 32 bits (valid while
    /// fewer than 2^32 operations are pending, which the ring and transport limits ensure).
    pub fn seq_from_low(&self, low: u32) -> u64 {
        self.base + u64::from(low.wrapping_sub(self.base as u32))
    }

    /// Moves past every finished operation at the front; returns the new counter if it moved.
    pub fn advance(&mut self) -> Option<u64> {
        let before = self.completed;
        while let Some(&(end, true)) = self.pending.front() {
            self.pending.pop_front();
            self.base += 1;
            self.completed = end;
        }
        (self.completed != before).then_some(self.completed)
    }

    /// Operations consumed and not yet past the counter.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// The counter.
    pub fn completed(&self) -> u64 {
        self.completed
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn advances_only_over_a_finished_prefix() {
        let mut c = Completions::new();
        let a = c.push(1);
        let b = c.push(3);
        let d = c.push(4);
        c.finish(b);
        assert_eq!(c.advance(), None);
        c.finish(a);
        assert_eq!(c.advance(), Some(3));
        assert_eq!(c.outstanding(), 1);
        c.finish(d);
        assert_eq!(c.advance(), Some(4));
        assert_eq!(c.outstanding(), 0);
        let e = c.push(6);
        assert_eq!(e, 3);
        assert_eq!(c.seq_from_low(3), 3);
        c.finish(e);
        assert_eq!(c.advance(), Some(6));
    }

    #[test]
    #[should_panic(expected = "twice")]
    fn double_finish_is_caught() {
        let mut c = Completions::new();
        let a = c.push(1);
        c.finish(a);
        c.finish(a);
    }
}
