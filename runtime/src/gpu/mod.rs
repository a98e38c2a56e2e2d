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

mod device;
pub mod host_ops;
mod kargs;
mod mem;
pub mod mps;
mod teams;

use std::{
    ffi::CStr,
    sync::{Arc, Mutex, MutexGuard},
};

use cudarc::driver::{CudaContext, CudaModule, CudaStream, DevicePtr, sys};
use pshmem_abi::error as code;
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{Health, HeapMem, Proxy};
use pshmem_ring::Ring;
use pshmem_transport::{LocalMem, MemKind, MrId, Transport};

use self::{
    device::CudaDeviceMem,
    mem::{DevAlloc, HostAlloc, IpcMapping, export_dmabuf},
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
    /// The host-staged path's landing areas, one per proxy thread (none when the heap is
    /// registered by DMA-BUF).
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
    /// The runtime's configuration (its `gpu` section, and what the GPU proxies share with the
    /// host ones).
    pub cfg: &'a Config,
    pub health: Arc<Health>,
    /// The CUDA device to use (else the configuration's, else local rank modulo devices).
    pub device: Option<usize>,
}

/// The proxy's registration of this PE's heap: the GPU heap itself (DMA-BUF) or the landing
/// area of the host-staged path.
struct Registration {
    region: HeapMem,
    mr: MrId,
    landing: Option<HostAlloc>,
    dmabuf: Option<std::os::fd::OwnedFd>,
}

