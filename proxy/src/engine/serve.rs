//! Phase 5 of a turn: what peers ask of this PE and what they answer. Requests (AMOs, signals,
//! and on the host-staged path stores and gets) are applied to this PE's heap and acked; acks
//! finish this PE's parts; tagged writes are counted until the signal waiting for them can be
//! applied; the acks gathered in a turn go out as one message per peer.

use pshmem_abi::error as code;
use pshmem_transport::PostError;

use super::{
    Engine,
    ctx::{Ctx, SignalTag, TagData},
};
use crate::{
    mem::MemError,
    trace::Cost,
    wire::{self, Ack, Message, Request, RequestKind, Status},
};

impl Engine {
    /// A message from a peer's proxy.
    pub(super) fn message(&mut self, m: &[u8]) {
        match wire::decode(m) {
            Ok(Message::Request { src, req }) => self.serve(src, req),
            Ok(Message::Acks { src, acks }) => {
                for a in acks {
                    // A signal's ack gives its tag back (the target forgot it before acking).
                    self.itags.acked(a.id);
                    if a.status != Status::Ok {
                        self.fault(
                            code::OP_FAILED,
                            Some(src as usize),
                            format!(
                                "PE {src} refused a request from PE {}: {:?}",
                                self.me, a.status
                            ),
                        );
                        return;
                    }
                    match Ctx::decode(a.id) {
                        Some(Ctx::Part(p)) => self.part_done(p, Some(a.value)),
                        _ => tracing::warn!(
                            "PE {}: dropped an ack from PE {src} with a foreign id {:#x}",
                            self.me,
                            a.id
                        ),
                    }
                }
            }
            Err(e) => {
                tracing::warn!("PE {}: dropped a message: {e}", self.me);
            }
        }
    }

    /// Applies a peer's request to this PE's heap (or parks a signal for its tagged writes).
    fn serve(&mut self, src: u32, req: Request) {
        match req.kind {
            RequestKind::Amo { op, wide } => {
                let r = self.heap_amo(req.offset, wide, op, req.operand, req.compare);
                self.ack(src, req.id, r);
            }
            RequestKind::Signal { expect: 0, .. } => self.signal_ready(src, req),
            RequestKind::Signal { expect, .. } => {
                let key = (src, SignalTag::decode(req.tag).tag);
                let st = self.tags.entry(key).or_default();
                if st.arrived >= expect {
                    self.tags.remove(&key);
                    self.signal_ready(src, req);
                } else {
                    st.signal = Some(req);
                }
            }
            RequestKind::Store { .. } | RequestKind::GetData { .. } if self.landing.is_some() => {
                self.serve_staged(src, req)
            }
            RequestKind::Store { .. } | RequestKind::GetData { .. } => self.fault(
                code::OP_FAILED,
                Some(src as usize),
                format!(
                    "PE {src} sent a host-staged request to PE {}, whose heap is registered \
                     (PEs disagree on the data path)",
                    self.me
                ),
            ),
        }
    }

    /// A signal's writes have all landed: apply it, unless it is a strong signal and an earlier
    /// one from its source has not been applied (then it waits for that one).
    fn signal_ready(&mut self, src: u32, req: Request) {
        let seq = SignalTag::decode(req.tag).seq;
        if seq == 0 {
            return self.apply_signal(src, &req);
        }
        let mut now = std::mem::take(&mut self.ready);
        self.order.ready(src, seq, req, &mut now);
        for r in now.drain(..) {
            self.apply_signal(src, &r);
        }
        self.ready = now;
    }

    /// Applies a signal request and acks it.
    fn apply_signal(&mut self, src: u32, req: &Request) {
        if let RequestKind::Signal { op, .. } = req.kind {
            let r = self.heap_amo(req.offset, true, op.as_amo(), req.operand, 0);
            self.ack(src, req.id, r.map(|_| 0));
        }
    }

    /// A tagged write landed: apply its signal if it was the last one awaited.
    pub(super) fn tagged_write(&mut self, data: u64) {
        let d = TagData::decode(data, self.imm);
        let key = (d.src, d.tag);
        let st = self.tags.entry(key).or_default();
        st.arrived += 1;
        let ready = matches!(
            st.signal,
            Some(Request { kind: RequestKind::Signal { expect, .. }, .. }) if st.arrived >= expect
        );
        if ready && let Some(req) = self.tags.remove(&key).and_then(|s| s.signal) {
            self.signal_ready(d.src, req);
        }
    }

    /// Queues the outcome of a request for the ack message to `to`.
    pub(super) fn ack(&mut self, to: u32, id: u64, r: Result<u64, MemError>) {
        let (value, status) = match r {
            Ok(v) => (v, Status::Ok),
            Err(MemError::OutOfBounds { .. }) => (0, Status::OutOfBounds),
            Err(MemError::Misaligned { .. }) => (0, Status::Misaligned),
            Err(e @ MemError::Device { .. }) => {
                self.mem_fault(to, e);
                return;
            }
        };
        self.acks
            .entry(to)
            .or_default()
            .push(Ack { id, value, status });
    }

    /// Sends the acks gathered this turn and retries messages that met back-pressure.
    pub(super) fn flush_messages(&mut self) -> usize {
        let per = wire::acks_per_message(self.caps.max_send_size);
        for (to, acks) in std::mem::take(&mut self.acks) {
            for chunk in acks.chunks(per) {
                let ctx = Ctx::Ack { pe: to }.encode();
                self.outbox
                    .push_back((to, wire::encode_acks(self.me, chunk), ctx));
            }
        }
        let mut sent = 0;
        while let Some((to, msg, ctx)) = self.outbox.pop_front() {
            let at = self.clock();
            let res = self.t.send(to as usize, &msg, ctx);
            self.charge_since(Cost::Post, at);
            match res {
                Ok(()) => sent += 1,
                Err(PostError::Retry) => {
                    self.outbox.push_front((to, msg, ctx));
                    break;
                }
                Err(PostError::Failed(e)) => {
                    let detail = format!("PE {}: sending acks to PE {to} failed: {e}", self.me);
                    self.fault_with(code::OP_FAILED, Some(to as usize), detail, *e);
                    break;
                }
            }
        }
        sent
    }
}
