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
//! target's GPU memory (the ack), so put-with-signal and fence are gates on the (channel, PE)
//! queue: the signal is requested only after every data chunk was acked, and work after a fence
//! waits for everything before it. This is correct on ordered and unordered transports alike.

use std::collections::VecDeque;

use pshmem_gpu_queue::{AmoOp, Desc, Local, layout::error as code};
use pshmem_transport::{LocalRef, PostError, RemoteRef};

use super::{Engine, OpRef, Part, SEND, Work};
use crate::{
    DeviceMem,
    mem::MemError,
    wire::{Request, RequestKind},
};

/// Bytes of a landing slot's header: ack id, address (destination offset or address), length,
/// kind. A landing slot (and a staging chunk on this path) is `PSHMEM_STAGING_CHUNK` + HDR bytes.
pub const HDR: usize = 32;
/// Marks the context of a staged write: its completion frees the staging chunk in the low 32
/// bits; bits 32..52 name the target PE (for errors).
pub(super) const STAGE_CTX: u64 = SEND | 1 << 60;
/// Whether a completion context is a staged write's (never a fast part's, whose channel bits
/// may overlap bit 60).
pub(super) fn is_stage_ctx(ctx: u64) -> bool {
    ctx & STAGE_CTX == STAGE_CTX && ctx & super::FAST == 0
}

const KIND_PUT: u64 = 1;
const KIND_REPLY: u64 = 2;

/// The GPU heap of a proxy's PE, and the host-staged path's state when the heap is not
/// registered with the transport.
pub(crate) struct Staged {
    dev: Box<dyn DeviceMem>,
    /// Device address and length of this PE's GPU heap.
    base: u64,
    len: u64,
    /// The host-staged path (None: the GPU heap is registered, data moves by RMA).
    landing: Option<Landing>,
}

struct Landing {
    slot: usize,
    per_group: u32,
    /// Free slots of this PE's group at each PE (at this PE itself: reply slots for gets).
    free: Vec<Vec<u32>>,
    /// Peers' get requests waiting for a staging chunk or for transport room.
    waiting: VecDeque<(u32, Request)>,
}

impl Staged {
    /// A GPU heap reached through `dev`; with `landing_len` bytes of landing area (`slot` bytes
    /// per slot) for the host-staged path, or none when the heap itself is registered.
    pub(crate) fn new(
        dev: Box<dyn DeviceMem>,
        landing_len: Option<usize>,
        slot: usize,
        n: usize,
    ) -> Result<Self, String> {
        let landing = match landing_len {
            None => None,
            Some(bytes) => {
                let per_group = bytes / slot.max(1) / n.max(1);
                if slot <= HDR || per_group == 0 {
                    return Err(format!(
                        "a landing area of {bytes} bytes cannot hold {n} groups of {slot}-byte slots"
                    ));
                }
                Some(Landing {
                    slot,
                    per_group: per_group.min(u32::MAX as usize) as u32,
                    free: (0..n)
                        .map(|_| (0..per_group as u32).rev().collect())
                        .collect(),
                    waiting: VecDeque::new(),
                })
            }
        };
        let (base, len) = dev.heap();
        Ok(Self {
            dev,
            base,
            len,
            landing,
        })
    }

    fn check(&self, off: u64, len: u64) -> Result<u64, MemError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.base + off),
            end => Err(MemError::OutOfBounds {
                offset: off,
                end: end.unwrap_or(u64::MAX),
                len: self.len,
            }),
        }
    }

    /// An AMO at heap offset `off`, by the GPU.
    pub(super) fn amo(
        &mut self,
        off: u64,
        wide: bool,
        op: AmoOp,
        operand: u64,
        compare: u64,
    ) -> Result<u64, MemError> {
        let width = if wide { 8 } else { 4 };
        let at = self.check(off, width)?;
        if off % width != 0 {
            return Err(MemError::Misaligned { offset: off, width });
        }
        self.dev
            .amo(at, op, wide, operand, compare)
            .map_err(|detail| MemError::Device { detail })
    }

    /// A copy between device or host addresses.
    ///
    /// # Safety
    /// As [`DeviceMem::copy`].
    pub(super) unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), MemError> {
        // SAFETY: forwarded.
        unsafe { self.dev.copy(dst, src, len) }.map_err(|detail| MemError::Device { detail })
    }

    /// A descriptor's local side as a heap offset where it lies in the GPU heap (registered
    /// mode: RMA straight from the registration).
    fn localize(&self, l: Local, len: u64) -> Local {
        match l {
            Local::Raw(a) if a >= self.base && a.saturating_add(len) <= self.base + self.len => {
                Local::Heap(a - self.base)
            }
            other => other,
        }
    }

    fn landing(&mut self) -> &mut Landing {
        self.landing.as_mut().expect("host-staged path")
    }
}