impl Gpu {
    /// Collective: allocates the heap, opens same-host peers' heaps, starts the proxy.
    pub(crate) fn create(s: GpuSetup<'_>) -> Result<Self> {
        let (me, n) = (s.me, s.n);
        let mut clock = crate::startup::Phases::start(me, "GPU init");
        let ordinal = choose_device(s.bs, me, n, s.device.or(s.cfg.gpu.device))?;
        let ctx = cuda::open(ordinal).map_err(cu(me, "opening the device"))?;
        ctx.bind_to_thread()
            .map_err(|e| cu(me, "binding the context")(driver("cuCtxSetCurrent")(e)))?;
        clock.mark("context");
        let heap =
            DevAlloc::new(&ctx, s.cfg.gpu.heap_size).map_err(cu(me, "allocating the GPU heap"))?;
        clock.mark("heap");
        let (peers, ipc) = open_peers(&s, &ctx, &heap)?;
        warn_about_proxy_settings(me, &peers, &s.cfg.gpu);
        clock.mark("peer heaps");

        // Device-side bookkeeping: peer table, result cells and owners, barrier epoch, error.
        let peer_off = 0usize;
        let owner_off = peer_off + n * 8;
        let cell_off = (owner_off + CELLS * 4).next_multiple_of(64);
        let epoch_off = cell_off + CELLS * 8;
        let err_off = epoch_off + 64;
        let misc =
            DevAlloc::new(&ctx, err_off + 64).map_err(cu(me, "allocating GPU bookkeeping"))?;
        // SAFETY: the peer table fits at the start of `misc`; `peers` is live until the copy
        // finished (synchronized below).
        let rc = unsafe {
            sys::cuMemcpyHtoD_v2(misc.ptr + peer_off as u64, peers.as_ptr().cast(), n * 8)
        };
        check(rc, "cuMemcpyHtoD (peer table)").map_err(cu(me, "writing the peer table"))?;
        // SAFETY: a plain synchronization of the bound context.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
            .map_err(cu(me, "writing the peer table"))?;

        // The GPU's rings and their proxies (to every PE not mapped above: RMA into a DMA-BUF
        // registration where the provider offers it, else the host-staged path). Ring r is
        // drained by proxy thread r mod threads; thread t of every PE talks to thread t.
        let mut rings = Vec::with_capacity(s.cfg.gpu.rings);
        let mut handles = Vec::with_capacity(s.cfg.gpu.rings);
        for _ in 0..s.cfg.gpu.rings {
            let (ring, handle) =
                cuda::gpu_ring(&ctx, s.cfg.ring_slots).map_err(cu(me, "creating the GPU ring"))?;
            rings.push(ring);
            handles.push(handle);
        }
        s.health.watch(rings.iter().cloned());
        let ring_table = DevAlloc::new(
            &ctx,
            s.cfg.gpu.rings * std::mem::size_of::<RingDeviceHandle>(),
        )
        .map_err(cu(me, "allocating the ring table"))?;
        // SAFETY: the table holds exactly `handles`, which live until the synchronization.
        let rc = unsafe {
            sys::cuMemcpyHtoD_v2(
                ring_table.ptr,
                handles.as_ptr().cast(),
                s.cfg.gpu.rings * std::mem::size_of::<RingDeviceHandle>(),
            )
        };
        check(rc, "cuMemcpyHtoD (ring table)").map_err(cu(me, "writing the ring table"))?;
        // SAFETY: a plain synchronization of the bound context.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
            .map_err(cu(me, "writing the ring table"))?;
        let ring_handle = handles[0];
        let ring = rings[0].clone();
        clock.mark("rings");
        let runtime = cuda::load(&ctx, pshmem_kernels::RUNTIME)
            .map_err(cu(me, "loading the runtime kernels"))?;
        clock.mark("kernels");
        // Every kernel is fetched here, once: with CUDA's lazy loading, fetching a function
        // while a kernel waits on a peer can stall the context (and with it the proxy that the
        // peer's progress depends on).
        let loaded = || cu(me, "loading the runtime kernels");
        let threads = s.cfg.gpu.proxy_threads.min(s.cfg.gpu.rings).max(1);
        // On an RDMA provider, every proxy thread stripes over the NICs placement put next to
        // this GPU (2 on p5en, 4 on p5), so its traffic never crosses a PCIe switch.
        let rails = crate::placement::gpu_proxy_rails(
            s.cfg.sources(),
            (s.bs.local_size(), s.bs.local_rank()),
            ordinal,
            me,
        );
        clock.mark("rails");
        let start = crate::proxies::Start {
            bs: s.bs,
            transport: &s.cfg.transport,
            rails: &rails,
            proxy: &s.cfg.proxy,
            cpus: &[],
            health: &s.health,
            name: "pshmem-gpu-proxy",
            heap: "the GPU heap",
        };
        let mut proxies = Vec::with_capacity(threads);
        let mut landing = Vec::new();
        let mut dmabuf = Vec::new();
        for t in 0..threads {
            let amo = Kernel::load(&ctx, &runtime, "pshmem_k_amo").map_err(loaded())?;
            proxies.push(start.thread(t, threads, &rings, |tr| {
                let reg = register(&s, &ctx, &heap, ordinal, tr)?;
                let result = HostAlloc::pinned(&ctx, 64)
                    .map_err(cu(me, "allocating the AMO result cell"))?;
                let heap_range = (heap.ptr, s.cfg.gpu.heap_size as u64);
                let dev = CudaDeviceMem::new(ctx.clone(), amo, heap_range, result)
                    .map_err(cu(me, "preparing the proxy's stream and AMO kernel"))?;
                let registered = reg.dmabuf.is_some();
                landing.extend(reg.landing);
                dmabuf.extend(reg.dmabuf);
                Ok(crate::proxies::Served {
                    region: reg.region,
                    mr: reg.mr,
                    device: Some(Box::new(dev)),
                    registered,
                })
            })?);
        }
        clock.mark("proxies");
        // The teams' sync words: the first allocation of the GPU heap, the same on every PE.
        let mut alloc = Allocator::new(s.cfg.gpu.heap_size as u64);
        let sync_base = alloc
            .alloc(TeamTable::sync_bytes(s.cfg.max_teams, n), 256)
            .ok_or_else(|| Error::Config {
                me,
                detail: format!(
                    "the GPU heap ({} bytes) cannot hold the sync words of {} teams of {n} PEs",
                    s.cfg.gpu.heap_size, s.cfg.max_teams
                ),
            })?;
        let teams = TeamTable::new(&ctx, s.cfg.max_teams, n, sync_base)
            .map_err(cu(me, "allocating the team table"))?;
        let cell = HostAlloc::pinned(&ctx, 8).map_err(cu(me, "allocating a result cell"))?;
        let host = host_ops::HostKernels::new(&ctx, &runtime, cell).map_err(loaded())?;
        let state = DeviceState {
            my_pe: me as i32,
            n_pes: n as i32,
            heap_base: heap.ptr,
            heap_size: s.cfg.gpu.heap_size as u64,
            peer_base: misc.ptr + peer_off as u64,
            ring: ring_handle,
            cell_owner: misc.ptr + owner_off as u64,
            cells: misc.ptr + cell_off as u64,
            n_cells: CELLS as u32,
            any_ring: u32::from(peers.contains(&0)),
            barrier_epoch: misc.ptr + epoch_off as u64,
            barrier_off: 0,
            dev_error: misc.ptr + err_off as u64,
            timeout_ns: s.cfg.op_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            teams: teams.entries(),
            max_teams: teams.max() as u32,
            version: STATE_VERSION,
        };
        let stream = ctx
            .new_stream()
            .map_err(|e| cu(me, "creating a stream")(driver("cuStreamCreate")(e)))?;
        let registered = !dmabuf.is_empty();
        let g = Self {
            proxies: Mutex::new(proxies),
            ring_table: (ring_table.ptr, s.cfg.gpu.rings),
            rings: rings
                .iter()
                .cloned()
                .zip(handles.iter().map(|h| h.head))
                .collect(),
            res: Mutex::new(Some(Resources {
                _ipc: ipc,
                _landing: landing,
                _dmabuf: dmabuf,
                _ring_table: ring_table,
                _misc: misc,
                _heap: heap,
            })),
            ring,
            ctx,
            stream,
            state,
            peers,
            copy_engine_min: s.cfg.gpu.copy_engine_min,
            teams,
            host,
            alloc: Mutex::new(alloc),
            registered,
            ordinal,
            me,
            health: s.health.clone(),
        };
        g.init_module(&runtime)?;
        clock.mark("state");
        s.bs.barrier()?;
        clock.mark("barrier");
        clock.log();
        Ok(g)
    }
}

