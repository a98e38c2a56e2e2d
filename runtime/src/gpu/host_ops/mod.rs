//! Host-initiated operations on the GPU symmetric heap (the C API and the NVSHMEM layer: host
//! `putmem`, `getmem`, atomics, signals, team syncs, alltoall, and their on-stream forms).
//!
//! Each is one of the runtime's kernels (`kernels/cuda/runtime.cu`) running the device API's
//! block variant, so a host call takes the same path as a kernel's: loads and stores to mapped
//! peers, the GPU's ring and proxy to the others. Blocking calls run on the runtime's internal
//! non-blocking stream, which they synchronize (never the legacy default stream or the whole
//! device: a user kernel on another stream may be waiting on a peer). A source or destination
//! the GPU cannot address (pageable host memory) is staged through a device buffer, chunk by
//! chunk; the on-stream forms take only device-addressable memory (they must be capturable in
//! a CUDA graph: kernel launches on the given stream, nothing else).

use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{CudaContext, CudaModule, sys};

use super::{
    Gpu, Resources, cu,
    kargs::{
        CollArgs, HostAmoArgs, PutSignalArgs, RmaArgs, SignalOpArgs, SignalWaitArgs, TeamSyncArgs,
    },
    mem::DevAlloc,
};
mod sync;

use crate::{
    coll::Coll,
    cuda::{CudaError, Kernel, KernelArgs, check},
    error::{Error, Result},
    team::Team,
};

/// Bytes of the staging buffer for pageable host memory.
const STAGE: usize = 4 << 20;
/// Threads of the one block a host operation runs in.
const THREADS: u32 = 256;
/// Bytes per member message from which a collective among mapped members runs on a grid.
const WIDE_BYTES: usize = 256 << 10;
/// Bytes per block of such a grid, and the most blocks.
const WIDE_SLICE: usize = 64 << 10;
const WIDE_BLOCKS: usize = 132;

/// The runtime's kernels for host operations, fetched once at init (with CUDA's lazy loading,
/// fetching one while a kernel waits on a peer can stall the context).
pub(super) struct HostKernels {
    rma: Kernel<RmaArgs>,
    put_signal: Kernel<PutSignalArgs>,
    signal_op: Kernel<SignalOpArgs>,
    signal_wait: Kernel<SignalWaitArgs>,
    amo: Kernel<HostAmoArgs>,
    team_sync: Kernel<TeamSyncArgs>,
    coll: Kernel<CollArgs>,
    coll_wide: Kernel<CollArgs>,
    /// `pshmem_k_quiet` and `pshmem_k_barrier_all` (no parameters).
    pub(super) quiet: Kernel<()>,
    pub(super) barrier_all: Kernel<()>,
    /// The staging buffer (allocated at first use) and the pinned result cell of AMOs; the lock
    /// also serializes the host operations of this PE on the internal stream.
    scratch: Mutex<Option<DevAlloc>>,
    cell: super::mem::HostAlloc,
}

impl HostKernels {
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        m: &Arc<CudaModule>,
        cell: super::mem::HostAlloc,
    ) -> std::result::Result<Self, CudaError> {
        Ok(Self {
            rma: Kernel::load(ctx, m, "pshmem_k_rma")?,
            put_signal: Kernel::load(ctx, m, "pshmem_k_put_signal")?,
            signal_op: Kernel::load(ctx, m, "pshmem_k_signal_op")?,
            signal_wait: Kernel::load(ctx, m, "pshmem_k_signal_wait")?,
            amo: Kernel::load(ctx, m, "pshmem_k_host_amo")?,
            team_sync: Kernel::load(ctx, m, "pshmem_k_team_sync")?,
            coll: Kernel::load(ctx, m, "pshmem_k_coll")?,
            coll_wide: Kernel::load(ctx, m, "pshmem_k_coll_wide")?,
            quiet: Kernel::load(ctx, m, "pshmem_k_quiet")?,
            barrier_all: Kernel::load(ctx, m, "pshmem_k_barrier_all")?,
            scratch: Mutex::new(None),
            cell,
        })
    }
}