impl Landing {
    fn offset(&self, group: u32, slot: u32) -> usize {
        (group as usize * self.per_group as usize + slot as usize) * self.slot
    }
}

fn header(id: u64, addr: u64, len: u64, kind: u64) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    for (i, w) in [id, addr, len, kind].into_iter().enumerate() {
        h[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    h
}

impl Engine {
    fn st(&mut self) -> &mut Staged {
        self.staged.as_mut().expect("GPU heap")
    }

    fn ld(&mut self) -> &mut Landing {
        self.st().landing()
    }

    /// The device or host address of a descriptor's local side.
    fn staged_addr(&self, l: Local) -> u64 {
        match l {
            Local::Heap(off) => self.staged.as_ref().map_or(0, |s| s.base) + off,
            Local::Raw(a) => a,
        }
    }

    /// Whether this PE's heap is GPU memory reached through host staging.
    pub(super) fn staging_path(&self) -> bool {
        self.staged.as_ref().is_some_and(|s| s.landing.is_some())
    }

    /// `accept` for a GPU heap: operations on itself (by the GPU), and on the staged path the
    /// data operations. Returns false for what the common path handles (fence, AMOs, signals;
    /// everything but the PE itself in registered mode, with local sides in the heap turned
    /// into offsets), after rewriting `d`.
    pub(super) fn accept_staged(&mut self, chan: u16, seq: u64, d: &mut Desc) -> bool {
        let d = match self.staging_path() {
            true => *d,
            false if d.pe() == Some(self.me) => *d,
            false => {
                let st = self.staged.as_ref().expect("GPU heap");
                match d {
                    Desc::Put { local, len, .. }
                    | Desc::Get { local, len, .. }
                    | Desc::PutSignal { local, len, .. } => *local = st.localize(*local, *len),
                    _ => {}
                }
                return false;
            }
        };
        if d.pe() == Some(self.me) {
            let r = self.apply_local_staged(&d);
            match r {
                Ok(()) => self.chans[chan as usize].done.finish(seq),
                Err(e) => self.fault(
                    code::OP_FAILED,
                    Some(self.me as usize),
                    format!("PE {}: {d:?} on itself: {e}", self.me),
                ),
            }
            return true;
        }
        let empty = matches!(d, Desc::Put { len: 0, .. } | Desc::Get { len: 0, .. });
        if empty {
            self.chans[chan as usize].done.finish(seq);
            return true;
        }
        match d {
            Desc::Fence | Desc::Amo { .. } | Desc::Signal { .. } => return false,
            Desc::Put {
                pe,
                remote,
                local,
                len,
            } => {
                let OpRef::Slab(op) = self.new_op(chan, seq, 0) else {
                    unreachable!()
                };
                let src = self.staged_addr(local);
                self.enqueue(
                    chan,
                    pe,
                    Work::SPut {
                        op,
                        remote,
                        src,
                        len,
                        issued: 0,
                        last: true,
                    },
                );
            }
            Desc::Get {
                pe,
                remote,
                local,
                len,
            } => {
                let OpRef::Slab(op) = self.new_op(chan, seq, 0) else {
                    unreachable!()
                };
                let dst = self.staged_addr(local);
                self.enqueue(
                    chan,
                    pe,
                    Work::SGet {
                        op,
                        remote,
                        dst,
                        len,
                        issued: 0,
                    },
                );
            }
            Desc::P {
                pe,
                remote,
                value,
                width,
            } => {
                let op = OpRef::Fast(seq);
                self.enqueue(
                    chan,
                    pe,
                    Work::Store {
                        op,
                        remote,
                        value,
                        width,
                    },
                );
            }
            Desc::PutSignal {
                pe,
                remote,
                local,
                len,
                sig,
                value,
                op: sop,
            } => {
                let opref = self.new_op(chan, seq, 0);
                let OpRef::Slab(op) = opref else {
                    unreachable!()
                };
                let src = self.staged_addr(local);
                self.enqueue(
                    chan,
                    pe,
                    Work::SPut {
                        op,
                        remote,
                        src,
                        len,
                        issued: 0,
                        last: false,
                    },
                );
                // The signal only once every data chunk is in the target's GPU memory.
                self.enqueue(chan, pe, Work::Gate);
                self.enqueue(
                    chan,
                    pe,
                    Work::Signal {
                        op: opref,
                        remote: sig,
                        value,
                        sop,
                        tag: None,
                    },
                );
            }
        }
        true
    }

    /// An operation on this PE's own GPU heap, at once and in order (by the GPU).
    fn apply_local_staged(&mut self, d: &Desc) -> Result<(), MemError> {
        let st = self.st();
        let local = |st: &Staged, l: Local, len: u64| match l {
            Local::Heap(o) => st.check(o, len),
            Local::Raw(a) => Ok(a),
        };
        match *d {
            Desc::Put {
                remote,
                local: l,
                len,
                ..
            } => {
                let (dst, src) = (st.check(remote, len)?, local(st, l, len)?);
                // SAFETY: the destination is inside the heap (checked); the producer keeps the
                // source valid until the operation completes.
                unsafe { st.copy(dst, src, len as usize) }
            }
            Desc::Get {
                remote,
                local: l,
                len,
                ..
            } => {
                let (src, dst) = (st.check(remote, len)?, local(st, l, len)?);
                // SAFETY: as above, the other way round.
                unsafe { st.copy(dst, src, len as usize) }
            }
            Desc::P {
                remote,
                value,
                width,
                ..
            } => {
                let dst = st.check(remote, u64::from(width))?;
                let v = value.to_le_bytes();
                // SAFETY: the destination is inside the heap; `v` is live.
                unsafe { st.copy(dst, v.as_ptr() as u64, width as usize) }
            }
            Desc::Amo {
                remote,
                op,
                wide,
                operand,
                compare,
                result,
                ..
            } => {
                let old = st.amo(remote, wide, op, operand, compare)?;
                if result != 0 {
                    let v = old.to_le_bytes();
                    // SAFETY: the producer keeps the result cell valid until the operation
                    // completes (API contract), which is after this write.
                    unsafe { st.copy(result, v.as_ptr() as u64, 8) }?;
                }
                Ok(())
            }
            Desc::Signal {
                remote, value, op, ..
            } => st.amo(remote, true, op.as_amo(), value, 0).map(|_| ()),
            Desc::PutSignal {
                remote,
                local: l,
                len,
                sig,
                value,
                op,
                ..
            } => {
                let (dst, src) = (st.check(remote, len)?, local(st, l, len)?);
                // SAFETY: as for Put.
                unsafe { st.copy(dst, src, len as usize) }?;
                st.amo(sig, true, op.as_amo(), value, 0).map(|_| ())
            }
            Desc::Fence => Ok(()),
        }
    }

    /// Issues staged work. `Ok(true)`: fully issued; `Err(())`: blocked (or failing).
    pub(super) fn issue_staged(&mut self, c: u16, pe: u32, w: &mut Work) -> Result<bool, ()> {
        match w {
            Work::SPut {
                op,
                remote,
                src,
                len,
                issued,
                ..
            } => {
                while *issued < *len {
                    if self.inflight >= self.cfg.max_inflight {
                        return Err(());
                    }
                    let payload = (self.ld().slot - HDR).min(self.staging.chunk - HDR) as u64;
                    let n = (*len - *issued).min(payload);
                    let Some(slot) = self.ld().free[pe as usize].pop() else {
                        return Err(());
                    };
                    let Some(ch) = self.staging.free.pop() else {
                        self.ld().free[pe as usize].push(slot);
                        return Err(());
                    };
                    let part = self.parts.insert(Part {
                        op: *op,
                        pe,
                        chan: c,
                        chunk: None,
                        copy_out: None,
                        landing: Some((pe, slot)),
                    });
                    let h = header(part, *remote + *issued, n, KIND_PUT);
                    let at = self.staging.chunk_ptr(ch);
                    // SAFETY: the chunk is ours (taken from the free list) and holds
                    // `staging.chunk` >= HDR + n bytes.
                    unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), at, HDR) };
                    // SAFETY: as above; the producer keeps the source valid until the
                    // operation completes.
                    let copied = unsafe {
                        self.st()
                            .dev
                            .copy(at as u64 + HDR as u64, *src + *issued, n as usize)
                    };
                    if let Err(e) = copied {
                        self.parts.remove(part);
                        self.staging.free.push(ch);
                        self.fault(
                            code::OP_FAILED,
                            Some(self.me as usize),
                            format!("PE {}: staging a put to PE {pe}: {e}", self.me),
                        );
                        return Err(());
                    }
                    let lref = LocalRef {
                        mr: self.staging.mr,
                        offset: ch as usize * self.staging.chunk,
                    };
                    let me = self.me;
                    let rref = RemoteRef {
                        mr: self.remote[pe as usize],
                        offset: self.ld().offset(me, slot) as u64,
                    };
                    let data = u64::from(self.me) << 32 | u64::from(slot);
                    // SAFETY: the chunk stays untouched until the write completes (its
                    // completion returns it to the free list).
                    let r = unsafe {
                        self.t.write_data(
                            pe as usize,
                            lref,
                            rref,
                            HDR + n as usize,
                            data,
                            STAGE_CTX | u64::from(pe) << 32 | u64::from(ch),
                        )
                    };
                    match r {
                        Ok(()) => {
                            // The ack part is in flight from now on.
                            self.posted(Ok(()), part, pe, "staged put")?;
                            *issued += n;
                        }
                        Err(PostError::Retry) => {
                            self.parts.remove(part);
                            self.staging.free.push(ch);
                            self.ld().free[pe as usize].push(slot);
                            return Err(());
                        }
                        Err(e) => {
                            self.staging.free.push(ch);
                            self.posted(Err(e), part, pe, "staged put")?;
                        }
                    }
                }
                Ok(true)
            }
            Work::SGet {
                op,
                remote,
                dst,
                len,
                issued,
            } => {
                while *issued < *len {
                    if self.inflight >= self.cfg.max_inflight {
                        return Err(());
                    }
                    let payload = (self.ld().slot - HDR) as u64;
                    let n = (*len - *issued).min(payload);
                    let me = self.me as usize;
                    let Some(slot) = self.ld().free[me].pop() else {
                        return Err(());
                    };
                    let part = self.parts.insert(Part {
                        op: *op,
                        pe,
                        chan: c,
                        chunk: None,
                        copy_out: None,
                        landing: Some((self.me, slot)),
                    });
                    let req = Request {
                        id: part,
                        offset: *remote + *issued,
                        operand: n,
                        compare: *dst + *issued,
                        tag: 0,
                        kind: RequestKind::GetData { slot },
                    };
                    let msg = crate::wire::encode_request(self.me, &req);
                    let r = self.t.send(pe as usize, &msg, SEND | part);
                    if !self.posted(r, part, pe, "staged get")? {
                        self.ld().free[me].push(slot);
                        return Err(());
                    }
                    *issued += n;
                }
                Ok(true)
            }
            Work::Store {
                op,
                remote,
                value,
                width,
            } => {
                let req = Request {
                    id: 0,
                    offset: *remote,
                    operand: *value,
                    compare: 0,
                    tag: 0,
                    kind: RequestKind::Store { width: *width },
                };
                self.request(c, pe, *op, req)
            }
            _ => unreachable!("not staged work"),
        }
    }

    /// A peer's staged store or get request against this PE's GPU heap.
    pub(super) fn serve_staged(&mut self, src: u32, req: Request) {
        let st = self.st();
        let r = match req.kind {
            RequestKind::Store { width } => st.check(req.offset, u64::from(width)).and_then(|at| {
                let v = req.operand.to_le_bytes();
                // SAFETY: inside the heap (checked); `v` is live.
                unsafe { st.copy(at, v.as_ptr() as u64, width as usize) }.map(|()| 0)
            }),
            RequestKind::GetData { .. } => match st.check(req.offset, req.operand) {
                Ok(_) => {
                    st.landing().waiting.push_back((src, req));
                    self.serve_waiting();
                    return;
                }
                Err(e) => Err(e),
            },
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
            let at = self.staging.chunk_ptr(ch);
            let n = req.operand as usize;
            let h = header(req.id, req.compare, req.operand, KIND_REPLY);
            // SAFETY: the chunk is ours and holds HDR + n bytes (the initiator sized n to its
            // slot, and every PE uses the same slot and chunk sizes).
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), at, HDR) };
            let src_addr = self.st().base + req.offset;
            // SAFETY: the source is inside the heap (checked when queued); the chunk is ours.
            if let Err(e) = unsafe { self.st().copy(at as u64 + HDR as u64, src_addr, n) } {
                self.staging.free.push(ch);
                self.mem_fault(src, e);
                return served;
            }
            let lref = LocalRef {
                mr: self.staging.mr,
                offset: ch as usize * self.staging.chunk,
            };
            let rref = RemoteRef {
                mr: self.remote[src as usize],
                offset: self.ld().offset(src, slot) as u64,
            };
            let data = u64::from(src) << 32 | u64::from(slot);
            // SAFETY: the chunk stays untouched until the write completes.
            let r = unsafe {
                self.t.write_data(
                    src as usize,
                    lref,
                    rref,
                    HDR + n,
                    data,
                    STAGE_CTX | u64::from(src) << 32 | u64::from(ch),
                )
            };
            match r {
                Ok(()) => {
                    self.ld().waiting.pop_front();
                    served += 1;
                }
                Err(PostError::Retry) => {
                    self.staging.free.push(ch);
                    break;
                }
                Err(PostError::Failed(e)) => {
                    self.staging.free.push(ch);
                    self.fault(
                        code::OP_FAILED,
                        Some(src as usize),
                        format!("PE {}: replying to a get of PE {src}: {e}", self.me),
                    );
                    return served;
                }
            }
        }
        served
    }

    /// A staged write landed here: a put's chunk (copy to the GPU heap, ack) or a get's reply
    /// (copy to the destination, finish the part).
    pub(super) fn landed(&mut self, data: u64) {
        let (group, slot) = ((data >> 32) as u32 & 0xf_ffff, data as u32);
        let n = self.n;
        let ld = self.ld();
        let (off, per_group, payload_max) = (ld.offset(group, slot), ld.per_group, ld.slot - HDR);
        let mut h = [0u8; HDR];
        if group as usize >= n
            || slot >= per_group
            // SAFETY: `h` is a live buffer of HDR bytes; the range is checked by the call.
            || unsafe { self.heap.read_to_raw(off as u64, h.as_mut_ptr(), HDR) }.is_err()
        {
            self.fault(
                code::OP_FAILED,
                Some(group as usize),
                format!("PE {}: a staged write into a bad slot ({data:#x})", self.me),
            );
            return;
        }
        let w = |i: usize| u64::from_le_bytes(h[i * 8..i * 8 + 8].try_into().expect("8"));
        let (id, addr, len, kind) = (w(0), w(1), w(2), w(3));
        let payload = self.heap.base() as u64 + (off + HDR) as u64;
        if len as usize > payload_max {
            self.fault(
                code::OP_FAILED,
                Some(group as usize),
                format!(
                    "PE {}: a staged write of {len} bytes overflows its slot",
                    self.me
                ),
            );
            return;
        }
        match kind {
            KIND_PUT => {
                let st = self.st();
                // SAFETY: the destination is inside the GPU heap (checked); the payload is in
                // the landing slot, which the initiator does not reuse before our ack.
                let r = st
                    .check(addr, len)
                    .and_then(|dst| unsafe { st.copy(dst, payload, len as usize) });
                self.ack(group, id, r.map(|()| 0));
            }
            KIND_REPLY => {
                // SAFETY: the destination is the initiator's own (its producer keeps it valid
                // until the operation completes); the payload is in our own slot.
                if let Err(e) = unsafe { self.st().copy(addr, payload, len as usize) } {
                    self.mem_fault(group, e);
                    return;
                }
                self.part_done(id, None);
            }
            _ => self.fault(
                code::OP_FAILED,
                Some(group as usize),
                format!("PE {}: a staged write of unknown kind {kind}", self.me),
            ),
        }
    }

    /// A finished part's landing slot returns to its free list.
    pub(super) fn free_landing(&mut self, owner: u32, slot: u32) {
        self.ld().free[owner as usize].push(slot);
    }

    /// Whether staged work is still pending (waiting get requests).
    pub(super) fn staged_busy(&self) -> bool {
        self.staged
            .as_ref()
            .and_then(|s| s.landing.as_ref())
            .is_some_and(|l| !l.waiting.is_empty())
    }
}
