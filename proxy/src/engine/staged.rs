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
//! `p`, AMOs and signals are requests applied by the target's proxy (stores by copy, AMOs and
//! signals by kernel), acked. Ordering: every operation finishes only when its effect is in the
//! target's GPU memory (the ack), so the engine runs this path in the gated signal mode:
//! put-with-signal and fence are gates on the (ring, PE) queue, correct on ordered and
//! unordered transports alike.

use std::collections::VecDeque;

use pshmem_abi::error as code;
use pshmem_ring::Local;
use pshmem_transport::{LocalRef, RemoteRef};

use super::{
    Engine,
    ctx::{Ctx, LandingData, PartRef},
    issue::Post,
    work::{Posted, Xfer},
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

/// The landing slots of the host-staged path.
pub(crate) struct Landing {
    slot: usize,
    per_group: u32,
    /// Free slots of this PE's group at each PE (at this PE itself: reply slots for gets).
    free: Vec<Vec<u32>>,
    /// Peers' get requests waiting for a staging chunk.
    waiting: VecDeque<(u32, Request)>,
    /// Copies under way (their tickets, in order) and what follows each.
    copying: VecDeque<(u64, AfterCopy)>,
}

/// What follows a copy of this path once the device finished it.
#[derive(Debug, Clone, Copy)]
enum AfterCopy {
    /// Write staging chunk `chunk` (`len` bytes, header included) into slot `slot` of group
    /// `group` at `pe`, with remote data naming the slot.
    Write {
        pe: u32,
        chunk: u32,
        group: u32,
        slot: u32,
        len: usize,
    },
    /// A peer's put chunk or `p` is in the heap: ack it.
    Ack { to: u32, id: u64 },
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
            free: (0..n)
                .map(|_| (0..per_group as u32).rev().collect())
                .collect(),
            waiting: VecDeque::new(),
            copying: VecDeque::new(),
        })
    }

    fn offset(&self, group: u32, slot: u32) -> usize {
        (group as usize * self.per_group as usize + slot as usize) * self.slot
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

impl Engine {
    fn ld(&mut self) -> &mut Landing {
        self.landing.as_mut().expect("the host-staged path")
    }

    /// The device or host address of a descriptor's local side.
    fn staged_addr(&self, l: Local) -> u64 {
        match l {
            Local::Heap(off) => self.device.as_ref().map_or(0, |d| d.base) + off,
            Local::Raw(a) => a,
        }
    }

    /// Starts filling staging chunk `ch` with a header and `n` bytes from `src` (device or
    /// host); returns the copy's ticket.
    fn fill_chunk(&mut self, ch: u32, h: [u8; HDR], src: u64, n: usize) -> Result<u64, MemError> {
        let at = self.staging.chunk_ptr(ch);
        // SAFETY: the chunk is ours (taken from the free list) and holds `staging.chunk` >=
        // HDR + n bytes.
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), at, HDR) };
        // SAFETY: as above, and the chunk stays ours until its write completes; the source is
        // valid for `n` bytes until the operation finishes (the producer's contract, or inside
        // this PE's heap).
        unsafe { self.copy_start(at as u64 + HDR as u64, src, n) }
    }

    /// Starts a copy of this path: on the device's stream, or at once without a device
    /// (ticket 0, always finished).
    ///
    /// # Safety
    /// As [`crate::DeviceMem::copy_start`].
    unsafe fn copy_start(&mut self, dst: u64, src: u64, n: usize) -> Result<u64, MemError> {
        let at = self.clock();
        let r = match self.device.as_mut() {
            // SAFETY: forwarded.
            Some(d) => unsafe { d.copy_start(dst, src, n) },
            None => {
                // SAFETY: forwarded; staging memory is the proxy's own, distinct from `src`.
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n) };
                Ok(0)
            }
        };
        self.charge_since(Cost::CopyStart, at);
        r
    }

    /// Runs what follows every finished copy, in copy order, while the transport takes the
    /// writes; returns how many ran.
    pub(super) fn flush_copies(&mut self) -> usize {
        if self.landing.as_ref().is_none_or(|l| l.copying.is_empty()) {
            return 0;
        }
        let at = self.clock();
        let done = self.device.as_mut().map(|d| d.copies_done());
        self.charge_since(Cost::CopyDone, at);
        let done = match done {
            None => u64::MAX,
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                let me = self.me;
                self.mem_fault(me, e);
                return 0;
            }
        };
        let mut ran = 0;
        while let Some(&(ticket, after)) = self.ld().copying.front() {
            if ticket > done {
                break;
            }
            match after {
                AfterCopy::Write {
                    pe,
                    chunk,
                    group,
                    slot,
                    len,
                } => match self.write_chunk(pe, chunk, group, slot, len) {
                    Ok(()) => {}
                    // The transport is full: the rest waits for the next turn, in order.
                    Err(pshmem_transport::PostError::Retry) => break,
                    Err(pshmem_transport::PostError::Failed(e)) => {
                        self.staging.free.push(chunk);
                        let detail =
                            format!("PE {}: a staged write to PE {pe} failed: {e}", self.me);
                        self.fault_with(code::OP_FAILED, Some(pe as usize), detail, *e);
                        return ran;
                    }
                },
                AfterCopy::Ack { to, id } => self.ack(to, id, Ok(0)),
                AfterCopy::Reply { part } => self.part_done(part, None),
            }
            self.ld().copying.pop_front();
            ran += 1;
        }
        ran
    }

    /// Writes staging chunk `chunk` into slot `slot` of group `group` at `pe`.
    fn write_chunk(
        &mut self,
        pe: u32,
        chunk: u32,
        group: u32,
        slot: u32,
        len: usize,
    ) -> Result<(), pshmem_transport::PostError> {
        let lref = LocalRef {
            mr: self.staging.mr,
            offset: self.staging.chunk_offset(chunk),
        };
        let rref = RemoteRef {
            mr: self.remote[pe as usize],
            offset: self.ld().offset(group, slot) as u64,
        };
        let data = LandingData { group, slot }.encode();
        let ctx = Ctx::Staged { pe, chunk }.encode();
        let at = self.clock();
        // SAFETY: the chunk stays untouched until the write completes (its completion returns
        // it to the free list).
        let res = unsafe { self.t.write_data(pe as usize, lref, rref, len, data, ctx) };
        self.charge_since(Cost::Post, at);
        res
    }

    /// Posts the next chunk of a staged put into a free landing slot at `pe`; returns its
    /// payload bytes, or `None` when blocked (no slot, no chunk, back-pressure, failure).
    pub(super) fn post_staged_put(&mut self, r: u16, pe: u32, x: &Xfer) -> Option<u64> {
        let ld = self.ld();
        let room = ld.slot - HDR;
        let slot = ld.free[pe as usize].pop()?;
        let n = (x.len - x.issued).min(room.min(self.staging.chunk - HDR) as u64);
        let Some(ch) = self.staging.free.pop() else {
            self.free_landing(pe, slot);
            return None;
        };
        let part = self.new_part(x.op, pe, r, Posted::Landing { owner: pe, slot });
        let h = header(Ctx::Part(part).encode(), x.remote + x.issued, n, KIND_PUT);
        let src = self.staged_addr(x.local) + x.issued;
        let ticket = match self.fill_chunk(ch, h, src, n as usize) {
            Ok(t) => t,
            Err(e) => {
                self.staging.free.push(ch);
                self.drop_part(part);
                self.mem_fault(pe, e);
                return None;
            }
        };
        // The part (the target's ack) is in flight from now on; its write follows the copy.
        self.posted(Ok(()), part, pe, "staged put");
        let (group, len) = (self.me, HDR + n as usize);
        self.ld().copying.push_back((
            ticket,
            AfterCopy::Write {
                pe,
                chunk: ch,
                group,
                slot,
                len,
            },
        ));
        Some(n)
    }

    /// Asks `pe` for the next chunk of a staged get, into a free slot of this PE's group;
    /// returns its bytes, or `None` when blocked.
    pub(super) fn post_staged_get(&mut self, r: u16, pe: u32, x: &Xfer) -> Option<u64> {
        let me = self.me;
        let ld = self.ld();
        let n = (x.len - x.issued).min((ld.slot - HDR) as u64);
        let slot = ld.free[me as usize].pop()?;
        let part = self.new_part(x.op, pe, r, Posted::Landing { owner: me, slot });
        let dst = self.staged_addr(x.local) + x.issued;
        let mut req = Request::new(x.remote + x.issued, n, dst, RequestKind::GetData { slot });
        req.id = Ctx::Part(part).encode();
        let msg = crate::wire::encode_request(me, &req);
        let res = self.t.send(pe as usize, &msg, Ctx::Request(part).encode());
        (self.posted(res, part, pe, "staged get") == Post::Done).then_some(n)
    }

    /// A peer's staged store or get request against this PE's GPU heap.
    pub(super) fn serve_staged(&mut self, src: u32, req: Request) {
        let r = match req.kind {
            RequestKind::Store { width } => {
                let dev = self.device.as_mut().expect("a GPU heap");
                match dev.store_start(req.offset, req.operand, width) {
                    // Acked once the stream made the store, like a landed chunk: the thread
                    // never waits for the GPU here.
                    Ok(Some(ticket)) => {
                        let ack = AfterCopy::Ack {
                            to: src,
                            id: req.id,
                        };
                        self.ld().copying.push_back((ticket, ack));
                        return;
                    }
                    Ok(None) => self.store(req.offset, req.operand, width).map(|()| 0),
                    Err(e) => Err(e),
                }
            }
            RequestKind::GetData { .. } => {
                let dev = self.device.as_ref().expect("a GPU heap");
                match dev.check(req.offset, req.operand) {
                    Ok(_) => {
                        self.ld().waiting.push_back((src, req));
                        self.serve_waiting();
                        return;
                    }
                    Err(e) => Err(e),
                }
            }
            _ => unreachable!("served by the common path"),
        };
        self.ack(src, req.id, r);
    }

    /// Starts the replies of waiting get requests while staging chunks last.
    pub(super) fn serve_waiting(&mut self) -> usize {
        let mut served = 0;
        while let Some(&(src, req)) = self.ld().waiting.front() {
            let RequestKind::GetData { slot } = req.kind else {
                self.ld().waiting.pop_front();
                continue;
            };
            let Some(ch) = self.staging.free.pop() else {
                break;
            };
            let n = req.operand as usize;
            let h = header(req.id, req.compare, req.operand, KIND_REPLY);
            // The source is inside the heap (checked when queued); the initiator sized `n` to
            // its slot, and every PE uses the same slot and chunk sizes.
            let from = self.staged_addr(Local::Heap(req.offset));
            let ticket = match self.fill_chunk(ch, h, from, n) {
                Ok(t) => t,
                Err(e) => {
                    self.staging.free.push(ch);
                    self.mem_fault(src, e);
                    return served;
                }
            };
            let ld = self.ld();
            ld.waiting.pop_front();
            ld.copying.push_back((
                ticket,
                AfterCopy::Write {
                    pe: src,
                    chunk: ch,
                    group: src,
                    slot,
                    len: HDR + n,
                },
            ));
            served += 1;
        }
        served
    }

    /// A staged write landed here: a put's chunk (copy to the GPU heap, ack) or a get's reply
    /// (copy to the destination, finish the part).
    pub(super) fn landed(&mut self, data: u64) {
        let LandingData { group, slot } = LandingData::decode(data);
        let Some(SlotHeader {
            id,
            addr,
            len,
            kind,
            payload,
        }) = self.read_slot(group, slot, data)
        else {
            return;
        };
        match kind {
            KIND_PUT => {
                let dev = self.device.as_ref().expect("a GPU heap");
                // SAFETY: the destination is inside the GPU heap (checked); the payload is in
                // the landing slot, which the initiator does not reuse before our ack (sent
                // when the copy finished).
                let r = dev
                    .check(addr, len)
                    .and_then(|dst| unsafe { self.copy_start(dst, payload, len as usize) });
                match r {
                    Ok(ticket) => self
                        .ld()
                        .copying
                        .push_back((ticket, AfterCopy::Ack { to: group, id })),
                    Err(e) => self.ack(group, id, Err(e)),
                }
            }
            KIND_REPLY => {
                let Some(Ctx::Part(part)) = Ctx::decode(id) else {
                    self.fault(
                        code::OP_FAILED,
                        Some(group as usize),
                        format!("PE {}: a staged reply with a foreign id {id:#x}", self.me),
                    );
                    return;
                };
                // SAFETY: the destination is the initiator's own (its producer keeps it valid
                // until the operation completes); the payload is in our own slot, which stays
                // the part's until it is done (after the copy).
                match unsafe { self.copy_start(addr, payload, len as usize) } {
                    Ok(ticket) => self
                        .ld()
                        .copying
                        .push_back((ticket, AfterCopy::Reply { part })),
                    Err(e) => self.mem_fault(group, e),
                }
            }
            kind => self.fault(
                code::OP_FAILED,
                Some(group as usize),
                format!("PE {}: a staged write of unknown kind {kind}", self.me),
            ),
        }
    }

    /// The header of a landed slot, or `None` after faulting on a bad slot or length.
    fn read_slot(&mut self, group: u32, slot: u32, data: u64) -> Option<SlotHeader> {
        let n = self.n;
        let ld = self.ld();
        let (off, per_group, payload_max) = (ld.offset(group, slot), ld.per_group, ld.slot - HDR);
        let mut h = [0u8; HDR];
        if group as usize >= n
            || slot >= per_group
            // SAFETY: `h` is a live buffer of HDR bytes; the range is checked by the call.
            || unsafe { self.region.read_to_raw(off as u64, h.as_mut_ptr(), HDR) }.is_err()
        {
            self.fault(
                code::OP_FAILED,
                Some(group as usize),
                format!("PE {}: a staged write into a bad slot ({data:#x})", self.me),
            );
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(h[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (id, addr, len, kind) = (w(0), w(1), w(2), w(3));
        if len as usize > payload_max {
            self.fault(
                code::OP_FAILED,
                Some(group as usize),
                format!(
                    "PE {}: a staged write of {len} bytes overflows its slot",
                    self.me
                ),
            );
            return None;
        }
        Some(SlotHeader {
            id,
            addr,
            len,
            kind,
            payload: self.region.base() as u64 + (off + HDR) as u64,
        })
    }

    /// A finished part's landing slot returns to its free list.
    pub(super) fn free_landing(&mut self, owner: u32, slot: u32) {
        self.ld().free[owner as usize].push(slot);
    }

    /// Whether staged work is still pending (waiting get requests, copies under way).
    pub(super) fn staged_busy(&self) -> bool {
        self.landing
            .as_ref()
            .is_some_and(|l| !l.waiting.is_empty() || !l.copying.is_empty())
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
