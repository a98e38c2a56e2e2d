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

use std::{
    ffi::{CStr, c_void},
    sync::{Arc, Mutex},
};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg, sys,
};
use pshmem_abi::{AMO_WIDE, AmoOp, error as code};
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{DeviceMem, Health, HeapMem, Proxy, ProxyConfig, ProxySetup};
use pshmem_ring::Ring;
use pshmem_transport::{LocalMem, MemKind};

use crate::{
    alloc::{Allocator, RESERVED},
    cuda::{self, RingDeviceHandle},
    error::{Error, Result},
};

/// Whether the GPU path can start here (a driver and a device), or why not.
pub fn probe() -> std::result::Result<(), String> {
    match cuda::devices()? {
        d if d.is_empty() => Err("no CUDA device".into()),
        _ => Ok(()),
    }
}

/// Result cells for ring gets and fetching AMOs (each claimed by one thread at a time).
const CELLS: usize = 4096;

/// `pshmem_device_state_t` (kernels/include/pshmem/state.h; every offset is compared with the C
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
}

const _: () = assert!(std::mem::size_of::<DeviceState>() == 128);
const _: () = assert!(std::mem::offset_of!(DeviceState, ring) == 32);
const _: () = assert!(std::mem::offset_of!(DeviceState, dev_error) == 112);

// SAFETY: a plain #[repr(C)] struct of integers, laid out as the C struct it mirrors.
unsafe impl DeviceRepr for DeviceState {}

fn check(r: sys::CUresult, what: &'static str, me: usize) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            me,
            what,
            detail: format!("{r:?}"),
        })
    }
}

/// Device memory freed on drop.
struct DevAlloc {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl DevAlloc {
    fn new(ctx: &Arc<CudaContext>, len: usize, me: usize, what: &'static str) -> Result<Self> {
        let mut ptr = 0;
        check(
            // SAFETY: out-pointer for a fresh allocation, the context bound by the caller.
            unsafe { sys::cuMemAlloc_v2(&mut ptr, len.max(1)) },
            what,
            me,
        )?;
        let a = Self {
            ctx: ctx.clone(),
            ptr,
        };
        check(
            // SAFETY: `ptr` is a fresh allocation of at least `len` bytes; the context is
            // synchronized so the zeroes are in place before anyone is told the address.
            unsafe {
                let r = sys::cuMemsetD8_v2(ptr, 0, len.max(1));
                if r == sys::CUresult::CUDA_SUCCESS {
                    sys::cuCtxSynchronize()
                } else {
                    r
                }
            },
            what,
            me,
        )?;
        Ok(a)
    }
}

impl Drop for DevAlloc {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemAlloc, freed once, no kernel or proxy uses it any more
        // (the proxy is stopped first: field order of `Gpu`).
        unsafe {
            let _ = sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// Pinned host memory freed on drop.
struct HostAlloc {
    ctx: Arc<CudaContext>,
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: owned memory, only freed in Drop; accessed through the proxy's checked views.
unsafe impl Send for HostAlloc {}
// SAFETY: as above.
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    /// `len` bytes of pinned host memory, mapped for the device.
    fn pinned(ctx: &Arc<CudaContext>, len: usize, me: usize) -> Result<Self> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: out-pointer for a fresh pinned allocation, the context bound by the caller.
            unsafe {
                sys::cuMemHostAlloc(
                    &mut ptr,
                    len,
                    sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
                )
            },
            "allocating pinned host memory",
            me,
        )?;
        Ok(Self {
            ctx: ctx.clone(),
            ptr,
            len,
        })
    }
}

/// Exports `len` bytes of device memory at `ptr` as a DMA-BUF fd (for NICs that register GPU
/// memory).
fn export_dmabuf(ptr: u64, len: usize, me: usize) -> Result<std::os::fd::OwnedFd> {
    let mut fd: std::ffi::c_int = -1;
    check(
        // SAFETY: `ptr..ptr + len` is one cuMemAlloc allocation (page-aligned, whole); `fd` is
        // the out-parameter of the DMA-BUF handle type.
        unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut std::ffi::c_int).cast(),
                ptr,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        },
        "exporting the GPU heap as a DMA-BUF",
        me,
    )?;
    // SAFETY: a fresh fd that the driver handed to us.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by cuMemHostAlloc, freed once after its users stopped.
        unsafe {
            let _ = sys::cuMemFreeHost(self.ptr);
        }
    }
}

