//! The host-staged path: a GPU heap reached over a transport that cannot register GPU memory
//! (tcp, shm, or any provider without FI_HMEM). Every byte goes through pinned host memory, and
//! every effect on a GPU heap is made by the proxy of the GPU's own PE, with CUDA copies and
//! (for AMOs) a one-thread kernel — the CPU never touches GPU memory itself.
//!
//! Memory: the PE's registered "heap" is a pinned **landing area** of `n_pes` groups of
//! `per_group` slots of `slot` bytes. Group g at every PE belongs to initiator g: PE g alone
//! writes its group's slots at its targets (puts), and receives replies in its own group at
//! home (gets), so the initiator always knows which of its slots are free — credits without
//! messages.
//!
//! A put, per chunk of at most `slot - HDR` bytes: take a free slot at the target and a staging
//! chunk; copy the source (device or host address) into the chunk after a header
//! {ack id, destination offset, length, kind}; post one write-with-remote-data into the slot.
//! The target's proxy sees the remote data (initiator, slot), copies the payload into its GPU
//! heap and acks; the ack finishes the chunk and frees the slot. Copies of the next chunks
//! overlap the transfers of the earlier ones (up to `per_group` chunks in flight per target).
//!
//! A get, per chunk: take a free slot of the own group and send a `GetData` request; the target
//! copies from its GPU heap into a staging chunk and writes it into that slot with remote data;
//! the initiator copies the payload to the destination and finishes the chunk.
//!
//! Copies never block the thread: each starts on the device's stream and what follows it (the
//! write of a filled chunk, the ack of a landed one, the end of a get) waits in `copying`, in
//! copy order, until the device reports it finished — so the transport keeps progressing while
//! the GPU copies, and the copies of the next chunks overlap the writes of the earlier ones.
//!
//! The state is split by owner: the geometry in the [`Link`] (every PE's areas are laid out
//! alike), the free slots of this PE's group at each target in the initiator's peers, the
//! waiting gets in the [`Target`], and the copies under way in [`super::home::Home`], whose
//! results the engine hands to whichever side they belong ([`Engine::flush_copies`]).
//!
//! `p`, AMOs and signals are requests applied by the target's proxy (stores by copy, AMOs and
//! signals by kernel), acked. Ordering: every operation finishes only when its effect is in the
//! target's GPU memory (the ack), so the engine runs this path in the gated signal mode:
//! put-with-signal and fence are gates on the (ring, PE) queue, correct on ordered and
//! unordered transports alike.

use pshmem_abi::error as code;
use pshmem_ring::Local;
use pshmem_transport::{Pe, PostError};

use super::{
    Engine,
    ctx::{Ctx, LandingData, PartRef, RingId},
    home::Home,
    initiator::Initiator,
    io::{Io, Tracer},
    target::Target,
    work::{Post, Posted, Staging, Xfer},
};
use crate::{
    mem::MemError,
    trace::Cost,
    wire::{Request, RequestKind},
};

/// Bytes of a landing slot's header: ack id, address (destination offset or address), length,
/// kind. A landing slot (and a staging chunk on this path) is `PSHMEM_STAGING_CHUNK` + HDR bytes.
pub const HDR: usize = 32;

const KIND_PUT: u64 = 1;
const KIND_REPLY: u64 = 2;

/// The geometry of a landing area, the same at every PE: `n` groups of `per_group` slots of
/// `slot` bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Landing {
    pub slot: usize,
    pub per_group: u32,
}

/// What follows a copy of this path once the device finished it.
#[derive(Debug, Clone, Copy)]
pub(super) enum AfterCopy {
    /// Write staging chunk `chunk` (`len` bytes, header included) into slot `slot` of group
    /// `group` at `pe`, with remote data naming the slot.
    Write {
        pe: Pe,
        chunk: u32,
        group: Pe,
        slot: u32,
        len: usize,
    },
    /// A peer's put chunk or `p` is in the heap: ack it.
    Ack { to: Pe, id: u64 },
    /// A get's reply is at its destination: its part is done.
    Reply { part: PartRef },
}

