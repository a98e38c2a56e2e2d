//! Phase 3 of a turn, the initiator's: issue queued work to the transport, front first per
//! (ring, PE), in round-robin over the active queues, until the transport pushes back, flow
//! control or staging runs out, or a gate closes. Transfers go part by part: RMA parts here,
//! host-staged chunks in [`super::staged`].

use pshmem_ring::Local;
use pshmem_transport::{LocalRef, Pe, PostError};

use super::{
    SignalMode,
    ctx::{Ctx, FastOp, PartRef, RingId, SignalTag, TagData},
    initiator::Initiator,
    io::{Io, Tracer},
    tags::Tag,
    work::{Dir, Issued, OpRef, Part, Post, Posted, Staging, Work, Xfer, part_max},
};
use crate::wire::{self, Request, RequestKind};

impl Initiator {
    /// Issues every active queue as far as it goes; returns the work items finished.
    pub(super) fn issue_all(&mut self, io: &mut Io<'_>) -> usize {
        let mut work = 0;
        for _ in 0..self.active.len() {
            let Some((r, pe)) = self.active.pop_front() else {
                break;
            };
            let before = self.peers[pe].queues[r.idx()].work.len();
            let issued = self.issue_queue(io, r, pe);
            let q = self.peers[pe].queue(r);
            work += before - q.work.len();
            match issued {
                Issued::All => q.active = false,
                Issued::Blocked => self.active.push_back((r, pe)),
            }
            if io.faults.failed {
                break;
            }
        }
        work
    }

    /// Issues the queue of (ring, PE) front first until it is empty or blocked.
    fn issue_queue(&mut self, io: &mut Io<'_>, r: RingId, pe: Pe) -> Issued {
        loop {
            let q = self.peers[pe].queue(r);
            let drained = q.drained();
            let Some(front) = q.work.front_mut() else {
                return Issued::All;
            };
            let issued = match front {
                Work::Gate { .. } | Work::Hold if drained => Issued::All,
                Work::Gate { .. } => Issued::Blocked,
                Work::Hold => {
                    // Its signal waits aside; what follows it goes on issuing.
                    q.work.pop_front();
                    let w = q
                        .work
                        .pop_front()
                        .expect("a hold is queued with its signal");
                    let seq = match w {
                        Work::Signal {
                            op: OpRef::Fast(seq),
                            ..
                        } => seq,
                        _ => unreachable!("a hold is followed by a fast signal: {w:?}"),
                    };
                    if q.held.is_empty() {
                        self.holding.push((r, pe));
                    }
                    q.hold(seq, w);
                    continue;
                }
                _ => {
                    // Taken out while issued (issuing borrows the whole initiator).
                    let mut w = std::mem::replace(front, Work::Gate { fence: false });
                    let issued = self.issue_one(io, r, pe, &mut w);
                    let q = self.peers[pe].queue(r);
                    *q.work.front_mut().expect("the front is still queued") = w;
                    issued
                }
            };
            if issued == Issued::Blocked {
                return Issued::Blocked;
            }
            let w = self.peers[pe]
                .queue(r)
                .work
                .pop_front()
                .expect("the front is still queued");
            self.finish_issuing(io.tracer, &w);
        }
    }

    /// Issues every held signal whose preceding parts all completed, oldest first per queue
    /// (ahead of the work queued after it, all of it later); one that cannot be issued yet
    /// stays held, and the queue's later signals wait behind it. Returns how many went.
    pub(super) fn release_held(&mut self, io: &mut Io<'_>) -> usize {
        let mut n = 0;
        let mut holding = std::mem::take(&mut self.holding);
        holding.retain(|&(r, pe)| {
            while let Some((seq, mut w)) = self.peers[pe].queue(r).release() {
                if self.issue_one(io, r, pe, &mut w) == Issued::Blocked {
                    self.peers[pe].queue(r).unrelease(seq, w);
                    break;
                }
                self.finish_issuing(io.tracer, &w);
                n += 1;
            }
            !self.peers[pe].queues[r.idx()].held.is_empty()
        });
        // Parking during the issues above may have added queues.
        holding.append(&mut self.holding);
        self.holding = holding;
        n
    }

    /// A work item is fully issued: if it was its operation's last, the operation's issuing
    /// token is given back (a fast operation finishes with its one part instead).
    pub(super) fn finish_issuing(&mut self, tracer: &mut Tracer, w: &Work) {
        if let Some(OpRef::Slab(k)) = w.ends() {
            self.release(tracer, k);
        }
    }

