//! The proxy's hands on this PE's GPU (`pshmem_proxy::DeviceMem`): copies on the proxy's own
//! non-blocking stream (so they never wait behind an application kernel, which may itself be
//! waiting for the proxy), and AMOs by a one-thread kernel on the same stream — the CPU never
//! does an atomic on GPU memory (no GDRCopy), so AMOs from kernels and from remote PEs are
//! atomic with respect to each other.

use std::{
    collections::VecDeque,
    ffi::c_void,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use cudarc::driver::{CudaContext, CudaStream, sys};
use pshmem_abi::{AMO_WIDE, AmoOp};
use pshmem_proxy::{DeviceError, DeviceMem};

use super::{kargs::AmoArgs, mem::HostAlloc};
use crate::cuda::{CudaError, Kernel, check, driver, record};

/// This PE's GPU heap as its proxy reaches it.
pub(super) struct CudaDeviceMem {
    pub(super) ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Whether the context is current on the proxy thread (bound at its first use).
    bound: bool,
    amo: Kernel<AmoArgs>,
    heap: (u64, u64),
    /// Pinned host cell the AMO kernel writes the old value to.
    result: HostAlloc,
    /// Host ranges page-locked by `pin`, unregistered on drop.
    pinned: Vec<usize>,
    /// How started copies are seen to finish.
    finished: Finished,
    /// Tickets of the latest started and the latest finished copy.
    started: u64,
    done: u64,
}

/// How the proxy learns that its started copies finished.
enum Finished {
    /// The stream writes each copy's ticket into this pinned word behind the copy
    /// (`cuStreamWriteValue64_v2`, with its memory barrier): a finished copy is one load, no driver
    /// call. With events instead, their queries took a quarter of the proxy's time when a
    /// kernel of 32 blocks waited on the ring (proxy trace, H100: 192 of 798 ms).
    Word { cell: HostAlloc, dev: u64 },
    /// An event recorded behind each copy (GPUs without 64-bit stream memory operations):
    /// pending ones oldest first with their tickets, and finished ones for reuse.
    Events {
        pending: VecDeque<(u64, Event)>,
        spare: Vec<Event>,
    },
}

/// A CUDA event of the proxy's stream.
struct Event(sys::CUevent);

// SAFETY: a CUDA event handle may be used from any thread that has its context current; the
// proxy owns it and uses it from its own thread only (after binding the context).
unsafe impl Send for Event {}

impl CudaDeviceMem {
    /// Built during initialization, before the application can launch a kernel: the stream,
    /// the first copy and the first AMO launch are made here, synchronized, so that whatever
    /// the driver does on first use (stream set-up, loading the AMO kernel under lazy loading)
    /// is never done while an application kernel spins waiting for this proxy.
    pub(super) fn new(
        ctx: Arc<CudaContext>,
        amo: Kernel<AmoArgs>,
        heap: (u64, u64),
        result: HostAlloc,
    ) -> Result<Self, CudaError> {
        ctx.bind_to_thread()
            .map_err(driver("binding the context"))?;
        let stream = ctx
            .new_stream()
            .map_err(driver("creating the proxy's stream"))?;
        let mem_ops = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)
            .map_err(driver("querying stream memory operations"))?;
        let finished = if mem_ops == 1 {
            let cell = HostAlloc::pinned(&ctx, 64)?;
            // SAFETY: a fresh pinned allocation of 64 bytes, 8-aligned; nothing else uses it.
            unsafe { cell.ptr.cast::<u64>().write_volatile(0) };
            let dev = cell.device_ptr()?;
            Finished::Word { cell, dev }
        } else {
            tracing::info!("this GPU lacks 64-bit stream memory operations: copies use events");
            Finished::Events {
                pending: VecDeque::new(),
                spare: Vec::new(),
            }
        };
        let mut d = Self {
            ctx,
            stream,
            bound: false,
            amo,
            heap,
            result,
            pinned: Vec::new(),
            finished,
            started: 0,
            done: 0,
        };
        // A read of the heap's first word, by copy and by the AMO kernel (a fetch changes
        // nothing): both paths the proxy uses, each synchronized.
        let mut word = 0u64;
        // SAFETY: 8 bytes at the heap's base (the heap is at least one page) into a live local.
        unsafe { d.copy_on_stream(&mut word as *mut u64 as u64, heap.0, 8) }?;
        d.amo_on_stream(heap.0, (AmoOp::Fetch, true, 0, 0), &mut || {})?;
        Ok(d)
    }

    /// The proxy's stream, with the context made current on the calling thread the first time.
    fn stream(&mut self) -> Result<Arc<CudaStream>, CudaError> {
        if !self.bound {
            self.ctx
                .bind_to_thread()
                .map_err(driver("binding the context"))?;
            self.bound = true;
        }
        Ok(self.stream.clone())
    }

    /// # Safety
    /// As [`DeviceMem::copy`].
    unsafe fn copy_on_stream(&mut self, dst: u64, src: u64, len: usize) -> Result<(), CudaError> {
        let s = self.stream.cu_stream();
        // SAFETY: the caller guarantees both ranges; unified addressing lets the driver infer
        // each side's kind; the stream is synchronized before returning.
        let rc = unsafe { sys::cuMemcpyAsync(dst, src, len, s) };
        check(rc, "cuMemcpyAsync")?;
        // SAFETY: a plain synchronization of our own stream.
        let rc = unsafe { sys::cuStreamSynchronize(s) };
        check(rc, "cuStreamSynchronize")?;
        Ok(())
    }

    /// Marks what was just enqueued on stream `s` with the next ticket: the stream writes it
    /// into the ticket word behind the work, or an event is recorded; returns the ticket.
    fn mark(&mut self, s: sys::CUstream) -> Result<u64, CudaError> {
        let ticket = self.started + 1;
        match &mut self.finished {
            Finished::Word { dev, .. } => {
                let flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
                // SAFETY: a write of our pinned, device-mapped ticket word on our stream, behind
                // the work (the default flags order that work's writes before it).
                let rc = unsafe { sys::cuStreamWriteValue64_v2(s, *dev, ticket, flags) };
                check(rc, "cuStreamWriteValue64_v2")?;
            }
            Finished::Events { pending, spare } => {
                let ev = match spare.pop() {
                    Some(e) => e,
                    None => {
                        let mut e = std::ptr::null_mut();
                        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
                        // SAFETY: creates an event in the bound context into a live local.
                        let rc = unsafe { sys::cuEventCreate(&mut e, flags) };
                        check(rc, "cuEventCreate")?;
                        Event(e)
                    }
                };
                // SAFETY: our event, recorded on our stream behind the work.
                let rc = unsafe { sys::cuEventRecord(ev.0, s) };
                if let Err(e) = check(rc, "cuEventRecord") {
                    spare.push(ev);
                    return Err(e);
                }
                pending.push_back((ticket, ev));
            }
        }
        self.started = ticket;
        Ok(ticket)
    }

    fn amo_on_stream(
        &mut self,
        addr: u64,
        (op, wide, operand, compare): (AmoOp, bool, u64, u64),
        idle: &mut dyn FnMut(),
    ) -> Result<u64, CudaError> {
        let args = AmoArgs {
            addr,
            operand,
            compare,
            result: self.result.device_ptr()?,
            sub: u32::from(op.code() | if wide { AMO_WIDE } else { 0 }),
            _pad: 0,
        };
        let s = self.stream.cu_stream();
        // SAFETY: the address is inside the heap and aligned (checked by the proxy, or the
        // heap's base); the result cell is pinned and device-mapped.
        unsafe { self.amo.launch((1, 1), 1, s, args) }?;
        // Not a blocking synchronize: the kernel needs an SM, and the GPU's blocks may all be
        // waiting for ring space that only the proxy (in `idle`) can free.
        loop {
            // SAFETY: a query of our own stream.
            match unsafe { sys::cuStreamQuery(s) } {
                sys::CUresult::CUDA_SUCCESS => break,
                sys::CUresult::CUDA_ERROR_NOT_READY => idle(),
                rc => check(rc, "cuStreamQuery (the AMO kernel)")?,
            }
        }
        // SAFETY: the kernel finished (its stream is idle); the cell is 8 aligned bytes.
        Ok(unsafe { std::ptr::read_volatile(self.result.ptr.cast::<u64>()) })
    }
}

