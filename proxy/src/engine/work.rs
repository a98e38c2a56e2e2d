//! What the engine keeps between the phases of its turns: work queued per (ring, PE), the
//! operations and parts in flight, the registered staging memory.

use std::collections::VecDeque;

use pshmem_ring::{AmoOp, Completions, Consumer, Local, RawSlot, SignalOp, layout::MAX_SLOTS};
use pshmem_transport::MrId;

use super::{ctx::SlabKey, tags::Tag};
use crate::wire::Request;

/// The operation a work item or part belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpRef {
    /// Tracked in the op slab (several parts, a result cell, a signal after data).
    Slab(SlabKey),
    /// A single-part operation without a result, by its sequence number: its part's context
    /// names it (ring, PE, sequence number), and that part's completion finishes it, with no
    /// slab entry on either side (the common case: `p`, small puts and gets, signals,
    /// non-fetching AMOs).
    Fast(u64),
}

/// Which way a transfer moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    /// From the local side to the target's heap.
    Put,
    /// From the target's heap to the local side.
    Get,
}

/// A put or get being issued part by part (RMA parts, or host-staged chunks).
#[derive(Debug, Clone, Copy)]
pub(super) struct Xfer {
    pub dir: Dir,
    pub op: OpRef,
    /// Offset in the target's heap.
    pub remote: u64,
    pub local: Local,
    pub len: u64,
    /// Bytes issued so far.
    pub issued: u64,
    /// The tag every data write carries (tagged signal mode): its put-with-signal's, its
    /// counted round's, or its strong epoch's.
    pub tag: Option<Tag>,
    /// The operation's last work item (false: a signal follows).
    pub last: bool,
}

/// Work queued for one (ring, PE), issued front first.
#[derive(Debug)]
pub(super) enum Work {
    Xfer(Xfer),
    P {
        op: OpRef,
        remote: u64,
        value: u64,
        width: u8,
        /// Its strong epoch's tag (strong signals).
        tag: Option<Tag>,
    },
    Amo {
        op: OpRef,
        remote: u64,
        aop: AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
    },
    Signal {
        op: OpRef,
        remote: u64,
        value: u64,
        sop: SignalOp,
        /// The tag of the writes it waits for (tagged mode), if any.
        tag: Option<Tag>,
        /// Applied in issue order at the target (strong signals).
        strong: bool,
    },
    /// Passes once everything issued before it to this PE has completed.
    Gate,
}

impl Work {
    /// The operation whose issuing this item ends, if it is the operation's last item.
    pub(super) fn ends(&self) -> Option<OpRef> {
        match *self {
            Work::Xfer(Xfer { last: false, .. }) | Work::Gate => None,
            Work::Xfer(Xfer { op, .. })
            | Work::P { op, .. }
            | Work::Amo { op, .. }
            | Work::Signal { op, .. } => Some(op),
        }
    }
}

/// How issuing went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Issued {
    /// The whole item is posted.
    All,
    /// Blocked (transport back-pressure, flow control, staging, a closed gate, or a failure
    /// that is failing the job): try again later.
    Blocked,
}

/// The work of one (ring, PE).
#[derive(Debug, Default)]
pub(super) struct PeQueue {
    pub work: VecDeque<Work>,
    /// Parts posted to this PE from this ring and not yet complete.
    pub outstanding: u32,
    /// In the active list.
    pub active: bool,
}

/// One logical operation from a ring that needs bookkeeping.
#[derive(Debug)]
pub(super) struct Op {
    pub ring: u16,
    pub seq: u64,
    /// 1 while still being issued, plus the parts in flight.
    pub pending: u32,
    /// Where a fetching AMO's old value goes (0: nowhere).
    pub result: u64,
    /// Data parts issued (a tagged signal waits for this many writes).
    pub data_parts: u32,
}

