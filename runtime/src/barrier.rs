//! The host barrier, and what it says when it times out: which PEs have not arrived.
//!
//! Reserved words at the start of the heap (below [`crate::alloc::RESERVED`]):
//! - `0..8*ROUNDS`: one arrival counter per dissemination round;
//! - `ARRIVED`: the epoch of the last barrier this PE entered (written by this PE only);
//! - `PROBE..PROBE+8*PROBE_SLOTS`: where a timed-out PE reads the peers' `ARRIVED` words.

use std::time::{Duration, Instant};

use pshmem_ring::{Desc, Local, Pe, SignalOp, WaitLimit};

use crate::{Cmp, Error, Pshmem, Result, Route, SymPtr, lock};

/// Dissemination rounds the counters allow (2^64 PEs).
const ROUNDS: u64 = 64;
/// This PE's last barrier epoch.
const ARRIVED: u64 = 8 * ROUNDS;
/// Where the peers' epochs are read into.
const PROBE: u64 = 1024;
/// PEs probed per batch.
const PROBE_SLOTS: u64 = (crate::alloc::RESERVED - PROBE) / 8;
/// An answer not yet received.
const UNANSWERED: u64 = u64::MAX;
/// How long a timed-out barrier waits for the peers' epochs.
const PROBE_WAIT: Duration = Duration::from_secs(2);

impl Pshmem {
    /// A dissemination barrier over signals on the reserved counters: in round k, signal
    /// PE (me + 2^k) mod n and wait for the signal from PE (me - 2^k) mod n. Each counter
    /// counts arrivals, so waiting for count >= epoch is immune to a fast peer's next barrier.
    /// On a timeout, the error names the PEs that have not entered this barrier.
    pub(crate) fn barrier_inner(&self, op: &'static str) -> Result<()> {
        let mut epoch = lock(&self.barrier_epoch);
        self.quiet_inner(op)?;
        *epoch += 1;
        self.mem
            .store(ARRIVED, *epoch, 8)
            .map_err(|e| self.mem_err(op, self.me, e))?;
        let mut k = 0;
        while (1usize << k) < self.n {
            let word = SymPtr(8 * k as u64);
            let partner = (self.me + (1 << k)) % self.n;
            self.signal_inner(op, self.route(partner), word, 1, SignalOp::Add, partner)?;
            match self.wait_local(op, word, Cmp::Ge, *epoch) {
                Ok(_) => {}
                Err(Error::Timeout { me, op, waited }) => {
                    let (missing, silent) = self.stragglers(*epoch);
                    return Err(Error::NotArrived {
                        me,
                        op,
                        waited,
                        missing,
                        silent,
                        waiting_for: (self.me + self.n - (1 << k)) % self.n,
                    });
                }
                Err(e) => return Err(e),
            }
            k += 1;
        }
        Ok(())
    }

    /// The PEs whose last barrier epoch is below `epoch` (not arrived), and those whose epoch
    /// could not be read within [`PROBE_WAIT`] (stopped, or their path is stuck).
    fn stragglers(&self, epoch: u64) -> (Vec<usize>, Vec<usize>) {
        let (mut missing, mut silent) = (Vec::new(), Vec::new());
        let mut by_ring = Vec::new();
        for pe in (0..self.n).filter(|&pe| pe != self.me) {
            match self.route(pe) {
                Route::Direct(h) => match h.load(ARRIVED, true) {
                    Ok(e) if e >= epoch => {}
                    Ok(_) => missing.push(pe),
                    Err(_) => silent.push(pe),
                },
                Route::Ring => by_ring.push(pe),
            }
        }
        for batch in by_ring.chunks(PROBE_SLOTS as usize) {
            let slot = |i: usize| PROBE + 8 * i as u64;
            for i in 0..batch.len() {
                let _ = self.mem.store(slot(i), UNANSWERED, 8);
            }
            let limit = WaitLimit::new(Some(PROBE_WAIT));
            let p = self.producer();
            let mut last = None;
            for (i, &pe) in batch.iter().enumerate() {
                // The answer lands in this PE's own heap, so a get that completes after we
                // stopped waiting writes nowhere it should not.
                let d = Desc::Get {
                    pe: Pe::from_idx(pe),
                    remote: ARRIVED,
                    local: Local::Heap(slot(i)),
                    len: 8,
                };
                let (slots, n) = d.encode();
                match p.push(&slots[..n], &limit) {
                    Ok(end) => last = Some(end),
                    Err(_) => break,
                }
            }
            if let Some(end) = last {
                // In order of completion, a stuck get hides the later ones: read every slot
                // however the wait ends.
                let _ = p.ring().wait_completed(end, &limit);
            }
            let deadline = Instant::now() + Duration::from_millis(50);
            for (i, &pe) in batch.iter().enumerate() {
                let mut v = self.mem.load(slot(i), true).unwrap_or(UNANSWERED);
                while v == UNANSWERED && Instant::now() < deadline {
                    std::thread::yield_now();
                    v = self.mem.load(slot(i), true).unwrap_or(UNANSWERED);
                }
                tracing::debug!("barrier probe: PE {pe} epoch {v:#x} (want {epoch})");
                match v {
                    UNANSWERED => silent.push(pe),
                    e if e < epoch => missing.push(pe),
                    _ => {}
                }
            }
        }
        missing.sort_unstable();
        silent.sort_unstable();
        (missing, silent)
    }
}
