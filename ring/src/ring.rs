//! The ring's memory, the CPU producer and the proxy-side consumer.
//!
//! # Memory ordering
//!
//! The happens-before chain of one operation, in the eight steps that `docs/PROTOCOLS.md`,
//! `abi/include/pshmem/ring.h` and `kernels/include/pshmem/ring_device.cuh` number alike. A CPU
//! producer (here) and a GPU producer (`ring_device.cuh`: head and tail cache in device memory,
//! `st.release.sys` for step 4) follow the same steps:
//!
//! 1. Reserve: the producer takes `[idx, idx + n)` with a `Relaxed` fetch-add on `head`: the
//!    counter only hands out distinct indices; nothing is published through it.
//! 2. Wait for room: before writing, it makes sure the consumer is done with the previous lap's
//!    contents of these slots: unless its cached tail already shows room, it loads `tail` with
//!    `Acquire` until `idx + n - tail <= capacity`. That acquire pairs with the consumer's
//!    `Release` store of `tail` (step 6), which follows its reads of those slots, so the reads
//!    happen before the overwrite.
//! 3. Write: it stores `a`, `b`, `c` and `pe` of every slot, and the `ctrl` of every
//!    continuation slot (`Relaxed`).
//! 4. Publish: it stores the first slot's `ctrl` with `Release`, carrying the lap's commit bit.
//! 5. Consume: the consumer loads the first slot's `ctrl` with `Acquire`; a matching commit bit
//!    means the release of step 4 is seen, and with it every store of step 3 to every slot of
//!    the operation; it copies the operation out.
//! 6. Hand back: after its copies, the consumer stores `tail` with `Release` (in batches); step 2
//!    of a later lap acquires it.
//! 7. Complete: after the operation's effects (data written, results stored, staged data copied
//!    out), and those of every operation before it in the ring, the consumer stores `completed`
//!    with `Release`.
//! 8. Quiet: a waiter reads `head` and loads `completed` with `Acquire` until it reaches that
//!    index, so it sees those effects.
//!
//! `error` is written once by the consumer side (`Release`, compare-exchange from 0) and read
//! by every CPU wait of steps 2 and 8 (`Acquire`) on every turn, so no wait outlives a failure.

use std::{
    any::Any,
    ptr::NonNull,
    sync::Arc,
    time::{Duration, Instant},
};

use pshmem_abi::error;

use crate::{
    layout::{CTRL_COMMIT, MAX_SLOTS, RawSlot, RingCtrl, Slot, commit_bit, ctrl_nslots},
    sync::{AtomicU64, Ordering, relax},
};

/// Why a ring operation could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// The proxy raised the ring's error word.
    #[error("the proxy raised error code {code} ({}): {}", pshmem_abi::describe_pe(*pe), describe(*code))]
    Raised {
        /// The error code (see [`pshmem_abi::error`]).
        code: u32,
        /// The PE concerned, if any.
        pe: Option<u32>,
    },
    /// A wait ran past its deadline.
    #[error("timed out after {waited:.1?} waiting for {what}: is the proxy thread running?")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// An operation with an impossible slot count.
    #[error("an operation takes 1..={max} slots, not {nslots}", max = MAX_SLOTS)]
    BadSlotCount {
        /// The count asked for.
        nslots: usize,
    },
    /// A batch larger than the ring could never be published.
    #[error("a batch of {slots} slots does not fit in a ring of {capacity}")]
    BatchTooLarge {
        /// Slots in the batch.
        slots: usize,
        /// The ring's capacity.
        capacity: u64,
    },
    /// The consumer found a slot that violates the protocol (torn or foreign write).
    #[error("protocol violation at ring index {index}: {what}")]
    Protocol {
        /// Ring index.
        index: u64,
        /// What was wrong.
        what: &'static str,
    },
}

fn describe(code: u32) -> &'static str {
    match code {
        error::PEER_DEAD => "a peer died",
        error::OP_FAILED => "an operation failed at the transport",
        error::PROXY => "the proxy failed or shut down",
        _ => "unknown code",
    }
}

/// Decodes an error word.
pub fn decode_error(word: u64) -> Option<RingError> {
    (word != 0).then(|| {
        let pe = word as u32;
        RingError::Raised {
            code: (word >> 32) as u32,
            pe: (pe != error::NO_PE).then_some(pe),
        }
    })
}

/// A bound on a wait: an optional deadline.
#[derive(Debug, Clone, Copy)]
pub struct WaitLimit {
    start: Instant,
    limit: Option<Duration>,
}

impl WaitLimit {
    /// Waits at most `limit` (`None`: until the error word says otherwise).
    pub fn new(limit: Option<Duration>) -> Self {
        Self {
            start: Instant::now(),
            limit,
        }
    }