/// What a tracked part holds until it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Posted {
    /// An RMA between registrations (the heap, or payload copied at post): nothing to release.
    Rma,
    /// A write from a staging chunk, freed at completion.
    FromChunk(u32),
    /// A read into a staging chunk, copied out to `dst` (`len` bytes) at completion.
    IntoChunk { chunk: u32, dst: u64, len: usize },
    /// A request whose ack completes the part.
    Request,
    /// A host-staged transfer holding a landing slot of `owner`'s group, freed at completion.
    Landing { owner: u32, slot: u32 },
}

/// One transport operation (a write, a read, or a request awaiting its ack).
#[derive(Debug)]
pub(super) struct Part {
    pub op: SlabKey,
    pub pe: u32,
    pub ring: u16,
    pub posted: Posted,
}

/// A ring the engine drains, with its completion tracker and per-PE queues.
pub(super) struct RingState {
    /// Taken out while the ring is drained (so each operation is handled inside the drain).
    pub cons: Option<Consumer>,
    pub done: Completions,
    pub queues: Vec<PeQueue>,
    /// Operations taken out of the ring while the proxy waited for its GPU (see
    /// [`stash_rings`]), each with its sequence number: the next drain takes them first.
    pub stash: VecDeque<Stashed>,
}

impl RingState {
    /// The state of `ring`, drained for a job of `n` PEs.
    pub(super) fn new(ring: std::sync::Arc<pshmem_ring::Ring>, n: usize) -> Self {
        Self {
            cons: Some(Consumer::new(ring)),
            done: Completions::new(),
            queues: (0..n).map(|_| PeQueue::default()).collect(),
            stash: VecDeque::new(),
        }
    }
}

/// An operation's slots, copied out of its ring before the engine could take it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stashed {
    pub seq: u64,
    pub slots: [RawSlot; MAX_SLOTS as usize],
    pub n: u8,
}

/// Copies new operations out of every ring not being drained now (up to `batch` each) into its
/// stash, freeing their slots: called while the proxy waits for its GPU, whose blocks may be
/// waiting for that ring space. Order is kept: a ring's stash is taken before its slots.
pub(super) fn stash_rings(rings: &mut [RingState], batch: usize) {
    for rs in rings {
        let RingState {
            cons, done, stash, ..
        } = rs;
        let Some(cons) = cons.as_mut() else {
            continue;
        };
        // An error (a bad slot) is left where it is: the next drain meets it and reports it.
        let _ = cons.poll(batch, |idx, slots| {
            let seq = done.push(idx + slots.len() as u64);
            let mut s = Stashed {
                seq,
                slots: [RawSlot::default(); MAX_SLOTS as usize],
                n: slots.len().min(MAX_SLOTS as usize) as u8,
            };
            s.slots[..s.n as usize].copy_from_slice(&slots[..s.n as usize]);
            stash.push_back(s);
        });
    }
}

/// Registered bounce memory for raw-address sources and destinations.
pub(super) struct Staging {
    pub buf: Vec<u8>,
    pub mr: MrId,
    pub chunk: usize,
    pub free: Vec<u32>,
    /// A small area for payloads that fit the inject size (copied by the transport at post).
    pub scratch: usize,
    /// Its length: the largest payload posted from it.
    pub inject: usize,
}

impl Staging {
    pub(super) fn chunk_ptr(&mut self, c: u32) -> *mut u8 {
        self.buf[c as usize * self.chunk..].as_mut_ptr()
    }

    /// Byte offset of chunk `c` in the registration.
    pub(super) fn chunk_offset(&self, c: u32) -> usize {
        c as usize * self.chunk
    }
}

/// A target-side record of tagged writes and the signal waiting for them.
#[derive(Debug, Default)]
pub(super) struct TagState {
    pub arrived: u32,
    pub signal: Option<Request>,
}

/// A transport event, copied out of the poll callback.
#[derive(Debug)]
pub(crate) enum Ev {
    Done(u64, Option<u64>),
    /// Context and the transport's error.
    Failed(u64, pshmem_transport::TransportError),
    /// A peer's write with remote CQ data landed here.
    RemoteData(u64),
}
