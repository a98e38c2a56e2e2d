//! The GPU path: a symmetric heap in device memory, same-host peers' heaps opened through CUDA
//! IPC into a peer table in device memory, the GPU's command ring and its proxy (the host-staged
//! path, see `pshmem_proxy::engine`), and the state every kernel module gets in its
//! `pshmem_dstate` (the device API, `kernels/include/pshmem/device.cuh`).
//!
//! Remote AMOs on GPU memory (the rule): every AMO on a GPU heap is executed by that GPU —
//! kernels use system-scope atomics on their own heap or through NVLink on a peer's, and the
//! proxy applies a remote initiator's AMO with a one-thread kernel on the target GPU. The CPU
//! never does an atomic on GPU memory (no GDRCopy), so all of them are atomic with respect to
//! each other.
//!
//! CUDA failures keep the driver's error as their source ([`CudaError`]); releases that fail in
//! `Drop` are recorded in the context and reported by [`Gpu::check`] or finalize.

mod create;
mod device;
mod heap;
pub mod host_ops;
mod kargs;
mod mem;
pub mod mps;
mod register;
pub mod registration;
mod sim_copy;
mod teams;

use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{CudaContext, CudaModule, CudaStream, DevicePtr, sys};
use pshmem_abi::error as code;
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{Health, HeapMem, Proxy};
use pshmem_ring::Ring;
use pshmem_transport::{LocalMem, MemKind, MrId, Transport};

use self::{
    device::CudaDeviceMem,
    mem::{DevAlloc, HostAlloc, IpcMapping, export_dmabuf, set_sync_memops},
    registration::{HeapRegistration, Want},
    teams::TeamTable,
};
use crate::{
    alloc::{Allocator, RESERVED},
    config::{Config, GpuConfig},
    cuda::{self, CudaError, Kernel, RingDeviceHandle, check, driver},
    error::{Error, Result},
};

/// Whether the GPU path can start here (a driver and a device), or why not.
pub fn probe() -> std::result::Result<(), CudaError> {
    match cuda::devices()?.len() {
        0 => Err(CudaError::NoDevice {
            ordinal: 0,
            count: 0,
        }),
        _ => Ok(()),
    }
}

/// Result cells for ring gets and fetching AMOs (each claimed by one thread at a time).
const CELLS: usize = 4096;

/// `pshmem_device_state_t` (abi/include/pshmem/state.h; every offset is compared with the C
/// compiler's by `device_state_matches_the_c_header`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DeviceState {
    my_pe: i32,
    n_pes: i32,
    heap_base: u64,
    heap_size: u64,
    peer_base: u64,
    ring: RingDeviceHandle,
    cell_owner: u64,
    cells: u64,
    n_cells: u32,
    any_ring: u32,
    barrier_epoch: u64,
    barrier_off: u64,
    dev_error: u64,
    timeout_ns: u64,
    teams: u64,
    max_teams: u32,
    version: u32,
}

/// `PSHMEM_STATE_VERSION` of state.h (checked by the probe test).
pub(crate) const STATE_VERSION: u32 = 2;

const _: () = assert!(std::mem::size_of::<DeviceState>() == 144);

/// The maker of an [`Error::Cuda`] for `what` on PE `me` (for `map_err`).
fn cu(me: usize, what: &'static str) -> impl FnOnce(CudaError) -> Error {
    move |source| Error::Cuda { me, what, source }
}

/// What the GPU path holds until finalize releases it (field order: the IPC mappings of peers'
/// heaps before this PE's own memory).
struct Resources {
    _ipc: Vec<IpcMapping>,
    /// The host-staged path's landing areas, one per proxy thread (none when the heap itself
    /// is registered).
    _landing: Vec<HostAlloc>,
    /// The heap's DMA-BUFs (one per proxy thread's registration), while registered.
    _dmabuf: Vec<std::os::fd::OwnedFd>,
    /// The device handles of every GPU ring ([`Gpu::ring_table`]).
    _ring_table: DevAlloc,
    _misc: DevAlloc,
    _heap: DevAlloc,
}