    fn check(&self, what: &'static str) -> Result<(), RingError> {
        match self.limit {
            Some(l) if self.start.elapsed() > l => Err(RingError::Timeout {
                what,
                waited: self.start.elapsed(),
            }),
            _ => Ok(()),
        }
    }
}

/// The memory behind a ring that this process does not own as Rust boxes (pinned host memory
/// mapped for the GPU, say); kept alive as long as the ring.
pub type Backing = Box<dyn Any + Send + Sync>;

/// A ring: `capacity` slots and a control block, shared by producers and one consumer.
#[derive(Debug)]
pub struct Ring {
    slots: NonNull<Slot>,
    ctrl: NonNull<RingCtrl>,
    capacity: u64,
    mask: u64,
    _backing: Owner,
}

enum Owner {
    Host {
        _slots: Box<[Slot]>,
        _ctrl: Box<RingCtrl>,
    },
    External(#[allow(dead_code)] Backing),
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Owner::Host { .. } => "host",
            Owner::External(_) => "external",
        })
    }
}

// SAFETY: the ring is made of atomics only (slots and control block); the pointers stay valid
// for the ring's life because it owns (or keeps alive) the memory they point to.
unsafe impl Send for Ring {}
// SAFETY: as above; every access goes through atomics.
unsafe impl Sync for Ring {}

impl Ring {
    /// A ring in ordinary host memory (CPU producers, tests, host mode).
    ///
    /// # Panics
    /// If `capacity` is not a power of two of at least [`MAX_SLOTS`].
    pub fn new_host(capacity: usize) -> Arc<Self> {
        assert!(
            capacity.is_power_of_two() && capacity >= MAX_SLOTS as usize,
            "ring capacity must be a power of two >= {MAX_SLOTS}"
        );
        let mut slots: Box<[Slot]> = (0..capacity).map(|_| Slot::default()).collect();
        let mut ctrl = Box::<RingCtrl>::default();
        let sp = NonNull::from(&mut slots[0]);
        let cp = NonNull::from(&mut *ctrl);
        Arc::new(Self {
            slots: sp,
            ctrl: cp,
            capacity: capacity as u64,
            mask: capacity as u64 - 1,
            _backing: Owner::Host {
                _slots: slots,
                _ctrl: ctrl,
            },
        })
    }

