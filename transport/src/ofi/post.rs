//! Posting: receive buffers, the checks every operation makes (peer, local and remote bounds),
//! operation slots, and writes and reads, striped over the rails when long enough.

use std::{
    ffi::c_void,
    time::{Duration, Instant},
};

use pshmem_libfabric_sys as sys;

use super::{
    OfiTransport, OpKind, OpRec, Region, RemoteRegion,
    fabric::{bits, check},
    more::{Held, Src},
};
use crate::{LocalRef, Pe, PostError, RemoteRef, Result, TransportError, check_bounds};

/// Longest a stripe after the first may meet back-pressure before its operation fails (the
/// earlier stripes are in flight, so it cannot be retried later as a whole).
const STRIPE_WAIT: Duration = Duration::from_secs(30);

impl OfiTransport {
    pub(super) fn send_off(&self, slot: u32) -> usize {
        slot as usize * self.cfg.max_send
    }

    pub(super) fn recv_off(&self, b: usize) -> usize {
        (self.cfg.max_outstanding + b) * self.cfg.max_send
    }

    pub(super) fn post_recv(&mut self, r: usize, b: usize) -> Result<()> {
        let off = self.recv_off(b);
        let len = self.cfg.max_send;
        let rail = &mut self.rails[r];
        let ctx: *mut sys::fi_context2 = &mut rail.ctxs[self.cfg.max_outstanding + b];
        // SAFETY: the receive buffer lies inside the rail's registered internal memory, which
        // lives as long as the endpoint; the context slot is reserved for this buffer.
        let rc = unsafe {
            sys::fi_recv(
                rail.ep.raw(),
                rail.internal.as_mut_ptr().add(off).cast(),
                len,
                rail.internal_mr.desc,
                sys::FI_ADDR_UNSPEC,
                ctx.cast(),
            )
        };
        check(rc, "fi_recv").map(|_| ())
    }