impl Landing {
    /// `n` groups of `slot`-byte slots in a landing area of `bytes`.
    pub(super) fn new(bytes: usize, slot: usize, n: usize) -> Result<Self, String> {
        let per_group = bytes / slot.max(1) / n.max(1);
        if slot <= HDR || per_group == 0 {
            return Err(format!(
                "a landing area of {bytes} bytes cannot hold {n} groups of {slot}-byte slots"
            ));
        }
        Ok(Self {
            slot,
            per_group: per_group.min(u32::MAX as usize) as u32,
        })
    }

    /// Where slot `slot` of group `group` is in a landing area.
    pub(super) fn offset(&self, group: Pe, slot: u32) -> usize {
        (group.idx() * self.per_group as usize + slot as usize) * self.slot
    }
}

/// A slot header: ack id, address, length, kind.
fn header(id: u64, addr: u64, len: u64, kind: u64) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    for (i, w) in [id, addr, len, kind].into_iter().enumerate() {
        h[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    h
}

impl Home {
    /// Starts filling staging chunk `ch` with a header and `n` bytes from `src` (device or
    /// host); returns the copy's ticket.
    fn fill_chunk(
        &mut self,
        (st, tracer): (&mut Staging, &mut Tracer),
        ch: u32,
        h: [u8; HDR],
        (src, n): (u64, usize),
    ) -> Result<u64, MemError> {
        let at = st.chunk_ptr(ch);
        // SAFETY: the chunk is ours (taken from the free list) and holds `staging.chunk` >=
        // HDR + n bytes.
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), at, HDR) };
        // SAFETY: as above, and the chunk stays ours until its write completes; the source is
        // valid for `n` bytes until the operation finishes (the producer's contract, or inside
        // this PE's heap).
        unsafe { self.copy_start(tracer, at as u64 + HDR as u64, src, n) }
    }

    /// The header of slot `slot` of group `group` in this PE's landing area, and where its
    /// payload is; or why not (a bad slot or length: the caller fails the job).
    fn read_slot(
        &self,
        l: &Landing,
        n: usize,
        (group, slot): (Pe, u32),
    ) -> Result<SlotHeader, &'static str> {
        let off = l.offset(group, slot);
        let mut h = [0u8; HDR];
        if group.idx() >= n
            || slot >= l.per_group
            // SAFETY: `h` is a live buffer of HDR bytes; the range is checked by the call.
            || unsafe { self.region.read_to_raw(off as u64, h.as_mut_ptr(), HDR) }.is_err()
        {
            return Err("into a bad slot");
        }
        let w = |i: usize| u64::from_le_bytes(h[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (id, addr, len, kind) = (w(0), w(1), w(2), w(3));
        if len as usize > l.slot - HDR {
            return Err("that overflows its slot");
        }
        Ok(SlotHeader {
            id,
            addr,
            len,
            kind,
            payload: self.region.base() as u64 + (off + HDR) as u64,
        })
    }
}

impl Initiator {
    /// Posts the next chunk of a staged put into a free landing slot at `pe`; returns its
    /// payload bytes, or `None` when blocked (no slot, no chunk, back-pressure, failure).
    pub(super) fn post_staged_put(
        &mut self,
        io: &mut Io<'_>,
        r: RingId,
        pe: Pe,
        x: &Xfer,
    ) -> Option<u64> {
        let room = io.link.landing.as_ref().expect("the host-staged path").slot - HDR;
        let slot = self.peers[pe].slots.pop()?;
        let n = (x.len - x.issued).min(room.min(io.staging.chunk - HDR) as u64);
        let Some(ch) = io.staging.free.pop() else {
            self.peers[pe].slots.push(slot);
            return None;
        };
        let part = self.new_part(x.op, pe, r, Posted::Landing { owner: pe, slot });
        let h = header(Ctx::Part(part).encode(), x.remote + x.issued, n, KIND_PUT);
        let src = io.home.staged_addr(x.local) + x.issued;
        let ticket = match io
            .home
            .fill_chunk((io.staging, io.tracer), ch, h, (src, n as usize))
        {
            Ok(t) => t,
            Err(e) => {
                io.staging.free.push(ch);
                self.drop_part(io.staging, part);
                io.faults.mem(pe, e);
                return None;
            }
        };
        // The part (the target's ack) is in flight from now on; its write follows the copy.
        self.posted(io, Ok(()), (part, pe), "staged put");
        let write = AfterCopy::Write {
            pe,
            chunk: ch,
            group: self.me,
            slot,
            len: HDR + n as usize,
        };
        io.home.copying.push_back((ticket, write));
        Some(n)
    }

