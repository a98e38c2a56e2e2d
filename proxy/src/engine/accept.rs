//! Phase 2 of a turn: drain the rings and turn each operation into work for its target PE's
//! queue. One translation serves every data path: the host heap and a registered GPU heap (RMA
//! parts) and the host-staged path (chunks through landing slots) differ only in how a part is
//! posted ([`super::issue`]) and in the signal mode.

use pshmem_abi::error as code;
use pshmem_ring::{Desc, Local, RawSlot, SignalOp, layout::ctrl_op, layout::op};
use pshmem_transport::PostError;

use super::{
    Engine, SignalMode,
    ctx::{Ctx, FastOp, PartRef},
    tags::{Round, Tag},
    work::{Dir, Issued, Op, OpRef, Work, Xfer},
};

/// Largest single write or read the proxy posts from the heap (bigger ones are split).
pub(super) const MAX_PART: u64 = 16 << 20;

impl Engine {
    /// Drains up to a batch of operations from ring `r` (first those stashed while the proxy
    /// waited for its GPU); returns how many.
    pub(super) fn drain(&mut self, r: usize) -> usize {
        let stashed = self.take_stash(r);
        let Some(mut cons) = self.rings[r].cons.take() else {
            return stashed;
        };
        let batch = self.cfg.batch;
        let mut bad = None;
        let res = cons.poll(batch, |idx, slots| {
            let seq = self.rings[r].done.push(idx + slots.len() as u64);
            if bad.is_none() && !self.strong && self.p_fast(r as u16, seq, slots) {
                return;
            }
            match Desc::decode(slots) {
                Ok(d) if bad.is_none() => self.accept(r as u16, seq, d),
                Ok(_) => {}
                Err(e) => {
                    bad.get_or_insert(e.to_string());
                }
            }
        });
        self.rings[r].cons = Some(cons);
        let n = match res {
            Ok(n) => n,
            Err(e) => {
                bad.get_or_insert(e.to_string());
                0
            }
        };
        if let Some(e) = bad {
            self.fault(code::PROXY, None, format!("PE {}: ring {r}: {e}", self.me));
        }
        stashed + n
    }

    /// Takes the operations stashed from ring `r`, in order (taking one may stash more: they
    /// come after it).
    fn take_stash(&mut self, r: usize) -> usize {
        let mut n = 0;
        while let Some(s) = self.rings[r].stash.pop_front() {
            n += 1;
            let slots = &s.slots[..s.n as usize];
            if !self.strong && self.p_fast(r as u16, s.seq, slots) {
                continue;
            }
            match Desc::decode(slots) {
                Ok(d) => self.accept(r as u16, s.seq, d),
                Err(e) => {
                    self.fault(code::PROXY, None, format!("PE {}: ring {r}: {e}", self.me));
                    self.rings[r].stash.clear();
                }
            }
        }
        n
    }