/// The CUDA device of this PE: the one given, `PSHMEM_CUDA_DEVICE`, or the local rank modulo the
/// devices.
fn choose_device(bs: &Bootstrap, me: usize, n: usize, given: Option<usize>) -> Result<usize> {
    let devs = cuda::devices().map_err(cu(me, "no GPU path"))?;
    if devs.is_empty() {
        return Err(cu(me, "no GPU path")(CudaError::NoDevice {
            ordinal: 0,
            count: 0,
        }));
    }
    let ordinal = match given {
        Some(d) if d < devs.len() => d,
        Some(d) => {
            return Err(cu(me, "PSHMEM_CUDA_DEVICE")(CudaError::NoDevice {
                ordinal: d,
                count: devs.len(),
            }));
        }
        None => bs.local_rank() % devs.len(),
    };
    if n > (RESERVED / 8) as usize {
        return Err(cu(me, "GPU path")(CudaError::Unusable(format!(
            "{n} PEs: the device barrier supports {}",
            RESERVED / 8
        ))));
    }
    Ok(ordinal)
}

/// CUDA IPC, collective: every PE publishes its heap's handle and its GPU's PCI bus id; same-host
/// peers whose GPUs are peer-accessible (or the same GPU) open each other's heaps, unless
/// `disable_p2p`. Returns each PE's heap address on this GPU (0: through the ring) and the
/// mappings.
fn open_peers(
    s: &GpuSetup<'_>,
    ctx: &Arc<CudaContext>,
    heap: &DevAlloc,
) -> Result<(Vec<u64>, Vec<IpcMapping>)> {
    let me = s.me;
    let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
    // SAFETY: out-pointer; `heap.ptr` is a cuMemAlloc allocation.
    let rc = unsafe { sys::cuIpcGetMemHandle(&mut handle, heap.ptr) };
    check(rc, "cuIpcGetMemHandle").map_err(cu(me, "exporting the GPU heap"))?;
    let mut bus = [0 as std::ffi::c_char; 32];
    // SAFETY: a 32-byte buffer for the NUL-terminated bus id of a valid device.
    let rc = unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), 32, ctx.cu_device()) };
    check(rc, "cuDeviceGetPCIBusId").map_err(cu(me, "exporting the GPU heap"))?;
    let mut rec = Vec::with_capacity(64 + 32 + 8);
    rec.extend(handle.reserved.iter().map(|&c| c as u8));
    rec.extend(bus.iter().map(|&c| c as u8));
    rec.extend((s.cfg.gpu.heap_size as u64).to_le_bytes());
    let all = s.bs.allgather(&rec)?;
    let bus_of = |r: usize| {
        s.bs.same_host(r).then(|| {
            CStr::from_bytes_until_nul(&all[r][64..96])
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
    };
    let buses: Vec<Option<String>> = (0..s.n).map(bus_of).collect();
    if let Some(mine) = &buses[me] {
        mps::warn_if_unserved(me, mine, &mps::sharing(me, mine, &buses));
    }
    let mut peers = vec![0u64; s.n];
    peers[me] = heap.ptr;
    let mut ipc = Vec::new();
    for (r, other) in all.iter().enumerate() {
        if r == me || s.cfg.disable_p2p || !s.bs.same_host(r) {
            continue;
        }
        let peer_bus = CStr::from_bytes_until_nul(&other[64..96])
            .map(|c| c.to_owned())
            .unwrap_or_default();
        if !peer_accessible(ctx, &peer_bus) {
            tracing::warn!(
                "PE {me}: GPU {peer_bus:?} of PE {r} is not peer-accessible from this GPU: its heap is reached through the proxy"
            );
            continue;
        }
        let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
        for (d, s) in h.reserved.iter_mut().zip(&other[..64]) {
            *d = *s as std::ffi::c_char;
        }
        match IpcMapping::open(ctx, h) {
            Ok(m) => {
                peers[r] = m.ptr;
                ipc.push(m);
            }
            Err(e) => tracing::warn!(
                "PE {me}: opening PE {r}'s GPU heap through CUDA IPC: {e}; it is reached through the proxy"
            ),
        }
    }
    Ok((peers, ipc))
}

/// Whether the GPU with PCI bus id `bus` is this context's device or peer-accessible from it.
fn peer_accessible(ctx: &CudaContext, bus: &CStr) -> bool {
    let (mut pdev, mut can) = (0, 0);
    // SAFETY: a NUL-terminated bus id; out-pointers.
    unsafe {
        sys::cuDeviceGetByPCIBusId(&mut pdev, bus.as_ptr()) == sys::CUresult::CUDA_SUCCESS
            && (pdev == ctx.cu_device()
                || (sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), pdev)
                    == sys::CUresult::CUDA_SUCCESS
                    && can == 1))
    }
}

