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

mod rma;
mod sync;

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
}