/// A raw CUDA stream of the application (`cudaStream_t` is a `CUstream`).
pub type RawStream = sys::CUstream;

/// Whether the GPU can address `p` (device memory, or pinned host memory, mapped under UVA).
fn device_addressable(p: *const u8) -> bool {
    let mut kind: u32 = 0;
    // SAFETY: an attribute query with an out-pointer of the attribute's size (an enum value).
    let rc = unsafe {
        sys::cuPointerGetAttribute(
            (&mut kind as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            p as sys::CUdeviceptr,
        )
    };
    rc == sys::CUresult::CUDA_SUCCESS
        && (kind == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32
            || kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32)
}

impl Gpu {
    /// The heap offset of `len` bytes at device address `addr` of this PE's GPU heap.
    pub fn offset_of(&self, addr: u64, len: usize) -> Option<u64> {
        let off = addr.checked_sub(self.state.heap_base)?;
        (off.checked_add(len as u64)? <= self.state.heap_size).then_some(off)
    }

    /// This GPU's address of `pe`'s copy of the object at heap offset `off` (its own heap for
    /// this PE), or `None` when `pe` is reached through the proxy.
    pub fn peer_addr(&self, off: u64, pe: usize) -> Option<u64> {
        match self.peers.get(pe) {
            Some(&b) if b != 0 => Some(b + off),
            _ => None,
        }
    }

    fn check_pe(&self, op: &'static str, pe: usize) -> Result<()> {
        let n = self.peers.len();
        if pe < n {
            Ok(())
        } else {
            Err(Error::InvalidPe {
                me: self.me,
                op,
                pe,
                n_pes: n,
            })
        }
    }

    fn sym(&self, op: &'static str, addr: u64, len: usize) -> Result<u64> {
        self.offset_of(addr, len).ok_or(Error::OutOfHeap {
            me: self.me,
            op,
            offset: addr.wrapping_sub(self.state.heap_base),
            end: addr
                .wrapping_sub(self.state.heap_base)
                .saturating_add(len as u64),
            start: 0,
            heap: self.state.heap_size,
        })
    }

    /// Launches kernel `k` of operation `op` on `grid` blocks of `threads` on `stream`.
    ///
    /// # Safety
    /// As [`Kernel::launch`]: every memory the kernel touches through `args` stays valid until
    /// it has run.
    pub(super) unsafe fn launch<A: KernelArgs>(
        &self,
        op: &'static str,
        k: &Kernel<A>,
        (grid, threads): (u32, u32),
        stream: RawStream,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { k.launch((grid, 1), threads, stream, args) }.map_err(cu(self.me, op))
    }

    fn host_lock(&self) -> MutexGuard<'_, Option<DevAlloc>> {
        self.host.scratch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn scratch(&self, op: &'static str, g: &mut MutexGuard<'_, Option<DevAlloc>>) -> Result<u64> {
        if g.is_none() {
            **g = Some(DevAlloc::new(&self.ctx, STAGE).map_err(cu(self.me, op))?);
        }
        Ok(g.as_ref().expect("allocated").ptr)
    }

    /// Waits for the internal stream, then reports any error a device call recorded. The
    /// caller's hold on the resources (if any) is released first: `check` takes it again, and
    /// the mutex is not reentrant.
    fn finish(
        &self,
        op: &'static str,
        live: Option<MutexGuard<'_, Option<Resources>>>,
    ) -> Result<()> {
        self.sync_stream(op)?;
        drop(live);
        self.check(op)
    }

    /// A host put or get on `stream`: by the copy engine where `pe`'s heap is mapped and the
    /// transfer is large (`PSHMEM_COPY_ENGINE_MIN`: one block of SM stores moves tens of GB/s,
    /// the copy engine hundreds — 394 GB/s over NVLink at 1 GiB on 2×H200, above a full grid of
    /// SM-driven puts; on one H100 the kernel was ahead up to 1 MiB), else by the one-block RMA
    /// kernel (which also takes the ring to unmapped peers).
    #[allow(clippy::too_many_arguments)]
    fn rma_kernel(
        &self,
        op: &'static str,
        put: bool,
        dest: u64,
        src: u64,
        len: usize,
        pe: usize,
        nbi: bool,
        stream: RawStream,
    ) -> Result<()> {
        let sym = if put { dest } else { src };
        let mapped = self
            .offset_of(sym, len)
            .and_then(|off| self.peer_addr(off, pe));
        if let Some(remote) = mapped.filter(|_| len >= self.copy_engine_min) {
            let (d, s) = if put { (remote, src) } else { (dest, remote) };
            // SAFETY: `remote..remote + len` is `pe`'s heap as this GPU maps it (checked against
            // the heap's bounds); the callers keep the local range valid until the stream ran the
            // copy (blocking calls synchronize), as for the kernel.
            let rc = unsafe { sys::cuMemcpyAsync(d, s, len, stream) };
            return check(rc, "cuMemcpyAsync (copy engine)").map_err(cu(self.me, op));
        }
        let args = RmaArgs {
            dest,
            src,
            n: len as u64,
            pe: pe as i32,
            put: i32::from(put),
            nbi: i32::from(nbi),
            _pad: 0,
        };
        // SAFETY: the callers keep both ranges valid until the kernel ran (blocking calls
        // synchronize).
        unsafe { self.launch(op, &self.host.rma, (1, THREADS), stream, args) }
    }

    /// Copies `len` bytes at `src` (any memory of this process) to the GPU heap address `dest`
    /// on `pe` (an address of this PE's heap, as every symmetric address). Blocking: on return
    /// `src` may be reused. `nbi` leaves completion to [`Gpu::host_quiet`] where `src` is
    /// device-addressable (a staged source is always waited for).
    ///
    /// # Safety
    /// `src..src + len` is readable and unchanged until the call returns (or, for `nbi`, until
    /// the next quiet).
    pub(crate) unsafe fn host_put(
        &self,
        dest: u64,
        src: *const u8,
        len: usize,
        pe: usize,
        nbi: bool,
    ) -> Result<()> {
        let op = "putmem";
        self.check_pe(op, pe)?;
        self.sym(op, dest, len)?;
        if len == 0 {
            return Ok(());
        }
        let live = self.live(op)?;
        let mut g = self.host_lock();
        let st = self.stream.cu_stream();
        if device_addressable(src) {
            self.rma_kernel(op, true, dest, src as u64, len, pe, nbi, st)?;
            return if nbi {
                Ok(())
            } else {
                self.finish(op, Some(live))
            };
        }
        let buf = self.scratch(op, &mut g)?;
        for at in (0..len).step_by(STAGE) {
            let k = STAGE.min(len - at);
            // SAFETY: `src..src + len` is readable (the caller's slice); the buffer holds STAGE
            // bytes; the stream orders this copy after the previous chunk's blocking kernel.
            let rc = unsafe { sys::cuMemcpyHtoDAsync_v2(buf, src.add(at).cast(), k, st) };
            check(rc, "cuMemcpyHtoDAsync").map_err(cu(self.me, op))?;
            self.rma_kernel(op, true, dest + at as u64, buf, k, pe, false, st)?;
        }
        self.finish(op, Some(live))
    }

    /// Copies `len` bytes of the GPU heap address `src` on `pe` into `dest` (any memory of this
    /// process). Blocking (`nbi` as for [`Gpu::host_put`], for a device-addressable `dest`).
    ///
    /// # Safety
    /// `dest..dest + len` is writable and untouched by others until the call returns (or, for
    /// `nbi`, until the next quiet).
    pub(crate) unsafe fn host_get(
        &self,
        dest: *mut u8,
        src: u64,
        len: usize,
        pe: usize,
        nbi: bool,
    ) -> Result<()> {
        let op = "getmem";
        self.check_pe(op, pe)?;
        self.sym(op, src, len)?;
        if len == 0 {
            return Ok(());
        }
        let live = self.live(op)?;
        let mut g = self.host_lock();
        let st = self.stream.cu_stream();
        if device_addressable(dest) {
            self.rma_kernel(op, false, dest as u64, src, len, pe, nbi, st)?;
            return if nbi {
                Ok(())
            } else {
                self.finish(op, Some(live))
            };
        }
        let buf = self.scratch(op, &mut g)?;
        for at in (0..len).step_by(STAGE) {
            let k = STAGE.min(len - at);
            self.rma_kernel(op, false, buf, src + at as u64, k, pe, false, st)?;
            // SAFETY: `dest..dest + len` is writable (the caller's slice); the copy follows the
            // blocking get on the stream.
            let rc = unsafe { sys::cuMemcpyDtoHAsync_v2(dest.add(at).cast(), buf, k, st) };
            check(rc, "cuMemcpyDtoHAsync").map_err(cu(self.me, op))?;
            // Pageable destinations: the copy is complete once the stream is.
            self.sync_stream(op)?;
        }
        self.finish(op, Some(live))
    }

    /// put or get on `stream` (device-addressable `local` only; graph-capturable).
    ///
    /// # Safety
    /// `stream` is a live stream of this PE's context; `local..local + len` stays valid (and,
    /// for a get, untouched) until the stream has run the operation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn rma_on_stream(
        &self,
        put: bool,
        remote: u64,
        local: *const u8,
        len: usize,
        pe: usize,
        nbi: bool,
        stream: RawStream,
    ) -> Result<()> {
        let op = if put {
            "putmem_on_stream"
        } else {
            "getmem_on_stream"
        };
        self.check_pe(op, pe)?;
        self.sym(op, remote, len)?;
        if len == 0 {
            return Ok(());
        }
        if !device_addressable(local) {
            return Err(self.cuda(
                op,
                CudaError::Unusable(
                    "the local buffer of an on-stream put or get must be device memory or \
                     pinned host memory"
                        .into(),
                ),
            ));
        }
        let _live = self.live(op)?;
        let (d, s) = if put {
            (remote, local as u64)
        } else {
            (local as u64, remote)
        };
        self.rma_kernel(op, put, d, s, len, pe, nbi, stream)
    }

    /// put-with-signal from the host (blocking unless `nbi` or on a `stream`).
    ///
    /// # Safety
    /// `src..src + len` is device-addressable and stays valid until the operation ran;
    /// `stream`, when given, is a live stream of this PE's context.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn host_put_signal(
        &self,
        dest: u64,
        src: *const u8,
        len: usize,
        sig: u64,
        value: u64,
        sig_op: u8,
        pe: usize,
        nbi: bool,
        stream: Option<RawStream>,
    ) -> Result<()> {
        let op = "putmem_signal";
        self.check_pe(op, pe)?;
        self.sym(op, dest, len)?;
        self.sym(op, sig, 8)?;
        if !device_addressable(src) && len > 0 {
            return Err(self.cuda(
                op,
                CudaError::Unusable(
                    "the source of a host put-with-signal must be device memory or pinned host \
                     memory"
                        .into(),
                ),
            ));
        }
        let live = self.live(op)?;
        let _g = self.host_lock();
        let st = stream.unwrap_or_else(|| self.stream.cu_stream());
        let args = PutSignalArgs {
            dest,
            src: src as u64,
            n: len as u64,
            sig,
            value,
            op: i32::from(sig_op),
            pe: pe as i32,
            nbi: i32::from(nbi),
            _pad: 0,
        };
        // SAFETY: the source stays valid (blocking calls synchronize; on-stream and nbi callers
        // own that).
        unsafe { self.launch(op, &self.host.put_signal, (1, THREADS), st, args)? };
        if stream.is_some() || nbi {
            Ok(())
        } else {
            self.finish(op, Some(live))
        }
    }

    /// A signal update from the host (complete at quiet; on `stream` when given).
    ///
    /// # Safety
    /// `stream`, when given, is a live stream of this PE's context.
    pub(crate) unsafe fn host_signal_op(
        &self,
        sig: u64,
        value: u64,
        sig_op: u8,
        pe: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        let op = "signal_op";
        self.check_pe(op, pe)?;
        self.sym(op, sig, 8)?;
        let _live = self.live(op)?;
        let _g = self.host_lock();
        let st = stream.unwrap_or_else(|| self.stream.cu_stream());
        let args = SignalOpArgs {
            sig,
            value,
            op: i32::from(sig_op),
            pe: pe as i32,
        };
        // SAFETY: the signal word is in the heap (checked).
        unsafe { self.launch(op, &self.host.signal_op, (1, 1), st, args) }
    }

    /// Makes `stream` wait until this PE's signal word at `sig` satisfies `cmp value` (a
    /// PSHMEM_CMP_* code), then, with `reset`, sets the word to that value: a one-thread kernel
    /// holding one SM while it waits, bounded by the device wait limit (a wait that ends on it
    /// records the error for the next check).
    ///
    /// # Safety
    /// `stream` is a live stream of this PE's context.
    pub(crate) unsafe fn signal_wait_on_stream(
        &self,
        sig: u64,
        cmp: u8,
        value: u64,
        reset: Option<u64>,
        stream: RawStream,
    ) -> Result<()> {
        let op = "signal_wait_until_on_stream";
        self.sym(op, sig, 8)?;
        if sig % 8 != 0 {
            return Err(Error::Misaligned {
                me: self.me,
                op,
                offset: sig.wrapping_sub(self.state.heap_base),
                align: 8,
            });
        }
        let _live = self.live(op)?;
        let args = SignalWaitArgs {
            sig,
            value,
            to: reset.unwrap_or(0),
            cmp: i32::from(cmp),
            reset: i32::from(reset.is_some()),
        };
        // SAFETY: the word is in the heap (checked), on the caller's live stream.
        unsafe { self.launch(op, &self.host.signal_wait, (1, 1), stream, args) }
    }

    /// An AMO from the host on a 4- or 8-byte (`wide`) word: `sub` a PSHMEM_AMO_* code.
    /// Blocking; returns the old value (0 for the non-fetching operations).
    pub(crate) fn host_atomic(
        &self,
        sub: u8,
        wide: bool,
        dest: u64,
        operand: u64,
        compare: u64,
        pe: usize,
    ) -> Result<u64> {
        let op = "atomic";
        self.check_pe(op, pe)?;
        let w = if wide { 8 } else { 4 };
        self.sym(op, dest, w)?;
        if dest % w as u64 != 0 {
            return Err(Error::Misaligned {
                me: self.me,
                op,
                offset: dest - self.state.heap_base,
                align: w as u64,
            });
        }
        let live = self.live(op)?;
        let _g = self.host_lock();
        let cell = self.host.cell.device_ptr().map_err(|e| self.cuda(op, e))?;
        let wide_bit = if wide { pshmem_abi::AMO_WIDE } else { 0 };
        let args = HostAmoArgs {
            dest,
            operand,
            compare,
            result: cell,
            sub: u32::from(sub | wide_bit),
            pe: pe as i32,
        };
        // SAFETY: the word is in the heap (checked); the result cell is pinned memory of this
        // Gpu, read after the stream is synchronized.
        unsafe { self.launch(op, &self.host.amo, (1, 1), self.stream.cu_stream(), args)? };
        self.finish(op, Some(live))?;
        // SAFETY: 8 bytes of pinned host memory the finished kernel wrote.
        Ok(unsafe { std::ptr::read_volatile(self.host.cell.ptr.cast::<u64>()) })
    }
}
