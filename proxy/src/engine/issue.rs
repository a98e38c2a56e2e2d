//! Phase 3 of a turn: issue queued work to the transport, front first per (ring, PE), in
//! round-robin over the active queues, until the transport pushes back, flow control or
//! staging runs out, or a gate closes. Transfers go part by part: RMA parts here, host-staged
//! chunks in [`super::staged`].

use pshmem_abi::error as code;
use pshmem_ring::Local;
use pshmem_transport::{LocalRef, PostError, RemoteRef};

use super::{
    Engine,
    accept::MAX_PART,
    ctx::{Ctx, FastOp, PartRef, SignalTag, SlabKey, TagData},
    tags::Tag,
    work::{Dir, Issued, OpRef, Part, Posted, Work, Xfer},
};
use crate::wire::{self, Request, RequestKind};

/// How a post went, once booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Post {
    /// Posted: the part is in flight.
    Done,
    /// Back-pressure: nothing was posted (the part is undone); try again later.
    Retry,
    /// Failed: the job is failing.
    Failed,
}

impl Post {
    /// What a post means for the work item that made it.
    fn issued(self) -> Issued {
        match self {
            Post::Done => Issued::All,
            Post::Retry | Post::Failed => Issued::Blocked,
        }
    }
}

impl Engine {
    /// Issues every active queue as far as it goes; returns the work items finished.
    pub(super) fn issue_all(&mut self) -> usize {
        let mut work = 0;
        for _ in 0..self.active.len() {
            let Some((r, pe)) = self.active.pop_front() else {
                break;
            };
            let before = self.rings[r as usize].queues[pe as usize].work.len();
            let issued = self.issue_queue(r, pe);
            let q = &mut self.rings[r as usize].queues[pe as usize];
            work += before - q.work.len();
            match issued {
                Issued::All => q.active = false,
                Issued::Blocked => self.active.push_back((r, pe)),
            }
            if self.failed {
                break;
            }
        }
        work
    }

