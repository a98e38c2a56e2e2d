//! Phase 2 of a turn, the initiator's: drain the rings and turn each operation into work for
//! its destination's queue. One translation serves every data path: the host heap and a
//! registered GPU heap (RMA parts) and the host-staged path (chunks through landing slots)
//! differ only in how a part is posted ([`super::issue`]) and in the signal mode.

use pshmem_abi::error as code;
use pshmem_ring::{Desc, Local, RawSlot, SignalOp, layout::ctrl_op, layout::op};
use pshmem_transport::{Pe, PostError};

use super::{
    SignalMode,
    ctx::{Ctx, FastOp, PartRef, RingId},
    initiator::Initiator,
    io::Io,
    tags::{Round, Tag},
    work::{Dir, Issued, OpRef, Stashed, Work, Xfer, part_max},
};

/// Why an operation that needs a tag got none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoTag {
    /// Every tag toward the PE is in use and a signal in flight or queued will give one back:
    /// the ring waits (back-pressure).
    Wait,
    /// No tag can come back: the job is failing.
    Failed,
}

/// The tag an operation carries (`None`: none needed), or why it has none.
type TagResult = Result<Option<Tag>, NoTag>;

impl Initiator {
    /// Drains up to a batch of operations from ring `r` (first those stashed while the proxy
    /// waited for its GPU or for a tag); returns how many. While an operation of the ring waits
    /// for a tag, the ring's later operations wait behind it, in order (back-pressure to the
    /// ring's producers, whose slots stay taken).
    pub(super) fn drain(&mut self, io: &mut Io<'_>, r: RingId) -> usize {
        let stashed = self.take_stash(io, r);
        if !self.rings[r.idx()].stash.is_empty() {
            return stashed;
        }
        let Some(mut cons) = self.rings[r.idx()].cons.take() else {
            return stashed;
        };
        let mut bad = None;
        let mut waiting = false;
        let res = cons.poll(self.batch, |idx, slots| {
            let seq = self.rings[r.idx()].done.push(idx + slots.len() as u64);
            if waiting {
                self.rings[r.idx()]
                    .stash
                    .push_back(Stashed::new(seq, slots));
                return;
            }
            if bad.is_none() && !self.strong && self.p_fast(io, r, seq, slots) {
                return;
            }
            match Desc::decode(slots) {
                Ok(d) if bad.is_none() => {
                    if !self.accept(io, r, seq, d) {
                        waiting = true;
                        self.rings[r.idx()]
                            .stash
                            .push_back(Stashed::new(seq, slots));
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    bad.get_or_insert(e.to_string());
                }
            }
        });
        self.rings[r.idx()].cons = Some(cons);
        let n = match res {
            Ok(n) => n,
            Err(e) => {
                bad.get_or_insert(e.to_string());
                0
            }
        };
        if let Some(e) = bad {
            let detail = format!("PE {}: ring {}: {e}", self.me, r.get());
            io.faults.raise(code::PROXY, None, detail);
        }
        stashed + n
    }

    /// Takes the operations stashed from ring `r`, in order (taking one may stash more: they
    /// come after it), up to one that still waits for a tag, which stays first.
    fn take_stash(&mut self, io: &mut Io<'_>, r: RingId) -> usize {
        let mut n = 0;
        while let Some(s) = self.rings[r.idx()].stash.pop_front() {
            let slots = &s.slots[..s.n as usize];
            if !self.strong && self.p_fast(io, r, s.seq, slots) {
                n += 1;
                continue;
            }
            match Desc::decode(slots) {
                Ok(d) => {
                    if !self.accept(io, r, s.seq, d) {
                        self.rings[r.idx()].stash.push_front(s);
                        break;
                    }
                    n += 1;
                }
                Err(e) => {
                    let detail = format!("PE {}: ring {}: {e}", self.me, r.get());
                    io.faults.raise(code::PROXY, None, detail);
                    self.rings[r.idx()].stash.clear();
                }
            }
        }
        n
    }

    /// Takes one operation from a ring: applies it (this PE; fences on ordered transports;
    /// empty transfers) or queues it for its target PE. Returns false, having done nothing,
    /// when it needs a tag and every tag toward its PE is in use ([`NoTag::Wait`]).
    fn accept(&mut self, io: &mut Io<'_>, ring: RingId, seq: u64, d: Desc) -> bool {
        io.tracer.arrive(ring, seq, &d);
        if let Some(pe) = d.pe()
            && pe.idx() >= self.n
        {
            let detail = format!("PE {}: operation for PE {pe} of {}: {d:?}", self.me, self.n);
            io.faults.raise(code::OP_FAILED, None, detail);
            return true;
        }
        let d = io.home.localize(d, self.staged);
        if d.pe() == Some(self.me) {
            match self.apply_self(io, &d) {
                Ok(()) => self.finish_op(io.tracer, ring, seq),
                Err(e) => {
                    let detail = format!("PE {}: {d:?} on itself: {e}", self.me);
                    io.faults.raise(code::OP_FAILED, Some(self.me), detail);
                }
            }
            return true;
        }
        let taken = self.accept_remote(io, ring, seq, d);
        if !taken {
            io.tracer.retract_arrival(ring, seq);
        }
        taken
    }

    /// [`Initiator::accept`] of an operation on another PE.
    fn accept_remote(&mut self, io: &mut Io<'_>, ring: RingId, seq: u64, d: Desc) -> bool {
        match d {
            Desc::Fence => self.fence(io, ring, seq),
            Desc::Put {
                pe,
                remote,
                local,
                len,
            } => {
                self.after_fence(io, ring, pe);
                // Strong signals (or fences by sequence): every put carries its ring's epoch
                // tag toward the PE, so the next signal or fence mark there can wait for it.
                let tag = self.epoch_tag(io, ring, pe);
                return self.with_tag(tag, |s, tag| {
                    let x = (Dir::Put, remote, local, len, tag);
                    s.accept_xfer(io, (ring, seq, pe), x);
                });
            }
            Desc::Get {
                pe,
                remote,
                local,
                len,
            } => self.accept_xfer(io, (ring, seq, pe), (Dir::Get, remote, local, len, None)),
            Desc::PutCounted {
                pe,
                remote,
                local,
                len,
                sig,
            } => {
                self.after_fence(io, ring, pe);
                let tag = self.counted_tag(io, ring, pe, sig);
                return self.with_tag(tag, |s, tag| {
                    let x = (Dir::Put, remote, local, len, tag);
                    s.accept_xfer(io, (ring, seq, pe), x);
                });
            }
            Desc::SignalCounted {
                pe,
                remote,
                value,
                op: sop,
            } => {
                // Tagged: the target applies it once it counted the writes of this round
                // (the round closes here; the next counted put opens another). Gated (staged
                // path, or no remote CQ data): after everything before it to that PE from
                // this ring completed. Ordered: behind them on the same path.
                let tag = match self.mode {
                    SignalMode::Tagged => self.peers[pe].tags.close(ring, Round::Counted(remote)),
                    _ => None,
                };
                self.enqueue_signal(io, (ring, seq, pe), (remote, value, sop), tag, true);
            }
            Desc::P { .. } | Desc::Amo { .. } | Desc::Signal { .. } => {
                return self.accept_single(io, ring, seq, d);
            }
            Desc::PutSignal { .. } => return self.accept_put_signal(io, ring, seq, d),
        }
        true
    }

    /// Runs `then` with the tag `tag` gave; true when the operation was taken (or the job is
    /// failing), false when it waits for a tag.
    fn with_tag(&mut self, tag: TagResult, then: impl FnOnce(&mut Self, Option<Tag>)) -> bool {
        match tag {
            Ok(t) => {
                then(self, t);
                true
            }
            Err(NoTag::Failed) => true,
            Err(NoTag::Wait) => false,
        }
    }

    /// `p`, AMOs and signals: one part (a write or a request), queued for the target; false
    /// when it waits for a tag.
    fn accept_single(&mut self, io: &mut Io<'_>, ring: RingId, seq: u64, d: Desc) -> bool {
        let (pe, w) = match d {
            Desc::P {
                pe,
                remote,
                value,
                width,
            } => {
                if !self.strong && self.post_p_now(io, (ring, seq, pe), (remote, value, width)) {
                    return true;
                }
                if self.store_after_fence(io, (ring, seq, pe), (remote, value, width)) {
                    return true;
                }
                let tag = match self.epoch_tag(io, ring, pe) {
                    Ok(t) => t,
                    Err(e) => return e == NoTag::Failed,
                };
                // A staged `p` is a store request; an RMA one beyond the inject size needs a
                // chunk, which a tracked part frees.
                let single = self.staged || width as usize <= io.staging.inject;
                let op = self.op_ref(ring, seq, single);
                let w = Work::P {
                    op,
                    remote,
                    value,
                    width,
                    tag,
                };
                (pe, w)
            }
            Desc::Amo {
                pe,
                remote,
                op: aop,
                wide,
                operand,
                compare,
                result,
            } => {
                let op = match result {
                    0 => OpRef::Fast(seq),
                    cell => self.new_op(ring, seq, cell),
                };
                let w = Work::Amo {
                    op,
                    remote,
                    aop,
                    wide,
                    operand,
                    compare,
                };
                (pe, w)
            }
            Desc::Signal {
                pe,
                remote,
                value,
                op: sop,
            } => {
                // Strong: it waits for the ring's epoch toward the PE, which it closes (tagged
                // mode), or for everything before it to complete (gated mode; a put-with-signal
                // has that gate anyway).
                let tag = if self.strong {
                    self.peers[pe].tags.close(ring, Round::Epoch)
                } else {
                    None
                };
                let sig = (remote, value, sop);
                self.enqueue_signal(io, (ring, seq, pe), sig, tag, false);
                return true;
            }
            _ => unreachable!("not a single-part operation: {d:?}"),
        };
        self.enqueue(io, ring, pe, w);
        true
    }

    /// Queues signal `seq` (counted, or plain) behind what the mode needs in gated mode: a
    /// hold for a counted signal, a gate for a plain one under strong signals.
    fn enqueue_signal(
        &mut self,
        io: &mut Io<'_>,
        (ring, seq, pe): (RingId, u64, Pe),
        (remote, value, sop): (u64, u64, SignalOp),
        tag: Option<Tag>,
        counted: bool,
    ) {
        // A counted signal covers only what precedes it: it waits aside and later work goes
        // on. A strong plain signal keeps the gate (signals are applied in issue order).
        if self.mode == SignalMode::Gated && counted {
            self.enqueue(io, ring, pe, Work::Hold);
        } else if self.mode == SignalMode::Gated && self.strong_asked {
            self.enqueue(io, ring, pe, Work::Gate { fence: false });
        }
        let w = Work::Signal {
            op: OpRef::Fast(seq),
            remote,
            value,
            sop,
            tag,
            // Signals apply in issue order (counts and additions add up to what landed); in
            // gated mode each gate or hold already waits for every earlier part of its queue.
            sequenced: self.mode == SignalMode::Tagged,
        };
        self.enqueue(io, ring, pe, w);
    }

    /// In tagged mode, the tag of a counted put to the signal word `sig` on `pe` (its round's,
    /// opened by the first put of the round); `Ok(None)` in the other modes.
    fn counted_tag(&mut self, io: &mut Io<'_>, ring: RingId, pe: Pe, sig: u64) -> TagResult {
        if self.mode != SignalMode::Tagged {
            return Ok(None);
        }
        self.shared_tag(io, ring, pe, Round::Counted(sig))
    }

    /// The tag of ring `ring`'s current epoch toward `pe` for a write, with strong signals or
    /// once a fence made that ring's writes to `pe` carry it; `Ok(None)` otherwise.
    fn epoch_tag(&mut self, io: &mut Io<'_>, ring: RingId, pe: Pe) -> TagResult {
        if !self.strong && !self.peers[pe].queues[ring.idx()].epoch_writes {
            return Ok(None);
        }
        self.shared_tag(io, ring, pe, Round::Epoch)
    }

    fn shared_tag(&mut self, io: &mut Io<'_>, ring: RingId, pe: Pe, round: Round) -> TagResult {
        match self.peers[pe].tags.shared(ring, round) {
            Some(t) => Ok(Some(t)),
            None => Err(self.no_tag(io, ring, pe)),
        }
    }

    /// Every tag toward `pe` is in use. A tag comes back when a signal's ack does: if a signal
    /// holding one is in flight or queued, ring `ring` waits (its operation is retried, later
    /// ones stay behind it); if every tag is held by rounds this very ring has open, whose
    /// signals come later in it, nothing would ever give one back, and the job fails rather
    /// than hang.
    fn no_tag(&mut self, io: &mut Io<'_>, ring: RingId, pe: Pe) -> NoTag {
        if !self.peers[pe].tags.all_open_on(ring) {
            return NoTag::Wait;
        }
        let detail = format!(
            "PE {}: ring {} has {} counted rounds or strong epochs toward PE {pe} open, the most \
             that the {}-byte remote CQ data of {} can tell apart: their signals come later in \
             the ring, so no tag can come back (signal some rounds before opening more)",
            self.me,
            ring.get(),
            self.peers[pe].tags.capacity(),
            io.link.caps.cq_data_size,
            io.link.caps.name
        );
        io.faults.raise(code::OP_FAILED, Some(pe), detail);
        NoTag::Failed
    }

    /// A put or get of `len` bytes: one work item, issued part by part.
    fn accept_xfer(
        &mut self,
        io: &mut Io<'_>,
        (ring, seq, pe): (RingId, u64, Pe),
        (dir, remote, local, len, tag): (Dir, u64, Local, u64, Option<Tag>),
    ) {
        if len == 0 {
            self.finish_op(io.tracer, ring, seq);
            return;
        }
        // One part, whose completion needs nothing done: a heap-to-heap RMA of at most one
        // part, or a put whose source is copied at post.
        let single = !self.staged
            && len <= part_max(&io.link.caps, dir, len, tag.is_some())
            && match (local, dir) {
                (Local::Heap(_), _) => true,
                (Local::Raw(_), Dir::Put) => len as usize <= io.staging.inject,
                (Local::Raw(_), Dir::Get) => false,
            };
        let op = self.op_ref(ring, seq, single);
        let x = Xfer {
            dir,
            op,
            remote,
            local,
            len,
            issued: 0,
            tag,
            last: true,
        };
        self.enqueue(io, ring, pe, Work::Xfer(x));
    }

    /// A put, then a signal that never becomes visible before the data: tagged data writes
    /// (the target counts them), a gate, or nothing on an ordered path.
    fn accept_put_signal(&mut self, io: &mut Io<'_>, ring: RingId, seq: u64, d: Desc) -> bool {
        let Desc::PutSignal {
            pe,
            remote,
            local,
            len,
            sig,
            value,
            op: sop,
        } = d
        else {
            return true;
        };
        // Tagged: its data carries a tag of its own, or (strong) its ring's epoch tag, which
        // the signal then closes.
        let (data_tag, sig_tag) = match self.mode {
            SignalMode::Tagged if self.strong => match self.epoch_tag(io, ring, pe) {
                Ok(t) => (t, self.peers[pe].tags.close(ring, Round::Epoch)),
                Err(e) => return e == NoTag::Failed,
            },
            SignalMode::Tagged => match self.peers[pe].tags.alloc() {
                Some(id) => {
                    let t = Tag { id, shared: false };
                    (Some(t), Some(t))
                }
                None => return self.no_tag(io, ring, pe) == NoTag::Failed,
            },
            _ => (None, None),
        };
        self.after_fence(io, ring, pe);
        let op = self.new_op(ring, seq, 0);
        let x = Xfer {
            dir: Dir::Put,
            op,
            remote,
            local,
            len,
            issued: 0,
            tag: data_tag,
            last: false,
        };
        self.enqueue(io, ring, pe, Work::Xfer(x));
        if self.mode == SignalMode::Gated {
            self.enqueue(io, ring, pe, Work::Gate { fence: false });
        }
        let w = Work::Signal {
            op,
            remote: sig,
            value,
            sop,
            tag: sig_tag,
            sequenced: self.mode == SignalMode::Tagged,
        };
        self.enqueue(io, ring, pe, w);
        true
    }

    /// A `p` to another PE straight from its slot, without decoding it into a [`Desc`] and
    /// going through `accept` (whose checks it repeats: a valid width and PE, not itself).
    /// Returns false when it did nothing; the general path then takes the slot.
    #[inline]
    fn p_fast(&mut self, io: &mut Io<'_>, ring: RingId, seq: u64, slots: &[RawSlot]) -> bool {
        let [s] = slots else { return false };
        let pe = Pe::new(s.pe);
        if ctrl_op(s.ctrl) != op::P
            || !matches!(s.c, 1 | 2 | 4 | 8)
            || pe.idx() >= self.n
            || pe == self.me
        {
            return false;
        }
        if io.tracer.on() {
            // `accept` does not see it: its arrival is recorded here (and taken back when the
            // general path takes the slot after all).
            let d = Desc::P {
                pe,
                remote: s.a,
                value: s.b,
                width: s.c as u8,
            };
            io.tracer.arrive(ring, seq, &d);
        }
        let posted = self.post_p_now(io, (ring, seq, pe), (s.a, s.b, s.c as u8));
        if !posted {
            io.tracer.retract_arrival(ring, seq);
        }
        posted
    }

    /// The hottest case, straight to the transport: an RMA `p` that fits the inject size, to
    /// a PE with nothing queued, with room in flight. Returns false (nothing done) otherwise,
    /// or on back-pressure, and the general path queues it.
    #[inline]
    fn post_p_now(
        &mut self,
        io: &mut Io<'_>,
        (ring, seq, pe): (RingId, u64, Pe),
        (remote, value, width): (u64, u64, u8),
    ) -> bool {
        if self.staged || width as usize > io.staging.inject || !self.room_for(pe) {
            return false;
        }
        let peer = &mut self.peers[pe];
        let q = &peer.queues[ring.idx()];
        // Behind queued work, or (fences by sequence) a write that must carry the epoch tag.
        if !q.work.is_empty() || q.epoch_writes {
            return false;
        }
        let ctx = Ctx::Part(PartRef::Fast(FastOp::new(ring, pe, seq))).encode();
        let scratch = io.staging.scratch;
        let r = io
            .link
            .write_value(io.staging, pe, scratch, (remote, value, width), None, ctx);
        match r {
            Ok(()) => {
                peer.queues[ring.idx()].posted(|| seq);
                peer.inflight += 1;
                self.inflight += 1;
                io.tracer.post(ring, seq, pe);
                true
            }
            Err(PostError::Retry) => false,
            Err(PostError::Failed(e)) => {
                io.faults.post_failed("p", pe, *e);
                true
            }
        }
    }

    /// Queues work for (ring, PE); when nothing is queued there yet, issues it at once (the
    /// same order as queuing it and issuing the queue, without the round trip).
    pub(super) fn enqueue(&mut self, io: &mut Io<'_>, ring: RingId, pe: Pe, mut w: Work) {
        let q = &self.peers[pe].queues[ring.idx()];
        if q.work.is_empty() {
            let done = match w {
                Work::Gate { .. } | Work::Hold => q.drained(),
                _ => self.issue_one(io, ring, pe, &mut w) == Issued::All,
            };
            if done {
                self.finish_issuing(io.tracer, &w);
                return;
            }
        }
        match w {
            Work::Gate { fence: false } => self.gated.gates += 1,
            Work::Gate { fence: true } => self.gated.fences += 1,
            Work::Hold => self.gated.holds += 1,
            _ => {}
        }
        if let Some(kind) = w.waited() {
            io.tracer.gated(kind);
        }
        let q = self.peers[pe].queue(ring);
        q.work.push_back(w);
        if !q.active {
            q.active = true;
            self.active.push_back((ring, pe));
        }
    }
}