    pub(super) fn peer_ok(&self, pe: Pe, op: &'static str) -> Result<(), PostError> {
        if pe.idx() >= self.n {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} out of range for {} PEs", self.n),
            }
            .into());
        }
        match &self.dead[pe.idx()] {
            Some(reason) => Err(TransportError::PeerLost {
                pe,
                op,
                reason: reason.clone(),
            }
            .into()),
            None => Ok(()),
        }
    }

    fn region(
        &self,
        local: LocalRef,
        pe: Pe,
        op: &'static str,
        len: usize,
    ) -> Result<&Region, PostError> {
        let r = self
            .regions
            .get(local.mr.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("unknown local registration {:?}", local.mr),
            })?;
        check_bounds(pe, op, "local", local.offset as u64, len, r.len as u64)?;
        Ok(r)
    }

    fn remote(
        &self,
        remote: RemoteRef,
        pe: Pe,
        op: &'static str,
        len: usize,
    ) -> Result<&RemoteRegion, PostError> {
        let r = self.remotes.get(remote.mr.0 as usize).ok_or_else(|| {
            TransportError::InvalidArgument {
                op,
                reason: format!("unknown remote registration {:?}", remote.mr),
            }
        })?;
        if r.pe != pe {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!(
                    "remote registration {:?} belongs to PE {}, not {pe}",
                    remote.mr, r.pe
                ),
            }
            .into());
        }
        check_bounds(pe, op, "remote", remote.offset, len, r.len)?;
        Ok(r)
    }

    /// The rail of `pe`'s traffic that nothing else places: `(me + pe) % rails`, so that a
    /// PE's traffic spreads over its NICs by destination and what it receives over its NICs
    /// by source (with `pe % rails`, everything sent to a PE would arrive on one of its NICs).
    pub(super) fn home_rail(&self, pe: Pe) -> usize {
        match self.rails.len() {
            1 => 0,
            n => (self.me.idx() + pe.idx()) % n,
        }
    }

    pub(super) fn new_op(
        &mut self,
        ctx: u64,
        pe: Pe,
        kind: OpKind,
        parts: u32,
    ) -> Result<u32, PostError> {
        self.ops
            .insert(OpRec {
                ctx,
                pe,
                kind,
                remaining: parts,
                error: None,
                abandoned: false,
            })
            .map_err(|_| PostError::Retry)
    }

    pub(super) fn ctx_ptr(&mut self, rail: usize, slot: u32) -> *mut c_void {
        (&mut self.rails[rail].ctxs[slot as usize] as *mut sys::fi_context2).cast()
    }

    /// Posts one RMA part. Returns Ok(false) on EAGAIN.
    ///
    /// # Safety
    /// The local bytes must stay valid until completion (or be injectable).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn post_rma(
        &mut self,
        rail: usize,
        slot: u32,
        write: bool,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
    ) -> Result<bool> {
        // SAFETY: forwarded.
        unsafe {
            self.post_rma_from(
                rail,
                slot,
                (write, pe),
                (Src::Region(local), remote, len),
                data,
                false,
            )
        }
    }

    /// [`Self::post_rma`] from `src`, with `FI_MORE` when `more` (another post follows at once).
    ///
    /// # Safety
    /// As for [`Self::post_rma`]; an internal source lies in this op's slot of the rail's
    /// internal buffer.
    pub(super) unsafe fn post_rma_from(
        &mut self,
        rail: usize,
        slot: u32,
        (write, pe): (bool, Pe),
        (src, remote, len): (Src, RemoteRef, usize),
        data: Option<u64>,
        more: bool,
    ) -> Result<bool> {
        let rr = &self.remotes[remote.mr.0 as usize];
        let (base, key) = rr.rails[rail];
        let addr = if self.rails[rail].virt_addr {
            base + remote.offset
        } else {
            remote.offset
        };
        let (buf, mut desc) = match src {
            Src::Region(local) => {
                let region = self.regions[local.mr.0 as usize].as_ref().expect("checked");
                // SAFETY: offset checked against the region's length by the caller.
                (
                    unsafe { region.ptr.add(local.offset) },
                    region.mrs[rail].desc,
                )
            }
            Src::Internal(off) => {
                let r = &mut self.rails[rail];
                // SAFETY: `off` is this op's slot in the internal buffer (caller's contract).
                (
                    unsafe { r.internal.as_mut_ptr().add(off) },
                    r.internal_mr.desc,
                )
            }
        };
        let iov = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let rma = sys::fi_rma_iov { addr, len, key };
        let context = self.ctx_ptr(rail, slot);
        let r = &self.rails[rail];
        let msg = sys::fi_msg_rma {
            msg_iov: (&iov as *const libc::iovec).cast(),
            desc: &mut desc,
            iov_count: 1,
            addr: r.peers[pe.idx()],
            rma_iov: &rma,
            rma_iov_count: 1,
            context,
            data: data.unwrap_or(0),
        };
        let mut flags = bits!(FI_COMPLETION);
        if self.caps.delivery_complete {
            flags |= bits!(FI_DELIVERY_COMPLETE);
        }
        if data.is_some() {
            flags |= bits!(FI_REMOTE_CQ_DATA);
        }
        if write && len <= self.caps.inject_size {
            flags |= bits!(FI_INJECT);
        }
        if more {
            flags |= bits!(FI_MORE);
        }
        // SAFETY: msg and everything it points to are valid for the call; the caller keeps the
        // local bytes alive until completion; the context slot is reserved for this operation.
        let rc = unsafe {
            if write {
                sys::fi_writemsg(r.ep.raw(), &msg, flags)
            } else {
                sys::fi_readmsg(r.ep.raw(), &msg, flags)
            }
        };
        if rc == -(sys::FI_EAGAIN as isize) {
            return Ok(false);
        }
        check(rc, if write { "fi_writemsg" } else { "fi_readmsg" })?;
        self.rails[rail].bytes += len as u64;
        Ok(true)
    }

    /// Posts a write or read, striped over the rails when long enough.
    ///
    /// # Safety
    /// As for [`Transport::write`]/[`Transport::read`].
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn rma(
        &mut self,
        write: bool,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        let op = if write { "write" } else { "read" };
        self.peer_ok(pe, op)?;
        self.region(local, pe, op, len)?;
        self.remote(remote, pe, op, len)?;
        let nrails = self.rails.len();
        // Remote CQ data must arrive once, after all the bytes: never stripe such writes.
        let parts = if nrails > 1 && data.is_none() && len >= self.cfg.stripe_min {
            nrails
        } else {
            1
        };
        // A write with remote CQ data is whole on one rail; such writes take turns over the
        // rails (each is self-describing at the target), so a stream of them uses every rail.
        // The turn passes only once the write went (below): a retried write keeps its rail.
        let turns = data.is_some() && nrails > 1;
        let home = if turns {
            (self.next_data_rail + 1) % nrails
        } else {
            self.home_rail(pe)
        };
        let kind = if write { OpKind::Write } else { OpKind::Read };
        let slot = self.new_op(ctx, pe, kind, parts as u32)?;
        if parts == 1 {
            // The common case, without the striping arithmetic (held for doorbell batching
            // when that is on).
            let op = Held::Rma {
                rail: home,
                slot,
                write,
                pe,
                src: Src::Region(local),
                remote,
                len,
                data,
            };
            self.post_or_hold(op)?;
            if turns {
                self.next_data_rail = home;
            }
            return Ok(());
        }
        // Stripes go at once, behind whatever the rails held.
        self.flush_held();
        // SAFETY: forwarded from the caller.
        unsafe { self.post_striped(slot, home, parts, write, pe, local, remote, len, data) }
    }

    /// Posts the `parts` stripes of operation `slot`, stripe `p` on rail `(home + p) % rails`.
    ///
    /// # Safety
    /// As for [`Self::rma`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_striped(
        &mut self,
        slot: u32,
        home: usize,
        parts: usize,
        write: bool,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
    ) -> Result<(), PostError> {
        let nrails = self.rails.len();
        let chunk = len.div_ceil(parts);
        for p in 0..parts {
            let off = p * chunk;
            let this = chunk.min(len - off);
            let rail = (home + p) % nrails;
            let l = LocalRef {
                mr: local.mr,
                offset: local.offset + off,
            };
            let r = RemoteRef {
                mr: remote.mr,
                offset: remote.offset + off as u64,
            };
            // SAFETY: forwarded from the caller.
            let posted = unsafe { self.post_rma(rail, slot, write, pe, l, r, this, data) };
            match posted {
                Ok(true) => {}
                Ok(false) if p == 0 => {
                    self.ops.remove(slot);
                    return Err(PostError::Retry);
                }
                // A later stripe hit back-pressure: finish it synchronously (the earlier stripes
                // are already in flight).
                Ok(false) => {
                    // SAFETY: forwarded from the caller.
                    let go = unsafe {
                        self.post_stripe_waiting(rail, slot, write, pe, l, r, this, data)
                    };
                    if !go? {
                        let rec = self.ops.get_mut(slot).expect("live");
                        rec.remaining -= (parts - p) as u32;
                        rec.error.get_or_insert(Box::new(TransportError::Ofi {
                            op: if write { "fi_write" } else { "fi_read" },
                            code: sys::FI_EAGAIN as i32,
                            text: format!(
                                "stripe {p} of {parts} to PE {pe} on rail {rail}: pushed back \
                                 for {} s",
                                STRIPE_WAIT.as_secs()
                            ),
                        }));
                        return Ok(());
                    }
                }
                Err(e) => {
                    if p == 0 {
                        self.ops.remove(slot);
                        return Err(e.into());
                    }
                    let rec = self.ops.get_mut(slot).expect("live");
                    rec.remaining -= (parts - p) as u32;
                    rec.error.get_or_insert(Box::new(e));
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Posts a stripe that met back-pressure, progressing every rail's CQ until it goes — not
    /// only its own rail's: a peer stuck the same way on another rail may need our progress
    /// there (rxm's rendezvous over tcp) before its own frees this one, and the two would wait
    /// for each other. False once STRIPE_WAIT passed without it going.
    ///
    /// # Safety
    /// As for [`Self::rma`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_stripe_waiting(
        &mut self,
        rail: usize,
        slot: u32,
        write: bool,
        pe: Pe,
        l: LocalRef,
        r: RemoteRef,
        len: usize,
        data: Option<u64>,
    ) -> Result<bool> {
        let start = Instant::now();
        loop {
            for other in 0..self.rails.len() {
                self.progress_rail_into_deferred(other)?;
            }
            // SAFETY: forwarded from the caller.
            if unsafe { self.post_rma(rail, slot, write, pe, l, r, len, data) }? {
                return Ok(true);
            }
            if start.elapsed() > STRIPE_WAIT {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }
}
