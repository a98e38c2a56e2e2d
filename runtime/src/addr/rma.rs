//! Puts, gets, signals, atomics and this PE's words, by address.

use super::*;

impl ByAddr<'_> {
    /// Copies `n` bytes at `src` (this process's memory) to the symmetric `dest` on `pe`.
    ///
    /// # Safety
    /// `src..src + n` is readable and unchanged until the call returns or, for `nbi` and on a
    /// stream, until the next quiet (or the stream ran the call). On a stream, or for a GPU
    /// `nbi`, it is device-addressable; for the host heap it is host memory.
    pub unsafe fn put(
        &self,
        dest: u64,
        src: *const u8,
        n: usize,
        pe: usize,
        nbi: bool,
        stream: Option<Stream>,
    ) -> Result<()> {
        let op = if nbi { "put_nbi" } else { "put" };
        self.s.check_pe(op, pe)?;
        let sym = self.resolve(op, dest, n)?;
        let src = nonnull(src, n);
        match (sym.heap, stream) {
            (HeapKind::Host, st) => {
                self.host_only(op, st)?;
                if n == 0 {
                    return self.s.live(op);
                }
                // SAFETY: forwarded from the caller.
                unsafe { self.s.put_at(op, SymPtr(sym.offset), src, n, pe, !nbi) }
            }
            // SAFETY: forwarded from the caller.
            (HeapKind::Gpu, None) => unsafe { self.gpu(op)?.host_put(dest, src, n, pe, nbi) },
            // SAFETY: forwarded from the caller; the stream is live (`Stream::from_raw`).
            (HeapKind::Gpu, Some(st)) => unsafe {
                self.gpu(op)?
                    .rma_on_stream(true, dest, src, n, pe, nbi, st.raw())
            },
        }
    }

    /// Copies `n` bytes of the symmetric `src` on `pe` to `dest` (this process's memory).
    ///
    /// # Safety
    /// `dest..dest + n` is writable and untouched by others until the call returns or, for
    /// `nbi` and on a stream, until the next quiet (or the stream ran the call); otherwise as
    /// [`ByAddr::put`].
    pub unsafe fn get(
        &self,
        dest: *mut u8,
        src: u64,
        n: usize,
        pe: usize,
        nbi: bool,
        stream: Option<Stream>,
    ) -> Result<()> {
        let op = if nbi { "get_nbi" } else { "get" };
        self.s.check_pe(op, pe)?;
        let sym = self.resolve(op, src, n)?;
        let dest = nonnull(dest, n).cast_mut();
        match (sym.heap, stream) {
            (HeapKind::Host, st) => {
                self.host_only(op, st)?;
                if n == 0 {
                    return self.s.live(op);
                }
                // SAFETY: forwarded from the caller.
                unsafe { self.s.get_at(op, dest, SymPtr(sym.offset), n, pe, !nbi) }
            }
            // SAFETY: forwarded from the caller.
            (HeapKind::Gpu, None) => unsafe { self.gpu(op)?.host_get(dest, src, n, pe, nbi) },
            // SAFETY: forwarded from the caller; the stream is live.
            (HeapKind::Gpu, Some(st)) => unsafe {
                self.gpu(op)?
                    .rma_on_stream(false, src, dest, n, pe, nbi, st.raw())
            },
        }
    }

    /// Copies `n` bytes at `src` to `dest` on `pe`, then updates the 64-bit signal word `sig`
    /// there by `sig_op` with `value`; the signal is never visible before the data. `dest` and
    /// `sig` share a heap.
    ///
    /// # Safety
    /// As [`ByAddr::put`]; on the GPU heap `src` is device-addressable.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put_signal(
        &self,
        dest: u64,
        src: *const u8,
        n: usize,
        sig: u64,
        value: u64,
        sig_op: SignalOp,
        pe: usize,
        nbi: bool,
        stream: Option<Stream>,
    ) -> Result<()> {
        let op = if nbi { "put_signal_nbi" } else { "put_signal" };
        self.s.check_pe(op, pe)?;
        let (d, s) = self.resolve_pair(op, (dest, n), (sig, 8))?;
        self.s.check_aligned(op, SymPtr(s.offset), 8)?;
        let src = nonnull(src, n);
        match (d.heap, stream) {
            (HeapKind::Host, st) => {
                self.host_only(op, st)?;
                let (at, sw) = (SymPtr(d.offset), SymPtr(s.offset));
                // SAFETY: forwarded from the caller.
                unsafe {
                    self.s
                        .put_signal_at(op, at, src, n, sw, value, sig_op, pe, !nbi)
                }
            }
            // SAFETY: forwarded from the caller; a stream, when given, is live.
            (HeapKind::Gpu, st) => unsafe {
                self.gpu(op)?.host_put_signal(
                    dest,
                    src,
                    n,
                    sig,
                    value,
                    sig_op.code(),
                    pe,
                    nbi || st.is_some(),
                    st.map(Stream::raw),
                )
            },
        }
    }

    /// Updates the 64-bit signal word `sig` on `pe` by `sig_op` with `value`; complete at quiet
    /// (or when the stream ran it).
    pub fn signal_op(
        &self,
        sig: u64,
        value: u64,
        sig_op: SignalOp,
        pe: usize,
        stream: Option<Stream>,
    ) -> Result<()> {
        let op = "signal_op";
        self.s.check_pe(op, pe)?;
        let sym = self.word(op, sig, 8)?;
        match sym.heap {
            HeapKind::Host => {
                self.host_only(op, stream)?;
                self.s.signal_op(SymPtr(sym.offset), value, sig_op, pe)
            }
            // SAFETY: the word is in the GPU heap (resolved, aligned); a stream is live.
            HeapKind::Gpu => unsafe {
                self.gpu(op)?
                    .host_signal_op(sig, value, sig_op.code(), pe, stream.map(Stream::raw))
            },
        }
    }

    /// AMO `amo` on the 8-byte (`wide`) or 4-byte word at `dest` on `pe`; the old value (0 for
    /// the non-fetching operations).
    pub fn atomic(
        &self,
        amo: AmoOp,
        dest: u64,
        wide: bool,
        (operand, compare): (u64, u64),
        pe: usize,
    ) -> Result<u64> {
        let op = "atomic";
        self.s.check_pe(op, pe)?;
        let sym = self.word(op, dest, if wide { 8 } else { 4 })?;
        let at = SymPtr(sym.offset);
        match sym.heap {
            HeapKind::Host if wide => self.s.atomic::<u64>(amo, at, operand, compare, pe),
            HeapKind::Host => self
                .s
                .atomic::<u32>(amo, at, operand as u32, compare as u32, pe)
                .map(u64::from),
            HeapKind::Gpu => {
                self.gpu(op)?
                    .host_atomic(amo.code(), wide, dest, operand, compare, pe)
            }
        }
    }

    /// This PE's 8-byte (`wide`) or 4-byte word at `addr` now.
    pub fn read_word(&self, addr: u64, wide: bool) -> Result<u64> {
        let op = "signal_fetch";
        let w = if wide { 8 } else { 4 };
        let sym = self.word(op, addr, w)?;
        let at = SymPtr(sym.offset);
        match sym.heap {
            HeapKind::Host if wide => self.s.local_read::<u64>(at),
            HeapKind::Host => self.s.local_read::<u32>(at).map(u64::from),
            HeapKind::Gpu => {
                let mut b = [0u8; 8];
                self.gpu(op)?.copy_out(at, &mut b[..w])?;
                Ok(u64::from_le_bytes(b))
            }
        }
    }

    /// Waits up to `within` (capped by `PSHMEM_OP_TIMEOUT`) until this PE's word at `addr`
    /// satisfies `cmp value`: the word, or `None` when `within` passed first. Bindings wait in
    /// such slices to stay interruptible. Host words are watched with loads, GPU words polled.
    pub fn wait_within(
        &self,
        addr: u64,
        wide: bool,
        (cmp, value): (Cmp, u64),
        within: Duration,
    ) -> Result<Option<u64>> {
        let op = "wait_until";
        let sym = self.word(op, addr, if wide { 8 } else { 4 })?;
        let at = SymPtr(sym.offset);
        match sym.heap {
            HeapKind::Host if wide => self.s.wait_until_within::<u64>(at, cmp, value, within),
            HeapKind::Host => Ok(self
                .s
                .wait_until_within::<u32>(at, cmp, value as u32, within)?
                .map(u64::from)),
            HeapKind::Gpu => {
                let t = Instant::now();
                let within = within.min(self.s.cfg.op_timeout);
                loop {
                    let v = self.read_word(addr, wide)?;
                    if cmp.holds(v, value) {
                        return Ok(Some(v));
                    }
                    if t.elapsed() >= within {
                        return Ok(None);
                    }
                    std::thread::sleep(POLL);
                }
            }
        }
    }

    /// [`ByAddr::wait_within`] until the condition holds: [`Error::Timeout`] after
    /// `PSHMEM_OP_TIMEOUT`.
    pub fn wait_until(&self, addr: u64, wide: bool, cond: (Cmp, u64)) -> Result<u64> {
        let limit = self.s.cfg.op_timeout;
        let start = Instant::now();
        match self.wait_within(addr, wide, cond, limit)? {
            Some(v) => Ok(v),
            None => Err(Error::Timeout {
                me: self.me(),
                op: "wait_until",
                waited: start.elapsed(),
            }),
        }
    }

    /// Stores `value` into this PE's 64-bit word at `addr` (a signal consumed after a host
    /// wait) by an atomic swap: peers may be updating the word (on the GPU heap a plain copy
    /// could lose their AMO), and a swap is complete on return on every path.
    pub fn reset_word(&self, addr: u64, value: u64) -> Result<()> {
        self.atomic(AmoOp::Swap, addr, true, (value, 0), self.me())
            .map(|_| ())
    }

    /// Makes `stream` wait until this PE's signal word at `sig` (GPU heap) satisfies `cmp
    /// value`, then, with `reset`, sets it to that value.
    pub fn wait_on_stream(
        &self,
        sig: u64,
        (cmp, value): (Cmp, u64),
        reset: Option<u64>,
        stream: Stream,
    ) -> Result<()> {
        let op = "signal_wait_until_on_stream";
        let sym = self.word(op, sig, 8)?;
        if sym.heap == HeapKind::Host {
            self.host_only(op, Some(stream))?;
        }
        // SAFETY: the word is in the GPU heap (resolved); the stream is live.
        unsafe {
            self.gpu(op)?
                .signal_wait_on_stream(sig, cmp.code(), value, reset, stream.raw())
        }
    }
}
