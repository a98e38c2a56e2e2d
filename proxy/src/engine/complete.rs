//! Phase 4 of a turn: poll the transport and finish what completed. A fast part finishes its
//! operation inside the poll callback (the hottest event); every other event is copied out and
//! dispatched by what its context says it is ([`super::ctx::Ctx`]).

use std::sync::atomic::Ordering;

use pshmem_abi::error as code;
use pshmem_transport::{Event, TransportError};

use crate::trace::{Cost, Trace};

use super::{
    Engine,
    ctx::{self, Ctx, FastOp, PartRef},
    exclusive::Exclusive,
    work::{Ev, Posted, RingState},
};

/// Copies an event out of the transport's poll callback for [`Engine::dispatch`].
pub(super) fn keep(events: &mut Vec<Ev>, msgs: &mut Vec<Vec<u8>>, e: Event<'_>) {
    match e {
        Event::Recv { data } => msgs.push(data.to_vec()),
        Event::Done { ctx } => events.push(Ev::Done(ctx, None)),
        Event::Failed { ctx, error } => events.push(Ev::Failed(ctx, error)),
        Event::RemoteWrite { data } => events.push(Ev::RemoteData(data)),
    }
}

/// A fast operation's part completed: one fewer in flight, to its PE and in total, and its
/// sequence number finished.
#[inline(always)]
fn fast_done(
    rings: &mut [RingState],
    inflight: (&mut usize, &mut [u32]),
    trace: &mut Option<Box<Trace>>,
    f: FastOp,
) {
    *inflight.0 -= 1;
    inflight.1[f.pe as usize] -= 1;
    let ring = &mut rings[f.ring as usize];
    let seq = ring.done.seq_from_low(f.seq_low);
    ring.queues[f.pe as usize].completed(|| seq);
    if let Some(t) = trace {
        t.finish(f.ring, seq);
    }
    ring.done.finish(seq);
}

impl Engine {
    /// Polls the transport and handles what it reports; returns the number of events.
    pub(super) fn poll(&mut self) -> usize {
        let mut events = std::mem::take(&mut self.events);
        let mut msgs = std::mem::take(&mut self.msgs);
        // The hottest event, a fast part's completion, is finished inside the callback (it
        // touches only the rings and the in-flight count, not the transport).
        let (rings, trace) = (&mut self.rings, &mut self.trace);
        let (inflight, pe_inflight) = (&mut self.inflight, &mut self.pe_inflight);
        let mut fast = 0;
        let at = trace.as_ref().map(|t| t.start());
        let res = self.t.poll(&mut |e| {
            if let Event::Done { ctx } = e
                && let Some(f) = ctx::fast_part(ctx)
            {
                fast_done(rings, (&mut *inflight, &mut pe_inflight[..]), trace, f);
                fast += 1;
            } else {
                keep(&mut events, &mut msgs, e);
            }
        });
        self.charge_since(Cost::Poll, at);
        if let Err(e) = res {
            let detail = format!("PE {}: polling the transport failed: {e}", self.me);
            self.fault_with(code::OP_FAILED, e.pe(), detail, e);
            return 0;
        }
        let n = fast + events.len() + msgs.len();
        self.dispatch(&mut events, &mut msgs);
        self.events = events;
        self.msgs = msgs;
        n
    }

    /// Handles events gathered by a poll (and by a job's polls).
    pub(super) fn dispatch(&mut self, events: &mut Vec<Ev>, msgs: &mut Vec<Vec<u8>>) {
        for ev in events.drain(..) {
            match ev {
                Ev::Done(word, value) => self.done(word, value),
                Ev::Failed(word, err) => self.failed_event(word, err),
                Ev::RemoteData(data) if self.landing.is_some() => self.landed(data),
                Ev::RemoteData(data) => self.tagged_write(data),
            }
        }
        for m in msgs.drain(..) {
            self.message(&m);
        }
    }

