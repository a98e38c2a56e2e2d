//! The GPU path's memory: device allocations, pinned host memory, peers' heaps opened through
//! CUDA IPC, and the heap's DMA-BUF export. Each owns its allocation and releases it in `Drop`,
//! where a failure is recorded in the context for the next call (or `Gpu::check`, or finalize)
//! to report.

use std::{ffi::c_void, os::fd::OwnedFd, sync::Arc};

use cudarc::driver::{CudaContext, sys};

use crate::cuda::{CudaError, check, record};

/// Device memory, zeroed, freed on drop.
pub(super) struct DevAlloc {
    ctx: Arc<CudaContext>,
    pub(super) ptr: sys::CUdeviceptr,
}

impl DevAlloc {
    /// `len` bytes of zeroed device memory (the context bound by the caller).
    pub(super) fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, CudaError> {
        let mut ptr = 0;
        // SAFETY: out-pointer for a fresh allocation, the context bound by the caller.
        let rc = unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) };
        check(rc, "cuMemAlloc")?;
        let a = Self {
            ctx: ctx.clone(),
            ptr,
        };
        // SAFETY: `ptr` is a fresh allocation of at least `len` bytes; the context is
        // synchronized so the zeroes are in place before anyone is told the address.
        let rc = unsafe { sys::cuMemsetD8_v2(ptr, 0, len.max(1)) };
        check(rc, "cuMemsetD8")?;
        // SAFETY: a plain synchronization of the bound context.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")?;
        Ok(a)
    }
}

impl Drop for DevAlloc {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: allocated by cuMemAlloc, freed once, no kernel or proxy uses it any more
        // (the proxy is stopped first).
        record(&self.ctx, unsafe { sys::cuMemFree_v2(self.ptr) });
    }
}

/// Pinned host memory mapped for the device, freed on drop.
pub(super) struct HostAlloc {
    ctx: Arc<CudaContext>,
    pub(super) ptr: *mut c_void,
    pub(super) len: usize,
}

// SAFETY: owned memory, only freed in Drop; accessed through the proxy's checked views.
unsafe impl Send for HostAlloc {}
// SAFETY: as above.
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    /// `len` bytes of pinned host memory, mapped for the device.
    pub(super) fn pinned(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, CudaError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: out-pointer for a fresh pinned allocation, the context bound by the caller.
        let rc = unsafe { sys::cuMemHostAlloc(&mut ptr, len, flags) };
        check(rc, "cuMemHostAlloc")?;
        Ok(Self {
            ctx: ctx.clone(),
            ptr,
            len,
        })
    }

    /// The device's address of this memory.
    pub(super) fn device_ptr(&self) -> Result<u64, CudaError> {
        let mut d = 0u64;
        // SAFETY: allocated with DEVICEMAP; out-pointer for its device address.
        let rc = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr, 0) };
        check(rc, "cuMemHostGetDevicePointer")?;
        Ok(d)
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: allocated by cuMemHostAlloc, freed once after its users stopped.
        record(&self.ctx, unsafe { sys::cuMemFreeHost(self.ptr) });
    }
}

/// A peer's heap opened through CUDA IPC, closed on drop.
pub(super) struct IpcMapping {
    ctx: Arc<CudaContext>,
    pub(super) ptr: sys::CUdeviceptr,
}

impl IpcMapping {
    /// Opens a peer's exported heap (lazy peer access).
    pub(super) fn open(
        ctx: &Arc<CudaContext>,
        handle: sys::CUipcMemHandle,
    ) -> Result<Self, CudaError> {
        let mut ptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: a handle exported by the peer's cuIpcGetMemHandle; out-pointer.
        let rc = unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, handle, flags) };
        check(rc, "cuIpcOpenMemHandle")?;
        Ok(Self {
            ctx: ctx.clone(),
            ptr,
        })
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: opened by cuIpcOpenMemHandle, closed once, after kernels finished with it.
        record(&self.ctx, unsafe { sys::cuIpcCloseMemHandle(self.ptr) });
    }
}

/// Exports `len` bytes of device memory at `ptr` as a DMA-BUF fd (for NICs that register GPU
/// memory).
pub(super) fn export_dmabuf(ptr: u64, len: usize) -> Result<OwnedFd, CudaError> {
    let mut fd: std::ffi::c_int = -1;
    let kind = sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
    // SAFETY: `ptr..ptr + len` is one cuMemAlloc allocation (page-aligned, whole); `fd` is the
    // out-parameter of the DMA-BUF handle type.
    let rc = unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut std::ffi::c_int).cast(),
            ptr,
            len,
            kind,
            0,
        )
    };
    check(rc, "cuMemGetHandleForAddressRange (DMA-BUF)")?;
    // SAFETY: a fresh fd that the driver handed to us.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Makes every synchronous CUDA copy into or out of the allocation at `ptr` complete before the
/// call returns (`CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`). A provider that takes GPU memory by
/// copying it itself (libfabric's shm and tcp) uses `cudaMemcpy`, which may return before a
/// device-to-device copy, or the DMA of a pageable host-to-device one, has landed: it would
/// report the write complete and the signal after it could overtake the data.
pub(super) fn set_sync_memops(ptr: u64) -> Result<(), CudaError> {
    let on: std::ffi::c_uint = 1;
    // SAFETY: `ptr` lies in a live cuMemAlloc allocation; the attribute's value is a c_uint,
    // read by the call only.
    let rc = unsafe {
        sys::cuPointerSetAttribute(
            (&on as *const std::ffi::c_uint).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
            ptr,
        )
    };
    check(rc, "cuPointerSetAttribute (SYNC_MEMOPS)")
}
