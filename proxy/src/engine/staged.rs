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
    ctx::{Ctx, LandingData},
    issue::Post,
    work::{Posted, Xfer},
};
use crate::{
    mem::MemError,
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
    /// Peers' get requests waiting for a staging chunk or for transport room.
    waiting: VecDeque<(u32, Request)>,
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

    /// Fills staging chunk `ch` with a header and `n` bytes from `src` (device or host).
    fn fill_chunk(&mut self, ch: u32, h: [u8; HDR], src: u64, n: usize) -> Result<(), MemError> {
        let at = self.staging.chunk_ptr(ch);
        // SAFETY: the chunk is ours (taken from the free list) and holds `staging.chunk` >=
        // HDR + n bytes.
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), at, HDR) };
        // SAFETY: as above; the source is valid for `n` bytes (the producer's contract, or
        // inside this PE's heap).
        unsafe { self.copy_raw(at as u64 + HDR as u64, src, n) }
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
        if let Err(e) = self.fill_chunk(ch, h, src, n as usize) {
            self.staging.free.push(ch);
            self.drop_part(part);
            self.mem_fault(pe, e);
            return None;
        }
        let lref = LocalRef {
            mr: self.staging.mr,
            offset: self.staging.chunk_offset(ch),
        };
        let me = self.me;
        let rref = RemoteRef {
            mr: self.remote[pe as usize],
            offset: self.ld().offset(me, slot) as u64,
        };
        let data = LandingData { group: me, slot }.encode();
        let ctx = Ctx::Staged { pe, chunk: ch }.encode();
        // SAFETY: the chunk stays untouched until the write completes (its completion returns
        // it to the free list).
        let res = unsafe {
            self.t
                .write_data(pe as usize, lref, rref, HDR + n as usize, data, ctx)
        };
        if res.is_err() {
            self.staging.free.push(ch);
        }
        // The part (the target's ack) is in flight from now on.
        (self.posted(res, part, pe, "staged put") == Post::Done).then_some(n)
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
            RequestKind::Store { width } => self.store(req.offset, req.operand, width).map(|()| 0),
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

    /// Serves waiting get requests while staging chunks and the transport allow.
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
            if let Err(e) = self.fill_chunk(ch, h, from, n) {
                self.staging.free.push(ch);
                self.mem_fault(src, e);
                return served;
            }
            let lref = LocalRef {
                mr: self.staging.mr,
                offset: self.staging.chunk_offset(ch),
            };
            let rref = RemoteRef {
                mr: self.remote[src as usize],
                offset: self.ld().offset(src, slot) as u64,
            };
            let data = LandingData { group: src, slot }.encode();
            let ctx = Ctx::Staged { pe: src, chunk: ch }.encode();
            // SAFETY: the chunk stays untouched until the write completes.
            let res = unsafe {
                self.t
                    .write_data(src as usize, lref, rref, HDR + n, data, ctx)
            };
            match res {
                Ok(()) => {
                    self.ld().waiting.pop_front();
                    served += 1;
                }
                Err(pshmem_transport::PostError::Retry) => {
                    self.staging.free.push(ch);
                    break;
                }
                Err(pshmem_transport::PostError::Failed(e)) => {
                    self.staging.free.push(ch);
                    let detail = format!("PE {}: replying to a get of PE {src}: {e}", self.me);
                    self.fault_with(code::OP_FAILED, Some(src as usize), detail, *e);
                    return served;
                }
            }
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
                let dev = self.device.as_mut().expect("a GPU heap");
                // SAFETY: the destination is inside the GPU heap (checked); the payload is in
                // the landing slot, which the initiator does not reuse before our ack.
                let r = dev
                    .check(addr, len)
                    .and_then(|dst| unsafe { dev.copy(dst, payload, len as usize) });
                self.ack(group, id, r.map(|()| 0));
            }
            KIND_REPLY => {
                // SAFETY: the destination is the initiator's own (its producer keeps it valid
                // until the operation completes); the payload is in our own slot.
                if let Err(e) = unsafe { self.copy_raw(addr, payload, len as usize) } {
                    self.mem_fault(group, e);
                    return;
                }
                match Ctx::decode(id) {
                    Some(Ctx::Part(p)) => self.part_done(p, None),
                    _ => self.fault(
                        code::OP_FAILED,
                        Some(group as usize),
                        format!("PE {}: a staged reply with a foreign id {id:#x}", self.me),
                    ),
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

    /// Whether staged work is still pending (waiting get requests).
    pub(super) fn staged_busy(&self) -> bool {
        self.landing.as_ref().is_some_and(|l| !l.waiting.is_empty())
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
