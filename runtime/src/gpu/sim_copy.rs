//! The simulated fabric's way into the GPU heap (`PSHMEM_SIM_GPU_MEMORY=1`): its NIC threads
//! read and write device memory with copies on a non-blocking stream of their own (never
//! behind an application kernel, which may be waiting for the very data being copied), one
//! copy at a time. It lets the GPU heap be registered as a DMA-BUF registration would be — so
//! the registered path and the efa profile's tagged signals run on a GPU machine without a
//! libfabric that takes GPU memory. A test transport only: the copies cost what a NIC's DMA
//! does not.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream, sys};
use pshmem_transport::DeviceCopy;

use super::{GpuSetup, cu};
use crate::{
    Result,
    cuda::{CudaError, check, driver},
};

/// Offers `t` device copies on `ctx` when the simulated fabric is to take GPU memory
/// (`PSHMEM_SIM_GPU_MEMORY`); other transports ignore the offer.
pub(super) fn offer(
    s: &GpuSetup<'_>,
    ctx: &Arc<CudaContext>,
    t: &mut dyn pshmem_transport::Transport,
) -> Result<()> {
    if s.cfg.transport.sim.gpu_memory {
        let copy = SimCopy::new(ctx).map_err(cu(s.me, "preparing device copies"))?;
        t.attach_device_copy(Arc::new(copy));
    }
    Ok(())
}

/// Copies through one stream of `ctx`.
pub(super) struct SimCopy {
    ctx: Arc<CudaContext>,
    stream: Mutex<Arc<CudaStream>>,
}

impl std::fmt::Debug for SimCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCopy").finish_non_exhaustive()
    }
}

impl SimCopy {
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Self, CudaError> {
        let stream = ctx
            .new_stream()
            .map_err(driver("creating the simulated NIC's stream"))?;
        Ok(Self {
            ctx: ctx.clone(),
            stream: Mutex::new(stream),
        })
    }

    /// Runs `copy` on the stream (the context bound to this thread) and waits for it.
    fn run(&self, copy: impl FnOnce(sys::CUstream) -> sys::CUresult) -> Result<(), String> {
        let stream = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        self.ctx
            .bind_to_thread()
            .map_err(|e| format!("binding the CUDA context: {e}"))?;
        let st = stream.cu_stream();
        check(copy(st), "cuMemcpyAsync").map_err(|e| e.to_string())?;
        // SAFETY: a live stream of the bound context.
        check(
            unsafe { sys::cuStreamSynchronize(st) },
            "cuStreamSynchronize",
        )
        .map_err(|e| e.to_string())
    }
}

impl DeviceCopy for SimCopy {
    fn read(&self, src: u64, dst: &mut [u8]) -> Result<(), String> {
        let (ptr, len) = (dst.as_mut_ptr(), dst.len());
        // SAFETY: `dst` is a live host buffer of `len` bytes, borrowed until the copy finished
        // (`run` synchronizes); `src` lies in a registered device range (the sim checked it).
        self.run(|st| unsafe { sys::cuMemcpyDtoHAsync_v2(ptr.cast(), src, len, st) })
    }

    fn write(&self, dst: u64, src: &[u8]) -> Result<(), String> {
        // SAFETY: as in `read`, the other way.
        self.run(|st| unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), st) })
    }
}
