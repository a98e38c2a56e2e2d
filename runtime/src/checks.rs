//! The checks every operation makes (live, PE, range, alignment), where it goes (the direct
//! path or the ring), publishing on the rings, and the errors of raised faults.

use super::*;

impl Pshmem {
    /// Refuses work after finalize, and after a failure of the job (sticky): a dead peer's
    /// memory may stay mapped on the direct path, but nothing may go on as if it were alive.
    pub(crate) fn live(&self, op: &'static str) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Error::Finalized { me: self.me, op });
        }
        if self.health.faulted() {
            return Err(self.fault_err(op, code::PROXY, None));
        }
        Ok(())
    }

    pub(crate) fn check_pe(&self, op: &'static str, pe: usize) -> Result<()> {
        if pe >= self.n {
            return Err(Error::InvalidPe {
                me: self.me,
                op,
                pe,
                n_pes: self.n,
            });
        }
        Ok(())
    }

    pub(crate) fn check_range(&self, op: &'static str, at: SymPtr, len: usize) -> Result<()> {
        let end = at.0.checked_add(len as u64);
        match end {
            Some(end) if at.0 >= alloc::RESERVED && end <= self.mem.len() as u64 => Ok(()),
            _ => Err(Error::OutOfHeap {
                me: self.me,
                op,
                offset: at.0,
                end: end.unwrap_or(u64::MAX),
                start: alloc::RESERVED,
                heap: self.mem.len() as u64,
            }),
        }
    }

    pub(crate) fn check_aligned(&self, op: &'static str, at: SymPtr, align: u64) -> Result<()> {
        if at.0 % align != 0 {
            return Err(Error::Misaligned {
                me: self.me,
                op,
                offset: at.0,
                align,
            });
        }
        Ok(())
    }

    /// Common checks of a remote operation on `len` bytes at `at` of `pe`.
    pub(crate) fn check(
        &self,
        op: &'static str,
        pe: usize,
        at: SymPtr,
        len: usize,
    ) -> Result<Route> {
        self.live(op)?;
        self.check_pe(op, pe)?;
        self.check_range(op, at, len)?;
        Ok(self.route(pe))
    }

    pub(crate) fn route(&self, pe: usize) -> Route {
        match self.peers[pe] {
            Some(h) => Route::Direct(h),
            None => Route::Ring,
        }
    }

    pub(crate) fn mem_err(&self, op: &'static str, pe: usize, e: MemError) -> Error {
        Error::OpFailed {
            me: self.me,
            op,
            pe: Some(pe),
            detail: e.to_string(),
            cause: Some(Box::new(e.into())),
        }
    }

    /// The heap offset of a local buffer if it lies in this PE's heap.
    pub(crate) fn local_ref(&self, ptr: *const u8, len: usize) -> Local {
        match self.mem.offset_of(ptr, len) {
            Some(off) => Local::Heap(off),
            None => Local::Raw(ptr as u64),
        }
    }

    pub(crate) fn producer(&self) -> &Producer {
        let n = self.producers.len();
        let i = RING.with(|c| {
            if c.get() == usize::MAX {
                c.set(NEXT_RING.fetch_add(1, Ordering::Relaxed));
            }
            c.get()
        });
        &self.producers[i % n]
    }

    pub(crate) fn limit(&self) -> WaitLimit {
        WaitLimit::new(Some(self.cfg.op_timeout))
    }

    /// Publishes an operation on this thread's ring; returns where it ends.
    pub(crate) fn push(&self, op: &'static str, d: Desc) -> Result<(&Producer, u64)> {
        let p = self.producer();
        let (slots, n) = d.encode();
        let end = p
            .push(&slots[..n], &self.limit())
            .map_err(|e| self.ring_err(op, e))?;
        Ok((p, end))
    }

    /// Publishes an operation and waits for it (and everything before it on the ring).
    pub(crate) fn push_wait(&self, op: &'static str, d: Desc) -> Result<()> {
        let (p, end) = self.push(op, d)?;
        p.ring()
            .wait_completed(end, &self.limit())
            .map_err(|e| self.ring_err(op, e))
    }

    /// Waits (bounded) until the proxies finished what kernels published on the GPU rings, so
    /// that no PE leaves while a peer still owes it an ack.
    pub(crate) fn drain_gpu_rings(&self) -> Result<()> {
        let Some(g) = self.gpu.get() else {
            return Ok(());
        };
        for (ring, head) in g.ring_heads()? {
            ring.wait_completed(head, &self.limit())
                .map_err(|e| self.ring_err("finalize", e))?;
        }
        Ok(())
    }

    pub(crate) fn ring_err(&self, op: &'static str, e: RingError) -> Error {
        match &e {
            RingError::Raised { .. } => self.halt_proxies(),
            RingError::Timeout { waited, .. } => {
                // The operation may still sit in the ring or the proxy, which would read (or
                // write) the caller's buffer after this call returned and the caller freed it;
                // nothing bounds when that ends. So a timed-out wait ends the data path: the
                // fault makes every later call fail at once, naming this timeout, and the
                // proxies are stopped before the caller gets its buffer back.
                self.health.raise(
                    code::TIMEOUT,
                    None,
                    format!(
                        "{op} waited {waited:.1?} (PSHMEM_OP_TIMEOUT) without completing, so PE \
                         {} stopped its proxies",
                        self.me
                    ),
                );
                self.halt_proxies();
            }
            _ => {}
        }
        match e {
            RingError::Timeout { waited, .. } => Error::Timeout {
                me: self.me,
                op,
                waited,
            },
            RingError::Raised { code: c, pe } => self.fault_err(op, c, pe.map(|p| p as usize)),
            other => Error::OpFailed {
                me: self.me,
                op,
                pe: None,
                detail: other.to_string(),
                cause: None,
            },
        }
    }

    /// Stops the proxies (a bounded drain) once a fault is raised. Every later call fails
    /// anyway (the fault is sticky), and a wait that ends on the fault returns before the proxy
    /// may have read the descriptors it covers: a blocking put's caller frees its source as
    /// soon as the put returns, error or not, so no proxy may read it after that.
    pub(crate) fn halt_proxies(&self) {
        for p in lock(&self.proxies).drain(..) {
            let _ = p.stop();
        }
    }

    /// The error for a raised fault, with the details the proxy or the bootstrap recorded.
    pub(crate) fn fault_err(&self, op: &'static str, c: u32, pe: Option<usize>) -> Error {
        fault_error(self.me, op, self.health.fault(), c, pe)
    }
}

/// The error for a raised fault of `code` (for `pe`), with what the proxy or the bootstrap
/// recorded about it: a dead peer, or a failed data path with its typed cause.
pub(crate) fn fault_error(
    me: usize,
    op: &'static str,
    fault: Option<pshmem_proxy::Fault>,
    code: u32,
    pe: Option<usize>,
) -> Error {
    let (code, pe, detail, cause) = match fault {
        Some(f) => (f.code, f.pe.or(pe), f.detail, f.cause.map(Box::new)),
        None => (code, pe, "no details".into(), None),
    };
    if code == code::PEER_DEAD {
        Error::PeerDied {
            me,
            op,
            pe,
            detail,
            cause,
        }
    } else {
        Error::OpFailed {
            me,
            op,
            pe,
            detail,
            cause,
        }
    }
}