    /// Asks `pe` for the next chunk of a staged get, into a free slot of this PE's group;
    /// returns its bytes, or `None` when blocked.
    pub(super) fn post_staged_get(
        &mut self,
        io: &mut Io<'_>,
        r: RingId,
        pe: Pe,
        x: &Xfer,
    ) -> Option<u64> {
        let me = self.me;
        let room = io.link.landing.as_ref().expect("the host-staged path").slot - HDR;
        let n = (x.len - x.issued).min(room as u64);
        let slot = self.peers[me].slots.pop()?;
        let part = self.new_part(x.op, pe, r, Posted::Landing { owner: me, slot });
        let dst = io.home.staged_addr(x.local) + x.issued;
        let mut req = Request::new(x.remote + x.issued, n, dst, RequestKind::GetData { slot });
        req.id = Ctx::Part(part).encode();
        let msg = crate::wire::encode_request(me, &req);
        let res = io.link.t.send(pe, &msg, Ctx::Request(part).encode());
        (self.posted(io, res, (part, pe), "staged get") == Post::Done).then_some(n)
    }
}

impl Target {
    /// A peer's staged store or get request against this PE's GPU heap.
    pub(super) fn serve_staged(&mut self, io: &mut Io<'_>, src: Pe, req: Request) {
        let r = match req.kind {
            RequestKind::Store { width } => {
                let dev = io.home.device.as_mut().expect("a GPU heap");
                match dev.store_start(req.offset, req.operand, width) {
                    // Acked once the stream made the store, like a landed chunk: the thread
                    // never waits for the GPU here.
                    Ok(Some(ticket)) => {
                        let ack = AfterCopy::Ack {
                            to: src,
                            id: req.id,
                        };
                        io.home.copying.push_back((ticket, ack));
                        return;
                    }
                    Ok(None) => io.home.store(req.offset, req.operand, width).map(|()| 0),
                    Err(e) => Err(e),
                }
            }
            RequestKind::GetData { .. } => {
                let dev = io.home.device.as_ref().expect("a GPU heap");
                match dev.check(req.offset, req.operand) {
                    Ok(_) => {
                        self.waiting.push_back((src, req));
                        self.serve_waiting(io);
                        return;
                    }
                    Err(e) => Err(e),
                }
            }
            _ => unreachable!("served by the common path"),
        };
        self.ack(io, src, req.id, r);
    }

    /// Starts the replies of waiting get requests while staging chunks last.
    pub(super) fn serve_waiting(&mut self, io: &mut Io<'_>) -> usize {
        let mut served = 0;
        while let Some(&(src, req)) = self.waiting.front() {
            let RequestKind::GetData { slot } = req.kind else {
                self.waiting.pop_front();
                continue;
            };
            let Some(ch) = io.staging.free.pop() else {
                break;
            };
            let n = req.operand as usize;
            let h = header(req.id, req.compare, req.operand, KIND_REPLY);
            // The source is inside the heap (checked when queued); the initiator sized `n` to
            // its slot, and every PE uses the same slot and chunk sizes.
            let from = io.home.staged_addr(Local::Heap(req.offset));
            let ticket = match io
                .home
                .fill_chunk((io.staging, io.tracer), ch, h, (from, n))
            {
                Ok(t) => t,
                Err(e) => {
                    io.staging.free.push(ch);
                    io.faults.mem(src, e);
                    return served;
                }
            };
            self.waiting.pop_front();
            let write = AfterCopy::Write {
                pe: src,
                chunk: ch,
                group: src,
                slot,
                len: HDR + n,
            };
            io.home.copying.push_back((ticket, write));
            served += 1;
        }
        served
    }
}