impl DeviceMem for CudaDeviceMem {
    fn heap(&self) -> (u64, u64) {
        self.heap
    }

    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), DeviceError> {
        if len == 0 {
            return Ok(());
        }
        self.stream()?;
        // SAFETY: forwarded.
        Ok(unsafe { self.copy_on_stream(dst, src, len) }?)
    }

    unsafe fn copy_start(&mut self, dst: u64, src: u64, len: usize) -> Result<u64, DeviceError> {
        let s = self.stream()?.cu_stream();
        // SAFETY: the caller keeps both ranges valid until its ticket is seen; unified
        // addressing lets the driver infer each side's kind.
        let rc = unsafe { sys::cuMemcpyAsync(dst, src, len, s) };
        check(rc, "cuMemcpyAsync")?;
        Ok(self.mark(s)?)
    }

    fn store_start(
        &mut self,
        addr: u64,
        value: u64,
        width: u8,
    ) -> Result<Option<u64>, DeviceError> {
        // A stream memory operation, not a copy: no DMA set-up, and no host buffer to keep
        // alive. Only where finished copies are watched through the ticket word (the device
        // has stream memory operations).
        let aligned = matches!(width, 4 | 8) && addr % u64::from(width) == 0;
        if !matches!(self.finished, Finished::Word { .. }) || !aligned {
            return Ok(None);
        }
        let s = self.stream()?.cu_stream();
        let flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        // SAFETY: the engine checked that `addr..addr + width` lies in this PE's GPU heap; an
        // aligned 4- or 8-byte write on our stream (checked above).
        let rc = unsafe {
            if width == 8 {
                sys::cuStreamWriteValue64_v2(s, addr, value, flags)
            } else {
                sys::cuStreamWriteValue32_v2(s, addr, value as u32, flags)
            }
        };
        check(rc, "cuStreamWriteValue (a peer's p)")?;
        Ok(Some(self.mark(s)?))
    }

    fn copies_done(&mut self) -> Result<u64, DeviceError> {
        match &mut self.finished {
            Finished::Word { cell, .. } => {
                // SAFETY: our pinned, 8-aligned ticket word, written only by our stream.
                let word = unsafe { &*cell.ptr.cast::<AtomicU64>() };
                // Acquire: pairs with the stream's ordered write; the copies it covers are done.
                self.done = word.load(Ordering::Acquire);
            }
            Finished::Events { pending, spare } => {
                while let Some((ticket, ev)) = pending.front() {
                    // SAFETY: a query of our own recorded event.
                    match unsafe { sys::cuEventQuery(ev.0) } {
                        sys::CUresult::CUDA_SUCCESS => {
                            self.done = *ticket;
                            let (_, ev) = pending.pop_front().expect("the front");
                            spare.push(ev);
                        }
                        sys::CUresult::CUDA_ERROR_NOT_READY => break,
                        rc => check(rc, "cuEventQuery (a proxy copy)")?,
                    }
                }
            }
        }
        Ok(self.done)
    }

    fn amo(
        &mut self,
        addr: u64,
        op: AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
        idle: &mut dyn FnMut(),
    ) -> Result<u64, DeviceError> {
        self.stream()?;
        Ok(self.amo_on_stream(addr, (op, wide, operand, compare), idle)?)
    }

    unsafe fn pin(&mut self, ptr: *mut u8, len: usize) {
        if let Err(e) = self.ctx.bind_to_thread() {
            tracing::info!("could not page-lock {len} bytes of staging memory: {e}");
            return;
        }
        // SAFETY: the caller keeps the range allocated while this value lives; unregistered in
        // Drop.
        let r = unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, 0) };
        match check(r, "cuMemHostRegister") {
            Ok(()) => self.pinned.push(ptr as usize),
            // Best effort: copies from unpinned memory are slower, not wrong.
            Err(e) => tracing::info!("could not page-lock {len} bytes of staging memory: {e}"),
        }
    }
}

impl Drop for CudaDeviceMem {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        for p in self.pinned.drain(..) {
            // SAFETY: registered by `pin`, still allocated (the engine drops its device before
            // its staging buffer: field order there).
            record(&self.ctx, unsafe {
                sys::cuMemHostUnregister(p as *mut c_void)
            });
        }
        if let Finished::Events { pending, spare } = &mut self.finished {
            for ev in pending.drain(..).map(|(_, e)| e).chain(spare.drain(..)) {
                // SAFETY: our event; a pending one is released by CUDA once its work finished.
                record(&self.ctx, unsafe { sys::cuEventDestroy_v2(ev.0) });
            }
        }
    }
}