    /// Issues as much of `w` as possible.
    pub(super) fn issue_one(&mut self, io: &mut Io<'_>, r: RingId, pe: Pe, w: &mut Work) -> Issued {
        match w {
            Work::Xfer(x) => self.issue_xfer(io, r, pe, x),
            Work::P {
                op,
                remote,
                value,
                width,
                tag,
            } => {
                if self.staged {
                    let mut req =
                        Request::new(*remote, *value, 0, RequestKind::Store { width: *width });
                    self.request(io, (r, pe, *op), &mut req)
                } else {
                    self.issue_p(io, (r, pe, *op), (*remote, *value, *width), *tag)
                }
            }
            Work::Amo {
                op,
                remote,
                aop,
                wide,
                operand,
                compare,
            } => {
                let kind = RequestKind::Amo {
                    op: *aop,
                    wide: *wide,
                };
                let req = Request::new(*remote, *operand, *compare, kind);
                // Sequenced in tagged mode, so that a fence's mark orders it.
                let seq = self.mode == SignalMode::Tagged;
                self.request_after(io, (r, pe, *op), req, (None, seq))
            }
            Work::Signal {
                op,
                remote,
                value,
                sop,
                tag,
                sequenced,
            } => {
                // A tagged signal is applied once the target counted every data write: its
                // put's parts, or the writes of its counted round or strong epoch (all
                // issued: they were ahead of it in this queue).
                let kind = RequestKind::Signal {
                    op: *sop,
                    expect: self.expect(pe, *tag, *op),
                };
                let req = Request::new(*remote, *value, 0, kind);
                self.request_after(io, (r, pe, *op), req, (*tag, *sequenced))
            }
            Work::Store {
                op,
                remote,
                value,
                width,
            } => {
                let kind = RequestKind::Store { width: *width };
                let req = Request::new(*remote, *value, 0, kind);
                self.request_after(io, (r, pe, *op), req, (None, true))
            }
            Work::Mark { op, tag } => {
                let kind = RequestKind::Fence {
                    expect: self.expect(pe, *tag, *op),
                };
                let req = Request::new(0, 0, 0, kind);
                self.request_after(io, (r, pe, *op), req, (*tag, true))
            }
            Work::Gate { .. } | Work::Hold => Issued::All,
        }
    }

    /// The tagged writes a signal or mark with `tag` waits for: its round's or epoch's count
    /// (a shared tag), or its put-with-signal's data parts.
    fn expect(&self, pe: Pe, tag: Option<Tag>, op: OpRef) -> u32 {
        match (tag, op) {
            (Some(t), _) if t.shared => self.peers[pe].tags.written(t.id),
            (Some(_), OpRef::Slab(k)) => self.ops.get(k).map_or(0, |o| o.data_parts),
            _ => 0,
        }
    }

    /// Sends request `req`, waiting at the target for the writes of `tag` and (`sequenced`)
    /// in its place among this PE's sequenced requests there. The sequence number is taken
    /// only if the request goes out (the target waits for every number in turn); the tag
    /// comes back with the ack.
    fn request_after(
        &mut self,
        io: &mut Io<'_>,
        (r, pe, op): (RingId, Pe, OpRef),
        mut req: Request,
        (tag, sequenced): (Option<Tag>, bool),
    ) -> Issued {
        let tags = &self.peers[pe].tags;
        let seq = if sequenced { tags.peek_seq() } else { 0 };
        req.tag = SignalTag {
            tag: tag.map_or(0, |t| t.id),
            seq,
        }
        .encode();
        let issued = self.request(io, (r, pe, op), &mut req);
        if issued == Issued::All {
            let tags = &mut self.peers[pe].tags;
            if sequenced {
                tags.take_seq();
            }
            if let Some(t) = tag {
                tags.sent(t.id, req.id);
            }
        }
        issued
    }

    /// Issues a transfer part by part while flow control, staging and the transport allow.
    fn issue_xfer(&mut self, io: &mut Io<'_>, r: RingId, pe: Pe, x: &mut Xfer) -> Issued {
        while x.issued < x.len {
            if !self.room_for(pe) {
                return Issued::Blocked;
            }
            let step = match (self.staged, x.dir) {
                (false, Dir::Put) => self.post_rma(io, r, pe, x),
                (false, Dir::Get) => self.post_rma(io, r, pe, x),
                (true, Dir::Put) => self.post_staged_put(io, r, pe, x),
                (true, Dir::Get) => self.post_staged_get(io, r, pe, x),
            };
            match step {
                Some(n) => {
                    x.issued += n;
                    if let Some(t) = x.tag
                        && t.shared
                    {
                        self.peers[pe].tags.wrote(t.id);
                    }
                    if x.dir == Dir::Put
                        && let OpRef::Slab(k) = x.op
                        && let Some(o) = self.ops.get_mut(k)
                    {
                        o.data_parts += 1;
                    }
                }
                None => return Issued::Blocked,
            }
        }
        Issued::All
    }

