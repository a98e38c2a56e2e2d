//! Phase 4 of a turn: poll the transport and finish what completed. A fast part finishes its
//! operation inside the poll callback (the hottest event); every other event is copied into the
//! link's inbox and dispatched by what its context says it is ([`super::ctx::Ctx`]): the
//! initiator's parts here, peers' messages and tagged writes to the target.

use pshmem_abi::error as code;
use pshmem_transport::{Event, Pe, TransportError};

use super::{
    Engine,
    ctx::{self, Ctx, FastOp, PartRef},
    initiator::Initiator,
    io::{Io, Tracer},
    issue::free_posted,
    link::Link,
    work::{Ev, Posted, stash_rings},
};
use crate::{
    trace::Cost,
    wire::{self, Ack, Message, Status},
};

impl Initiator {
    /// A fast operation's part completed: one fewer in flight, to its PE and in total, and its
    /// sequence number finished. A second completion of it (a duplicate the transport
    /// reported) is counted and ignored.
    #[inline(always)]
    pub(super) fn fast_done(&mut self, tracer: &mut Tracer, f: FastOp) {
        let Some(ring) = self.rings.get_mut(f.ring.idx()) else {
            return self.duplicate(tracer);
        };
        let seq = ring.done.seq_from_low(f.seq_low);
        if !ring.done.is_pending(seq) {
            return self.duplicate(tracer);
        }
        self.inflight -= 1;
        let peer = &mut self.peers[f.pe];
        peer.inflight -= 1;
        peer.queues[f.ring.idx()].completed(|| seq);
        tracer.finish(f.ring, seq);
        ring.done.finish(seq);
    }

    /// A completion for nothing in flight: the transport reported one twice (or a part the
    /// job already gave up completed). Nothing is counted for it but the trace's
    /// `duplicates`, which the tests read.
    #[cold]
    fn duplicate(&mut self, tracer: &mut Tracer) {
        tracer.duplicate();
    }

