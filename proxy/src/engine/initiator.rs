//! The initiator: this PE's side of its own operations. It drains the rings (`accept`), queues
//! work per (ring, destination) and issues it (`issue`), and finishes parts and operations as
//! their completions and acks come back (`complete`); the host-staged path posts its chunks
//! from here too (`staged`). It owns the rings, the operations and parts in flight, and one
//! [`Peer`] per destination; it borrows everything else through an [`Io`].

use std::collections::VecDeque;

use pshmem_transport::Pe;

use super::{
    SignalMode,
    ctx::{RingId, SlabKey},
    io::{Io, Tracer},
    peer::Peer,
    work::{Op, OpRef, Part, PeVec, RingState},
};
use crate::{ProxyConfig, slab::GenSlab};

/// This PE's side of its own operations.
pub(super) struct Initiator {
    pub rings: Vec<RingState>,
    pub peers: PeVec<Peer>,
    pub ops: GenSlab<Op>,
    pub parts: GenSlab<Part>,
    /// (ring, PE) queues with work, in round-robin order.
    pub active: VecDeque<(RingId, Pe)>,
    /// The (ring, PE) queues holding counted signals aside (gated mode) until what precedes
    /// them completes.
    pub holding: Vec<(RingId, Pe)>,
    /// Parts posted and not yet complete (bounded by `ProxyConfig::max_inflight`).
    pub inflight: usize,
    /// How put-with-signal and fence keep their order.
    pub mode: SignalMode,
    /// Strong signals are in effect (asked for, in tagged mode).
    pub strong: bool,
    /// Strong signals were asked for (in gated mode a plain signal then keeps a gate).
    pub strong_asked: bool,
    /// The host-staged path: data moves through landing slots, every operation is acked.
    pub staged: bool,
    pub max_inflight: usize,
    pub max_per_pe: usize,
    /// Most operations drained from one ring per turn.
    pub batch: usize,
    pub me: Pe,
    pub n: usize,
    /// Round trips taken for ordering: gates and holds that had to wait for completions.
    pub gated: Gated,
}

/// Ordering that waited for completions (a round trip each): what the tagged mode exists to
/// avoid, counted for the trace and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gated {
    /// [`super::work::Work::Gate`]s of signals (a signal waited for everything
    /// before it to that PE).
    pub gates: u64,
    /// [`super::work::Work::Hold`]s (a counted signal waited aside).
    pub holds: u64,
    /// Fences' gates (what followed a fence waited for everything before it to that PE).
    pub fences: u64,
    /// Fences' marks (tagged mode: a fence by sequence, no round trip).
    pub marks: u64,
}

impl Initiator {
    /// The initiator of PE `me` of `n` over `rings`, in signal mode `mode`, with tags of
    /// `tag_bits` bits and `slots` landing slots per group (host-staged path).
    pub(super) fn new(
        rings: Vec<RingState>,
        (me, n): (Pe, usize),
        (mode, tag_bits, staged, slots): (SignalMode, u32, bool, u32),
        cfg: &ProxyConfig,
    ) -> Self {
        let r = rings.len();
        Self {
            peers: PeVec::from_fn(n, |_| Peer::new(r, tag_bits, slots)),
            rings,
            ops: GenSlab::new(),
            parts: GenSlab::new(),
            active: VecDeque::new(),
            holding: Vec::new(),
            inflight: 0,
            mode,
            strong: cfg.strong_signals && mode == SignalMode::Tagged,
            strong_asked: cfg.strong_signals,
            staged,
            max_inflight: cfg.max_inflight,
            max_per_pe: cfg.max_inflight_per_pe,
            batch: cfg.batch,
            me,
            n,
            gated: Gated::default(),
        }
    }

    /// Whether flow control lets one more part go to `pe` now: in flight in total and to
    /// that PE below their limits.
    #[inline]
    pub(super) fn room_for(&self, pe: Pe) -> bool {
        self.inflight < self.max_inflight && (self.peers[pe].inflight as usize) < self.max_per_pe
    }

    /// Operation `seq` of ring `ring` finished: its ring's completion may move past it.
    #[inline]
    pub(super) fn finish_op(&mut self, tracer: &mut Tracer, ring: RingId, seq: u64) {
        tracer.finish(ring, seq);
        self.rings[ring.idx()].done.finish(seq);
    }

    /// A new tracked operation.
    pub(super) fn new_op(&mut self, ring: RingId, seq: u64, result: u64) -> OpRef {
        OpRef::Slab(self.ops.insert(Op {
            ring,
            seq,
            pending: 1,
            result,
            data_parts: 0,
        }))
    }

    /// A new tracked operation issued as `items` work items, each of which gives one issuing
    /// token back (a fence's marks to several PEs).
    pub(super) fn new_op_of(&mut self, ring: RingId, seq: u64, items: u32) -> OpRef {
        let op = self.new_op(ring, seq, 0);
        if let OpRef::Slab(k) = op
            && let Some(o) = self.ops.get_mut(k)
        {
            o.pending = items;
        }
        op
    }

    /// The reference of an operation that will be exactly one part without a result when
    /// `single`, else a slab entry.
    pub(super) fn op_ref(&mut self, ring: RingId, seq: u64, single: bool) -> OpRef {
        if single {
            OpRef::Fast(seq)
        } else {
            self.new_op(ring, seq, 0)
        }
    }

    /// Drops one pending count of a tracked operation; finishes it at zero.
    pub(super) fn release(&mut self, tracer: &mut Tracer, op: SlabKey) {
        let Some(o) = self.ops.get_mut(op) else {
            return;
        };
        o.pending -= 1;
        if o.pending == 0 {
            let o = self.ops.remove(op).expect("the operation is live");
            self.finish_op(tracer, o.ring, o.seq);
        }
    }

    /// Whether anything of the initiator is still under way.
    pub(super) fn busy(&self) -> bool {
        self.ops.len() > 0
            || self.parts.len() > 0
            || !self.active.is_empty()
            || !self.holding.is_empty()
            || self.rings.iter().any(|r| !r.stash.is_empty())
    }

    /// Parts in flight or queued work (an idle proxy must not sleep then).
    pub(super) fn waiting(&self) -> bool {
        self.parts.len() > 0 || !self.active.is_empty() || !self.holding.is_empty()
    }

    /// Moves each ring's `completed` counter past its finished prefix.
    pub(super) fn publish_completions(&mut self) {
        for r in &mut self.rings {
            if let Some(v) = r.done.advance()
                && let Some(cons) = &r.cons
            {
                cons.set_completed(v);
            }
        }
    }

    /// The idle hook of a GPU AMO started from here: the rings' new operations are stashed
    /// while it is pending (the GPU's blocks may be waiting for that ring space).
    pub(super) fn apply_self(
        &mut self,
        io: &mut Io<'_>,
        d: &pshmem_ring::Desc,
    ) -> Result<(), crate::mem::MemError> {
        let (rings, batch) = (&mut self.rings, self.batch);
        io.home
            .apply_self(d, &mut || super::work::stash_rings(rings, batch))
    }
}