/// A peer's heap opened through CUDA IPC, closed on drop.
struct IpcMapping {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: opened by cuIpcOpenMemHandle, closed once, after kernels finished with it.
        unsafe {
            let _ = sys::cuIpcCloseMemHandle(self.ptr);
        }
    }
}

/// The proxy's access to this PE's GPU: copies on its own non-blocking stream (so they never
/// wait behind an application kernel, which may itself be waiting for the proxy), and the AMO
/// kernel on the same stream.
struct CudaDeviceMem {
    ctx: Arc<CudaContext>,
    stream: Option<Arc<CudaStream>>,
    amo: CudaFunction,
    heap: (u64, u64),
    /// Pinned host cell the AMO kernel writes the old value to.
    result: HostAlloc,
    pinned: Vec<usize>,
}

impl CudaDeviceMem {
    fn stream(&mut self) -> std::result::Result<Arc<CudaStream>, String> {
        if let Some(s) = &self.stream {
            return Ok(s.clone());
        }
        // First use, on the proxy thread: bind the context there.
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        let s = self.ctx.new_stream().map_err(|e| e.to_string())?;
        self.stream = Some(s.clone());
        Ok(s)
    }
}

impl DeviceMem for CudaDeviceMem {
    fn heap(&self) -> (u64, u64) {
        self.heap
    }

    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> std::result::Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        let s = self.stream()?;
        // SAFETY: the caller guarantees both ranges; unified addressing lets the driver infer
        // each side's kind; the stream is synchronized before returning.
        let r = unsafe {
            let r = sys::cuMemcpyAsync(dst, src, len, s.cu_stream());
            if r == sys::CUresult::CUDA_SUCCESS {
                sys::cuStreamSynchronize(s.cu_stream())
            } else {
                r
            }
        };
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!(
                "cuMemcpy of {len} bytes {src:#x} -> {dst:#x}: {r:?}"
            ))
        }
    }

    fn amo(
        &mut self,
        addr: u64,
        op: AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
    ) -> std::result::Result<u64, String> {
        let s = self.stream()?;
        let sub = u32::from(op.code() | if wide { AMO_WIDE } else { 0 });
        let mut dev_result = 0u64;
        // SAFETY: the cell was allocated with DEVICEMAP; out-pointer for its device address.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev_result, self.result.ptr, 0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuMemHostGetDevicePointer: {r:?}"));
        }
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
        unsafe { b.launch(cfg) }.map_err(|e| format!("launching the AMO kernel: {e}"))?;
        s.synchronize()
            .map_err(|e| format!("the AMO kernel failed: {e}"))?;
        // SAFETY: the kernel finished (stream synchronized); the cell is 8 aligned bytes.
        Ok(unsafe { std::ptr::read_volatile(self.result.ptr.cast::<u64>()) })
    }

    unsafe fn pin(&mut self, ptr: *mut u8, len: usize) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: the caller keeps the range allocated while this value lives; unregistered in
        // Drop.
        let r = unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, 0) };
        if r == sys::CUresult::CUDA_SUCCESS {
            self.pinned.push(ptr as usize);
        } else {
            tracing::info!("could not page-lock {len} bytes of staging memory: {r:?}");
        }
    }
}

impl Drop for CudaDeviceMem {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        for p in self.pinned.drain(..) {
            // SAFETY: registered by `pin`, still allocated (the engine drops us before its
            // staging buffer: field order there keeps the device with the staged state).
            unsafe {
                let _ = sys::cuMemHostUnregister(p as *mut c_void);
            }
        }
    }
}

