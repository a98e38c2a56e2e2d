//! Completions: reading a rail's CQ into events, finishing (striped) operations part by part,
//! and the error a failed completion reports.

use std::{ffi::c_void, mem::size_of};

use pshmem_libfabric_sys as sys;

use super::{
    OfiTransport, OpKind, OwnedEvent, connection_lost,
    fabric::{CqError, CqRead, bits, strerror},
};
use crate::{Event, Pe, Result, TransportError};

impl OfiTransport {
    /// The error of a failed completion of an operation of `kind` to `pe` on `rail`: the peer
    /// lost when the provider says its connection is gone (the runtime then tells the whole
    /// job, which may not have seen the death yet), else the completion's own codes, naming the
    /// rail (a failing NIC among several).
    fn completion_error(&self, pe: Pe, rail: usize, kind: OpKind, ce: CqError) -> TransportError {
        let text = if ce.text.is_empty() {
            strerror(ce.err)
        } else {
            ce.text
        };
        if pe.idx() < self.n && connection_lost(self.socket_errnos, ce.prov_errno) {
            return TransportError::PeerLost {
                pe,
                op: kind.name(),
                reason: format!(
                    "{text} on rail {rail} (error {}, provider error {})",
                    ce.err, ce.prov_errno
                ),
            };
        }
        TransportError::Completion {
            pe,
            rail,
            op: kind.name(),
            code: ce.err,
            prov_errno: ce.prov_errno,
            text,
        }
    }

    /// Reads one rail's CQ while no user callback is at hand, keeping every event for the
    /// next poll.
    pub(super) fn progress_rail_into_deferred(&mut self, rail: usize) -> Result<()> {
        let mut events = Vec::new();
        self.poll_rail(rail, &mut |e| events.push(OwnedEvent::of(e)))?;
        self.deferred.extend(events);
        Ok(())
    }

    fn finish_part(
        &mut self,
        slot: u32,
        err: Option<TransportError>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) {
        let Some(rec) = self.ops.get_mut(slot) else {
            return;
        };
        rec.remaining = rec.remaining.saturating_sub(1);
        if let Some(e) = err {
            rec.error.get_or_insert(Box::new(e));
        }
        if rec.remaining > 0 {
            return;
        }
        let rec = self.ops.remove(slot).expect("live");
        if rec.abandoned {
            return;
        }
        match rec.error {
            Some(error) => on_event(Event::Failed {
                ctx: rec.ctx,
                error: *error,
            }),
            None => on_event(Event::Done { ctx: rec.ctx }),
        }
    }

    pub(super) fn poll_rail(
        &mut self,
        r: usize,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize> {
        let mut entries = std::mem::take(&mut self.entries);
        let res = self.rails[r].cq.read(&mut entries);
        let mut count = 0;
        let base = self.rails[r].ctxs.as_ptr() as usize;
        let slot_of = |p: *mut c_void| -> Option<usize> {
            let a = p as usize;
            (a >= base && (a - base) % size_of::<sys::fi_context2>() == 0)
                .then(|| (a - base) / size_of::<sys::fi_context2>())
        };
        let out = match res {
            Err(e) => Err(e),
            Ok(CqRead::Entries(n)) => {
                for e in &entries[..n] {
                    count += 1;
                    let idx = slot_of(e.op_context);
                    let is_recv_slot = idx.is_some_and(|i| i >= self.cfg.max_outstanding);
                    if e.flags & bits!(FI_REMOTE_CQ_DATA) != 0 && e.flags & bits!(FI_RECV) == 0 {
                        on_event(Event::RemoteWrite { data: e.data });
                        continue;
                    }
                    if is_recv_slot {
                        let b = idx.expect("slot") - self.cfg.max_outstanding;
                        if e.flags & bits!(FI_REMOTE_CQ_DATA) != 0 {
                            on_event(Event::RemoteWrite { data: e.data });
                        } else {
                            let off = self.recv_off(b);
                            let len = e.len.min(self.cfg.max_send);
                            on_event(Event::Recv {
                                data: &self.rails[r].internal[off..off + len],
                            });
                        }
                        self.post_recv(r, b)?;
                        continue;
                    }
                    match idx {
                        Some(i) => self.finish_part(i as u32, None, on_event),
                        None => tracing::warn!(
                            "rail {r}: completion with unknown context {:p}",
                            e.op_context
                        ),
                    }
                }
                Ok(count)
            }
            Ok(CqRead::Error(ce)) => {
                count += 1;
                match slot_of(ce.op_context) {
                    Some(i) if i >= self.cfg.max_outstanding => {
                        // A receive buffer failed (e.g. cancelled at close): repost it.
                        let _ = self.post_recv(r, i - self.cfg.max_outstanding);
                    }
                    Some(i) => {
                        let (pe, kind) = match self.ops.get_mut(i as u32) {
                            Some(rec) => (rec.pe, rec.kind),
                            None => (Pe::new(u32::MAX), OpKind::Write),
                        };
                        let error = self.completion_error(pe, r, kind, ce);
                        self.finish_part(i as u32, Some(error), on_event);
                    }
                    None => {
                        tracing::warn!("rail {r}: error completion without context: {}", ce.text)
                    }
                }
                Ok(count)
            }
        };
        self.entries = entries;
        out
    }
}