    /// Takes one operation from a ring: applies it (this PE; fences on ordered transports;
    /// empty transfers) or queues it for its target PE.
    fn accept(&mut self, ring: u16, seq: u64, d: Desc) {
        if let Some(t) = &mut self.trace {
            t.arrive(ring, seq, &d);
        }
        if let Some(pe) = d.pe()
            && pe as usize >= self.n
        {
            self.fault(
                code::OP_FAILED,
                None,
                format!("PE {}: operation for PE {pe} of {}: {d:?}", self.me, self.n),
            );
            return;
        }
        let d = self.localize(d);
        if d.pe() == Some(self.me) {
            match self.apply_self(&d) {
                Ok(()) => self.finish_op(ring, seq),
                Err(e) => self.fault(
                    code::OP_FAILED,
                    Some(self.me as usize),
                    format!("PE {}: {d:?} on itself: {e}", self.me),
                ),
            }
            return;
        }
        match d {
            Desc::Fence => self.fence(ring, seq),
            Desc::Put {
                pe,
                remote,
                local,
                len,
            } => {
                // Strong signals: every put carries its ring's epoch tag toward the PE, so the
                // next signal there can wait for it.
                if let Some(tag) = self.epoch_tag(ring, pe) {
                    self.accept_xfer(ring, seq, pe, Dir::Put, remote, local, len, tag);
                }
            }
            Desc::Get {
                pe,
                remote,
                local,
                len,
            } => self.accept_xfer(ring, seq, pe, Dir::Get, remote, local, len, None),
            Desc::PutCounted {
                pe,
                remote,
                local,
                len,
                sig,
            } => {
                if let Some(tag) = self.counted_tag(ring, pe, sig) {
                    self.accept_xfer(ring, seq, pe, Dir::Put, remote, local, len, tag);
                }
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
                    SignalMode::Tagged => self.itags.close(ring, pe, Round::Counted(remote)),
                    _ => None,
                };
                self.enqueue_signal(ring, pe, seq, (remote, value, sop), tag, true);
            }
            Desc::P { .. } | Desc::Amo { .. } | Desc::Signal { .. } => {
                self.accept_single(ring, seq, d)
            }
            Desc::PutSignal { .. } => self.accept_put_signal(ring, seq, d),
        }
    }

    /// `p`, AMOs and signals: one part (a write or a request), queued for the target.
    fn accept_single(&mut self, ring: u16, seq: u64, d: Desc) {
        let (pe, w) = match d {
            Desc::P {
                pe,
                remote,
                value,
                width,
            } => {
                if !self.strong && self.post_p_now(ring, seq, pe, remote, value, width) {
                    return;
                }
                let Some(tag) = self.epoch_tag(ring, pe) else {
                    return;
                };
                // A staged `p` is a store request; an RMA one beyond the inject size needs a
                // chunk, which a tracked part frees.
                let single = self.landing.is_some() || width as usize <= self.staging.inject;
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
                    self.itags.close(ring, pe, Round::Epoch)
                } else {
                    None
                };
                return self.enqueue_signal(ring, pe, seq, (remote, value, sop), tag, false);
            }
            _ => unreachable!("not a single-part operation: {d:?}"),
        };
        self.enqueue(ring, pe, w);
    }

    /// Queues signal `seq` (counted, or plain) behind what the mode needs in gated mode: a
    /// hold for a counted signal, a gate for a plain one under strong signals.
    fn enqueue_signal(
        &mut self,
        ring: u16,
        pe: u32,
        seq: u64,
        (remote, value, sop): (u64, u64, SignalOp),
        tag: Option<Tag>,
        counted: bool,
    ) {
        // A counted signal covers only what precedes it: it waits aside and later work goes
        // on. A strong plain signal keeps the gate (signals are applied in issue order).
        if self.mode == SignalMode::Gated && counted {
            self.enqueue(ring, pe, Work::Hold);
        } else if self.mode == SignalMode::Gated && self.cfg.strong_signals {
            self.enqueue(ring, pe, Work::Gate);
        }
        let w = Work::Signal {
            op: OpRef::Fast(seq),
            remote,
            value,
            sop,
            tag,
            strong: self.strong && !counted,
        };
        self.enqueue(ring, pe, w);
    }

    /// A fence: on unordered paths, a gate in the queue of every PE with work in flight from
    /// this ring (other PEs are not stalled).
    fn fence(&mut self, ring: u16, seq: u64) {
        if self.mode != SignalMode::Ordered {
            for pe in 0..self.n as u32 {
                let q = &self.rings[ring as usize].queues[pe as usize];
                if !q.drained() || !q.work.is_empty() {
                    self.enqueue(ring, pe, Work::Gate);
                }
            }
        }
        self.finish_op(ring, seq);
    }

    /// In tagged mode, the tag of a counted put to the signal word `sig` on `pe` (its round's,
    /// opened by the first put of the round): `Some(None)` in the other modes; `None` after a
    /// fault (no tag left).
    fn counted_tag(&mut self, ring: u16, pe: u32, sig: u64) -> Option<Option<Tag>> {
        if self.mode != SignalMode::Tagged {
            return Some(None);
        }
        self.shared_tag(ring, pe, Round::Counted(sig))
    }

    /// With strong signals, the tag of ring `ring`'s current epoch toward `pe`: `Some(None)`
    /// without them; `None` after a fault (no tag left).
    fn epoch_tag(&mut self, ring: u16, pe: u32) -> Option<Option<Tag>> {
        if !self.strong {
            return Some(None);
        }
        self.shared_tag(ring, pe, Round::Epoch)
    }

    fn shared_tag(&mut self, ring: u16, pe: u32, round: Round) -> Option<Option<Tag>> {
        match self.itags.shared(ring, pe, round) {
            Some(t) => Some(Some(t)),
            None => {
                self.out_of_tags(pe);
                None
            }
        }
    }

    /// Every tag toward `pe` is held by a round or signal in flight: the job fails (not a
    /// wait: a tag comes back only when a signal's ack does, which this very queue may hold).
    fn out_of_tags(&mut self, pe: u32) {
        self.fault(
            code::OP_FAILED,
            Some(pe as usize),
            format!(
                "PE {}: {} signals and counted rounds toward PE {pe} are in flight, the most \
                 that the {}-byte remote CQ data of {} can tell apart",
                self.me,
                self.itags.capacity(),
                self.caps.cq_data_size,
                self.caps.name
            ),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn accept_xfer(
        &mut self,
        ring: u16,
        seq: u64,
        pe: u32,
        dir: Dir,
        remote: u64,
        local: Local,
        len: u64,
        tag: Option<Tag>,
    ) {
        if len == 0 {
            self.finish_op(ring, seq);
            return;
        }
        // One part, whose completion needs nothing done: a heap-to-heap RMA of at most one
        // part, or a put whose source is copied at post.
        let single = self.landing.is_none()
            && len <= MAX_PART
            && match (local, dir) {
                (Local::Heap(_), _) => true,
                (Local::Raw(_), Dir::Put) => len as usize <= self.staging.inject,
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
        self.enqueue(ring, pe, Work::Xfer(x));
    }

    /// A put, then a signal that never becomes visible before the data: tagged data writes
    /// (the target counts them), a gate, or nothing on an ordered path.
    fn accept_put_signal(&mut self, ring: u16, seq: u64, d: Desc) {
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
            return;
        };
        let op = self.new_op(ring, seq, 0);
        // Tagged: its data carries a tag of its own, or (strong) its ring's epoch tag, which
        // the signal then closes.
        let (data_tag, sig_tag) = match self.mode {
            SignalMode::Tagged if self.strong => {
                let Some(t) = self.epoch_tag(ring, pe) else {
                    return;
                };
                (t, self.itags.close(ring, pe, Round::Epoch))
            }
            SignalMode::Tagged => match self.itags.alloc(pe) {
                Some(id) => {
                    let t = Tag { id, shared: false };
                    (Some(t), Some(t))
                }
                None => return self.out_of_tags(pe),
            },
            _ => (None, None),
        };
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
        self.enqueue(ring, pe, Work::Xfer(x));
        if self.mode == SignalMode::Gated {
            self.enqueue(ring, pe, Work::Gate);
        }
        let w = Work::Signal {
            op,
            remote: sig,
            value,
            sop,
            tag: sig_tag,
            strong: self.strong,
        };
        self.enqueue(ring, pe, w);
    }

    fn new_op(&mut self, ring: u16, seq: u64, result: u64) -> OpRef {
        OpRef::Slab(self.ops.insert(Op {
            ring,
            seq,
            pending: 1,
            result,
            data_parts: 0,
        }))
    }

    /// The reference of an operation that will be exactly one part without a result when
    /// `single`, else a slab entry.
    fn op_ref(&mut self, ring: u16, seq: u64, single: bool) -> OpRef {
        if single {
            OpRef::Fast(seq)
        } else {
            self.new_op(ring, seq, 0)
        }
    }

    /// A `p` to another PE straight from its slot, without decoding it into a [`Desc`] and
    /// going through [`Engine::accept`] (whose checks it repeats: a valid width and PE, not
    /// itself). Returns false when it did nothing; the general path then takes the slot.
    #[inline]
    fn p_fast(&mut self, ring: u16, seq: u64, slots: &[RawSlot]) -> bool {
        let [s] = slots else { return false };
        if ctrl_op(s.ctrl) != op::P
            || !matches!(s.c, 1 | 2 | 4 | 8)
            || s.pe as usize >= self.n
            || s.pe == self.me
        {
            return false;
        }
        if let Some(t) = &mut self.trace {
            // `accept` does not see it: its arrival is recorded here (and taken back when the
            // general path takes the slot after all).
            let d = Desc::P {
                pe: s.pe,
                remote: s.a,
                value: s.b,
                width: s.c as u8,
            };
            t.arrive(ring, seq, &d);
        }
        let posted = self.post_p_now(ring, seq, s.pe, s.a, s.b, s.c as u8);
        if !posted && let Some(t) = &mut self.trace {
            t.retract_arrival(ring, seq);
        }
        posted
    }

    /// The hottest case, straight to the transport: an RMA `p` that fits the inject size, to
    /// a PE with nothing queued, with room in flight. Returns false (nothing done) otherwise,
    /// or on back-pressure, and the general path queues it.
    #[inline]
    fn post_p_now(
        &mut self,
        ring: u16,
        seq: u64,
        pe: u32,
        remote: u64,
        value: u64,
        width: u8,
    ) -> bool {
        let q = &self.rings[ring as usize].queues[pe as usize];
        if !q.work.is_empty()
            || self.landing.is_some()
            || width as usize > self.staging.inject
            || !self.room_for(pe)
        {
            return false;
        }
        let ctx = Ctx::Part(PartRef::Fast(FastOp::new(ring, pe, seq))).encode();
        let r = self.write_value(pe, self.staging.scratch, (remote, value, width), None, ctx);
        match r {
            Ok(()) => {
                self.rings[ring as usize].queues[pe as usize].posted(|| seq);
                self.inflight += 1;
                self.pe_inflight[pe as usize] += 1;
                if let Some(t) = &mut self.trace {
                    t.post(ring, seq, pe);
                }
                true
            }
            Err(PostError::Retry) => false,
            Err(PostError::Failed(e)) => {
                let detail = format!("PE {}: posting a p to PE {pe} failed: {e}", self.me);
                self.fault_with(code::OP_FAILED, Some(pe as usize), detail, *e);
                true
            }
        }
    }

    /// Queues work for (ring, PE); when nothing is queued there yet, issues it at once (the
    /// same order as queuing it and issuing the queue, without the round trip).
    pub(super) fn enqueue(&mut self, ring: u16, pe: u32, mut w: Work) {
        let q = &self.rings[ring as usize].queues[pe as usize];
        if q.work.is_empty() {
            let done = match w {
                Work::Gate | Work::Hold => q.drained(),
                _ => self.issue_one(ring, pe, &mut w) == Issued::All,
            };
            if done {
                self.finish_issuing(&w);
                return;
            }
        }
        let q = &mut self.rings[ring as usize].queues[pe as usize];
        q.work.push_back(w);
        if !q.active {
            q.active = true;
            self.active.push_back((ring, pe));
        }
    }
}