    /// A posted operation completed.
    fn done(&mut self, word: u64, value: Option<u64>) {
        match Ctx::decode(word) {
            Some(Ctx::Part(p)) => self.part_done(p, value),
            // Sends: a request's ack finishes its part; acks need nothing. A job's write that
            // completed after its job returned needs nothing either.
            Some(Ctx::Request(_) | Ctx::Ack { .. } | Ctx::Job(_)) => {}
            Some(Ctx::Staged { chunk, .. }) => self.staging.free.push(chunk),
            None => self.fault(
                code::PROXY,
                None,
                format!(
                    "PE {}: a completion with a context the proxy never posted ({word:#x})",
                    self.me
                ),
            ),
        }
    }

    /// A posted operation failed: the job fails, naming the PE it went to.
    fn failed_event(&mut self, word: u64, err: TransportError) {
        let c = Ctx::decode(word);
        if let Some(Ctx::Job(_)) = c {
            tracing::warn!("PE {}: a finished job's write failed: {err}", self.me);
            return;
        }
        let pe = match c {
            Some(Ctx::Part(PartRef::Tracked(k)) | Ctx::Request(PartRef::Tracked(k))) => {
                self.parts.get(k).map(|p| p.pe)
            }
            Some(c) => c.pe(),
            None => None,
        };
        let pe = pe.map(|p| p as usize).or(err.pe());
        let whom = pe.map_or_else(|| "a peer".to_string(), |p| format!("PE {p}"));
        let detail = format!("PE {}: an operation to {whom} failed: {err}", self.me);
        self.fault_with(code::OP_FAILED, pe, detail, err);
    }

    /// A part completed (a write or read, or a request's ack with the old value).
    pub(super) fn part_done(&mut self, part: PartRef, fetched: Option<u64>) {
        let key = match part {
            PartRef::Fast(f) => {
                let inflight = (&mut self.inflight, &mut self.pe_inflight[..]);
                return fast_done(&mut self.rings, inflight, &mut self.trace, f);
            }
            PartRef::Tracked(k) => k,
        };
        let Some(p) = self.parts.remove(key) else {
            return;
        };
        self.inflight -= 1;
        self.pe_inflight[p.pe as usize] -= 1;
        if let Posted::IntoChunk { chunk, dst, len } = p.posted {
            let src = self.staging.chunk_ptr(chunk) as u64;
            // SAFETY: the producer keeps raw destinations valid until the operation completes,
            // which is after this copy; the chunk holds `len` bytes just read.
            if let Err(e) = unsafe { self.copy_raw(dst, src, len) } {
                self.mem_fault(p.pe, e);
            }
        }
        self.free_posted(p.posted);
        if let (Some(v), Some(o)) = (fetched, self.ops.get(p.op))
            && o.result != 0
        {
            let (cell, b) = (o.result, v.to_le_bytes());
            // SAFETY: the result cell stays valid until the operation completes (API
            // contract), which is after this write.
            if let Err(e) = unsafe { self.copy_raw(cell, b.as_ptr() as u64, 8) } {
                self.mem_fault(p.pe, e);
            }
        }
        let ops = &self.ops;
        let q = &mut self.rings[p.ring as usize].queues[p.pe as usize];
        q.completed(|| ops.get(p.op).map_or(0, |o| o.seq));
        self.release(p.op);
    }

    /// Runs the waiting job with the transport to itself (nothing is in flight), then handles
    /// the events its polls kept for the proxy.
    pub(super) fn run_job(&mut self) {
        // Cleared before the slot is emptied: a job installed meanwhile sets it again. Relaxed:
        // the slot's mutex orders the job itself; a stale `true` only costs a lock.
        self.jobs.pending.store(false, Ordering::Relaxed);
        let Some(job) = self.jobs.lock().take() else {
            return;
        };
        let mut events = std::mem::take(&mut self.events);
        let mut msgs = std::mem::take(&mut self.msgs);
        let mut x = Exclusive {
            t: &mut *self.t,
            heap: &self.region,
            heap_mr: self.region_mr,
            remote: &self.remote,
            events: &mut events,
            msgs: &mut msgs,
            outstanding: 0,
        };
        job(&mut x);
        self.dispatch(&mut events, &mut msgs);
        self.events = events;
        self.msgs = msgs;
    }
}
