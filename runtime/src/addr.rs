//! The host API by address, for both symmetric heaps: what the C ABI and the Python extension
//! call. An operation takes this PE's address of a symmetric object (as a C program or a
//! tensor holds it), finds the heap it lies in ([`ByAddr::resolve`]), and takes that heap's
//! path: the host heap's copies and ring, or the GPU heap's kernels (on an application stream
//! when one is given, else blocking on the runtime's internal stream).
//!
//! | operation | host heap | GPU heap, no stream | GPU heap, on a stream |
//! |---|---|---|---|
//! | put, get | blocking, or complete at quiet (`nbi`) | blocking (pageable memory staged); `nbi` from device-addressable memory complete at quiet | one kernel or copy on the stream |
//! | put_signal | as put | as put; the signal after the data | as put |
//! | signal_op | complete at quiet | complete at quiet | on the stream |
//! | atomic | fetching ones blocking, the others complete at quiet | blocking (the GPU runs every AMO on its memory) | – |
//! | read_word, wait, reset_word | loads and AMOs on this PE's word | copies out, a polled wait, an AMO | wait_on_stream |
//! | quiet, fence | the host rings | the host rings, then the GPU's | the host rings, then a kernel on the stream |
//! | sync, barrier_all | host algorithms | kernels (a barrier quiets the host rings first) | kernels on the stream |
//! | collective | host algorithms | kernels | kernels on the stream |
//!
//! A stream with host-heap memory, or before the GPU part started, is refused: it would order
//! nothing. Zero bytes are checked like any call and then do nothing. Signals, words and AMOs
//! must be aligned to their width on both heaps (a misaligned device atomic is a sticky CUDA
//! error that ends the context). Neither heap's first `RESERVED` bytes (the runtime's own words)
//! are reachable through it.

use std::time::{Duration, Instant};

use crate::{
    AmoOp, Cmp, Error, Pshmem, Result, SignalOp, SymPtr,
    alloc::RESERVED,
    coll::Coll,
    gpu::{Gpu, host_ops::RawStream},
    team::Team,
};

/// A symmetric heap of this PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeapKind {
    /// Host memory (a memfd, or private memory without same-host peers).
    Host,
    /// GPU memory, once `gpu_init` ran.
    Gpu,
}

impl HeapKind {
    /// "host" or "gpu".
    pub fn name(self) -> &'static str {
        match self {
            HeapKind::Host => "host",
            HeapKind::Gpu => "gpu",
        }
    }
}

/// A resolved symmetric range: its heap and its offset there (the same on every PE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sym {
    /// The heap.
    pub heap: HeapKind,
    /// The offset in it.
    pub offset: u64,
}

/// An application CUDA stream (`cudaStream_t`), held as an integer so that a call can carry it
/// across threads (Python releases the GIL around each call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(u64);

impl Stream {
    /// The stream `raw` (a `cudaStream_t` or `CUstream` as an integer).
    ///
    /// # Safety
    /// `raw` is a live stream of this PE's CUDA context for every call it is passed to.
    pub unsafe fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    fn raw(self) -> RawStream {
        (self.0 as usize as *mut std::ffi::c_void).cast()
    }
}

/// The host API by address of one PE (see the module's table); from [`Pshmem::by_addr`].
#[derive(Debug, Clone, Copy)]
pub struct ByAddr<'a> {
    s: &'a Pshmem,
}

impl Pshmem {
    /// The host API by address (both heaps).
    pub fn by_addr(&self) -> ByAddr<'_> {
        ByAddr { s: self }
    }
}

/// How long a polled wait on a GPU word sleeps between looks (a device-to-host copy each).
const POLL: Duration = Duration::from_micros(5);

/// A stand-in for the buffer of a zero-byte call: never dereferenced, but not null (a null
/// pointer is invalid for a slice even of length 0).
fn nonnull(p: *const u8, n: usize) -> *const u8 {
    if n == 0 {
        std::ptr::NonNull::<u8>::dangling().as_ptr()
    } else {
        p
    }
}

impl<'a> ByAddr<'a> {
    fn me(&self) -> usize {
        self.s.me
    }

    fn invalid(&self, op: &'static str, detail: impl Into<String>) -> Error {
        Error::InvalidArgument {
            me: self.me(),
            op,
            detail: detail.into(),
        }
    }

