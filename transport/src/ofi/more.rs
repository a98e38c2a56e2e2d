//! Doorbell batching (`PSHMEM_OFI_MORE`): each rail holds back its latest single-part post, so
//! that when the next one comes the held one goes with `FI_MORE` (the provider may wait for
//! the rest before ringing the NIC's doorbell, one doorbell for a run of posts), and the last
//! of a run goes without it when the proxy flushes at the end of its batch
//! ([`crate::Transport::flush`]; also at every poll and wait, so nothing stays held while the
//! proxy waits). At most `PSHMEM_OFI_MORE` posts in a row carry the flag (a bounded run).
//!
//! A held write's source must stay valid until it is posted: a transfer's local bytes do until
//! completion (the post contract), but a payload of at most the inject size may be scratch the
//! caller reuses at once, so it is copied into the operation's slot of the rail's internal
//! buffer first, as a send's payload is. Striped operations flush first and post at once.

use pshmem_libfabric_sys as sys;

use super::{
    OfiTransport, OwnedEvent,
    fabric::{bits, check},
};
use crate::{LocalRef, Pe, PostError, RemoteRef, Result, TransportError};

/// Where a write's or read's local bytes are.
#[derive(Debug, Clone, Copy)]
pub(super) enum Src {
    /// In a registered region.
    Region(LocalRef),
    /// At this offset of the rail's internal buffer (the operation's send slot).
    Internal(usize),
}

/// A single-part post waiting for the next one (or a flush).
#[derive(Debug, Clone, Copy)]
pub(super) enum Held {
    Rma {
        rail: usize,
        slot: u32,
        write: bool,
        pe: Pe,
        src: Src,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
    },
    /// A send whose payload is in the slot's part of the internal buffer.
    Send {
        rail: usize,
        slot: u32,
        pe: Pe,
        len: usize,
    },
}

impl Held {
    fn rail(&self) -> usize {
        match *self {
            Held::Rma { rail, .. } | Held::Send { rail, .. } => rail,
        }
    }

    fn slot(&self) -> u32 {
        match *self {
            Held::Rma { slot, .. } | Held::Send { slot, .. } => slot,
        }
    }
}

impl OfiTransport {
    /// Posts `op`, or (batching on) holds it after posting the rail's held one with `FI_MORE`.
    /// On `Retry` or an error nothing of `op` remains (its slot is freed).
    pub(super) fn post_or_hold(&mut self, op: Held) -> Result<(), PostError> {
        let r = op.rail();
        if self.cfg.more == 0 {
            return self.post_alone(op);
        }
        if let Some(h) = self.held[r].take() {
            let more = self.chain[r] + 1 < self.cfg.more;
            match self.post_held(&h, more) {
                Ok(true) => self.chain[r] = if more { self.chain[r] + 1 } else { 0 },
                Ok(false) => {
                    self.held[r] = Some(h);
                    self.ops.remove(op.slot());
                    return Err(PostError::Retry);
                }
                Err(e) => self.held_failed(h, e),
            }
        }
        match self.holdable(op) {
            Some(h) => {
                self.held[r] = Some(h);
                Ok(())
            }
            None => self.post_alone(op),
        }
    }

    /// Posts every held operation without `FI_MORE` (ringing each rail's doorbell); one the
    /// provider pushes back stays held for the next flush.
    pub(super) fn flush_held(&mut self) {
        for r in 0..self.held.len() {
            if let Some(h) = self.held[r].take() {
                match self.post_held(&h, false) {
                    Ok(true) => self.chain[r] = 0,
                    Ok(false) => self.held[r] = Some(h),
                    Err(e) => self.held_failed(h, e),
                }
            }
        }
    }

    /// Whether some rail holds a post.
    pub(super) fn holding(&self) -> bool {
        self.held.iter().any(Option::is_some)
    }