    /// A ring over memory allocated elsewhere (for example pinned host memory the GPU writes).
    ///
    /// # Safety
    /// `slots` must point to `capacity` zeroed [`Slot`]s and `ctrl` to a zeroed [`RingCtrl`],
    /// both valid for reads and writes, suitably aligned, and kept alive by `backing` until the
    /// ring is dropped; nothing else may access them except through the ring protocol.
    /// `capacity` must be a power of two of at least [`MAX_SLOTS`].
    pub unsafe fn from_raw(
        slots: NonNull<Slot>,
        ctrl: NonNull<RingCtrl>,
        capacity: usize,
        backing: Backing,
    ) -> Arc<Self> {
        Arc::new(Self {
            slots,
            ctrl,
            capacity: capacity as u64,
            mask: capacity as u64 - 1,
            _backing: Owner::External(backing),
        })
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The control block.
    pub fn ctrl(&self) -> &RingCtrl {
        // SAFETY: valid for the ring's life (constructor contracts).
        unsafe { self.ctrl.as_ref() }
    }

    /// The slot that ring index `index` maps to.
    /// Asks the CPU to bring the cache line of slot `index` close (a hint; no effect on
    /// what any load returns).
    #[inline]
    fn prefetch(&self, index: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            let p = self.slot(index) as *const Slot as *const i8;
            // SAFETY: a prefetch never faults and reads nothing into the program; `p` is a
            // slot of this ring anyway.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = index;
    }

    fn slot(&self, index: u64) -> &Slot {
        // SAFETY: `index & mask < capacity`, and the slots are valid for the ring's life.
        unsafe { &*self.slots.as_ptr().add((index & self.mask) as usize) }
    }

    /// Addresses of the slots and control block (for handing the ring to a GPU).
    pub fn raw_parts(&self) -> (NonNull<Slot>, NonNull<RingCtrl>) {
        (self.slots, self.ctrl)
    }

    /// The error word, decoded.
    pub fn error(&self) -> Option<RingError> {
        // Acquire: pairs with the release in `raise`, so what the proxy recorded before raising
        // (its sticky error) is visible to whoever reads the word.
        decode_error(self.ctrl().error.load(Ordering::Acquire))
    }

    /// Raises the error word (the first raise wins). Returns whether this call set it.
    pub fn raise(&self, code: u32, pe: Option<u32>) -> bool {
        let word = (u64::from(code) << 32) | u64::from(pe.unwrap_or(error::NO_PE));
        self.ctrl()
            .error
            .compare_exchange(0, word, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Operations below this index have finished.
    pub fn completed(&self) -> u64 {
        // Acquire: step 8 — pairs with the consumer's release store in
        // `Consumer::set_completed`.
        self.ctrl().completed.load(Ordering::Acquire)
    }

    /// Spins (with back-off) until `cond` holds, the error word is raised, or `limit` passes.
    fn wait(
        &self,
        what: &'static str,
        limit: &WaitLimit,
        mut cond: impl FnMut() -> bool,
    ) -> Result<(), RingError> {
        let mut step = 0u32;
        loop {
            if cond() {
                return Ok(());
            }
            if let Some(e) = self.error() {
                return Err(e);
            }
            if step % 256 == 255 {
                limit.check(what)?;
            }
            relax(step.min(1 << 20));
            step = step.wrapping_add(1);
        }
    }

    /// Waits until every operation below `index` has finished.
    pub fn wait_completed(&self, index: u64, limit: &WaitLimit) -> Result<(), RingError> {
        self.wait("operations to complete", limit, || {
            self.completed() >= index
        })
    }
}

/// A CPU producer. Any number of threads may share one (`&self` methods); each reservation is
/// one fetch-add on the ring's `head`.
#[derive(Debug)]
pub struct Producer {
    ring: Arc<Ring>,
    /// The last tail seen (only ever grows; `Relaxed`: it is a hint, re-read with acquire
    /// before any slot is reused).
    tail_cache: AtomicU64,
}

impl Producer {
    /// A producer on `ring`.
    pub fn new(ring: Arc<Ring>) -> Self {
        Self {
            ring,
            tail_cache: AtomicU64::new(0),
        }
    }

    /// The ring.
    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }

    /// Every operation reserved so far lies below this index (what quiet waits for).
    pub fn head(&self) -> u64 {
        // Acquire: a quiet issued after another thread's push (synchronised with it by the
        // application) must see that push's reservation.
        self.ring.ctrl().head.load(Ordering::Acquire)
    }

    /// Publishes one operation of 1..=[`MAX_SLOTS`] slots (`ctrl` words without commit bit;
    /// the first slot's carries the slot count). Returns the index just past it: the operation
    /// has finished once [`Ring::completed`] reaches it.
    ///
    /// After an error the ring is unusable: a reserved slot may stay unpublished.
    pub fn push(&self, slots: &[RawSlot], limit: &WaitLimit) -> Result<u64, RingError> {
        let n = slots.len();
        if n == 0 || n > MAX_SLOTS as usize || ctrl_nslots(slots[0].ctrl) as usize != n {
            return Err(RingError::BadSlotCount { nslots: n });
        }
        self.publish(slots, limit)
    }

    /// Publishes a batch of consecutive operations (their slots concatenated, each laid out as
    /// for [`Producer::push`]) with one reservation and one release store: the consumer sees
    /// none of them until it sees them all, and then drains them without waiting on this
    /// producer between operations. The batch must fit in the ring. Returns the index just
    /// past the last operation.
    pub fn push_many(&self, slots: &[RawSlot], limit: &WaitLimit) -> Result<u64, RingError> {
        if slots.len() as u64 > self.ring.capacity {
            return Err(RingError::BatchTooLarge {
                slots: slots.len(),
                capacity: self.ring.capacity,
            });
        }
        let mut at = 0;
        while at < slots.len() {
            let n = ctrl_nslots(slots[at].ctrl) as usize;
            if n == 0 || n > MAX_SLOTS as usize || at + n > slots.len() {
                return Err(RingError::BadSlotCount { nslots: n });
            }
            at += n;
        }
        if slots.is_empty() {
            return Ok(self.head());
        }
        self.publish(slots, limit)
    }

    /// Reserves `slots.len()` slots, waits for room, writes them and publishes them with one
    /// release store on the first slot's `ctrl`. Every other store (payloads, and the `ctrl`
    /// words of later operations in a batch) is `Relaxed` and program-ordered before that
    /// release: the consumer reaches a later operation only after acquiring the first slot, so
    /// each of them happens before its reads (memory-ordering steps 3, 4 and 5).
    fn publish(&self, slots: &[RawSlot], limit: &WaitLimit) -> Result<u64, RingError> {
        if let Some(e) = self.ring.error() {
            return Err(e);
        }
        let n = slots.len();
        let ring = &*self.ring;
        let cap = ring.capacity;
        // Relaxed: the fetch-add only hands out distinct indices (memory-ordering step 1).
        let idx = ring.ctrl().head.fetch_add(n as u64, Ordering::Relaxed);
        let end = idx + n as u64;
        if end - self.tail_cache.load(Ordering::Relaxed) > cap {
            ring.wait("room in the ring", limit, || {
                // Acquire: step 2 — the consumer's reads of the previous lap's slots happen
                // before our writes below.
                let tail = ring.ctrl().tail.load(Ordering::Acquire);
                self.tail_cache.fetch_max(tail, Ordering::Relaxed);
                end - tail <= cap
            })?;
        }
        // Step 3 (`Relaxed`), from the last slot to the first, then step 4.
        for (i, s) in slots.iter().enumerate().rev() {
            let at = idx + i as u64;
            let slot = ring.slot(at);
            slot.a.store(s.a, Ordering::Relaxed);
            slot.b.store(s.b, Ordering::Relaxed);
            slot.c.store(s.c, Ordering::Relaxed);
            slot.pe.store(s.pe, Ordering::Relaxed);
            let ctrl = (s.ctrl & !CTRL_COMMIT) | commit_bit(at, cap);
            if i == 0 {
                // Release: step 4 — publishes every store above, continuation slots and later
                // operations of a batch included.
                slot.ctrl.store(ctrl, Ordering::Release);
            } else {
                // Relaxed: ordered before the consumer's view by the first slot's release.
                slot.ctrl.store(ctrl, Ordering::Relaxed);
            }
        }
        Ok(end)
    }

    /// Waits until everything reserved so far has finished (quiet).
    pub fn quiet(&self, limit: &WaitLimit) -> Result<(), RingError> {
        self.ring.wait_completed(self.head(), limit)
    }
}

/// How many slots ahead of its position the consumer prefetches (eight 64-byte lines).
const PREFETCH_AHEAD: u64 = 16;

/// The consumer side (one per ring, owned by a proxy thread).
#[derive(Debug)]
pub struct Consumer {
    ring: Arc<Ring>,
    pos: u64,
    tail_published: u64,
    tail_batch: u64,
}

impl Consumer {
    /// The consumer of `ring`; it hands slots back to producers every `capacity / 8` slots,
    /// and whenever it finds the ring empty.
    pub fn new(ring: Arc<Ring>) -> Self {
        let tail_batch = (ring.capacity / 8).max(1);
        Self {
            ring,
            pos: 0,
            tail_published: 0,
            tail_batch,
        }
    }

    /// The ring.
    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }

    /// Index of the next operation to consume.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Copies out up to `max_ops` published operations, in order, calling `f(index, slots)`
    /// for each. Returns how many were consumed.
    pub fn poll(
        &mut self,
        max_ops: usize,
        mut f: impl FnMut(u64, &[RawSlot]),
    ) -> Result<usize, RingError> {
        let ring = &*self.ring;
        let cap = ring.capacity;
        let mut n = 0;
        let mut buf = [RawSlot::default(); MAX_SLOTS as usize];
        while n < max_ops {
            // The slots a few lines ahead are most likely written by now (by another core or
            // the GPU): start moving them here while this one is handled.
            ring.prefetch(self.pos + PREFETCH_AHEAD);
            let first = ring.slot(self.pos);
            // Acquire: step 5 — pairs with the producer's release of this ctrl word.
            let ctrl = first.ctrl.load(Ordering::Acquire);
            if ctrl & CTRL_COMMIT != commit_bit(self.pos, cap) {
                break;
            }
            let ns = ctrl_nslots(ctrl);
            if ns > MAX_SLOTS {
                return Err(RingError::Protocol {
                    index: self.pos,
                    what: "slot count above the maximum",
                });
            }
            for (i, out) in buf.iter_mut().enumerate().take(ns as usize) {
                let at = self.pos + i as u64;
                let s = ring.slot(at);
                let c = if i == 0 {
                    ctrl
                } else {
                    s.ctrl.load(Ordering::Relaxed)
                };
                if c & CTRL_COMMIT != commit_bit(at, cap) {
                    return Err(RingError::Protocol {
                        index: at,
                        what: "continuation slot not published with its operation",
                    });
                }
                *out = RawSlot {
                    a: s.a.load(Ordering::Relaxed),
                    b: s.b.load(Ordering::Relaxed),
                    c: s.c.load(Ordering::Relaxed),
                    pe: s.pe.load(Ordering::Relaxed),
                    ctrl: c & !CTRL_COMMIT,
                };
            }
            f(self.pos, &buf[..ns as usize]);
            self.pos += u64::from(ns);
            n += 1;
        }
        let unpublished = self.pos - self.tail_published;
        if unpublished >= self.tail_batch || (n < max_ops && unpublished > 0) {
            // Release: step 6 — the copies above happen before any producer reuses these
            // slots (its step 2 acquires this store).
            ring.ctrl().tail.store(self.pos, Ordering::Release);
            self.tail_published = self.pos;
        }
        Ok(n)
    }

    /// Declares every operation below `index` finished.
    pub fn set_completed(&self, index: u64) {
        // Release: step 7 — the operations' effects happen before a waiter's acquire.
        self.ring.ctrl().completed.store(index, Ordering::Release);
    }
}
