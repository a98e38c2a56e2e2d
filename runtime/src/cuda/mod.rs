//! The CUDA driver, loaded at run time through cudarc: nothing CUDA is needed to build, and a
//! machine without a driver simply has no CUDA devices (the library's presence is checked before
//! anything is called, so nothing panics). Also the GPU side of a command ring: pinned host
//! memory the GPU writes, device-memory counters, and the handle kernels take.
//!
//! Errors the cudarc way: a failed driver call keeps the driver's own error (and with it
//! `cuGetErrorString`'s text) as the source of a [`CudaError`]; a release that fails in `Drop`
//! is recorded in the context ([`CudaContext::record_err`]) and reported by the next call that
//! binds the context, or by `Gpu::check` and finalize.

use std::sync::Arc;

mod kernel;

use cudarc::driver::sys;
pub use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError};
pub use kernel::{Kernel, KernelArgs};
use pshmem_ring::{
    Ring,
    layout::{RingCtrl, Slot},
};
use pshmem_topology::PciAddr;

/// Why a CUDA call failed, or why CUDA cannot be used here.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// A driver call failed; the source is the driver's error.
    #[error("{call} failed: {}", driver_text(source))]
    Driver {
        /// The call (or what it was for).
        call: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// No CUDA driver here.
    #[error("no CUDA driver (libcuda.so) on this machine")]
    NoDriver,
    /// Switched off by the environment.
    #[error("CUDA disabled (PSHMEM_DISABLE_CUDA=1)")]
    Disabled,
    /// No such device.
    #[error("no CUDA device {ordinal} ({count} present)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices present.
        count: usize,
    },
    /// A setting or state the GPU path cannot work with.
    #[error("{0}")]
    Unusable(String),
}

/// `cuGetErrorString`'s text and the code.
fn driver_text(e: &DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{} ({:?})", s.to_string_lossy(), e.0),
        Err(_) => format!("{:?}", e.0),
    }
}

/// A driver call's result as a [`CudaError`] naming `call`.
pub fn check(r: sys::CUresult, call: &'static str) -> Result<(), CudaError> {
    r.result()
        .map_err(|source| CudaError::Driver { call, source })
}

/// Turns a cudarc error into a [`CudaError`] naming `call` (for `map_err`).
pub fn driver(call: &'static str) -> impl FnOnce(DriverError) -> CudaError {
    move |source| CudaError::Driver { call, source }
}

/// In `Drop`: keeps a failed release in the context, for the next call to report (never
/// panics, never discards).
pub(crate) fn record(ctx: &CudaContext, r: sys::CUresult) {
    ctx.record_err(r.result());
}

/// A CUDA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaDevice {
    /// Ordinal.
    pub ordinal: i32,
    /// Name ("NVIDIA H200").
    pub name: String,
    /// PCI address (matches the topology's GPU).
    pub pci: PciAddr,
    /// It exports DMA-BUFs of its memory (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub dmabuf: bool,
}

/// Whether the driver library can be loaded (cudarc panics when it cannot).
fn driver_present() -> Result<(), CudaError> {
    if pshmem_env::DISABLE_CUDA.bool().unwrap_or(false) {
        return Err(CudaError::Disabled);
    }
    // SAFETY: only probes whether the driver library can be loaded.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError::NoDriver);
    }
    Ok(())
}

/// The CUDA devices of this machine in ordinal order, or why there are none.
pub fn devices() -> Result<Vec<CudaDevice>, CudaError> {
    driver_present()?;
    use cudarc::driver::{result, sys::CUdevice_attribute as A};
    result::init().map_err(driver("cuInit"))?;
    let n = result::device::get_count().map_err(driver("cuDeviceGetCount"))?;
    (0..n)
        .map(|i| {
            let dev = result::device::get(i).map_err(driver("cuDeviceGet"))?;
            // SAFETY: `dev` came from cuDeviceGet.
            let attr = |a| unsafe { result::device::get_attribute(dev, a) };
            let get = |a| attr(a).map_err(driver("cuDeviceGetAttribute (PCI address)"));
            Ok(CudaDevice {
                ordinal: i,
                name: result::device::get_name(dev).unwrap_or_else(|_| "?".into()),
                pci: PciAddr {
                    domain: get(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)? as u32,
                    bus: get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)? as u8,
                    dev: get(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)? as u8,
                    func: 0,
                },
                dmabuf: attr(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).is_ok_and(|v| v == 1),
            })
        })
        .collect()
}

/// The ordinal of the CUDA device current on this thread (its current context's), if any:
/// where the NVSHMEM layer completes its two-stage init.
pub fn current_device() -> Option<usize> {
    driver_present().ok()?;
    use cudarc::driver::sys;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: cuInit is idempotent; the others write out-pointers.
    unsafe {
        if sys::cuInit(0) != sys::CUresult::CUDA_SUCCESS
            || sys::cuCtxGetCurrent(&mut ctx) != sys::CUresult::CUDA_SUCCESS
            || ctx.is_null()
        {
            return None;
        }
        let mut dev: sys::CUdevice = 0;
        (sys::cuCtxGetDevice(&mut dev) == sys::CUresult::CUDA_SUCCESS).then_some(dev as usize)
    }
}

