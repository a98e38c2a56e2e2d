//! In-order completion from out-of-order finishes: the proxy consumes operations in ring order,
//! they finish in any order, and the ring's `completed` counter may only move past an operation
//! once it and every operation before it have finished.

/// Tracks the operations of one ring between consumption and completion.
///
/// A power-of-two ring of words indexed by sequence number (`seq & mask`), each holding the
/// ring index just past its operation shifted left by one, with the low bit set once finished:
/// push, finish and advance are a store, an or and a load each (the proxy does all three for
/// every descriptor).
#[derive(Debug)]
pub struct Completions {
    /// Sequence number of the oldest pending operation.
    base: u64,
    /// Operations pending (consumed, not yet past the counter).
    len: usize,
    /// `end << 1 | finished` of sequence number `s` at `slots[s & mask]`.
    slots: Vec<u64>,
    mask: u64,
    /// Everything below this ring index has finished.
    completed: u64,
}

impl Default for Completions {
    fn default() -> Self {
        Self::new()
    }
}

impl Completions {
    /// An empty tracker.
    pub fn new() -> Self {
        const INITIAL: usize = 1024;
        Self {
            base: 0,
            len: 0,
            slots: vec![0; INITIAL],
            mask: INITIAL as u64 - 1,
            completed: 0,
        }
    }

    /// Doubles the ring, keeping every pending entry at its sequence number's new position.
    #[cold]
    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let mut slots = vec![0; cap];
        let mask = cap as u64 - 1;
        for seq in self.base..self.base + self.len as u64 {
            slots[(seq & mask) as usize] = self.slots[(seq & self.mask) as usize];
        }
        self.slots = slots;
        self.mask = mask;
    }

    /// Registers the next consumed operation, which ends at ring index `end`; returns its
    /// sequence number for [`Completions::finish`].
    #[inline]
    pub fn push(&mut self, end: u64) -> u64 {
        debug_assert!(end > self.completed && end < 1 << 63);
        if self.len == self.slots.len() {
            self.grow();
        }
        let seq = self.base + self.len as u64;
        self.slots[(seq & self.mask) as usize] = end << 1;
        self.len += 1;
        seq
    }

    /// Whether `seq` was pushed and has not finished: a completion for anything else is a
    /// duplicate (or was never posted).
    #[inline]
    pub fn is_pending(&self, seq: u64) -> bool {
        seq.wrapping_sub(self.base) < self.len as u64
            && self.slots[(seq & self.mask) as usize] & 1 == 0
    }

    /// Marks operation `seq` finished.
    ///
    /// # Panics
    /// If `seq` is not pending (a bookkeeping bug in the caller).
    #[inline]
    pub fn finish(&mut self, seq: u64) {
        assert!(
            seq.wrapping_sub(self.base) < self.len as u64,
            "finished an operation twice (or one never pushed)"
        );
        let e = &mut self.slots[(seq & self.mask) as usize];
        assert!(*e & 1 == 0, "finished an operation twice");
        *e |= 1;
    }

    /// The full sequence number of a pending operation from its low 32 bits (valid while
    /// fewer than 2^32 operations are pending, which the ring and transport limits ensure).
    #[inline]
    pub fn seq_from_low(&self, low: u32) -> u64 {
        self.base + u64::from(low.wrapping_sub(self.base as u32))
    }

    /// Moves past every finished operation at the front; returns the new counter if it moved.
    #[inline]
    pub fn advance(&mut self) -> Option<u64> {
        let before = self.completed;
        while self.len > 0 {
            let e = self.slots[(self.base & self.mask) as usize];
            if e & 1 == 0 {
                break;
            }
            self.completed = e >> 1;
            self.base += 1;
            self.len -= 1;
        }
        (self.completed != before).then_some(self.completed)
    }

    /// Operations consumed and not yet past the counter.
    pub fn outstanding(&self) -> usize {
        self.len
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
    fn grows_with_pending_operations_out_of_order() {
        let mut c = Completions::new();
        // Start away from zero so that the pending window wraps the ring while it grows.
        for i in 0..700 {
            let s = c.push(i + 1);
            c.finish(s);
        }
        assert_eq!(c.advance(), Some(700));
        let seqs: Vec<u64> = (0..5000).map(|i| c.push(701 + 2 * i)).collect();
        assert_eq!(c.outstanding(), 5000);
        for s in seqs[1..4999].iter().rev() {
            c.finish(*s);
        }
        assert_eq!(c.advance(), None, "the oldest is still pending");
        c.finish(*seqs.last().unwrap());
        assert_eq!(c.advance(), None);
        c.finish(seqs[0]);
        assert_eq!(c.advance(), Some(701 + 2 * 4999));
        assert_eq!(c.outstanding(), 0);
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