    /// `op` made safe to hold: a write's payload of at most the inject size copied into its
    /// internal slot; `None` when it cannot be (a payload past the slot).
    fn holdable(&mut self, op: Held) -> Option<Held> {
        let Held::Rma {
            rail,
            slot,
            write: true,
            pe,
            src: Src::Region(local),
            remote,
            len,
            data,
        } = op
        else {
            return Some(op);
        };
        if len > self.caps.inject_size {
            return Some(op);
        }
        if len > self.cfg.max_send {
            return None;
        }
        let off = self.send_off(slot);
        let region = self.regions[local.mr.0 as usize].as_ref().expect("checked");
        // SAFETY: `local` was checked against the region, which the caller keeps valid for
        // the duration of the post (it may reuse it once this returns: hence the copy).
        let bytes = unsafe { std::slice::from_raw_parts(region.ptr.add(local.offset), len) };
        self.rails[rail].internal[off..off + len].copy_from_slice(bytes);
        Some(Held::Rma {
            rail,
            slot,
            write: true,
            pe,
            src: Src::Internal(off),
            remote,
            len,
            data,
        })
    }

    /// Posts `op` at once, without `FI_MORE`, freeing its slot when it does not go.
    fn post_alone(&mut self, op: Held) -> Result<(), PostError> {
        match self.post_held(&op, false) {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.ops.remove(op.slot());
                Err(PostError::Retry)
            }
            Err(e) => {
                self.ops.remove(op.slot());
                Err(e.into())
            }
        }
    }

    /// A held post failed after its caller was told it went: reported by the next poll.
    fn held_failed(&mut self, h: Held, e: TransportError) {
        // An operation already failed for its dead peer was reported then.
        if let Some(rec) = self.ops.remove(h.slot())
            && !rec.abandoned
        {
            self.deferred.push(OwnedEvent::Failed(rec.ctx, e));
        }
    }

    /// Posts `op` (with `FI_MORE` when `more`); Ok(false) on EAGAIN.
    fn post_held(&mut self, op: &Held, more: bool) -> Result<bool> {
        match *op {
            Held::Rma {
                rail,
                slot,
                write,
                pe,
                src,
                remote,
                len,
                data,
            } => {
                // SAFETY: the source is registered and valid until completion (checked at the
                // call; a copied payload lies in this op's internal slot).
                unsafe {
                    self.post_rma_from(rail, slot, (write, pe), (src, remote, len), data, more)
                }
            }
            Held::Send {
                rail,
                slot,
                pe,
                len,
            } => self.post_send(rail, slot, pe, len, more),
        }
    }

    /// Posts the send of operation `slot`, whose `len` payload bytes are in its internal slot.
    fn post_send(
        &mut self,
        rail: usize,
        slot: u32,
        pe: Pe,
        len: usize,
        more: bool,
    ) -> Result<bool> {
        let off = self.send_off(slot);
        let context = self.ctx_ptr(rail, slot);
        let inject = len <= self.caps.inject_size;
        let delivery = self.caps.delivery_complete;
        let r = &mut self.rails[rail];
        let mut desc = r.internal_mr.desc;
        // SAFETY: `off` lies inside the internal buffer (slot < max_outstanding); the payload
        // was copied there and the slot stays reserved until completion.
        let payload = unsafe { r.internal.as_mut_ptr().add(off) };
        let iov = libc::iovec {
            iov_base: payload.cast(),
            iov_len: len,
        };
        let m = sys::fi_msg {
            msg_iov: (&iov as *const libc::iovec).cast(),
            desc: &mut desc,
            iov_count: 1,
            addr: r.peers[pe.idx()],
            context,
            data: 0,
        };
        let mut flags = bits!(FI_COMPLETION);
        if inject {
            flags |= bits!(FI_INJECT);
        }
        if delivery {
            flags |= bits!(FI_DELIVERY_COMPLETE);
        }
        if more {
            flags |= bits!(FI_MORE);
        }
        // SAFETY: m and the buffer it names are valid; the context slot is reserved.
        let rc = unsafe { sys::fi_sendmsg(r.ep.raw(), &m, flags) };
        if rc == -(sys::FI_EAGAIN as isize) {
            return Ok(false);
        }
        check(rc, "fi_sendmsg").map(|_| true)
    }
}