/// A kernel's view of a ring: `pshmem_ring_device_t` in `abi/include/pshmem/ring.h` (compared
/// with the C compiler's layout by a test of `gpu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingDeviceHandle {
    /// Device address of the slots (pinned host memory).
    pub slots: u64,
    /// Device address of the control block (pinned host memory).
    pub ctrl: u64,
    /// Device address of the reservation counter (device memory).
    pub head: u64,
    /// Device address of the shared tail cache (device memory).
    pub tail_cache: u64,
    /// Slots.
    pub capacity: u64,
}

const _: () = assert!(std::mem::size_of::<RingDeviceHandle>() == 40);

/// Opens device `ordinal` (checking first that a driver exists: cudarc would panic otherwise).
pub fn open(ordinal: usize) -> Result<Arc<CudaContext>, CudaError> {
    driver_present()?;
    CudaContext::new(ordinal).map_err(driver("opening the CUDA device (cuDevicePrimaryCtxRetain)"))
}

/// Loads an embedded fatbin (see `pshmem-kernels`).
pub fn load(ctx: &Arc<CudaContext>, fatbin: &[u8]) -> Result<Arc<CudaModule>, CudaError> {
    ctx.load_module(cudarc::nvrtc::Ptx::from_binary(fatbin.to_vec()))
        .map_err(driver("loading a module (cuModuleLoadData)"))
}

/// Memory behind a GPU ring: pinned host memory mapped for the device (slots and control
/// block) and device memory (head and tail cache). Freed when the ring is dropped.
struct GpuRingMemory {
    ctx: Arc<CudaContext>,
    host: *mut std::ffi::c_void,
    dev: sys::CUdeviceptr,
}

// SAFETY: the pointers are owned by this value and only freed in Drop; CUDA allocations may be
// freed from any thread with the context bound.
unsafe impl Send for GpuRingMemory {}
// SAFETY: as above; nothing is accessed through `&self`.
unsafe impl Sync for GpuRingMemory {}

impl Drop for GpuRingMemory {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: allocated by `gpu_ring` with these functions (when set), freed once, no longer
        // in use (the ring holding this backing is gone, and kernels using it have finished).
        unsafe {
            record(&self.ctx, sys::cuMemFreeHost(self.host));
            if self.dev != 0 {
                record(&self.ctx, sys::cuMemFree_v2(self.dev));
            }
        }
    }
}

/// A ring whose producers are GPU threads: the slots and the control block in pinned host memory
/// the GPU writes over PCIe (DEVICEMAP|PORTABLE, not write-combined: the proxy reads it), the
/// producers' head and tail cache in device memory. Returns the ring (for a proxy's consumer)
/// and the handle kernels take.
pub fn gpu_ring(
    ctx: &Arc<CudaContext>,
    capacity: usize,
) -> Result<(Arc<Ring>, RingDeviceHandle), CudaError> {
    if !capacity.is_power_of_two() || capacity < 2 {
        return Err(CudaError::Unusable(format!(
            "ring capacity {capacity} is not a power of two >= 2"
        )));
    }
    ctx.bind_to_thread()
        .map_err(driver("binding the context"))?;
    let ctrl_bytes = std::mem::size_of::<RingCtrl>();
    let bytes = ctrl_bytes + capacity * std::mem::size_of::<Slot>();
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
    // SAFETY: out-pointer for a fresh allocation of `bytes`, with the context bound.
    let rc = unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) };
    check(rc, "cuMemHostAlloc (ring)")?;
    // SAFETY: `host` is a fresh allocation of `bytes` bytes; zero is the ring's initial state.
    unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
    let mut host_dev: sys::CUdeviceptr = 0;
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: `host` was allocated with DEVICEMAP; out-pointers for the device addresses.
    let mapped = unsafe {
        check(
            sys::cuMemHostGetDevicePointer_v2(&mut host_dev, host, 0),
            "cuMemHostGetDevicePointer (ring)",
        )
        .and_then(|()| {
            check(
                sys::cuMemAlloc_v2(&mut dev, 16),
                "cuMemAlloc (ring counters)",
            )
        })
        .and_then(|()| check(sys::cuMemsetD8_v2(dev, 0, 16), "cuMemsetD8 (ring counters)"))
    };
    let backing = GpuRingMemory {
        ctx: ctx.clone(),
        host,
        dev,
    };
    mapped?;
    let ctrl = std::ptr::NonNull::new(host.cast::<RingCtrl>()).expect("allocated");
    // SAFETY: the slots follow the 256-byte control block (64-byte aligned) in the allocation.
    let slots = unsafe {
        std::ptr::NonNull::new_unchecked(host.cast::<u8>().add(ctrl_bytes).cast::<Slot>())
    };
    // SAFETY: zeroed, aligned, `capacity` slots and one control block, kept alive by `backing`
    // for the ring's life; only the ring protocol touches them (the GPU and the consumer).
    let ring = unsafe { Ring::from_raw(slots, ctrl, capacity, Box::new(backing)) };
    let handle = RingDeviceHandle {
        slots: host_dev + ctrl_bytes as u64,
        ctrl: host_dev,
        head: dev,
        tail_cache: dev + 8,
        capacity: capacity as u64,
    };
    Ok((ring, handle))
}
