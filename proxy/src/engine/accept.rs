//! Phase 2 of a turn: drain the rings and turn each operation into work for its target PE's
//! queue. One translation serves every data path: the host heap and a registered GPU heap (RMA
//! parts) and the host-staged path (chunks through landing slots) differ only in how a part is
//! posted ([`super::issue`]) and in the signal mode.

use pshmem_abi::error as code;
use pshmem_ring::{Desc, Local, RawSlot, layout::ctrl_op, layout::op};
use pshmem_transport::PostError;

use super::{
    Engine, SignalMode,
    ctx::{Ctx, FastOp, PartRef, TagData},
    work::{Dir, Issued, Op, OpRef, Work, Xfer},
};

/// Largest single write or read the proxy posts from the heap (bigger ones are split).
pub(super) const MAX_PART: u64 = 16 << 20;

impl Engine {
    /// Drains up to a batch of operations from ring `r`; returns how many.
    pub(super) fn drain(&mut self, r: usize) -> usize {
        let Some(mut cons) = self.rings[r].cons.take() else {
            return 0;
        };
        let batch = self.cfg.batch;
        let mut bad = None;
        let res = cons.poll(batch, |idx, slots| {
            let seq = self.rings[r].done.push(idx + slots.len() as u64);
            if bad.is_none() && self.p_fast(r as u16, seq, slots) {
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
            } => self.accept_xfer(ring, seq, pe, Dir::Put, remote, local, len, None),
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
                if let Some(tag) = self.counted_tag(ring, pe, sig, false) {
                    self.accept_xfer(ring, seq, pe, Dir::Put, remote, local, len, tag);
                }
            }
            Desc::SignalCounted {
                pe,
                remote,
                value,
                op: sop,
            } => {
                // Tagged: the target applies it once it counted the writes of this round.
                // Gated (staged path, or no remote CQ data): after everything before it to
                // that PE from this ring completed. Ordered: behind them on the same path.
                if let Some(tag) = self.counted_tag(ring, pe, remote, true) {
                    if self.mode == SignalMode::Gated {
                        self.enqueue(ring, pe, Work::Gate);
                    }
                    let w = Work::Signal {
                        op: OpRef::Fast(seq),
                        remote,
                        value,
                        sop,
                        tag,
                    };
                    self.enqueue(ring, pe, w);
                }
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
                if self.post_p_now(ring, seq, pe, remote, value, width) {
                    return;
                }
                // A staged `p` is a store request; an RMA one beyond the inject size needs a
                // chunk, which a tracked part frees.
                let single = self.landing.is_some() || width as usize <= self.staging.inject;
                let op = self.op_ref(ring, seq, single);
                let w = Work::P {
                    op,
                    remote,
                    value,
                    width,
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
                let op = OpRef::Fast(seq);
                let w = Work::Signal {
                    op,
                    remote,
                    value,
                    sop,
                    tag: None,
                };
                (pe, w)
            }
            _ => unreachable!("not a single-part operation: {d:?}"),
        };
        self.enqueue(ring, pe, w);
    }

    /// A fence: on unordered paths, a gate in the queue of every PE with work in flight from
    /// this ring (other PEs are not stalled).
    fn fence(&mut self, ring: u16, seq: u64) {
        if self.mode != SignalMode::Ordered {
            for pe in 0..self.n as u32 {
                let q = &self.rings[ring as usize].queues[pe as usize];
                if q.outstanding > 0 || !q.work.is_empty() {
                    self.enqueue(ring, pe, Work::Gate);
                }
            }
        }
        self.finish_op(ring, seq);
    }

    /// In tagged mode, the tag of a counted put (or, with `signal`, of the counted signal
    /// that closes the round, which then moves on) for the signal word `sig` on `pe`:
    /// `Some(None)` in the other modes; `None` after a fault (a word beyond the tag's reach).
    fn counted_tag(&mut self, ring: u16, pe: u32, sig: u64, signal: bool) -> Option<Option<u64>> {
        if self.mode != SignalMode::Tagged {
            return Some(None);
        }
        let round = self.rounds.entry((ring, pe, sig)).or_default();
        let tag = TagData::counted_tag(sig, *round);
        if signal {
            *round = round.wrapping_add(1);
        }
        if tag.is_none() {
            self.fault(
                code::OP_FAILED,
                Some(pe as usize),
                format!(
                    "PE {}: a counted signal word at heap offset {sig:#x} of PE {pe} is beyond \
                     the 512 GiB that a counted tag can name",
                    self.me
                ),
            );
            return None;
        }
        Some(tag)
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
        tag: Option<u64>,
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
        let tag = (self.mode == SignalMode::Tagged).then(|| {
            let t = self.next_tag;
            self.next_tag = TagData::next_tag(t);
            t
        });
        let x = Xfer {
            dir: Dir::Put,
            op,
            remote,
            local,
            len,
            issued: 0,
            tag,
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
            tag,
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
        let r = self.write_value(pe, self.staging.scratch, remote, value, width, ctx);
        match r {
            Ok(()) => {
                self.rings[ring as usize].queues[pe as usize].outstanding += 1;
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
                Work::Gate => q.outstanding == 0,
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