/// This PE's GPU: heap, peers, ring, proxy and the runtime's own kernels. Created by
/// [`crate::Pshmem::gpu_init`].
pub struct Gpu {
    // Drop order: the proxy first (it uses the heap, the landing area and the ring), then the
    // IPC mappings, then the memory.
    proxy: Mutex<Option<Proxy>>,
    _ipc: Vec<IpcMapping>,
    /// The host-staged path's landing area (None when the heap is registered by DMA-BUF).
    _landing: Option<HostAlloc>,
    /// The heap's DMA-BUF, while registered.
    _dmabuf: Option<std::os::fd::OwnedFd>,
    _misc: DevAlloc,
    _heap: DevAlloc,
    ring: Arc<Ring>,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// pshmem_k_quiet and pshmem_k_barrier_all, fetched once: with CUDA's lazy loading,
    /// fetching a function while a kernel waits on a peer can stall the context (and with it
    /// the proxy that the peer's progress depends on).
    k_quiet: CudaFunction,
    k_barrier: CudaFunction,
    state: DeviceState,
    peers: Vec<u64>,
    pub(crate) alloc: Mutex<Allocator>,
    registered: bool,
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
    pub heap_len: usize,
    pub disable_p2p: bool,
    pub ring_slots: usize,
    pub landing_slots: usize,
    pub op_timeout: std::time::Duration,
    pub proxy: ProxyConfig,
    pub health: Arc<Health>,
}

