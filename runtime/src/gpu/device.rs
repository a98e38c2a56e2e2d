//! The proxy's hands on this PE's GPU (`pshmem_proxy::DeviceMem`): copies on the proxy's own
//! non-blocking stream (so they never wait behind an application kernel, which may itself be
//! waiting for the proxy), and AMOs by a one-thread kernel on the same stream — the CPU never
//! does an atomic on GPU memory (no GDRCopy), so AMOs from kernels and from remote PEs are
//! atomic with respect to each other.

use std::{ffi::c_void, sync::Arc};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg, sys};
use pshmem_abi::{AMO_WIDE, AmoOp};
use pshmem_proxy::{DeviceError, DeviceMem};

use super::mem::HostAlloc;
use crate::cuda::{check, driver, record};

/// This PE's GPU heap as its proxy reaches it.
pub(super) struct CudaDeviceMem {
    pub(super) ctx: Arc<CudaContext>,
    stream: Option<Arc<CudaStream>>,
    amo: CudaFunction,
    heap: (u64, u64),
    /// Pinned host cell the AMO kernel writes the old value to.
    result: HostAlloc,
    /// Host ranges page-locked by `pin`, unregistered on drop.
    pinned: Vec<usize>,
}

impl CudaDeviceMem {
    pub(super) fn new(
        ctx: Arc<CudaContext>,
        amo: CudaFunction,
        heap: (u64, u64),
        result: HostAlloc,
    ) -> Self {
        Self {
            ctx,
            stream: None,
            amo,
            heap,
            result,
            pinned: Vec::new(),
        }
    }

    fn stream(&mut self) -> Result<Arc<CudaStream>, DeviceError> {
        if let Some(s) = &self.stream {
            return Ok(s.clone());
        }
        // First use, on the proxy thread: bind the context there.
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        let s = self
            .ctx
            .new_stream()
            .map_err(driver("creating the proxy's stream"))?;
        self.stream = Some(s.clone());
        Ok(s)
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
        let s = self.stream()?;
        // SAFETY: the caller guarantees both ranges; unified addressing lets the driver infer
        // each side's kind; the stream is synchronized before returning.
        let rc = unsafe { sys::cuMemcpyAsync(dst, src, len, s.cu_stream()) };
        check(rc, "cuMemcpyAsync")?;
        // SAFETY: a plain synchronization of our own stream.
        let rc = unsafe { sys::cuStreamSynchronize(s.cu_stream()) };
        check(rc, "cuStreamSynchronize")?;
        Ok(())
    }

    fn amo(
        &mut self,
        addr: u64,
        op: AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
    ) -> Result<u64, DeviceError> {
        let s = self.stream()?;
        let sub = u32::from(op.code() | if wide { AMO_WIDE } else { 0 });
        let dev_result = self.result.device_ptr()?;
        let mut b = s.launch_builder(&self.amo);
        b.arg(&addr)
            .arg(&sub)
            .arg(&operand)
            .arg(&compare)
            .arg(&dev_result);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: pshmem_k_amo(u64, u32, u64, u64, u64*): the address is inside the heap and
        // aligned (checked by the proxy); the result cell is pinned and device-mapped.
        unsafe { b.launch(cfg) }.map_err(driver("launching the AMO kernel"))?;
        s.synchronize().map_err(driver("the AMO kernel"))?;
        // SAFETY: the kernel finished (stream synchronized); the cell is 8 aligned bytes.
        Ok(unsafe { std::ptr::read_volatile(self.result.ptr.cast::<u64>()) })
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
    }
}
