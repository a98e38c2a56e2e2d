//! What the initiator keeps between the phases of its turns: work queued per (ring, PE), the
//! operations and parts in flight, and the registered staging memory; plus the small types the
//! phases share (a per-PE table, a transport event copied out of a poll).

use std::{
    collections::VecDeque,
    ops::{Index, IndexMut},
};

use pshmem_ring::{AmoOp, Completions, Consumer, Local, RawSlot, SignalOp, layout::MAX_SLOTS};
use pshmem_transport::{Caps, LocalMem, MemKind, MrId, Pe, Transport};

use super::{
    ctx::{RingId, SlabKey},
    tags::Tag,
};
use crate::{ProxyConfig, ProxyError, trace::Waited, wire::Request};

/// Largest single write or read the proxy posts from the heap (bigger ones are split).
pub(super) const MAX_PART: u64 = 16 << 20;

/// The most bytes of one RMA part of a transfer of `len` bytes. A tagged put (its writes
/// carry remote CQ data, which the transport never stripes, since the data must arrive once
/// after all the bytes) of at least the transport's striping size is cut into a part per
/// rail: the transport sends such writes over the rails in turn, so the put spreads over
/// every NIC like an untagged one, and the target counts each part's arrival.
pub(super) fn part_max(caps: &pshmem_transport::Caps, dir: Dir, len: u64, tagged: bool) -> u64 {
    if tagged && dir == Dir::Put && caps.rails > 1 && len >= caps.stripe_min as u64 {
        len.div_ceil(caps.rails as u64).min(MAX_PART)
    } else {
        MAX_PART
    }
}

/// One value per PE of the job, indexed by [`Pe`] (so that no phase converts a PE to an index).
#[derive(Debug, Clone)]
pub(super) struct PeVec<T>(Box<[T]>);

impl<T> PeVec<T> {
    /// `f(pe)` for every PE of a job of `n`.
    pub(super) fn from_fn(n: usize, f: impl FnMut(Pe) -> T) -> Self {
        Self(Pe::all(n).map(f).collect())
    }
}

impl<T> Index<Pe> for PeVec<T> {
    type Output = T;
    #[inline]
    fn index(&self, pe: Pe) -> &T {
        &self.0[pe.idx()]
    }
}

impl<T> IndexMut<Pe> for PeVec<T> {
    #[inline]
    fn index_mut(&mut self, pe: Pe) -> &mut T {
        &mut self.0[pe.idx()]
    }
}

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
        /// Applied in issue order at the target (a sequence number): every signal in tagged
        /// mode, so that a later signal never shows before an earlier one — whose own data it
        /// may count on (a counter or ring tail advanced by additions).
        sequenced: bool,
    },
    /// A `p` after a fence (tagged mode): a store request applied at the target in its
    /// source's order, so after the fence's mark, with no gate.
    Store {
        op: OpRef,
        remote: u64,
        value: u64,
        width: u8,
    },
    /// A fence's mark (tagged mode): a sequenced request that the target applies (as nothing)
    /// once the writes of the ring's epoch toward it landed; the sequenced requests after it
    /// (signals, AMOs, stores) then apply after everything before the fence.
    Mark {
        op: OpRef,
        /// The closed epoch's tag (`None`: no write since the last mark).
        tag: Option<Tag>,
    },
    /// Passes once everything issued before it to this PE has completed.
    Gate {
        /// Put there by a fence (else by a signal's ordering in gated mode).
        fence: bool,
    },
    /// Sets the next item (a counted signal) aside until everything issued before it to this
    /// PE has completed, while the items after it go on issuing (gated mode): the signal
    /// covers only what precedes it, so unlike a [`Work::Gate`] it holds nothing back.
    Hold,
}

impl Work {
    /// What a gate or hold that has to wait orders, for the trace.
    pub(super) fn waited(&self) -> Option<Waited> {
        match self {
            Work::Gate { fence: false } => Some(Waited::Signal),
            Work::Gate { fence: true } => Some(Waited::Fence),
            Work::Hold => Some(Waited::Hold),
            _ => None,
        }
    }