/// This PE's GPU: heap, peers, ring, proxy and the runtime's own kernels. Created by
/// [`crate::Pshmem::gpu_init`].
pub struct Gpu {
    // Drop order: the proxy first (it uses the heap, the landing area and the ring), then the
    // memory (unless finalize released it already).
    proxies: Mutex<Vec<Proxy>>,
    res: Mutex<Option<Resources>>,
    ring: Arc<Ring>,
    /// Device address and length of the table of every GPU ring's handle (ring 0 first).
    ring_table: (u64, usize),
    /// Every GPU ring and the device address of its reservation counter (finalize drains them).
    rings: Vec<(Arc<Ring>, u64)>,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    state: DeviceState,
    peers: Vec<u64>,
    /// Host puts and gets to mapped peers of at least this many bytes use the copy engine.
    copy_engine_min: usize,
    teams: TeamTable,
    host: host_ops::HostKernels,
    pub(crate) alloc: Mutex<Allocator>,
    /// How the proxy's transport reaches the heap, and why.
    /// How the proxies' transport reaches the heap, and why; `None`: no GPU proxy (every PE of
    /// the job maps every peer's GPU heap through CUDA IPC, so no transport was opened).
    registration: Option<(HeapRegistration, String)>,
    ordinal: usize,
    me: usize,
    health: Arc<Health>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("pe", &self.me)
            .field("device", &self.ordinal)
            .field(
                "heap",
                &format_args!("{:#x}+{}", self.state.heap_base, self.state.heap_size),
            )
            .field("peers", &self.peers)
            .finish_non_exhaustive()
    }
}

/// What `Gpu::create` needs from the runtime.
pub(crate) struct GpuSetup<'a> {
    pub bs: &'a Bootstrap,
    pub me: usize,
    pub n: usize,
    /// The runtime's configuration (its `gpu` section, and what the GPU proxies share with the
    /// host ones).
    pub cfg: &'a Config,
    pub health: Arc<Health>,
    /// The CUDA device to use (else the configuration's, else local rank modulo devices).
    pub device: Option<usize>,
}

impl Gpu {
    /// Every GPU ring with the index just past what kernels have published on it so far: the
    /// operations the proxies still owe peers (e.g. the acks of counted signals that no kernel
    /// quieted) have finished once `completed` reaches it. Finalize waits for that.
    pub fn ring_heads(&self) -> Result<Vec<(Arc<Ring>, u64)>> {
        let mut v = Vec::with_capacity(self.rings.len());
        for (ring, head_at) in &self.rings {
            let mut head = 0u64;
            self.sync_copy(&mut head as *mut u64 as u64, *head_at, 8, "finalize")?;
            v.push((ring.clone(), head));
        }
        Ok(v)
    }

    /// The device address of the table of every GPU ring's handle (`pshmem_ring_device_t`,
    /// ring 0 first: the device API's) and how many there are (`PSHMEM_GPU_RINGS`): kernels
    /// that spread their descriptors over rings take it as an argument.
    pub fn ring_table(&self) -> (u64, usize) {
        self.ring_table
    }

    /// The CUDA device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The context (bind it on threads that launch kernels).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A stream of the runtime (non-blocking).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Whether `pe`'s GPU heap is mapped here (loads and stores), rather than reached through
    /// the proxy.
    pub fn is_direct(&self, pe: usize) -> bool {
        self.peers.get(pe).is_some_and(|&p| p != 0)
    }

