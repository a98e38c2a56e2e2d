//! Fences on unordered paths. In gated mode a fence puts a gate in the queue of each PE with
//! work from its ring; in tagged mode it goes by sequence where it can: a mark (a sequenced
//! request that waits at the target for the writes before the fence) orders the signals, AMOs
//! and `p`s after it there without a round trip, and only a write after it waits, behind a
//! gate put before it lazily. docs/PROTOCOLS.md ("Fences by sequence") gives the rules.

use pshmem_transport::Pe;

use super::{
    SignalMode,
    ctx::RingId,
    initiator::Initiator,
    io::Io,
    tags::Round,
    work::{OpRef, Work},
};

impl Initiator {
    /// A fence: nothing on ordered paths; else for each PE with work in flight or queued from
    /// this ring (other PEs are not stalled), in gated mode a gate, in tagged mode a mark when
    /// the ring's writes to that PE carry its epoch tag and no counted round is open (the
    /// target applies the sequenced requests after the mark only after the writes before it;
    /// the next write takes a gate, [`Initiator::after_fence`]), else a gate — and the
    /// writes to that PE carry the epoch tag from then on, so that its next fence needs none.
    /// The fence finishes when its marks are acked (at once with none).
    pub(super) fn fence(&mut self, io: &mut Io<'_>, ring: RingId, seq: u64) {
        if self.mode == SignalMode::Ordered {
            return self.finish_op(io.tracer, ring, seq);
        }
        let mut marks = Vec::new();
        for pe in Pe::all(self.n) {
            let peer = &mut self.peers[pe];
            let q = &mut peer.queues[ring.idx()];
            if q.drained() && q.work.is_empty() {
                continue;
            }
            let tagged = self.mode == SignalMode::Tagged;
            if tagged && (q.epoch_writes || self.strong) && !peer.tags.counting_on(ring) {
                q.fenced = true;
                marks.push((pe, peer.tags.close(ring, Round::Epoch)));
                continue;
            }
            q.epoch_writes |= tagged;
            self.enqueue(io, ring, pe, Work::Gate { fence: true });
        }
        if marks.is_empty() {
            return self.finish_op(io.tracer, ring, seq);
        }
        // One issuing token per mark: each mark's issue gives one back.
        let op = self.new_op_of(ring, seq, marks.len() as u32);
        self.gated.marks += marks.len() as u64;
        io.tracer.marked(marks.len() as u64);
        for (pe, tag) in marks {
            self.enqueue(io, ring, pe, Work::Mark { op, tag });
        }
    }

    /// A `p` right after a fence that went by sequence (and no gate since): queued as a store
    /// request, which the target applies after the fence's mark, instead of a write that would
    /// need a gate; its ack finishes it. False (nothing done) otherwise.
    pub(super) fn store_after_fence(
        &mut self,
        io: &mut Io<'_>,
        (ring, seq, pe): (RingId, u64, Pe),
        (remote, value, width): (u64, u64, u8),
    ) -> bool {
        if !self.peers[pe].queues[ring.idx()].fenced {
            return false;
        }
        let w = Work::Store {
            op: OpRef::Fast(seq),
            remote,
            value,
            width,
        };
        self.enqueue(io, ring, pe, w);
        true
    }

    /// Before a write to `pe` from `ring`: if a fence went by sequence and no gate followed
    /// it, a gate now. The write's data is placed by the target's NIC, not its proxy, so only
    /// the completions of the writes before the fence can keep it behind them.
    pub(super) fn after_fence(&mut self, io: &mut Io<'_>, ring: RingId, pe: Pe) {
        let q = &mut self.peers[pe].queues[ring.idx()];
        if q.fenced {
            q.fenced = false;
            self.enqueue(io, ring, pe, Work::Gate { fence: true });
        }
    }
}