    /// The operation whose issuing this item ends, if it is the operation's last item.
    pub(super) fn ends(&self) -> Option<OpRef> {
        match *self {
            Work::Xfer(Xfer { last: false, .. }) | Work::Gate { .. } | Work::Hold => None,
            Work::Xfer(Xfer { op, .. })
            | Work::P { op, .. }
            | Work::Amo { op, .. }
            | Work::Signal { op, .. }
            | Work::Store { op, .. }
            | Work::Mark { op, .. } => Some(op),
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

/// How a post went, once booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Post {
    /// Posted: the part is in flight.
    Done,
    /// Back-pressure: nothing was posted (the part is undone); try again later.
    Retry,
    /// Failed: the job is failing.
    Failed,
}

impl Post {
    /// What a post means for the work item that made it.
    pub(super) fn issued(self) -> Issued {
        match self {
            Post::Done => Issued::All,
            Post::Retry | Post::Failed => Issued::Blocked,
        }
    }
}

/// The work of one (ring, PE).
#[derive(Debug, Default)]
pub(super) struct PeQueue {
    pub work: VecDeque<Work>,
    /// Parts posted to this PE from this ring and not yet complete.
    pub outstanding: u32,
    /// In the active list.
    pub active: bool,
    /// Signals set aside by a [`Work::Hold`], oldest first, each with its operation's
    /// sequence number (these increase: a queue holds its ring's operations in order).
    pub held: VecDeque<(u64, Work)>,
    /// While signals are held: the parts in flight between them by sequence number —
    /// `segs[i]` those of operations after `held[i - 1]` and before `held[i]`, the last one
    /// those after every held signal (`held.len() + 1` entries, summing to `outstanding`).
    pub segs: VecDeque<u32>,
    /// Tagged mode: the writes to this PE carry the ring's epoch tag (from the first fence
    /// on), so that later fences go by sequence: a mark counts them at the target.
    pub epoch_writes: bool,
    /// Tagged mode: a fence went by sequence and no gate followed it yet; the next write (its
    /// data is placed by the target's NIC, not its proxy) must take one.
    pub fenced: bool,
}

impl PeQueue {
    /// Nothing in flight and nothing held: what a [`Work::Gate`] waits for.
    pub fn drained(&self) -> bool {
        self.outstanding == 0 && self.held.is_empty()
    }

    /// The segment of the parts of operation `seq` (see `segs`): held seqs increase.
    fn seg(&self, seq: u64) -> usize {
        self.held.partition_point(|(s, _)| *s < seq)
    }

    /// A part of operation `seq()` was posted.
    #[inline]
    pub fn posted(&mut self, seq: impl FnOnce() -> u64) {
        self.outstanding += 1;
        if !self.held.is_empty() {
            let i = self.seg(seq());
            self.segs[i] += 1;
        }
    }

    /// A part of operation `seq()` completed.
    #[inline]
    pub fn completed(&mut self, seq: impl FnOnce() -> u64) {
        self.outstanding -= 1;
        if !self.held.is_empty() {
            let i = self.seg(seq());
            self.segs[i] -= 1;
        }
    }

    /// Sets signal `w` of operation `seq` aside until the parts in flight before it complete
    /// (it is at the front: everything before it was issued).
    pub fn hold(&mut self, seq: u64, w: Work) {
        self.open_segs();
        self.held.push_back((seq, w));
        self.segs.push_back(0);
    }

    /// Before a queue's first held signal: one segment of every part in flight.
    fn open_segs(&mut self) {
        if self.held.is_empty() {
            self.segs.clear();
            self.segs.push_back(self.outstanding);
        }
    }

    /// The oldest held signal and its operation's seq, once nothing before it is in flight.
    pub fn release(&mut self) -> Option<(u64, Work)> {
        if self.segs.front() != Some(&0) {
            return None;
        }
        self.segs.pop_front();
        let held = self.held.pop_front();
        if self.held.is_empty() {
            self.segs.clear();
        }
        held
    }

    /// Puts back the signal [`PeQueue::release`] gave, which could not be issued yet: it
    /// stays the oldest, with nothing before it in flight.
    pub fn unrelease(&mut self, seq: u64, w: Work) {
        // Every part in flight is later than it (it was not posted): they follow it.
        self.open_segs();
        self.held.push_front((seq, w));
        self.segs.push_front(0);
    }
}

/// One logical operation from a ring that needs bookkeeping.
#[derive(Debug)]
pub(super) struct Op {
    pub ring: RingId,
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
    /// A host-staged transfer holding a landing slot of this PE's group at `owner` (at this PE
    /// itself: a get's reply slot), freed at completion.
    Landing { owner: Pe, slot: u32 },
}

/// One transport operation (a write, a read, or a request awaiting its ack).
#[derive(Debug)]
pub(super) struct Part {
    pub op: SlabKey,
    pub pe: Pe,
    pub ring: RingId,
    pub posted: Posted,
}

/// A ring the engine drains, with its completion tracker.
pub(super) struct RingState {
    /// Taken out while the ring is drained (so each operation is handled inside the drain).
    pub cons: Option<Consumer>,
    pub done: Completions,
    /// Operations taken out of the ring while the proxy waited for its GPU (see
    /// [`stash_rings`]) or that wait for a tag (and the ring's operations after those), each
    /// with its sequence number: the next drain takes them first.
    pub stash: VecDeque<Stashed>,
}

impl RingState {
    /// The state of `ring`.
    pub(super) fn new(ring: std::sync::Arc<pshmem_ring::Ring>) -> Self {
        Self {
            cons: Some(Consumer::new(ring)),
            done: Completions::new(),
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

impl Stashed {
    /// Operation `seq`'s slots.
    pub(super) fn new(seq: u64, slots: &[RawSlot]) -> Self {
        let mut s = Stashed {
            seq,
            slots: [RawSlot::default(); MAX_SLOTS as usize],
            n: slots.len().min(MAX_SLOTS as usize) as u8,
        };
        s.slots[..s.n as usize].copy_from_slice(&slots[..s.n as usize]);
        s
    }
}

/// Copies new operations out of every ring not being drained now (up to `batch` each) into its
/// stash, freeing their slots: called while the proxy waits for its GPU, whose blocks may be
/// waiting for that ring space. Order is kept: a ring's stash is taken before its slots.
pub(super) fn stash_rings(rings: &mut [RingState], batch: usize) {
    for rs in rings {
        let RingState { cons, done, stash } = rs;
        let Some(cons) = cons.as_mut() else {
            continue;
        };
        // An error (a bad slot) is left where it is: the next drain meets it and reports it.
        let _ = cons.poll(batch, |idx, slots| {
            let seq = done.push(idx + slots.len() as u64);
            stash.push_back(Stashed::new(seq, slots));
        });
    }
}

/// Registered bounce memory for raw-address sources and destinations, shared by both sides
/// (the initiator's staged chunks and inline payloads; the target's staged get replies).
pub(super) struct Staging {
    pub buf: Vec<u8>,
    pub mr: MrId,
    pub chunk: usize,
    pub free: Vec<u32>,
    /// Per chunk: the generation of its current use and whether a staged write from it is in
    /// flight (so a second completion of that write is told apart and ignored).
    uses: Vec<(u16, bool)>,
    /// A small area for payloads that fit the inject size (copied by the transport at post).
    pub scratch: usize,
    /// Its length: the largest payload posted from it.
    pub inject: usize,
}

impl Staging {
    /// Registers `staging_chunks` chunks (plus, on the host-staged path, a landing header per
    /// chunk, so that a chunk's payload stays a whole `staging_chunk`: a 1 MiB put is one chunk,
    /// not two) and a scratch area of the inject size.
    pub(super) fn register(
        t: &mut dyn Transport,
        cfg: &ProxyConfig,
        caps: &Caps,
        host_staged: bool,
        me: Pe,
    ) -> Result<Self, ProxyError> {
        let chunk = cfg.staging_chunk.max(4096) + if host_staged { super::staged::HDR } else { 0 };
        let scratch = chunk * cfg.staging_chunks.max(1);
        // Payloads up to the inject size go through the scratch area (the transport copies
        // them at post); larger inline payloads take a chunk.
        let inject = caps.inject_size.clamp(8, 64 << 10);
        let mut buf = vec![0u8; scratch + inject];
        // SAFETY: `buf` is owned by the engine, never reallocated, and lives as long as the
        // transport (the engine drops the transport first: field order).
        let mr = unsafe {
            t.mr_reg(LocalMem {
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
                kind: MemKind::Host,
            })
        }
        .map_err(|source| ProxyError::Setup {
            pe: me.idx(),
            what: "registering the staging buffers",
            source,
        })?;
        Ok(Self {
            buf,
            mr,
            chunk,
            free: (0..cfg.staging_chunks.max(1) as u32).rev().collect(),
            uses: vec![(0, false); cfg.staging_chunks.max(1)],
            scratch,
            inject,
        })
    }

    pub(super) fn chunk_ptr(&mut self, c: u32) -> *mut u8 {
        self.buf[c as usize * self.chunk..].as_mut_ptr()
    }

    /// The generation a staged write from chunk `c` carries in its context.
    pub(super) fn generation(&self, c: u32) -> u16 {
        self.uses[c as usize].0
    }

    /// A staged write from chunk `c` went.
    pub(super) fn wrote(&mut self, c: u32) {
        self.uses[c as usize].1 = true;
    }

    /// The staged write of generation `era` from chunk `c` completed: frees the chunk, unless
    /// this completion is a duplicate (no write from it in flight, or an older use's); false
    /// for a duplicate.
    pub(super) fn landed(&mut self, c: u32, era: u16) -> bool {
        let Some(u) = self.uses.get_mut(c as usize) else {
            return false;
        };
        if !u.1 || u.0 != era {
            return false;
        }
        *u = ((era + 1) % super::ctx::STAGED_GENERATIONS, false);
        self.free.push(c);
        true
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
    Done(u64),
    /// Context and the transport's error.
    Failed(u64, pshmem_transport::TransportError),
    /// A peer's write with remote CQ data landed here.
    RemoteData(u64),
}