    /// Issues the queue of (ring, PE) front first until it is empty or blocked.
    fn issue_queue(&mut self, r: u16, pe: u32) -> Issued {
        loop {
            let q = &mut self.rings[r as usize].queues[pe as usize];
            let drained = q.drained();
            let Some(front) = q.work.front_mut() else {
                return Issued::All;
            };
            let issued = match front {
                Work::Gate | Work::Hold if drained => Issued::All,
                Work::Gate => Issued::Blocked,
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
                    // Taken out while issued (the transport and the queues are both `self`).
                    let mut w = std::mem::replace(front, Work::Gate);
                    let issued = self.issue_one(r, pe, &mut w);
                    let q = &mut self.rings[r as usize].queues[pe as usize];
                    *q.work.front_mut().expect("the front is still queued") = w;
                    issued
                }
            };
            if issued == Issued::Blocked {
                return Issued::Blocked;
            }
            let q = &mut self.rings[r as usize].queues[pe as usize];
            let w = q.work.pop_front().expect("the front is still queued");
            self.finish_issuing(&w);
        }
    }

    /// Issues every held signal whose preceding parts all completed, oldest first per queue
    /// (ahead of the work queued after it, all of it later); one that cannot be issued yet
    /// stays held, and the queue's later signals wait behind it. Returns how many went.
    pub(super) fn release_held(&mut self) -> usize {
        let mut n = 0;
        let mut holding = std::mem::take(&mut self.holding);
        holding.retain(|&(r, pe)| {
            loop {
                let q = &mut self.rings[r as usize].queues[pe as usize];
                let Some((seq, mut w)) = q.release() else {
                    break;
                };
                if self.issue_one(r, pe, &mut w) == Issued::Blocked {
                    self.rings[r as usize].queues[pe as usize].unrelease(seq, w);
                    break;
                }
                self.finish_issuing(&w);
                n += 1;
            }
            !self.rings[r as usize].queues[pe as usize].held.is_empty()
        });
        // Parking during the issues above may have added queues.
        holding.append(&mut self.holding);
        self.holding = holding;
        n
    }

    /// A work item is fully issued: if it was its operation's last, the operation's issuing
    /// token is given back (a fast operation finishes with its one part instead).
    pub(super) fn finish_issuing(&mut self, w: &Work) {
        if let Some(OpRef::Slab(k)) = w.ends() {
            self.release(k);
        }
    }

    /// Drops one pending count of a tracked operation; finishes it at zero.
    pub(super) fn release(&mut self, op: SlabKey) {
        let Some(o) = self.ops.get_mut(op) else {
            return;
        };
        o.pending -= 1;
        if o.pending == 0 {
            let o = self.ops.remove(op).expect("the operation is live");
            self.finish_op(o.ring, o.seq);
        }
    }

    /// Issues as much of `w` as possible.
    pub(super) fn issue_one(&mut self, r: u16, pe: u32, w: &mut Work) -> Issued {
        match w {
            Work::Xfer(x) => self.issue_xfer(r, pe, x),
            Work::P {
                op,
                remote,
                value,
                width,
                tag,
            } => match self.landing {
                Some(_) => {
                    let mut req =
                        Request::new(*remote, *value, 0, RequestKind::Store { width: *width });
                    self.request(r, pe, *op, &mut req)
                }
                None => self.issue_p(r, pe, *op, (*remote, *value, *width), *tag),
            },
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
                let mut req = Request::new(*remote, *operand, *compare, kind);
                self.request(r, pe, *op, &mut req)
            }
            Work::Signal {
                op,
                remote,
                value,
                sop,
                tag,
                strong,
            } => {
                // A tagged signal is applied once the target counted every data write: its
                // put's parts, or the writes of its counted round or strong epoch (all
                // issued: they were ahead of it in this queue).
                let expect = match (*tag, *op) {
                    (Some(t), _) if t.shared => self.itags.written(pe, t.id),
                    (Some(_), OpRef::Slab(k)) => self.ops.get(k).map_or(0, |o| o.data_parts),
                    _ => 0,
                };
                // A strong signal's sequence number is taken only if the request goes out:
                // the target waits for every number in turn.
                let seq = if *strong { self.itags.peek_seq(pe) } else { 0 };
                let kind = RequestKind::Signal { op: *sop, expect };
                let mut req = Request::new(*remote, *value, 0, kind);
                req.tag = SignalTag {
                    tag: tag.map_or(0, |t| t.id),
                    seq,
                }
                .encode();
                let issued = self.request(r, pe, *op, &mut req);
                if issued == Issued::All {
                    if *strong {
                        self.itags.take_seq(pe);
                    }
                    if let Some(t) = tag {
                        self.itags.sent(pe, t.id, req.id);
                    }
                }
                issued
            }
            Work::Gate | Work::Hold => Issued::All,
        }
    }

    /// Issues a transfer part by part while flow control, staging and the transport allow.
    fn issue_xfer(&mut self, r: u16, pe: u32, x: &mut Xfer) -> Issued {
        while x.issued < x.len {
            if !self.room_for(pe) {
                return Issued::Blocked;
            }
            let step = match (self.landing.is_some(), x.dir) {
                (false, Dir::Put) => self.post_rma_write(r, pe, x),
                (false, Dir::Get) => self.post_rma_read(r, pe, x),
                (true, Dir::Put) => self.post_staged_put(r, pe, x),
                (true, Dir::Get) => self.post_staged_get(r, pe, x),
            };
            match step {
                Some(n) => {
                    x.issued += n;
                    if let Some(t) = x.tag
                        && t.shared
                    {
                        self.itags.wrote(pe, t.id);
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
    fn rma_local(&mut self, pe: u32, x: &Xfer) -> Option<(LocalRef, u64, Posted)> {
        let left = x.len - x.issued;
        match x.local {
            Local::Heap(off) => {
                let lref = LocalRef {
                    mr: self.region_mr,
                    offset: (off + x.issued) as usize,
                };
                Some((lref, left.min(MAX_PART), Posted::Rma))
            }
            Local::Raw(addr) => {
                let inline = x.dir == Dir::Put && left as usize <= self.staging.inject;
                let (off, part, posted) = if inline {
                    (self.staging.scratch, left, Posted::Rma)
                } else {
                    let ch = self.staging.free.pop()?;
                    let part = left.min(self.staging.chunk as u64);
                    let posted = match x.dir {
                        Dir::Put => Posted::FromChunk(ch),
                        Dir::Get => Posted::IntoChunk {
                            chunk: ch,
                            dst: addr + x.issued,
                            len: part as usize,
                        },
                    };
                    (self.staging.chunk_offset(ch), part, posted)
                };
                if x.dir == Dir::Put {
                    let at = self.staging.buf[off..].as_mut_ptr() as u64;
                    // SAFETY: the producer keeps raw sources valid until the operation
                    // completes (API contract); the staging range is ours and idle.
                    if let Err(e) = unsafe { self.copy_raw(at, addr + x.issued, part as usize) } {
                        self.free_posted(posted);
                        self.mem_fault(pe, e);
                        return None;
                    }
                }
                let lref = LocalRef {
                    mr: self.staging.mr,
                    offset: off,
                };
                Some((lref, part, posted))
            }
        }
    }

    /// Posts the next RMA write of `x`; returns the bytes posted.
    fn post_rma_write(&mut self, r: u16, pe: u32, x: &Xfer) -> Option<u64> {
        let (lref, n, posted) = self.rma_local(pe, x)?;
        let rref = RemoteRef {
            mr: self.remote[pe as usize],
            offset: x.remote + x.issued,
        };
        let part = self.new_part(x.op, pe, r, posted);
        let ctx = Ctx::Part(part).encode();
        // SAFETY: heap sources are registered and outlive the transport; staged sources stay
        // untouched until the part completes (the chunk is ours), or are copied at post
        // (inject size, scratch).
        let res = unsafe {
            match x.tag {
                Some(tag) => {
                    let data = TagData {
                        src: self.me,
                        tag: tag.id,
                    }
                    .encode(self.imm);
                    self.t
                        .write_data(pe as usize, lref, rref, n as usize, data, ctx)
                }
                None => self.t.write(pe as usize, lref, rref, n as usize, ctx),
            }
        };
        (self.posted(res, part, pe, "put") == Post::Done).then_some(n)
    }

    /// Posts the next RMA read of `x`; returns the bytes posted.
    fn post_rma_read(&mut self, r: u16, pe: u32, x: &Xfer) -> Option<u64> {
        let (lref, n, posted) = self.rma_local(pe, x)?;
        let rref = RemoteRef {
            mr: self.remote[pe as usize],
            offset: x.remote + x.issued,
        };
        let part = self.new_part(x.op, pe, r, posted);
        // SAFETY: the destination (heap, or our staging chunk) is registered and not touched
        // until the part completes.
        let res = unsafe {
            self.t.read(
                pe as usize,
                lref,
                rref,
                n as usize,
                Ctx::Part(part).encode(),
            )
        };
        (self.posted(res, part, pe, "get") == Post::Done).then_some(n)
    }

    /// An RMA `p`: the value from the scratch area (copied at post) or a chunk.
    fn issue_p(
        &mut self,
        r: u16,
        pe: u32,
        op: OpRef,
        (remote, value, width): (u64, u64, u8),
        tag: Option<Tag>,
    ) -> Issued {
        if !self.room_for(pe) {
            return Issued::Blocked;
        }
        let (off, posted) = if width as usize <= self.staging.inject {
            (self.staging.scratch, Posted::Rma)
        } else {
            let Some(ch) = self.staging.free.pop() else {
                return Issued::Blocked;
            };
            (self.staging.chunk_offset(ch), Posted::FromChunk(ch))
        };
        let part = self.new_part(op, pe, r, posted);
        let ctx = Ctx::Part(part).encode();
        let data = tag.map(|t| {
            TagData {
                src: self.me,
                tag: t.id,
            }
            .encode(self.imm)
        });
        let res = self.write_value(pe, off, (remote, value, width), data, ctx);
        let issued = self.posted(res, part, pe, "p").issued();
        if issued == Issued::All
            && let Some(t) = tag
        {
            self.itags.wrote(pe, t.id);
        }
        issued
    }

    /// Writes the low `width` bytes of `value` to `remote` on `pe`, from staging memory at
    /// `off` (the scratch area, copied at post, or a chunk the caller holds until completion;
    /// either holds at least 8 bytes), with remote CQ data `data` if given.
    #[inline]
    pub(super) fn write_value(
        &mut self,
        pe: u32,
        off: usize,
        (remote, value, width): (u64, u64, u8),
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.staging.buf[off..off + 8].copy_from_slice(&value.to_le_bytes());
        let lref = LocalRef {
            mr: self.staging.mr,
            offset: off,
        };
        let rref = RemoteRef {
            mr: self.remote[pe as usize],
            offset: remote,
        };
        // SAFETY: the value is in our staging memory: injected at post, or in a chunk held
        // until the write completes.
        unsafe {
            match data {
                Some(d) => self
                    .t
                    .write_data(pe as usize, lref, rref, width as usize, d, ctx),
                None => self.t.write(pe as usize, lref, rref, width as usize, ctx),
            }
        }
    }

    /// Sends a request whose ack completes a part of `op`.
    /// Fills in `req.id` (the caller may keep it: its ack carries it back).
    pub(super) fn request(&mut self, r: u16, pe: u32, op: OpRef, req: &mut Request) -> Issued {
        if !self.room_for(pe) {
            return Issued::Blocked;
        }
        let part = self.new_part(op, pe, r, Posted::Request);
        req.id = Ctx::Part(part).encode();
        let msg = wire::encode_request(self.me, req);
        let res = self.t.send(pe as usize, &msg, Ctx::Request(part).encode());
        self.posted(res, part, pe, "request").issued()
    }

    /// A new part of `op` to `pe` from ring `r`.
    pub(super) fn new_part(&mut self, op: OpRef, pe: u32, r: u16, posted: Posted) -> PartRef {
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
        res: Result<(), PostError>,
        part: PartRef,
        pe: u32,
        what: &str,
    ) -> Post {
        match res {
            Ok(()) => {
                let (ring, seq) = match part {
                    PartRef::Fast(f) => {
                        let rs = &self.rings[f.ring as usize];
                        // Needed only by a trace and by a queue holding signals.
                        let need = self.trace.is_some() || !rs.queues[pe as usize].held.is_empty();
                        (f.ring, need.then(|| rs.done.seq_from_low(f.seq_low)))
                    }
                    PartRef::Tracked(k) => {
                        let p = self.parts.get(k).expect("a posted part is live");
                        let (op, ring) = (p.op, p.ring);
                        let o = self.ops.get_mut(op);
                        let seq = o.map(|o| {
                            o.pending += 1;
                            o.seq
                        });
                        (ring, seq)
                    }
                };
                if let (Some(t), Some(seq)) = (&mut self.trace, seq) {
                    t.post(ring, seq, pe);
                }
                // A tracked part's operation is live while the part is (none: a bookkeeping
                // slip; 0 counts it before every held signal, which then waits for it).
                self.rings[ring as usize].queues[pe as usize].posted(|| seq.unwrap_or(0));
                self.inflight += 1;
                self.pe_inflight[pe as usize] += 1;
                Post::Done
            }
            Err(PostError::Retry) => {
                self.drop_part(part);
                Post::Retry
            }
            Err(PostError::Failed(e)) => {
                self.drop_part(part);
                let detail = format!("PE {}: posting a {what} to PE {pe} failed: {e}", self.me);
                self.fault_with(code::OP_FAILED, Some(pe as usize), detail, *e);
                Post::Failed
            }
        }
    }

    /// Removes a part that was never posted, giving back what it held.
    pub(super) fn drop_part(&mut self, part: PartRef) {
        if let PartRef::Tracked(k) = part
            && let Some(p) = self.parts.remove(k)
        {
            self.free_posted(p.posted);
        }
    }

    /// Gives back the staging chunk or landing slot a part held.
    pub(super) fn free_posted(&mut self, posted: Posted) {
        match posted {
            Posted::FromChunk(ch) | Posted::IntoChunk { chunk: ch, .. } => {
                self.staging.free.push(ch)
            }
            Posted::Landing { owner, slot } => self.free_landing(owner, slot),
            Posted::Rma | Posted::Request => {}
        }
    }
}
