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

use pshmem_gpu_queue::{Desc, Local, layout::error as code};
use pshmem_transport::{LocalRef, PostError, RemoteRef};

use super::{Engine, OpRef, Part, SEND, Work};
use crate::{
    DeviceMem,
    mem::MemError,
    wire::{Request, RequestKind},
};

/// Bytes of a landing slot's header: ack id, address (destination offset or address), length,
/// kind.
pub(super) const HDR: usize = 32;
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

/// Staged-path state of a proxy whose PE's heap is GPU memory.
pub(crate) struct Staged {
    pub(super) dev: Box<dyn DeviceMem>,
    /// Device address and length of this PE's GPU heap.
    base: u64,
    len: u64,
    slot: usize,
    per_group: u32,
    /// Free slots of this PE's group at each PE (at this PE itself: reply slots for gets).
    free: Vec<Vec<u32>>,
    /// Peers' get requests waiting for a staging chunk or for transport room.
    waiting: VecDeque<(u32, Request)>,
}

impl Staged {
    /// `landing_len` bytes of landing area, `slot` bytes per slot.
    pub(crate) fn new(
        dev: Box<dyn DeviceMem>,
        landing_len: usize,
        slot: usize,
        n: usize,
    ) -> Result<Self, String> {
        let per_group = landing_len / slot.max(1) / n.max(1);
        if slot <= HDR || per_group == 0 {
            return Err(format!(
                "a landing area of {landing_len} bytes cannot hold {n} groups of {slot}-byte slots"
            ));
        }
        let (base, len) = dev.heap();
        Ok(Self {
            dev,
            base,
            len,
            slot,
            per_group: per_group.min(u32::MAX as usize) as u32,
            free: (0..n)
                .map(|_| (0..per_group as u32).rev().collect())
                .collect(),
            waiting: VecDeque::new(),
        })
    }