    /// The GPU part, for an operation that resolved to its heap (or was given a stream).
    fn gpu(&self, op: &'static str) -> Result<&'a Gpu> {
        self.s.gpu.get().ok_or_else(|| {
            self.invalid(
                op,
                "a stream orders GPU-heap work, but the GPU part is not started (gpu_init)",
            )
        })
    }

    /// The heap holding the `len` bytes at `addr`: past the heap's first `RESERVED` bytes and
    /// inside it. An address in neither heap is [`Error::NotSymmetric`]; one in a heap but
    /// reaching past its end (or into its reserved words) is [`Error::OutOfHeap`].
    pub fn resolve(&self, op: &'static str, addr: u64, len: usize) -> Result<Sym> {
        let host = (self.s.mem.base() as u64, self.s.mem.len() as u64);
        let gpu = self
            .s
            .gpu
            .get()
            .map(|g| (g.ptr(SymPtr(0)), g.heap_size() as u64));
        for (heap, span) in [(HeapKind::Host, Some(host)), (HeapKind::Gpu, gpu)] {
            let Some((base, size)) = span else { continue };
            let Some(offset) = addr.checked_sub(base).filter(|&o| o < size) else {
                continue;
            };
            let end = offset.checked_add(len as u64);
            return match end {
                Some(end) if offset >= RESERVED && end <= size => Ok(Sym { heap, offset }),
                _ => Err(Error::OutOfHeap {
                    me: self.me(),
                    op,
                    offset,
                    end: end.unwrap_or(u64::MAX),
                    start: RESERVED,
                    heap: size,
                }),
            };
        }
        Err(Error::NotSymmetric {
            me: self.me(),
            op,
            addr,
            len,
        })
    }

    /// Which heap holds the `len` bytes at `addr`, if one does.
    pub fn heap_of(&self, addr: u64, len: usize) -> Option<HeapKind> {
        self.resolve("heap_of", addr, len).ok().map(|s| s.heap)
    }

    /// Resolves `dest` and `sig` (or `src`) of one operation, which must share a heap.
    fn resolve_pair(
        &self,
        op: &'static str,
        (a, alen): (u64, usize),
        (b, blen): (u64, usize),
    ) -> Result<(Sym, Sym)> {
        let (x, y) = (self.resolve(op, a, alen)?, self.resolve(op, b, blen)?);
        if x.heap != y.heap {
            return Err(self.invalid(
                op,
                format!(
                    "{a:#x} is on the {} heap and {b:#x} on the {} heap: one operation takes \
                     one heap",
                    x.heap.name(),
                    y.heap.name()
                ),
            ));
        }
        Ok((x, y))
    }

    /// A word of `width` bytes at `addr`, resolved and aligned.
    fn word(&self, op: &'static str, addr: u64, width: usize) -> Result<Sym> {
        let sym = self.resolve(op, addr, width)?;
        self.s.check_aligned(op, SymPtr(sym.offset), width as u64)?;
        Ok(sym)
    }

    /// Refuses a stream with host-heap memory.
    fn host_only(&self, op: &'static str, stream: Option<Stream>) -> Result<()> {
        match stream {
            Some(_) => Err(self.invalid(
                op,
                "a stream orders GPU-heap work; this is host-heap memory (host operations \
                 complete on return or at quiet)",
            )),
            None => Ok(()),
        }
    }

    /// Whether `pe` is reached by loads and stores on `heap` (same host, mapped).
    pub fn is_direct(&self, heap: HeapKind, pe: usize) -> Result<bool> {
        self.s.check_pe("is_direct", pe)?;
        Ok(match heap {
            HeapKind::Host => self.s.is_direct(pe),
            HeapKind::Gpu => self.gpu("is_direct")?.is_direct(pe),
        })
    }

    /// This PE's address of `pe`'s copy of the symmetric object at `addr` (`addr` itself for
    /// this PE), or `None` where `pe`'s heap is not mapped here.
    pub fn peer_addr(&self, addr: u64, pe: usize) -> Result<Option<u64>> {
        let op = "ptr";
        self.s.check_pe(op, pe)?;
        let sym = self.resolve(op, addr, 0)?;
        Ok(match sym.heap {
            HeapKind::Host if pe == self.me() => Some(addr),
            HeapKind::Host => self.s.peer_ptr(SymPtr(sym.offset), pe).map(|p| p as u64),
            HeapKind::Gpu => self.gpu(op)?.peer_addr(sym.offset, pe),
        })
    }

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

    /// Completes this PE's host-initiated operations (`fence`: orders them per PE): the host
    /// rings', then the GPU heap's (on `stream`, else waited for), once the GPU part is up.
    pub fn quiet(&self, fence: bool, stream: Option<Stream>) -> Result<()> {
        let op = if fence { "fence" } else { "quiet" };
        if stream.is_some() {
            self.gpu(op)?;
        }
        if fence {
            self.s.fence()?;
        } else {
            self.s.quiet()?;
        }
        // GPU-heap operations of the host each run in their own kernel, one after another on
        // one stream, or ordered by the ring: a quiet of them is the simplest correct fence.
        match (self.s.gpu.get(), stream) {
            // SAFETY: a live stream (`Stream::from_raw`).
            (Some(g), Some(st)) => unsafe { g.on_raw_stream(false, st.raw()) },
            (Some(g), None) => g.host_quiet(),
            (None, _) => Ok(()),
        }
    }

    /// A sync (or `barrier`: quiet first) over `team`: with the GPU part up, a kernel on
    /// `stream` (else waited for) after a quiet of the host rings; otherwise on the host.
    pub fn sync(&self, team: Team, barrier: bool, stream: Option<Stream>) -> Result<()> {
        let op = if barrier { "barrier" } else { "team_sync" };
        match self.s.gpu.get() {
            Some(g) => {
                if barrier {
                    self.s.quiet()?;
                }
                // SAFETY: a live stream, when given.
                unsafe { g.team_sync_on(team, barrier, stream.map(Stream::raw)) }
            }
            None => {
                self.host_only(op, stream)?;
                if barrier {
                    self.s.team_barrier(team)
                } else {
                    self.s.team_sync(team)
                }
            }
        }
    }

    /// Quiet, then every PE arrives: with the GPU part up, its barrier kernel on `stream`
    /// (else waited for); otherwise the host barrier.
    pub fn barrier_all(&self, stream: Option<Stream>) -> Result<()> {
        match self.s.gpu.get() {
            Some(g) => {
                self.s.quiet()?;
                match stream {
                    // SAFETY: a live stream.
                    Some(st) => unsafe { g.on_raw_stream(true, st.raw()) },
                    None => g.host_barrier_all(),
                }
            }
            None => {
                self.host_only("barrier_all", stream)?;
                self.s.barrier_all()
            }
        }
    }

    /// Collective `coll` over `team` on the symmetric `dest` and `src` (`n` bytes, or
    /// elements for the reductions): kernels on the GPU heap (on `stream`, else waited for),
    /// the host algorithms on the host heap. Collective over the team.
    pub fn collective(
        &self,
        coll: Coll,
        team: Team,
        (dest, src): (u64, u64),
        n: usize,
        stream: Option<Stream>,
    ) -> Result<()> {
        let op = coll.name();
        let members = self.s.team_members(team)?;
        let (dest_len, src_len) = coll.lens(n, members.len()).ok_or(Error::SizeOverflow {
            me: self.me(),
            op,
            count: n,
            size: members.len(),
        })?;
        let (d, s) = self.resolve_pair(op, (dest, dest_len), (src, src_len))?;
        if d.heap == HeapKind::Gpu {
            let g = self.gpu(op)?;
            return match stream {
                // SAFETY: a live stream.
                Some(st) => unsafe {
                    g.collective_on_stream(coll, team, &members, dest, src, n, st.raw())
                },
                None => g.collective(coll, team, &members, dest, src, n),
            };
        }
        self.host_only(op, stream)?;
        let (dp, sp) = (SymPtr(d.offset), SymPtr(s.offset));
        match coll {
            Coll::Broadcast { root } => self.s.broadcast(team, dp, sp, n, root),
            Coll::Fcollect => self.s.fcollect(team, dp, sp, n),
            Coll::Alltoall => self.s.alltoall(team, dp, sp, n),
            Coll::Reduce(dt, red) => self.s.reduce(team, dt, red, dp, sp, n),
            Coll::ReduceScatter(dt, red) => self.s.reducescatter(team, dt, red, dp, sp, n),
        }
    }

    /// Allocates `size` bytes (at least 1) of `heap`, aligned to `align` (a power of two;
    /// at least the heap's own 64 or 256 bytes), zeroed when `zero` (before any peer can write
    /// there): this PE's address of the block. Collective. The heap's offsets are aligned, so
    /// the address is too where the heap's base is: an alignment beyond the base's is refused.
    pub fn malloc(&self, heap: HeapKind, size: usize, align: usize, zero: bool) -> Result<u64> {
        let op = if zero { "calloc" } else { "malloc" };
        let base = match heap {
            HeapKind::Host => self.s.mem.base() as u64,
            HeapKind::Gpu => self.gpu(op)?.ptr(SymPtr(0)),
        };
        if !align.is_power_of_two() || base % align as u64 != 0 {
            return Err(Error::BadAlignment {
                me: self.me(),
                op,
                align,
            });
        }
        let size = size.max(1) as u64;
        match heap {
            HeapKind::Host => {
                let at = self.s.allocate(op, size, align as u64, zero)?;
                Ok(base + at.0)
            }
            HeapKind::Gpu => {
                let g = self.gpu(op)?;
                let at =
                    self.s
                        .allocate_in(&g.alloc, op, size, align.max(256) as u64, |at, len| {
                            if zero {
                                g.zero(at, len as usize)
                            } else {
                                Ok(())
                            }
                        })?;
                Ok(base + at.0)
            }
        }
    }

    /// Frees the block starting at `addr` (either heap). Collective.
    pub fn free(&self, addr: u64) -> Result<()> {
        let sym = self.resolve("free", addr, 0)?;
        match sym.heap {
            HeapKind::Host => self.s.free(SymPtr(sym.offset)),
            HeapKind::Gpu => self.s.gpu_free(SymPtr(sym.offset)),
        }
    }
}