/// Two CUDA settings matter only where some peer is reached through the proxy (pshmrun sets
/// both for such jobs, and the Python package on import; other launchers may not), so warn when
/// this PE has such a peer and runs without them:
/// - CUDA's lazy loading (the default since 12.2) loads a kernel at its first launch, and a
///   load may wait for the context's running kernels while holding the driver: a kernel of the
///   application that waits for data only this PE's proxy can land (the proxy copies and
///   launches in the same context) then stalls with the first launch of any other kernel, until
///   PSHMEM_OP_TIMEOUT. (A module load does the same: seen on the H100 when the MoE kernels were
///   loaded at the first dispatch, behind a barrier through the proxy; the runtime's own kernels
///   are fetched at init for this reason.)
/// - CUDA's default hardware queues: streams share them, and the proxy's copies and AMO kernels
///   can wait behind an application kernel that waits for them (an intermittent MoE stall on
///   the H100 with 8; none in 12 runs with 16).
fn warn_about_proxy_settings(me: usize, peers: &[u64], cfg: &GpuConfig) {
    let through_proxy = peers.iter().enumerate().any(|(pe, &b)| pe != me && b == 0);
    if !through_proxy {
        return;
    }
    let mut mode = sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING;
    // SAFETY: an out-pointer to a live value; the driver is loaded (a context exists).
    let rc = unsafe { sys::cuModuleGetLoadingMode(&mut mode) };
    if rc == sys::CUresult::CUDA_SUCCESS && mode == sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING
    {
        tracing::warn!(
            "PE {me}: CUDA lazy module loading is on and some peers are reached through the \
             proxy: a kernel waiting on a peer can deadlock with the first launch of another \
             kernel in this process (until PSHMEM_OP_TIMEOUT); set CUDA_MODULE_LOADING=EAGER \
             (pshmrun does for such jobs, and the pshmem Python package unless it is set), or \
             launch every kernel once before such waits"
        );
    }
    if !cfg.cuda_connections_set {
        tracing::warn!(
            "PE {me}: some peers are reached through the proxy and {} is unset: with CUDA's \
             default hardware queues the proxy's copies can wait behind a kernel that waits \
             for them; set it to 16 (64 / PEs per GPU under MPS) before CUDA starts (pshmrun \
             does for such jobs)",
            pshmem_env::CUDA_DEVICE_MAX_CONNECTIONS
        );
    }
}