    /// The local side of the next RMA part of `x`: the heap itself, the scratch area (copied
    /// at post) or a staging chunk; `None` when no chunk is free or the copy failed.
    fn rma_local(&mut self, io: &mut Io<'_>, pe: Pe, x: &Xfer) -> Option<(LocalRef, u64, Posted)> {
        let left = x.len - x.issued;
        match x.local {
            Local::Heap(off) => {
                let lref = LocalRef {
                    mr: io.link.region_mr,
                    offset: (off + x.issued) as usize,
                };
                let most = part_max(&io.link.caps, x.dir, x.len, x.tag.is_some());
                Some((lref, left.min(most), Posted::Rma))
            }
            Local::Raw(addr) => {
                let st = &mut *io.staging;
                let inline = x.dir == Dir::Put && left as usize <= st.inject;
                let (off, part, posted) = if inline {
                    (st.scratch, left, Posted::Rma)
                } else {
                    let ch = st.free.pop()?;
                    let part = left.min(st.chunk as u64);
                    let posted = match x.dir {
                        Dir::Put => Posted::FromChunk(ch),
                        Dir::Get => Posted::IntoChunk {
                            chunk: ch,
                            dst: addr + x.issued,
                            len: part as usize,
                        },
                    };
                    (st.chunk_offset(ch), part, posted)
                };
                if x.dir == Dir::Put {
                    let at = st.buf[off..].as_mut_ptr() as u64;
                    // SAFETY: the producer keeps raw sources valid until the operation
                    // completes (API contract); the staging range is ours and idle.
                    if let Err(e) = unsafe { io.home.copy_raw(at, addr + x.issued, part as usize) }
                    {
                        free_posted(io.staging, &mut self.peers, posted);
                        io.faults.mem(pe, e);
                        return None;
                    }
                }
                let lref = LocalRef {
                    mr: io.staging.mr,
                    offset: off,
                };
                Some((lref, part, posted))
            }
        }
    }

    /// Posts the next RMA part of `x` (a write, with its tag as remote CQ data, or a read);
    /// returns the bytes posted.
    fn post_rma(&mut self, io: &mut Io<'_>, r: RingId, pe: Pe, x: &Xfer) -> Option<u64> {
        let (lref, n, posted) = self.rma_local(io, pe, x)?;
        let rref = io.link.remote_ref(pe, x.remote + x.issued);
        let part = self.new_part(x.op, pe, r, posted);
        let ctx = Ctx::Part(part).encode();
        let (res, what) = match x.dir {
            Dir::Put => {
                let data = x.tag.map(|tag| self.tag_data(io, tag));
                // SAFETY: heap sources are registered and outlive the transport; staged
                // sources stay untouched until the part completes (the chunk is ours), or are
                // copied at post (inject size, scratch).
                let res = unsafe { io.link.write(pe, lref, rref, n as usize, data, ctx) };
                (res, "put")
            }
            Dir::Get => {
                // SAFETY: the destination (heap, or our staging chunk) is registered and not
                // touched until the part completes.
                let res = unsafe { io.link.t.read(pe, lref, rref, n as usize, ctx) };
                (res, "get")
            }
        };
        (self.posted(io, res, (part, pe), what) == Post::Done).then_some(n)
    }

    /// The remote CQ data of a write carrying `tag` from this PE.
    fn tag_data(&self, io: &Io<'_>, tag: Tag) -> u64 {
        TagData {
            src: self.me,
            tag: tag.id,
        }
        .encode(io.link.imm)
    }