impl Engine {
    /// Runs what follows every finished copy, in copy order, while the transport takes the
    /// writes; returns how many ran.
    pub(super) fn flush_copies(&mut self) -> usize {
        if self.home.copying.is_empty() {
            return 0;
        }
        let at = self.tracer.clock();
        let done = self.home.device.as_mut().map(|d| d.copies_done());
        self.tracer.charge_since(Cost::CopyDone, at);
        let done = match done {
            None => u64::MAX,
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                self.faults.mem(self.link.me, e);
                return 0;
            }
        };
        let mut ran = 0;
        while let Some(&(ticket, after)) = self.home.copying.front() {
            if ticket > done {
                break;
            }
            let (init, target, mut io) = self.split();
            match after {
                AfterCopy::Write {
                    pe,
                    chunk,
                    group,
                    slot,
                    len,
                } => match io
                    .link
                    .write_chunk(io.staging, io.tracer, (pe, chunk, group, slot, len))
                {
                    Ok(()) => io.staging.wrote(chunk),
                    // The transport is full: the rest waits for the next turn, in order.
                    Err(PostError::Retry) => break,
                    Err(PostError::Failed(e)) => {
                        io.staging.free.push(chunk);
                        let detail =
                            format!("PE {}: a staged write to PE {pe} failed: {e}", io.link.me);
                        io.faults.raise_with(code::OP_FAILED, Some(pe), detail, *e);
                        return ran;
                    }
                },
                AfterCopy::Ack { to, id } => target.ack(&mut io, to, id, Ok(0)),
                AfterCopy::Reply { part } => init.part_done(&mut io, part, None),
            }
            self.home.copying.pop_front();
            ran += 1;
        }
        ran
    }

    /// A staged write landed here: a put's chunk (copy to the GPU heap, ack) or a get's reply
    /// (copy to the destination, finish the part).
    pub(super) fn landed(&mut self, data: u64) {
        let LandingData { group, slot } = LandingData::decode(data);
        let me = self.link.me;
        let l = *self.link.landing.as_ref().expect("the host-staged path");
        let h = match self.home.read_slot(&l, self.link.n, (group, slot)) {
            Ok(h) => h,
            Err(why) => {
                let detail = format!("PE {me}: a staged write {why} ({data:#x})");
                return self.faults.raise(code::OP_FAILED, Some(group), detail);
            }
        };
        let (id, len, payload) = (h.id, h.len, h.payload);
        match h.kind {
            KIND_PUT => {
                let home = &mut self.home;
                let dev = home.device.as_ref().expect("a GPU heap");
                // SAFETY: the destination is inside the GPU heap (checked); the payload is in
                // the landing slot, which the initiator does not reuse before our ack (sent
                // when the copy finished).
                let r = dev.check(h.addr, len).and_then(|dst| unsafe {
                    home.copy_start(&mut self.tracer, dst, payload, len as usize)
                });
                match r {
                    Ok(ticket) => home
                        .copying
                        .push_back((ticket, AfterCopy::Ack { to: group, id })),
                    Err(e) => {
                        let (_, target, mut io) = self.split();
                        target.ack(&mut io, group, id, Err(e));
                    }
                }
            }
            KIND_REPLY => {
                let Some(Ctx::Part(part)) = Ctx::decode(id) else {
                    let detail = format!("PE {me}: a staged reply with a foreign id {id:#x}");
                    return self.faults.raise(code::OP_FAILED, Some(group), detail);
                };
                // SAFETY: the destination is the initiator's own (its producer keeps it valid
                // until the operation completes); the payload is in our own slot, which stays
                // the part's until it is done (after the copy).
                match unsafe {
                    self.home
                        .copy_start(&mut self.tracer, h.addr, payload, len as usize)
                } {
                    Ok(ticket) => self
                        .home
                        .copying
                        .push_back((ticket, AfterCopy::Reply { part })),
                    Err(e) => self.faults.mem(group, e),
                }
            }
            kind => {
                let detail = format!("PE {me}: a staged write of unknown kind {kind}");
                self.faults.raise(code::OP_FAILED, Some(group), detail);
            }
        }
    }
}

/// A landed slot's header, and where its payload is.
struct SlotHeader {
    /// The ack id (puts) or the part's id (replies).
    id: u64,
    /// Destination: a heap offset (puts) or an address (replies).
    addr: u64,
    len: u64,
    kind: u64,
    /// Address of the payload in the landing slot.
    payload: u64,
}
