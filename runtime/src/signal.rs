//! Signals: put-with-signal, counted puts and signals, signal updates, and waits on this PE's
//! words.

use super::*;

impl Pshmem {
    /// Every put-with-signal: copy then signal on the direct path, or one descriptor (waited
    /// for when `blocking`).
    ///
    /// # Safety
    /// As [`Pshmem::put_at`] for `src`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn put_signal_at(
        &self,
        op_name: &'static str,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
        blocking: bool,
    ) -> Result<()> {
        let route = self.check(op_name, pe, dest, len)?;
        self.check_signal(op_name, sig)?;
        match route {
            // SAFETY: forwarded from the caller. The signal's AcqRel update follows the copy.
            Route::Direct(h) => unsafe { h.write_from_raw(dest.0, src, len) }
                .and_then(|()| h.amo(sig.0, true, op.as_amo(), value, 0))
                .map(|_| ())
                .map_err(|e| self.mem_err(op_name, pe, e)),
            Route::Ring => {
                let d = Desc::PutSignal {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    local: self.local_ref(src, len),
                    len: len as u64,
                    sig: sig.0,
                    value,
                    op,
                };
                self.submit(op_name, d, blocking)
            }
        }
    }

    /// Copies `src` to `dest` on `pe`, then updates the 64-bit signal `sig` there; the signal
    /// is never visible before the data. Returns when `src` may be reused.
    pub fn put_signal(
        &self,
        dest: SymPtr,
        src: &[u8],
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: `src` is a live slice, and the operation has completed when this returns.
        unsafe {
            self.put_signal_at(
                "put_signal",
                dest,
                src.as_ptr(),
                src.len(),
                sig,
                value,
                op,
                pe,
                true,
            )
        }
    }

    /// Non-blocking [`Pshmem::put_signal`].
    ///
    /// # Safety
    /// As [`Pshmem::put_nbi`] for `src`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put_signal_nbi(
        &self,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.put_signal_at("put_signal_nbi", dest, src, len, sig, value, op, pe, false) }
    }

    /// Non-blocking put-with-signal from this PE's symmetric `src`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_nbi_sym(
        &self,
        dest: SymPtr,
        src: SymPtr,
        len: usize,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        self.check_range("put_signal_nbi", src, len)?;
        // SAFETY: `src` lies in this PE's heap (checked).
        unsafe { self.put_signal_nbi(dest, self.ptr(src), len, sig, value, op, pe) }
    }

    /// Non-blocking put from this PE's symmetric `src` that counts towards the counted signal
    /// `sig` on `pe` ([`Pshmem::signal_counted`]). Nothing else orders it: many counted puts
    /// and one counted signal replace a put-with-signal per message, on any fabric.
    pub fn put_counted_nbi_sym(
        &self,
        dest: SymPtr,
        src: SymPtr,
        len: usize,
        sig: SymPtr,
        pe: usize,
    ) -> Result<()> {
        const NAME: &str = "put_counted_nbi";
        self.check_range(NAME, src, len)?;
        let route = self.check(NAME, pe, dest, len)?;
        self.check_signal(NAME, sig)?;
        match route {
            // SAFETY: `src` lies in this PE's heap (checked), `dest` in the peer's mapping.
            Route::Direct(h) => unsafe { h.write_from_raw(dest.0, self.ptr(src), len) }
                .map_err(|e| self.mem_err(NAME, pe, e)),
            Route::Ring => {
                let d = Desc::PutCounted {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    local: Local::Heap(src.0),
                    len: len as u64,
                    sig: sig.0,
                };
                self.submit(NAME, d, false)
            }
        }
    }

    /// Updates the signal `sig` on `pe` once every [`Pshmem::put_counted_nbi_sym`] for it
    /// issued by this thread since its previous counted signal has landed (complete after
    /// `quiet`). The target's proxy counts the writes (the tagged path), or the signal waits
    /// for their completion (the host-staged path), or follows them (ordered transports).
    pub fn signal_counted(&self, sig: SymPtr, value: u64, op: SignalOp, pe: usize) -> Result<()> {
        const NAME: &str = "signal_counted";
        let route = self.check(NAME, pe, sig, 8)?;
        self.check_aligned(NAME, sig, 8)?;
        match route {
            // The AcqRel update follows this thread's copies (the direct path is in order).
            Route::Direct(_) => self.signal_inner(NAME, route, sig, value, op, pe),
            Route::Ring => self
                .push(
                    NAME,
                    Desc::SignalCounted {
                        pe: Pe::from_idx(pe),
                        remote: sig.0,
                        value,
                        op,
                    },
                )
                .map(drop),
        }
    }

    pub(crate) fn check_signal(&self, op: &'static str, sig: SymPtr) -> Result<()> {
        self.check_range(op, sig, 8)?;
        self.check_aligned(op, sig, 8)
    }

    /// Updates the signal `sig` on `pe` (complete after `quiet`).
    pub fn signal_op(&self, sig: SymPtr, value: u64, op: SignalOp, pe: usize) -> Result<()> {
        let route = self.check("signal_op", pe, sig, 8)?;
        self.check_aligned("signal_op", sig, 8)?;
        self.signal_inner("signal_op", route, sig, value, op, pe)
    }

    pub(crate) fn signal_inner(
        &self,
        name: &'static str,
        route: Route,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        match route {
            Route::Direct(h) => h
                .amo(sig.0, true, op.as_amo(), value, 0)
                .map(|_| ())
                .map_err(|e| self.mem_err(name, pe, e)),
            Route::Ring => self
                .push(
                    name,
                    Desc::Signal {
                        pe: Pe::from_idx(pe),
                        remote: sig.0,
                        value,
                        op,
                    },
                )
                .map(|_| ()),
        }
    }

    /// Waits until this PE's signal `sig` satisfies `cmp value`; returns its value.
    pub fn signal_wait_until(&self, sig: SymPtr, cmp: Cmp, value: u64) -> Result<u64> {
        self.live("signal_wait_until")?;
        self.check_signal("signal_wait_until", sig)?;
        self.wait_local("signal_wait_until", sig, cmp, value)
    }

    /// Waits until this PE's `ivar` satisfies `cmp value`; returns its value.
    pub fn wait_until<T: AmoElem>(&self, ivar: SymPtr, cmp: Cmp, value: T) -> Result<T> {
        self.live("wait_until")?;
        self.check_range("wait_until", ivar, T::SIZE as usize)?;
        self.check_aligned("wait_until", ivar, u64::from(T::SIZE))?;
        self.wait_local("wait_until", ivar, cmp, value)
    }

    /// [`Pshmem::wait_until`] for at most `within` (capped by `PSHMEM_OP_TIMEOUT`): `None` when
    /// that passed first. Bindings wait in such slices to stay interruptible (Ctrl-C in Python)
    /// and apply the overall timeout themselves.
    pub fn wait_until_within<T: AmoElem>(
        &self,
        ivar: SymPtr,
        cmp: Cmp,
        value: T,
        within: Duration,
    ) -> Result<Option<T>> {
        let op = "wait_until";
        self.live(op)?;
        self.check_range(op, ivar, T::SIZE as usize)?;
        self.check_aligned(op, ivar, u64::from(T::SIZE))?;
        match self.wait_local_for(op, ivar, cmp, value, within.min(self.cfg.op_timeout)) {
            Err(Error::Timeout { .. }) => Ok(None),
            r => r.map(Some),
        }
    }

    /// Spins on a local word (acquire loads) until the condition holds, a fault is raised, or
    /// `PSHMEM_OP_TIMEOUT` passes.
    pub(crate) fn wait_local<T: AmoElem>(
        &self,
        op: &'static str,
        at: SymPtr,
        cmp: Cmp,
        value: T,
    ) -> Result<T> {
        self.wait_local_for(op, at, cmp, value, self.cfg.op_timeout)
    }

    /// [`Pshmem::wait_local`] bounded by `limit`.
    pub(crate) fn wait_local_for<T: AmoElem>(
        &self,
        op: &'static str,
        at: SymPtr,
        cmp: Cmp,
        value: T,
        limit: Duration,
    ) -> Result<T> {
        let start = Instant::now();
        let mut step = 0u32;
        loop {
            let v = T::from_bits(
                self.mem
                    .load(at.0, T::WIDE)
                    .map_err(|e| self.mem_err(op, self.me, e))?,
            );
            if cmp.holds(v, value) {
                return Ok(v);
            }
            step = step.wrapping_add(1);
            if step % 256 == 0 {
                if self.health.faulted() {
                    return Err(self.fault_err(op, code::PROXY, None));
                }
                if start.elapsed() > limit {
                    return Err(Error::Timeout {
                        me: self.me,
                        op,
                        waited: start.elapsed(),
                    });
                }
            }
            if step < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}