    /// An RMA `p`: the value from the scratch area (copied at post) or a chunk.
    fn issue_p(
        &mut self,
        io: &mut Io<'_>,
        (r, pe, op): (RingId, Pe, OpRef),
        (remote, value, width): (u64, u64, u8),
        tag: Option<Tag>,
    ) -> Issued {
        if !self.room_for(pe) {
            return Issued::Blocked;
        }
        let (off, posted) = if width as usize <= io.staging.inject {
            (io.staging.scratch, Posted::Rma)
        } else {
            let Some(ch) = io.staging.free.pop() else {
                return Issued::Blocked;
            };
            (io.staging.chunk_offset(ch), Posted::FromChunk(ch))
        };
        let part = self.new_part(op, pe, r, posted);
        let ctx = Ctx::Part(part).encode();
        let data = tag.map(|t| self.tag_data(io, t));
        let res = io
            .link
            .write_value(io.staging, pe, off, (remote, value, width), data, ctx);
        let issued = self.posted(io, res, (part, pe), "p").issued();
        if issued == Issued::All
            && let Some(t) = tag
        {
            self.peers[pe].tags.wrote(t.id);
        }
        issued
    }

    /// Sends a request whose ack completes a part of `op`.
    /// Fills in `req.id` (the caller may keep it: its ack carries it back).
    pub(super) fn request(
        &mut self,
        io: &mut Io<'_>,
        (r, pe, op): (RingId, Pe, OpRef),
        req: &mut Request,
    ) -> Issued {
        if !self.room_for(pe) {
            return Issued::Blocked;
        }
        let part = self.new_part(op, pe, r, Posted::Request);
        req.id = Ctx::Part(part).encode();
        let msg = wire::encode_request(self.me, req);
        let res = io.link.t.send(pe, &msg, Ctx::Request(part).encode());
        self.posted(io, res, (part, pe), "request").issued()
    }

    /// A new part of `op` to `pe` from ring `r`.
    pub(super) fn new_part(&mut self, op: OpRef, pe: Pe, r: RingId, posted: Posted) -> PartRef {
        match op {
            OpRef::Fast(seq) => {
                debug_assert!(matches!(posted, Posted::Rma | Posted::Request));
                PartRef::Fast(FastOp::new(r, pe, seq))
            }
            OpRef::Slab(op) => PartRef::Tracked(self.parts.insert(Part {
                op,
                pe,
                ring: r,
                posted,
            })),
        }
    }

    /// Books a post's outcome: in flight, undone (back-pressure), or the job's fault.
    pub(super) fn posted(
        &mut self,
        io: &mut Io<'_>,
        res: Result<(), PostError>,
        (part, pe): (PartRef, Pe),
        what: &str,
    ) -> Post {
        match res {
            Ok(()) => {
                let (ring, seq) = match part {
                    PartRef::Fast(f) => {
                        let held = !self.peers[pe].queues[f.ring.idx()].held.is_empty();
                        // Needed only by a trace and by a queue holding signals.
                        let need = io.tracer.on() || held;
                        let done = &self.rings[f.ring.idx()].done;
                        (f.ring, need.then(|| done.seq_from_low(f.seq_low)))
                    }
                    PartRef::Tracked(k) => {
                        let p = self.parts.get(k).expect("a posted part is live");
                        let (op, ring) = (p.op, p.ring);
                        let seq = self.ops.get_mut(op).map(|o| {
                            o.pending += 1;
                            o.seq
                        });
                        (ring, seq)
                    }
                };
                if let Some(seq) = seq {
                    io.tracer.post(ring, seq, pe);
                }
                // A tracked part's operation is live while the part is (none: a bookkeeping
                // slip; 0 counts it before every held signal, which then waits for it).
                let peer = &mut self.peers[pe];
                peer.queues[ring.idx()].posted(|| seq.unwrap_or(0));
                peer.inflight += 1;
                self.inflight += 1;
                Post::Done
            }
            Err(PostError::Retry) => {
                self.drop_part(io.staging, part);
                Post::Retry
            }
            Err(PostError::Failed(e)) => {
                self.drop_part(io.staging, part);
                io.faults.post_failed(what, pe, *e);
                Post::Failed
            }
        }
    }

    /// Removes a part that was never posted, giving back what it held.
    pub(super) fn drop_part(&mut self, st: &mut Staging, part: PartRef) {
        if let PartRef::Tracked(k) = part
            && let Some(p) = self.parts.remove(k)
        {
            free_posted(st, &mut self.peers, p.posted);
        }
    }
}

/// Gives back the staging chunk or landing slot a part held.
pub(super) fn free_posted(
    st: &mut Staging,
    peers: &mut super::work::PeVec<super::peer::Peer>,
    posted: Posted,
) {
    match posted {
        Posted::FromChunk(ch) | Posted::IntoChunk { chunk: ch, .. } => st.free.push(ch),
        Posted::Landing { owner, slot } => peers[owner].slots.push(slot),
        Posted::Rma | Posted::Request => {}
    }
}
