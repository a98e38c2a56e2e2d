//! The target: what peers ask of this PE and what it answers. Requests (AMOs, signals, and on
//! the host-staged path stores and gets) are applied to this PE's heap and acked; tagged writes
//! are counted until the signal or fence mark waiting for them can be applied; sequenced
//! requests (tagged mode) wait for the earlier ones from their source; the acks gathered in a
//! turn go out as one message per peer.
//! It owns only that bookkeeping, keyed by source PE, and borrows the rest through an [`Io`].

use std::collections::{HashMap, VecDeque};

use pshmem_abi::error as code;
use pshmem_transport::Pe;

use super::{
    ctx::{Ctx, SignalTag, TagData},
    io::Io,
    link::Link,
    tags::Order,
    work::TagState,
};
use crate::{
    mem::MemError,
    wire::{self, Ack, Request, RequestKind, Status},
};

/// This PE's side of its peers' operations.
#[derive(Default)]
pub(super) struct Target {
    /// Tagged writes and parked signals per (source PE, tag).
    pub tags: HashMap<(Pe, u32), TagState>,
    /// Sequenced requests ready but waiting for an earlier one from their source.
    pub order: Order<Request>,
    /// Reused: the sequenced requests to apply now.
    ready: Vec<Request>,
    /// The replies gathered this turn, per source.
    pub acks: HashMap<Pe, Vec<Ack>>,
    /// Host-staged path: peers' get requests waiting for a staging chunk.
    pub waiting: VecDeque<(Pe, Request)>,
}

impl Target {
    /// Nothing to answer and nothing waiting.
    pub(super) fn idle(&self) -> bool {
        self.acks.is_empty() && self.waiting.is_empty()
    }

    /// Applies a peer's request to this PE's heap (or parks a signal or fence mark for its
    /// tagged writes). `idle` runs while a GPU AMO is pending.
    pub(super) fn serve(&mut self, io: &mut Io<'_>, idle: &mut dyn FnMut(), src: Pe, req: Request) {
        let seq = SignalTag::decode(req.tag).seq;
        match req.kind {
            RequestKind::Amo { .. } => self.in_order(io, idle, src, req),
            RequestKind::Signal { .. } | RequestKind::Fence { .. } => {
                let expect = req.kind.expect();
                let key = (src, SignalTag::decode(req.tag).tag);
                if expect == 0 {
                    return self.in_order(io, idle, src, req);
                }
                let st = self.tags.entry(key).or_default();
                if st.arrived >= expect {
                    self.tags.remove(&key);
                    self.in_order(io, idle, src, req);
                } else {
                    st.signal = Some(req);
                }
            }
            RequestKind::Store { .. } | RequestKind::GetData { .. }
                if io.link.landing.is_some() =>
            {
                self.serve_staged(io, src, req)
            }
            // A `p` after a fence, in tagged mode: applied in its source's order.
            RequestKind::Store { .. } if seq != 0 => self.in_order(io, idle, src, req),
            RequestKind::Store { .. } | RequestKind::GetData { .. } => io.faults.raise(
                code::OP_FAILED,
                Some(src),
                format!(
                    "PE {src} sent a host-staged request to PE {}, whose heap is registered \
                     (PEs disagree on the data path)",
                    io.link.me
                ),
            ),
        }
    }

    /// A request's writes have all landed (or it waits for none): apply it, unless it is
    /// sequenced and an earlier one from its source has not been applied (then it waits for
    /// that one).
    fn in_order(&mut self, io: &mut Io<'_>, idle: &mut dyn FnMut(), src: Pe, req: Request) {
        let seq = SignalTag::decode(req.tag).seq;
        if seq == 0 {
            return self.apply(io, idle, src, &req);
        }
        let mut now = std::mem::take(&mut self.ready);
        self.order.ready(src, seq, req, &mut now);
        for r in now.drain(..) {
            self.apply(io, idle, src, &r);
        }
        self.ready = now;
    }

    /// Applies a request on the common path and acks it: an AMO (the ack carries the old
    /// value), a signal, a sequenced store, or a fence mark (nothing to do).
    fn apply(&mut self, io: &mut Io<'_>, idle: &mut dyn FnMut(), src: Pe, req: &Request) {
        let r = match req.kind {
            RequestKind::Amo { op, wide } => {
                io.home
                    .amo(req.offset, (wide, op, req.operand, req.compare), idle)
            }
            RequestKind::Signal { op, .. } => io
                .home
                .amo(req.offset, (true, op.as_amo(), req.operand, 0), idle)
                .map(|_| 0),
            RequestKind::Store { width } => {
                io.home.store(req.offset, req.operand, width).map(|()| 0)
            }
            RequestKind::Fence { .. } => Ok(0),
            RequestKind::GetData { .. } => unreachable!("served by the staged path"),
        };
        self.ack(io, src, req.id, r);
    }

    /// A tagged write landed: apply its signal if it was the last one awaited.
    pub(super) fn tagged_write(&mut self, io: &mut Io<'_>, idle: &mut dyn FnMut(), data: u64) {
        let d = TagData::decode(data, io.link.imm);
        if d.src.idx() >= io.link.n {
            let detail = format!(
                "PE {}: a tagged write names PE {}, outside the job ({data:#x})",
                io.link.me, d.src
            );
            return io.faults.raise(code::OP_FAILED, None, detail);
        }
        let key = (d.src, d.tag);
        let st = self.tags.entry(key).or_default();
        st.arrived += 1;
        let ready = st.signal.is_some_and(|r| st.arrived >= r.kind.expect());
        if ready && let Some(req) = self.tags.remove(&key).and_then(|s| s.signal) {
            self.in_order(io, idle, d.src, req);
        }
    }

    /// Queues the outcome of a request for the ack message to `to`.
    pub(super) fn ack(&mut self, io: &mut Io<'_>, to: Pe, id: u64, r: Result<u64, MemError>) {
        let (value, status) = match r {
            Ok(v) => (v, Status::Ok),
            Err(MemError::OutOfBounds { .. }) => (0, Status::OutOfBounds),
            Err(MemError::Misaligned { .. }) => (0, Status::Misaligned),
            Err(e @ MemError::Device { .. }) => {
                io.faults.mem(to, e);
                return;
            }
        };
        self.acks
            .entry(to)
            .or_default()
            .push(Ack { id, value, status });
    }

    /// Moves the acks gathered this turn into the link's outbox, one message per peer (or
    /// several, past the send size).
    pub(super) fn take_acks(&mut self, link: &mut Link) {
        let per = wire::acks_per_message(link.caps.max_send_size);
        for (to, acks) in self.acks.drain() {
            for chunk in acks.chunks(per) {
                let ctx = Ctx::Ack { pe: to }.encode();
                link.outbox
                    .push_back((to, wire::encode_acks(link.me, chunk), ctx));
            }
        }
    }
}
