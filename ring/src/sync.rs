//! The atomics and the spin hint the ring uses: std's normally, loom's under `cfg(loom)` so that
//! the model checker explores every interleaving of the protocol.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One step of a bounded spin: a CPU pause for the first steps, then a yield of the thread, so
/// that a waiter on an oversubscribed machine lets the thread it waits for run.
#[inline]
pub(crate) fn relax(step: u32) {
    #[cfg(loom)]
    {
        let _ = step;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if step < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