/// Where the provider registers GPU memory by DMA-BUF (and every PE's GPU exports it), the heap
/// itself is registered and data moves by RMA; otherwise the pinned landing area of the
/// host-staged path is. Collective.
fn register(
    s: &GpuSetup<'_>,
    ctx: &Arc<CudaContext>,
    heap: &DevAlloc,
    ordinal: usize,
    t: &mut dyn Transport,
) -> Result<Registration> {
    let me = s.me;
    let terr = |what| crate::proxies::transport_error(me, what);
    let gpu_dmabuf = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
        .is_ok_and(|v| v == 1);
    let dmabuf = t.caps().gpu_memory && t.caps().dmabuf && gpu_dmabuf;
    let votes = s.bs.allgather(&[u8::from(dmabuf)])?;
    let everywhere = votes.iter().all(|v| v.first() == Some(&1));
    if !everywhere && t.caps().gpu_memory {
        // The fabric can take GPU memory, yet the heap goes through host staging: say why,
        // loudly (a silent fallback costs an order of magnitude on the data path).
        let refused: Vec<usize> = (0..votes.len())
            .filter(|&p| votes[p].first() != Some(&1))
            .collect();
        tracing::warn!(
            "PE {me}: the GPU heap is not registered with the NIC (DMA-BUF); every PE goes \
             through host staging. Refused by PE(s) {refused:?}; here: DMA-BUF registration \
             {} (libfabric ≥ 1.20 at run time), the GPU's DMA-BUF support {}",
            if t.caps().dmabuf {
                "offered"
            } else {
                "not offered"
            },
            if gpu_dmabuf { "present" } else { "absent" }
        );
    }
    if everywhere {
        let fd = export_dmabuf(heap.ptr, s.cfg.gpu.heap_size)
            .map_err(cu(me, "exporting the GPU heap"))?;
        // SAFETY: a view of the GPU heap for the transport's bookkeeping; the proxy never
        // dereferences it in GPU mode (copies and AMOs go through the device), and the heap
        // outlives the proxy (finalize stops the proxy first).
        let region = unsafe { HeapMem::new(heap.ptr as *mut u8, s.cfg.gpu.heap_size) };
        let kind = MemKind::Cuda {
            device: ordinal as i32,
            dmabuf_fd: Some(std::os::fd::AsRawFd::as_raw_fd(&fd)),
            dmabuf_offset: 0,
        };
        let mem = LocalMem {
            ptr: heap.ptr as *mut u8,
            len: s.cfg.gpu.heap_size,
            kind,
        };
        // SAFETY: the heap outlives the transport, owned by the proxy (stopped first).
        let mr = unsafe { t.mr_reg(mem) }.map_err(terr("registering the GPU heap (DMA-BUF)"))?;
        return Ok(Registration {
            region,
            mr,
            landing: None,
            dmabuf: Some(fd),
        });
    }
    let slot = pshmem_proxy::landing_slot_bytes(s.cfg.proxy.staging_chunk);
    let landing = HostAlloc::pinned(ctx, s.n * s.cfg.gpu.landing_slots.max(1) * slot)
        .map_err(cu(me, "allocating the landing area"))?;
    // SAFETY: a view of the landing area, which outlives the proxy (stopped first).
    let region = unsafe { HeapMem::new(landing.ptr.cast(), landing.len) };
    let mem = LocalMem {
        ptr: landing.ptr.cast(),
        len: landing.len,
        kind: MemKind::Host,
    };
    // SAFETY: as above: registered memory outlives the transport, owned by the proxy.
    let mr = unsafe { t.mr_reg(mem) }.map_err(terr("registering the GPU landing area"))?;
    Ok(Registration {
        region,
        mr,
        landing: Some(landing),
        dmabuf: None,
    })
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