    /// A posted operation completed.
    fn done(&mut self, io: &mut Io<'_>, word: u64) {
        match Ctx::decode(word) {
            Some(Ctx::Part(p)) => self.part_done(io, p, None),
            // Sends: a request's ack finishes its part; acks need nothing. A job's write that
            // completed after its job returned needs nothing either.
            Some(Ctx::Request(_) | Ctx::Ack { .. } | Ctx::Job(_)) => {}
            Some(Ctx::Staged { chunk, era, .. }) => {
                if !io.staging.landed(chunk, era) {
                    self.duplicate(io.tracer);
                }
            }
            None => io.faults.raise(
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
    #[cold]
    fn failed_event(&mut self, io: &mut Io<'_>, word: u64, err: TransportError) {
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
        let pe = pe.or(err.pe());
        let whom = pe.map_or_else(|| "a peer".to_string(), |p| format!("PE {p}"));
        let detail = format!("PE {}: an operation to {whom} failed: {err}", self.me);
        io.faults.raise_with(code::OP_FAILED, pe, detail, err);
    }

    /// A part completed (a write or read, or a request's ack with the old value).
    pub(super) fn part_done(&mut self, io: &mut Io<'_>, part: PartRef, fetched: Option<u64>) {
        let key = match part {
            PartRef::Fast(f) => return self.fast_done(io.tracer, f),
            PartRef::Tracked(k) => k,
        };
        let Some(p) = self.parts.remove(key) else {
            return self.duplicate(io.tracer);
        };
        self.inflight -= 1;
        self.peers[p.pe].inflight -= 1;
        if let Posted::IntoChunk { chunk, dst, len } = p.posted {
            let src = io.staging.chunk_ptr(chunk) as u64;
            // SAFETY: the producer keeps raw destinations valid until the operation completes,
            // which is after this copy; the chunk holds `len` bytes just read.
            if let Err(e) = unsafe { io.home.copy_raw(dst, src, len) } {
                io.faults.mem(p.pe, e);
            }
        }
        free_posted(io.staging, &mut self.peers, p.posted);
        if let (Some(v), Some(o)) = (fetched, self.ops.get(p.op))
            && o.result != 0
        {
            let (cell, b) = (o.result, v.to_le_bytes());
            // SAFETY: the result cell stays valid until the operation completes (API
            // contract), which is after this write.
            if let Err(e) = unsafe { io.home.copy_raw(cell, b.as_ptr() as u64, 8) } {
                io.faults.mem(p.pe, e);
            }
        }
        let ops = &self.ops;
        self.peers[p.pe].queues[p.ring.idx()].completed(|| ops.get(p.op).map_or(0, |o| o.seq));
        self.release(io.tracer, p.op);
    }

    /// Acks from `src` for this PE's requests: each finishes its part and gives back the tag of
    /// a tagged signal; a refusal fails the job.
    fn acks(&mut self, io: &mut Io<'_>, src: Pe, acks: Vec<Ack>) {
        for a in acks {
            // A signal's ack gives its tag back (the target forgot it before acking).
            self.peers[src].tags.acked(a.id);
            if a.status != Status::Ok {
                let detail = format!(
                    "PE {src} refused a request from PE {}: {:?}",
                    self.me, a.status
                );
                io.faults.raise(code::OP_FAILED, Some(src), detail);
                return;
            }
            match Ctx::decode(a.id) {
                Some(Ctx::Part(p)) => self.part_done(io, p, Some(a.value)),
                _ => tracing::warn!(
                    "PE {}: dropped an ack from PE {src} with a foreign id {:#x}",
                    self.me,
                    a.id
                ),
            }
        }
    }
}

impl Link {
    /// Polls the transport: fast parts finish in the callback through `fast`, every other
    /// event goes to the inbox. Returns the number of fast parts.
    #[inline]
    fn poll(&mut self, mut fast: impl FnMut(FastOp)) -> pshmem_transport::Result<usize> {
        let Link { t, inbox, .. } = self;
        let mut n = 0;
        t.poll(&mut |e| {
            if let Event::Done { ctx } = e
                && let Some(f) = ctx::fast_part(ctx)
            {
                fast(f);
                n += 1;
            } else {
                inbox.keep(e);
            }
        })?;
        Ok(n)
    }
}

impl Engine {
    /// Polls the transport and handles what it reports; returns the number of events.
    pub(super) fn poll(&mut self) -> usize {
        let at = self.tracer.clock();
        // The hottest event, a fast part's completion, is finished inside the callback (it
        // touches only the initiator's rings and counts, not the transport).
        let (init, tracer) = (&mut self.init, &mut self.tracer);
        let res = self.link.poll(|f| init.fast_done(tracer, f));
        self.tracer.charge_since(Cost::Poll, at);
        let fast = match res {
            Ok(n) => n,
            Err(e) => {
                let detail = format!("PE {}: polling the transport failed: {e}", self.link.me);
                self.faults.raise_with(code::OP_FAILED, e.pe(), detail, e);
                return 0;
            }
        };
        let n = fast + self.link.inbox.events.len() + self.link.inbox.msgs.len();
        self.dispatch();
        n
    }

    /// Handles the events in the link's inbox (from a poll, or a job's polls).
    pub(super) fn dispatch(&mut self) {
        let mut events = std::mem::take(&mut self.link.inbox.events);
        let mut msgs = std::mem::take(&mut self.link.inbox.msgs);
        for ev in events.drain(..) {
            if let Ev::RemoteData(data) = ev
                && self.init.staged
            {
                self.landed(data);
                continue;
            }
            let (init, target, mut io) = self.split();
            match ev {
                Ev::Done(word) => init.done(&mut io, word),
                Ev::Failed(word, err) => init.failed_event(&mut io, word, err),
                Ev::RemoteData(data) => {
                    let (rings, batch) = (&mut init.rings, init.batch);
                    target.tagged_write(&mut io, &mut || stash_rings(rings, batch), data);
                }
            }
        }
        for m in msgs.drain(..) {
            self.message(&m);
        }
        // The buffers go back (empty) to be filled again without allocating.
        self.link.inbox.events = events;
        self.link.inbox.msgs = msgs;
    }

    /// A message from a peer's proxy: a request for the target, acks for the initiator.
    fn message(&mut self, m: &[u8]) {
        let me = self.link.me;
        let (src, msg) = match wire::decode(m) {
            Ok(msg @ Message::Request { src, .. }) | Ok(msg @ Message::Acks { src, .. }) => {
                (src, msg)
            }
            Err(e) => return tracing::warn!("PE {me}: dropped a message: {e}"),
        };
        if src.idx() >= self.link.n {
            return tracing::warn!(
                "PE {me}: dropped a message from PE {src}, outside the job's {} PEs",
                self.link.n
            );
        }
        let (init, target, mut io) = self.split();
        match msg {
            Message::Request { req, .. } => {
                let (rings, batch) = (&mut init.rings, init.batch);
                target.serve(&mut io, &mut || stash_rings(rings, batch), src, req);
            }
            Message::Acks { acks, .. } => init.acks(&mut io, src, acks),
        }
    }
}