    fn landing_offset(&self, group: u32, slot: u32) -> usize {
        (group as usize * self.per_group as usize + slot as usize) * self.slot
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

    fn check_aligned(&self, off: u64, width: u64) -> Result<u64, MemError> {
        let a = self.check(off, width)?;
        if off % width != 0 {
            return Err(MemError::Misaligned { offset: off, width });
        }
        Ok(a)
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
        self.staged.as_mut().expect("staged mode")
    }

    /// The device or host address of a descriptor's local side.
    fn staged_addr(&self, l: Local) -> u64 {
        match l {
            Local::Heap(off) => self.staged.as_ref().map_or(0, |s| s.base) + off,
            Local::Raw(a) => a,
        }
    }

    /// `accept` for a GPU heap on the staged path.
    pub(super) fn accept_staged(&mut self, chan: u16, seq: u64, d: Desc) {
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
            return;
        }
        let empty = matches!(d, Desc::Put { len: 0, .. } | Desc::Get { len: 0, .. });
        if empty {
            self.chans[chan as usize].done.finish(seq);
            return;
        }
        match d {
            Desc::Fence => {
                for pe in 0..self.n as u32 {
                    let q = &self.chans[chan as usize].queues[pe as usize];
                    if q.outstanding > 0 || !q.work.is_empty() {
                        self.enqueue(chan, pe, Work::Gate);
                    }
                }
                self.chans[chan as usize].done.finish(seq);
            }
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
            Desc::Amo {
                pe,
                remote,
                op: aop,
                wide,
                operand,
                compare,
                result,
            } => {
                let op = if result == 0 {
                    OpRef::Fast(seq)
                } else {
                    self.new_op(chan, seq, result)
                };
                self.enqueue(
                    chan,
                    pe,
                    Work::Amo {
                        op,
                        remote,
                        aop,
                        wide,
                        operand,
                        compare,
                    },
                );
            }
            Desc::Signal {
                pe,
                remote,
                value,
                op: sop,
            } => self.enqueue(
                chan,
                pe,
                Work::Signal {
                    op: OpRef::Fast(seq),
                    remote,
                    value,
                    sop,
                    tag: None,
                },
            ),
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
    }

    /// An operation on this PE's own GPU heap, at once and in order.
    fn apply_local_staged(&mut self, d: &Desc) -> Result<(), String> {
        let st = self.st();
        let err = |e: MemError| e.to_string();
        match *d {
            Desc::Put {
                remote, local, len, ..
            } => {
                let dst = st.check(remote, len).map_err(err)?;
                let src = match local {
                    Local::Heap(o) => st.check(o, len).map_err(err)?,
                    Local::Raw(a) => a,
                };
                // SAFETY: the destination is inside the heap (checked); the producer keeps the
                // source valid until the operation completes.
                unsafe { st.dev.copy(dst, src, len as usize) }
            }
            Desc::Get {
                remote, local, len, ..
            } => {
                let src = st.check(remote, len).map_err(err)?;
                let dst = match local {
                    Local::Heap(o) => st.check(o, len).map_err(err)?,
                    Local::Raw(a) => a,
                };
                // SAFETY: as above, the other way round.
                unsafe { st.dev.copy(dst, src, len as usize) }
            }
            Desc::P {
                remote,
                value,
                width,
                ..
            } => {
                let dst = st.check(remote, u64::from(width)).map_err(err)?;
                let v = value.to_le_bytes();
                // SAFETY: the destination is inside the heap; `v` is live.
                unsafe { st.dev.copy(dst, v.as_ptr() as u64, width as usize) }
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
                let at = st
                    .check_aligned(remote, if wide { 8 } else { 4 })
                    .map_err(err)?;
                let old = st.dev.amo(at, op, wide, operand, compare)?;
                if result != 0 {
                    let v = old.to_le_bytes();
                    // SAFETY: the producer keeps the result cell valid until the operation
                    // completes (API contract), which is after this write.
                    unsafe { st.dev.copy(result, v.as_ptr() as u64, 8) }?;
                }
                Ok(())
            }
            Desc::Signal {
                remote, value, op, ..
            } => {
                let at = st.check_aligned(remote, 8).map_err(err)?;
                st.dev.amo(at, op.as_amo(), true, value, 0).map(|_| ())
            }
            Desc::PutSignal {
                remote,
                local,
                len,
                sig,
                value,
                op,
                ..
            } => {
                let dst = st.check(remote, len).map_err(err)?;
                let at = st.check_aligned(sig, 8).map_err(err)?;
                let src = match local {
                    Local::Heap(o) => st.check(o, len).map_err(err)?,
                    Local::Raw(a) => a,
                };
                // SAFETY: as for Put.
                unsafe { st.dev.copy(dst, src, len as usize) }?;
                st.dev.amo(at, op.as_amo(), true, value, 0).map(|_| ())
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
                    let payload = (self.st().slot - HDR).min(self.staging.chunk - HDR) as u64;
                    let n = (*len - *issued).min(payload);
                    let Some(slot) = self.st().free[pe as usize].pop() else {
                        return Err(());
                    };
                    let Some(ch) = self.staging.free.pop() else {
                        self.st().free[pe as usize].push(slot);
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
                        offset: self.st().landing_offset(me, slot) as u64,
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
                            self.st().free[pe as usize].push(slot);
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
                    let payload = (self.st().slot - HDR) as u64;
                    let n = (*len - *issued).min(payload);
                    let me = self.me as usize;
                    let Some(slot) = self.st().free[me].pop() else {
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
                        self.st().free[me].push(slot);
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

    /// A peer's request against this PE's GPU heap.
    pub(super) fn serve_staged(&mut self, src: u32, req: Request) {
        let st = self.st();
        let r: Result<u64, MemError> = match req.kind {
            RequestKind::Amo { op, wide } => {
                match st.check_aligned(req.offset, if wide { 8 } else { 4 }) {
                    Ok(at) => match st.dev.amo(at, op, wide, req.operand, req.compare) {
                        Ok(v) => Ok(v),
                        Err(e) => return self.device_fault(src, e),
                    },
                    Err(e) => Err(e),
                }
            }
            RequestKind::Signal { op, .. } => match st.check_aligned(req.offset, 8) {
                Ok(at) => match st.dev.amo(at, op.as_amo(), true, req.operand, 0) {
                    Ok(_) => Ok(0),
                    Err(e) => return self.device_fault(src, e),
                },
                Err(e) => Err(e),
            },
            RequestKind::Store { width } => match st.check(req.offset, u64::from(width)) {
                Ok(at) => {
                    let v = req.operand.to_le_bytes();
                    // SAFETY: inside the heap (checked); `v` is live.
                    match unsafe { st.dev.copy(at, v.as_ptr() as u64, width as usize) } {
                        Ok(()) => Ok(0),
                        Err(e) => return self.device_fault(src, e),
                    }
                }
                Err(e) => Err(e),
            },
            RequestKind::GetData { .. } => {
                if let Err(e) = st.check(req.offset, req.operand) {
                    Err(e)
                } else {
                    st.waiting.push_back((src, req));
                    self.serve_waiting();
                    return;
                }
            }
        };
        self.ack(src, req.id, r);
    }

    fn device_fault(&mut self, src: u32, e: String) {
        self.fault(
            code::OP_FAILED,
            Some(self.me as usize),
            format!(
                "PE {}: applying a request of PE {src} to the GPU heap: {e}",
                self.me
            ),
        );
    }

    /// Serves waiting get requests while staging chunks and the transport allow.
    pub(super) fn serve_waiting(&mut self) -> usize {
        let mut served = 0;
        while let Some(&(src, req)) = self.st().waiting.front() {
            let RequestKind::GetData { slot } = req.kind else {
                self.st().waiting.pop_front();
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
            if let Err(e) = unsafe { self.st().dev.copy(at as u64 + HDR as u64, src_addr, n) } {
                self.staging.free.push(ch);
                self.device_fault(src, e);
                return served;
            }
            let lref = LocalRef {
                mr: self.staging.mr,
                offset: ch as usize * self.staging.chunk,
            };
            let rref = RemoteRef {
                mr: self.remote[src as usize],
                offset: self.st().landing_offset(src, slot) as u64,
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
                    self.st().waiting.pop_front();
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
        let st = self.st();
        let off = st.landing_offset(group, slot);
        let mut h = [0u8; HDR];
        if group as usize >= n
            || slot >= st.per_group
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
        if len as usize > self.st().slot - HDR {
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
                let r = match st.check(addr, len) {
                    Ok(dst) => {
                        // SAFETY: the destination is inside the GPU heap; the payload is in
                        // the landing slot, which the initiator does not reuse before our ack.
                        match unsafe { st.dev.copy(dst, payload, len as usize) } {
                            Ok(()) => Ok(0),
                            Err(e) => return self.device_fault(group, e),
                        }
                    }
                    Err(e) => Err(e),
                };
                self.ack(group, id, r);
            }
            KIND_REPLY => {
                // SAFETY: the destination is the initiator's own (its producer keeps it valid
                // until the operation completes); the payload is in our own slot.
                if let Err(e) = unsafe { self.st().dev.copy(addr, payload, len as usize) } {
                    self.device_fault(group, e);
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
        if let Some(st) = self.staged.as_mut() {
            st.free[owner as usize].push(slot);
        }
    }

    /// Writes a fetched value to a result cell: through the device in staged mode.
    pub(super) fn write_result_staged(&mut self, addr: u64, v: u64) {
        let b = v.to_le_bytes();
        // SAFETY: the producer keeps the result cell valid until the operation completes
        // (API contract), which is after this write.
        if let Err(e) = unsafe { self.st().dev.copy(addr, b.as_ptr() as u64, 8) } {
            self.fault(
                code::OP_FAILED,
                Some(self.me as usize),
                format!("PE {}: writing an AMO result: {e}", self.me),
            );
        }
    }

    /// Whether staged work is still pending (waiting get requests).
    pub(super) fn staged_busy(&self) -> bool {
        self.staged.as_ref().is_some_and(|s| !s.waiting.is_empty())
    }
}