    /// How PEs that are not mapped are reached: "dmabuf" or "hmem" (RMA into the registered
    /// GPU heap) or "host-staged"; "none" where every peer is mapped (no GPU proxy).
    pub fn remote_path(&self) -> &'static str {
        self.registration.as_ref().map_or("none", |r| r.0.name())
    }

    /// How the proxy's transport reaches the heap, and why (`PSHMEM_GPU_REGISTRATION`);
    /// `None` where no GPU proxy was started.
    pub fn registration(&self) -> Option<(HeapRegistration, &str)> {
        self.registration.as_ref().map(|r| (r.0, r.1.as_str()))
    }

    /// The device address of this PE's copy of a symmetric object.
    pub fn ptr(&self, p: crate::SymPtr) -> u64 {
        self.state.heap_base + p.offset()
    }

    /// Heap size in bytes.
    pub fn heap_size(&self) -> usize {
        self.state.heap_size as usize
    }

    /// The memory, while not released by finalize (which fails `op` with `Finalized`), with the
    /// context bound to this thread.
    fn live(&self, op: &'static str) -> Result<MutexGuard<'_, Option<Resources>>> {
        let res = self.res.lock().unwrap_or_else(|p| p.into_inner());
        if res.is_none() {
            return Err(Error::Finalized { me: self.me, op });
        }
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.cuda(op, driver("binding the context")(e)))?;
        Ok(res)
    }

    /// Loads an embedded fatbin and fills its `pshmem_dstate`, so its kernels can use the
    /// device API. Load (and fetch the functions) before any kernel that waits on peers can
    /// run: a load may wait for running kernels while holding the driver, and this PE's proxy
    /// needs the driver to land what such a kernel waits for (stalls until the timeout).
    pub fn load(&self, fatbin: &[u8]) -> Result<Arc<CudaModule>> {
        let _live = self.live("load")?;
        let m = cuda::load(&self.ctx, fatbin).map_err(|e| self.cuda("loading a module", e))?;
        self.init_module(&m)?;
        Ok(m)
    }

    /// Writes this PE's device state at `addr`, the device address of a `pshmem_dstate` of
    /// `size` bytes and header version `version` (a translation unit of the application that
    /// registered itself, or a module it loaded). Refuses another size or version: that code
    /// was built against other headers.
    pub fn fill_state_at(&self, addr: u64, size: usize, version: u32) -> Result<()> {
        let what = "filling a registered pshmem_dstate";
        let want = std::mem::size_of::<DeviceState>();
        if size != want || version != STATE_VERSION {
            return Err(self.cuda(
                what,
                CudaError::Unusable(format!(
                    "the code was built against device headers of state version {version} ({size} \
                     bytes); this runtime's is version {STATE_VERSION} ({want} bytes): rebuild it \
                     against this installation's headers"
                )),
            ));
        }
        let _live = self.live(what)?;
        // `addr` is a global of exactly this size (the registrant says so, and the size agrees);
        // the state is live until the copy finished.
        self.sync_copy(addr, &self.state as *const DeviceState as u64, want, what)
    }

    /// Fills `pshmem_dstate` of a module the application loaded itself (`cuModuleLoad*`);
    /// fails (without touching it) when the module has no such global.
    ///
    /// # Safety
    /// `module` is a `CUmodule` (`library == false`) or `CUlibrary` loaded in this PE's context.
    pub unsafe fn init_cumodule(&self, module: *mut std::ffi::c_void, library: bool) -> Result<()> {
        let what = if library {
            "pshmemx_culibrary_init"
        } else {
            "pshmemx_cumodule_init"
        };
        let _live = self.live(what)?;
        let (mut ptr, mut len) = (0u64, 0usize);
        let name = c"pshmem_dstate".as_ptr();
        // SAFETY: a lookup by a NUL-terminated name with out-pointers, in the caller's module
        // or library.
        let rc = unsafe {
            if library {
                sys::cuLibraryGetGlobal(&mut ptr, &mut len, module.cast(), name)
            } else {
                sys::cuModuleGetGlobal_v2(&mut ptr, &mut len, module.cast(), name)
            }
        };
        check(rc, "cuModuleGetGlobal").map_err(|e| {
            self.cuda(
                what,
                CudaError::Unusable(format!(
                    "the module has no pshmem_dstate ({e}): it does not use the device API, or \
                     it was built with -rdc without -DPSHMEM_MODULE_STATE"
                )),
            )
        })?;
        drop(_live);
        self.fill_state_at(ptr, len, STATE_VERSION)
    }

    fn init_module(&self, m: &Arc<CudaModule>) -> Result<()> {
        let what = "setting pshmem_dstate (does the module include pshmem/device.cuh?)";
        let g = m
            .get_global("pshmem_dstate", &self.stream)
            .map_err(|e| self.cuda(what, driver("cuModuleGetGlobal")(e)))?;
        let len = g.len();
        let (ptr, _sync) = g.device_ptr(&self.stream);
        let want = std::mem::size_of::<DeviceState>();
        if len != want {
            return Err(self.cuda(
                what,
                CudaError::Unusable(format!(
                    "pshmem_dstate is {len} bytes, the runtime's state {want}"
                )),
            ));
        }
        // The global of exactly this size; the state is live until the copy finished.
        self.sync_copy(ptr, &self.state as *const DeviceState as u64, want, what)
    }

    /// Copies bytes into this PE's GPU heap (synchronous).
    pub fn copy_in(&self, p: crate::SymPtr, src: &[u8]) -> Result<()> {
        self.bounds("copy_in", p, src.len())?;
        let _live = self.live("copy_in")?;
        // The range is inside the heap (checked); `src` is live until the copy finished.
        self.sync_copy(self.ptr(p), src.as_ptr() as u64, src.len(), "copy_in")
    }

    /// Copies bytes out of this PE's GPU heap (synchronous).
    pub fn copy_out(&self, p: crate::SymPtr, dst: &mut [u8]) -> Result<()> {
        self.bounds("copy_out", p, dst.len())?;
        let _live = self.live("copy_out")?;
        // The range is inside the heap (checked); `dst` is live and exclusive until the copy
        // finished.
        self.sync_copy(dst.as_mut_ptr() as u64, self.ptr(p), dst.len(), "copy_out")
    }

    /// Zeroes `len` bytes of this PE's GPU heap.
    pub(crate) fn zero(&self, off: u64, len: usize) -> Result<()> {
        let _live = self.live("calloc")?;
        let st = self.stream.cu_stream();
        // SAFETY: the allocator handed out `off..off + len` inside the heap. Synchronized: a
        // plain cuMemsetD8 may still run after peers started writing there.
        let rc = unsafe { sys::cuMemsetD8Async(self.state.heap_base + off, 0, len, st) };
        check(rc, "cuMemsetD8Async").map_err(|e| self.cuda("calloc", e))?;
        self.sync_stream("calloc")
    }

    /// A copy on the runtime's stream, finished on return (plain cuMemcpyHtoD from pageable
    /// memory may return before the data is in device memory). The callers guarantee both
    /// ranges.
    fn sync_copy(&self, dst: u64, src: u64, len: usize, what: &'static str) -> Result<()> {
        // SAFETY: the callers guarantee both ranges; synchronized before returning.
        let rc = unsafe { sys::cuMemcpyAsync(dst, src, len, self.stream.cu_stream()) };
        check(rc, "cuMemcpyAsync").map_err(|e| self.cuda(what, e))?;
        self.sync_stream(what)
    }

    fn sync_stream(&self, what: &'static str) -> Result<()> {
        // SAFETY: a plain synchronization of the runtime's stream.
        let rc = unsafe { sys::cuStreamSynchronize(self.stream.cu_stream()) };
        check(rc, "cuStreamSynchronize").map_err(|e| self.cuda(what, e))
    }

    fn bounds(&self, op: &'static str, p: crate::SymPtr, len: usize) -> Result<()> {
        match p.offset().checked_add(len as u64) {
            Some(end) if end <= self.state.heap_size && p.offset() >= RESERVED => Ok(()),
            end => Err(Error::OutOfHeap {
                me: self.me,
                op,
                offset: p.offset(),
                end: end.unwrap_or(u64::MAX),
                start: RESERVED,
                heap: self.state.heap_size,
            }),
        }
    }

    fn cuda(&self, what: &'static str, source: CudaError) -> Error {
        cu(self.me, what)(source)
    }

    /// Enqueues a quiet on `stream`: work after it on the stream starts once every device
    /// operation issued before it by this PE's GPU has completed.
    pub fn quiet_on_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        // SAFETY: a stream of this context, alive while the caller holds it.
        unsafe { self.on_raw_stream(false, stream.cu_stream()) }
    }

    /// Enqueues a barrier over all PEs on `stream` (collective: every PE enqueues it).
    pub fn barrier_all_on_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        // SAFETY: as above.
        unsafe { self.on_raw_stream(true, stream.cu_stream()) }
    }

    /// The first error a device call recorded, the data path's fault, or a CUDA release that
    /// failed in `Drop`, as an error naming the PE; `Ok` when none happened.
    pub fn check(&self, op: &'static str) -> Result<()> {
        self.ctx
            .check_err()
            .map_err(|e| self.cuda(op, driver("an earlier release of GPU memory")(e)))?;
        let _live = self.live(op)?;
        let mut word = 0u64;
        self.sync_copy(&mut word as *mut u64 as u64, self.state.dev_error, 8, op)?;
        let ring = match self.ring.error() {
            Some(pshmem_ring::RingError::Raised { code: c, pe }) => code::word(c, pe),
            _ => 0,
        };
        let word = if word != 0 { word } else { ring };
        let Some((c, pe)) = code::split(word) else {
            return Ok(());
        };
        let pe = pe.map(|p| p as usize);
        let device = |detail: &str| Error::OpFailed {
            me: self.me,
            op,
            pe,
            detail: detail.into(),
            cause: None,
        };
        Err(match c {
            code::BAD_ADDRESS => device(
                "a device call used an address outside the GPU symmetric heap, a PE outside the job, \
                 or a shared- or local-memory buffer for a PE reached through the proxy",
            ),
            code::NO_CELLS => device("no free result cell for a ring get or fetching AMO"),
            code::TIMEOUT => Error::Timeout {
                me: self.me,
                op,
                waited: std::time::Duration::from_nanos(self.state.timeout_ns),
            },
            c => crate::checks::fault_error(self.me, op, self.health.fault(), c, pe),
        })
    }

    /// Synchronizes `stream`, then [`Gpu::check`]s.
    pub fn synchronize(&self, stream: &Arc<CudaStream>, op: &'static str) -> Result<()> {
        stream
            .synchronize()
            .map_err(|e| self.cuda(op, driver("cuStreamSynchronize")(e)))?;
        self.check(op)
    }

    /// Finalize: stops the proxy, releases the GPU memory and reports any CUDA release that
    /// failed meanwhile.
    pub(crate) fn stop(&self) -> Result<()> {
        let ps = std::mem::take(&mut *self.proxies.lock().unwrap_or_else(|p| p.into_inner()));
        // Every proxy stops, whatever an earlier one reported; the first error is kept.
        let mut stopped = Ok(());
        for p in ps {
            let r = p.stop().map_err(Error::from);
            stopped = stopped.and(r);
        }
        // The device is idle for this PE (finalize's quiet and barrier came first).
        let synced = self.sync_stream("finalize");
        drop(self.res.lock().unwrap_or_else(|p| p.into_inner()).take());
        let released = self
            .ctx
            .check_err()
            .map_err(|e| self.cuda("finalize", driver("releasing GPU memory")(e)));
        stopped.and(synced).and(released)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use pshmem_abi_probe::{assert_mirror, value};

    use super::{DeviceState, RingDeviceHandle};

    #[test]
    fn device_state_matches_the_c_header() {
        let fields = [
            ("my_pe", offset_of!(DeviceState, my_pe)),
            ("n_pes", offset_of!(DeviceState, n_pes)),
            ("heap_base", offset_of!(DeviceState, heap_base)),
            ("heap_size", offset_of!(DeviceState, heap_size)),
            ("peer_base", offset_of!(DeviceState, peer_base)),
            ("ring", offset_of!(DeviceState, ring)),
            ("cell_owner", offset_of!(DeviceState, cell_owner)),
            ("cells", offset_of!(DeviceState, cells)),
            ("n_cells", offset_of!(DeviceState, n_cells)),
            ("any_ring", offset_of!(DeviceState, any_ring)),
            ("barrier_epoch", offset_of!(DeviceState, barrier_epoch)),
            ("barrier_off", offset_of!(DeviceState, barrier_off)),
            ("dev_error", offset_of!(DeviceState, dev_error)),
            ("timeout_ns", offset_of!(DeviceState, timeout_ns)),
            ("teams", offset_of!(DeviceState, teams)),
            ("max_teams", offset_of!(DeviceState, max_teams)),
            ("version", offset_of!(DeviceState, version)),
        ];
        assert_mirror("pshmem_device_state_t", &fields, size_of::<DeviceState>());
        assert_eq!(
            value("PSHMEM_STATE_VERSION"),
            u64::from(super::STATE_VERSION)
        );
    }

    #[test]
    fn team_entry_matches_the_c_header() {
        use super::teams::TeamEntry;
        let fields = [
            ("size", offset_of!(TeamEntry, size)),
            ("my_index", offset_of!(TeamEntry, my_index)),
            ("members", offset_of!(TeamEntry, members)),
            ("sync_off", offset_of!(TeamEntry, sync_off)),
            ("epoch", offset_of!(TeamEntry, epoch)),
            ("scratch", offset_of!(TeamEntry, scratch)),
            ("scratch_bytes", offset_of!(TeamEntry, scratch_bytes)),
            ("ll_off", offset_of!(TeamEntry, ll_off)),
            ("ll_seq", offset_of!(TeamEntry, ll_seq)),
        ];
        assert_mirror("pshmem_team_device_t", &fields, size_of::<TeamEntry>());
        assert_eq!(value("PSHMEM_LL_BYTES"), super::teams::LL_BYTES as u64);
    }

    #[test]
    fn ring_device_handle_matches_the_c_header() {
        let fields = [
            ("slots", offset_of!(RingDeviceHandle, slots)),
            ("ctrl", offset_of!(RingDeviceHandle, ctrl)),
            ("head", offset_of!(RingDeviceHandle, head)),
            ("tail_cache", offset_of!(RingDeviceHandle, tail_cache)),
            ("capacity", offset_of!(RingDeviceHandle, capacity)),
        ];
        assert_mirror(
            "pshmem_ring_device_t",
            &fields,
            size_of::<RingDeviceHandle>(),
        );
    }
}