impl Gpu {
    /// Collective: allocates the heap, opens same-host peers' heaps, starts the proxy.
    pub(crate) fn create(s: GpuSetup<'_>) -> Result<Self> {
        let GpuSetup {
            bs,
            me,
            n,
            heap_len,
            disable_p2p,
            ring_slots,
            landing_slots,
            op_timeout,
            proxy: pcfg,
            health,
        } = s;
        let cuda_err = |what: &'static str| move |detail: String| Error::Cuda { me, what, detail };
        let devs = cuda::devices().map_err(cuda_err("no GPU path"))?;
        if devs.is_empty() {
            return Err(Error::Cuda {
                me,
                what: "no GPU path",
                detail: "no CUDA device".into(),
            });
        }
        let ordinal = match pshmem_env::CUDA_DEVICE.opt_usize()? {
            Some(d) if d < devs.len() => d,
            Some(d) => {
                return Err(Error::Cuda {
                    me,
                    what: "PSHMEM_CUDA_DEVICE",
                    detail: format!("device {d}, but {} exist", devs.len()),
                });
            }
            None => bs.local_rank() % devs.len(),
        };
        if n > (RESERVED / 8) as usize {
            return Err(Error::Cuda {
                me,
                what: "GPU path",
                detail: format!("{n} PEs: the device barrier supports {}", RESERVED / 8),
            });
        }
        let ctx = cuda::open(ordinal).map_err(cuda_err("opening the device"))?;
        ctx.bind_to_thread()
            .map_err(|e| cuda_err("binding the context")(e.to_string()))?;
        let heap = DevAlloc::new(&ctx, heap_len, me, "allocating the GPU heap")?;

        // CUDA IPC: every PE publishes its heap's handle and its GPU's PCI bus id.
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        check(
            // SAFETY: out-pointer; `heap.ptr` is a cuMemAlloc allocation.
            unsafe { sys::cuIpcGetMemHandle(&mut handle, heap.ptr) },
            "cuIpcGetMemHandle",
            me,
        )?;
        let mut bus = [0 as std::ffi::c_char; 32];
        check(
            // SAFETY: a 32-byte buffer for the NUL-terminated bus id of a valid device.
            unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), 32, ctx.cu_device()) },
            "cuDeviceGetPCIBusId",
            me,
        )?;
        let mut rec = Vec::with_capacity(64 + 32 + 8);
        rec.extend(handle.reserved.iter().map(|&c| c as u8));
        rec.extend(bus.iter().map(|&c| c as u8));
        rec.extend((heap_len as u64).to_le_bytes());
        let all = bs.allgather(&rec)?;
        let mut peers = vec![0u64; n];
        peers[me] = heap.ptr;
        let mut ipc = Vec::new();
        for (r, other) in all.iter().enumerate() {
            if r == me || disable_p2p || !bs.same_host(r) {
                continue;
            }
            let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
            for (d, s) in h.reserved.iter_mut().zip(&other[..64]) {
                *d = *s as std::ffi::c_char;
            }
            let peer_bus = CStr::from_bytes_until_nul(&other[64..96])
                .map(|c| c.to_owned())
                .unwrap_or_default();
            let mut pdev = 0;
            let mut can = 0;
            // SAFETY: a NUL-terminated bus id; out-pointers.
            let reachable = unsafe {
                sys::cuDeviceGetByPCIBusId(&mut pdev, peer_bus.as_ptr())
                    == sys::CUresult::CUDA_SUCCESS
                    && (pdev == ctx.cu_device()
                        || (sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), pdev)
                            == sys::CUresult::CUDA_SUCCESS
                            && can == 1))
            };
            if !reachable {
                tracing::warn!(
                    "PE {me}: GPU {:?} of PE {r} is not peer-accessible from this GPU: its heap is reached through the proxy",
                    peer_bus
                );
                continue;
            }
            let mut ptr = 0;
            // SAFETY: a handle exported by the peer's cuIpcGetMemHandle; out-pointer.
            let rc = unsafe {
                sys::cuIpcOpenMemHandle_v2(
                    &mut ptr,
                    h,
                    sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
                )
            };
            if rc != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!(
                    "PE {me}: opening PE {r}'s GPU heap through CUDA IPC failed ({rc:?}): it is reached through the proxy"
                );
                continue;
            }
            peers[r] = ptr;
            ipc.push(IpcMapping {
                ctx: ctx.clone(),
                ptr,
            });
        }

        // Device-side bookkeeping: peer table, result cells and owners, barrier epoch, error.
        let peer_off = 0usize;
        let owner_off = peer_off + n * 8;
        let cell_off = (owner_off + CELLS * 4).next_multiple_of(64);
        let epoch_off = cell_off + CELLS * 8;
        let err_off = epoch_off + 64;
        let misc = DevAlloc::new(&ctx, err_off + 64, me, "allocating GPU bookkeeping")?;
        check(
            // SAFETY: the peer table fits at the start of `misc`; `peers` is live; synchronized.
            unsafe {
                let r =
                    sys::cuMemcpyHtoD_v2(misc.ptr + peer_off as u64, peers.as_ptr().cast(), n * 8);
                if r == sys::CUresult::CUDA_SUCCESS {
                    sys::cuCtxSynchronize()
                } else {
                    r
                }
            },
            "writing the peer table",
            me,
        )?;

        // The GPU's ring and its proxy (to every PE not mapped above: RMA into a DMA-BUF
        // registration where the provider offers it, else the host-staged path).
        let (ring, ring_handle) =
            cuda::gpu_ring(&ctx, ring_slots).map_err(cuda_err("creating the GPU ring"))?;
        health.watch([ring.clone()]);
        let result = HostAlloc::pinned(&ctx, 64, me)?;
        let runtime = cuda::load(&ctx, pshmem_kernels::RUNTIME)
            .map_err(cuda_err("loading the runtime kernels"))?;
        let amo = runtime
            .load_function("pshmem_k_amo")
            .map_err(|e| cuda_err("loading pshmem_k_amo")(e.to_string()))?;
        let mut t =
            pshmem_transport::open_from_env_on(bs, &[]).map_err(|source| Error::Transport {
                me,
                what: "opening the GPU proxy's transport",
                source: Box::new(source),
            })?;
        let terr = |what: &'static str| {
            move |source| Error::Transport {
                me,
                what,
                source: Box::new(source),
            }
        };
        // Where the provider registers GPU memory by DMA-BUF (and every PE's GPU exports it),
        // the heap itself is registered and data moves by RMA; otherwise host staging.
        let dmabuf = t.caps().gpu_memory
            && t.caps().dmabuf
            && ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
                .is_ok_and(|v| v == 1);
        let registered = bs
            .allgather(&[u8::from(dmabuf)])?
            .iter()
            .all(|v| v.first() == Some(&1));
        let (region, mr, landing, dmabuf_fd) = if registered {
            let fd = export_dmabuf(heap.ptr, heap_len, me)?;
            // SAFETY: a view of the GPU heap for the transport's bookkeeping; the proxy never
            // dereferences it in GPU mode (copies and AMOs go through the device), and the heap
            // outlives the proxy (field order of Gpu).
            let view = unsafe { HeapMem::new(heap.ptr as *mut u8, heap_len) };
            // SAFETY: the heap outlives the transport, owned by the proxy (field order).
            let mr = unsafe {
                t.mr_reg(LocalMem {
                    ptr: heap.ptr as *mut u8,
                    len: heap_len,
                    kind: MemKind::Cuda {
                        device: ordinal as i32,
                        dmabuf_fd: Some(std::os::fd::AsRawFd::as_raw_fd(&fd)),
                        dmabuf_offset: 0,
                    },
                })
            }
            .map_err(terr("registering the GPU heap (DMA-BUF)"))?;
            (view, mr, None, Some(fd))
        } else {
            let slot = pshmem_proxy::landing_slot_bytes(pcfg.staging_chunk);
            let landing = HostAlloc::pinned(&ctx, n * landing_slots.max(1) * slot, me)?;
            // SAFETY: a view of the landing area, which outlives the proxy (field order).
            let view = unsafe { HeapMem::new(landing.ptr.cast(), landing.len) };
            // SAFETY: as above: registered memory outlives the transport, owned by the proxy.
            let mr = unsafe {
                t.mr_reg(LocalMem {
                    ptr: landing.ptr.cast(),
                    len: landing.len,
                    kind: MemKind::Host,
                })
            }
            .map_err(terr("registering the GPU landing area"))?;
            (view, mr, Some(landing), None)
        };
        let remotes = pshmem_transport::exchange_mr(t.as_mut(), bs, mr)
            .map_err(terr("exchanging GPU heap registrations"))?;
        let dev = CudaDeviceMem {
            ctx: ctx.clone(),
            stream: None,
            amo,
            heap: (heap.ptr, heap_len as u64),
            result,
            pinned: Vec::new(),
        };
        let proxy = Proxy::spawn(
            format!("pshmem-gpu-proxy-{me}"),
            ProxySetup {
                transport: t,
                heap: region,
                heap_mr: mr,
                remote_heaps: remotes,
                rings: vec![ring.clone()],
                device: Some(Box::new(dev)),
                device_registered: registered,
            },
            pcfg,
            health.clone(),
        )?;

        let state = DeviceState {
            my_pe: me as i32,
            n_pes: n as i32,
            heap_base: heap.ptr,
            heap_size: heap_len as u64,
            peer_base: misc.ptr + peer_off as u64,
            ring: ring_handle,
            cell_owner: misc.ptr + owner_off as u64,
            cells: misc.ptr + cell_off as u64,
            n_cells: CELLS as u32,
            any_ring: u32::from(peers.contains(&0)),
            barrier_epoch: misc.ptr + epoch_off as u64,
            barrier_off: 0,
            dev_error: misc.ptr + err_off as u64,
            timeout_ns: op_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
        };
        let stream = ctx
            .new_stream()
            .map_err(|e| cuda_err("creating a stream")(e.to_string()))?;
        let g = Self {
            proxy: Mutex::new(Some(proxy)),
            _ipc: ipc,
            _landing: landing,
            _dmabuf: dmabuf_fd,
            _misc: misc,
            _heap: heap,
            ring,
            ctx,
            stream,
            k_quiet: runtime
                .load_function("pshmem_k_quiet")
                .map_err(|e| cuda_err("loading pshmem_k_quiet")(e.to_string()))?,
            k_barrier: runtime
                .load_function("pshmem_k_barrier_all")
                .map_err(|e| cuda_err("loading pshmem_k_barrier_all")(e.to_string()))?,
            state,
            peers,
            alloc: Mutex::new(Allocator::new(heap_len as u64)),
            registered,
            ordinal,
            me,
            health,
        };
        g.init_module(&runtime)?;
        bs.barrier()?;
        Ok(g)
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

    /// How PEs that are not mapped are reached: "dmabuf" (RMA into the registered GPU heap) or
    /// "host-staged".
    pub fn remote_path(&self) -> &'static str {
        if self.registered {
            "dmabuf"
        } else {
            "host-staged"
        }
    }

    /// The device address of this PE's copy of a symmetric object.
    pub fn ptr(&self, p: crate::SymPtr) -> u64 {
        self.state.heap_base + p.offset()
    }

    /// Heap size in bytes.
    pub fn heap_size(&self) -> usize {
        self.state.heap_size as usize
    }

    /// Loads an embedded fatbin and fills its `pshmem_dstate`, so its kernels can use the
    /// device API. Fetch the module's functions before launching kernels that wait on peers:
    /// with CUDA's lazy loading, fetching one while such a kernel runs can stall the context.
    pub fn load(&self, fatbin: &[u8]) -> Result<Arc<CudaModule>> {
        let m = cuda::load(&self.ctx, fatbin).map_err(|detail| Error::Cuda {
            me: self.me,
            what: "loading a module",
            detail,
        })?;
        self.init_module(&m)?;
        Ok(m)
    }

    fn init_module(&self, m: &Arc<CudaModule>) -> Result<()> {
        let err = |detail: String| Error::Cuda {
            me: self.me,
            what: "setting pshmem_dstate (does the module include pshmem/device.cuh?)",
            detail,
        };
        self.ctx.bind_to_thread().map_err(|e| err(e.to_string()))?;
        let g = m
            .get_global("pshmem_dstate", &self.stream)
            .map_err(|e| err(e.to_string()))?;
        let len = g.len();
        let (ptr, _sync) = g.device_ptr(&self.stream);
        if len != std::mem::size_of::<DeviceState>() {
            return Err(err(format!(
                "pshmem_dstate is {len} bytes, the runtime's state {}",
                std::mem::size_of::<DeviceState>()
            )));
        }
        // The global of exactly this size; the state is live until the copy finished.
        self.sync_copy(
            ptr,
            &self.state as *const DeviceState as u64,
            std::mem::size_of::<DeviceState>(),
            "writing pshmem_dstate",
        )
    }

    /// Copies bytes into this PE's GPU heap (synchronous).
    pub fn copy_in(&self, p: crate::SymPtr, src: &[u8]) -> Result<()> {
        self.bounds("copy_in", p, src.len())?;
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.cuda("copy_in", e.to_string()))?;
        // SAFETY: the range is inside the heap (checked); `src` is live until the stream is
        // synchronized.
        self.sync_copy(self.ptr(p), src.as_ptr() as u64, src.len(), "copy_in")
    }

    /// Copies bytes out of this PE's GPU heap (synchronous).
    pub fn copy_out(&self, p: crate::SymPtr, dst: &mut [u8]) -> Result<()> {
        self.bounds("copy_out", p, dst.len())?;
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.cuda("copy_out", e.to_string()))?;
        // SAFETY: the range is inside the heap (checked); `dst` is live and exclusive until
        // the stream is synchronized.
        self.sync_copy(dst.as_mut_ptr() as u64, self.ptr(p), dst.len(), "copy_out")
    }

    /// Zeroes `len` bytes of this PE's GPU heap.
    pub(crate) fn zero(&self, off: u64, len: usize) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.cuda("calloc", e.to_string()))?;
        let st = self.stream.cu_stream();
        check(
            // SAFETY: the allocator handed out `off..off + len` inside the heap. Synchronized: a
            // plain cuMemsetD8 may still run after peers started writing there.
            unsafe {
                let r = sys::cuMemsetD8Async(self.state.heap_base + off, 0, len, st);
                if r == sys::CUresult::CUDA_SUCCESS {
                    sys::cuStreamSynchronize(st)
                } else {
                    r
                }
            },
            "calloc",
            self.me,
        )
    }

    /// A copy on the runtime's stream, finished on return (plain cuMemcpyHtoD from pageable
    /// memory may return before the data is in device memory).
    fn sync_copy(&self, dst: u64, src: u64, len: usize, what: &'static str) -> Result<()> {
        let st = self.stream.cu_stream();
        check(
            // SAFETY: the callers guarantee both ranges; synchronized before returning.
            unsafe {
                let r = sys::cuMemcpyAsync(dst, src, len, st);
                if r == sys::CUresult::CUDA_SUCCESS {
                    sys::cuStreamSynchronize(st)
                } else {
                    r
                }
            },
            what,
            self.me,
        )
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

    fn cuda(&self, what: &'static str, detail: String) -> Error {
        Error::Cuda {
            me: self.me,
            what,
            detail,
        }
    }

    fn launch_one(
        &self,
        f: &CudaFunction,
        stream: &Arc<CudaStream>,
        op: &'static str,
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(f);
        // SAFETY: a kernel without arguments, using the module's filled pshmem_dstate.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(|e| self.cuda(op, e.to_string()))
    }

    /// Enqueues a quiet on `stream`: work after it on the stream starts once every device
    /// operation issued before it by this PE's GPU has completed.
    pub fn quiet_on_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.launch_one(&self.k_quiet, stream, "quiet_on_stream")
    }

    /// Enqueues a barrier over all PEs on `stream` (collective: every PE enqueues it).
    pub fn barrier_all_on_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.launch_one(&self.k_barrier, stream, "barrier_all_on_stream")
    }

    /// The first error a device call recorded, or the data path's fault, as an error naming
    /// the PE; `Ok` when neither happened.
    pub fn check(&self, op: &'static str) -> Result<()> {
        let mut word = 0u64;
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.cuda(op, e.to_string()))?;
        self.sync_copy(&mut word as *mut u64 as u64, self.state.dev_error, 8, op)?;
        let ring = match self.ring.error() {
            Some(pshmem_ring::RingError::Raised { code: c, pe }) => {
                (u64::from(c) << 32) | u64::from(pe.unwrap_or(u32::MAX))
            }
            _ => 0,
        };
        let word = if word != 0 { word } else { ring };
        if word == 0 {
            return Ok(());
        }
        let (c, pe) = ((word >> 32) as u32, word as u32);
        let pe = (pe != u32::MAX).then_some(pe as usize);
        let f = self.health.fault();
        let detail = f.as_ref().map_or_else(
            || format!("device error word {word:#x}"),
            |f| f.detail.clone(),
        );
        let pe = f.as_ref().and_then(|f| f.pe).or(pe);
        Err(match c {
            code::PEER_DEAD => Error::PeerDied {
                me: self.me,
                op,
                pe,
                detail,
            },
            code::BAD_ADDRESS => Error::OpFailed {
                me: self.me,
                op,
                pe,
                detail: "a device call used an address outside the GPU symmetric heap".into(),
            },
            code::TIMEOUT => Error::Timeout {
                me: self.me,
                op,
                waited: std::time::Duration::from_nanos(self.state.timeout_ns),
            },
            code::NO_CELLS => Error::OpFailed {
                me: self.me,
                op,
                pe,
                detail: "no free result cell for a ring get or fetching AMO".into(),
            },
            _ => Error::OpFailed {
                me: self.me,
                op,
                pe,
                detail,
            },
        })
    }

    /// Synchronizes `stream`, then [`Gpu::check`]s.
    pub fn synchronize(&self, stream: &Arc<CudaStream>, op: &'static str) -> Result<()> {
        stream
            .synchronize()
            .map_err(|e| self.cuda(op, e.to_string()))?;
        self.check(op)
    }

    /// Stops the proxy (finalize).
    pub(crate) fn stop(&self) -> Result<()> {
        let p = self.proxy.lock().unwrap_or_else(|p| p.into_inner()).take();
        match p {
            Some(p) => p.stop().map_err(Error::from),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use pshmem_abi::probe::value;

    use super::{DeviceState, RingDeviceHandle};

    #[test]
    fn device_state_matches_the_c_header() {
        let t = "pshmem_device_state_t";
        let rust = [
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
        ];
        for (f, off) in rust {
            assert_eq!(value(&format!("{t}.{f}")), off as u64, "{t}.{f}");
        }
        assert_eq!(
            value(&format!("sizeof {t}")),
            size_of::<DeviceState>() as u64
        );
    }

    #[test]
    fn ring_device_handle_matches_the_c_header() {
        let t = "pshmem_ring_device_t";
        let rust = [
            ("slots", offset_of!(RingDeviceHandle, slots)),
            ("ctrl", offset_of!(RingDeviceHandle, ctrl)),
            ("head", offset_of!(RingDeviceHandle, head)),
            ("tail_cache", offset_of!(RingDeviceHandle, tail_cache)),
            ("capacity", offset_of!(RingDeviceHandle, capacity)),
        ];
        for (f, off) in rust {
            assert_eq!(value(&format!("{t}.{f}")), off as u64, "{t}.{f}");
        }
        assert_eq!(
            value(&format!("sizeof {t}")),
            size_of::<RingDeviceHandle>() as u64
        );
    }
}
