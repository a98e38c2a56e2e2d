//! Starting the GPU path (`Gpu::create`, collective): the device, the heap, same-host peers'
//! heaps through CUDA IPC, the bookkeeping and rings the device API reads, the runtime's
//! kernels, the GPU proxies and their registration (DMA-BUF or the host-staged landing area).

use std::ffi::CStr;

use crate::placement::ProxyShape;

use super::*;

impl Gpu {
    /// Collective: allocates the heap, opens same-host peers' heaps, creates the GPU rings,
    /// loads the runtime's kernels, starts the proxies, fills the device state. Each phase is
    /// timed (`PSHMEM_LOG=info`).
    pub(crate) fn create(s: GpuSetup<'_>) -> Result<Self> {
        let (me, n) = (s.me, s.n);
        let mut clock = crate::startup::Phases::start(me, "GPU init");
        let ordinal = choose_device(s.bs, me, n, s.device.or(s.cfg.gpu.device))?;
        let ctx = cuda::open(ordinal).map_err(cu(me, "opening the device"))?;
        ctx.bind_to_thread()
            .map_err(|e| cu(me, "binding the context")(driver("cuCtxSetCurrent")(e)))?;
        clock.mark("context");
        let heap =
            DevAlloc::new(&ctx, s.heap_bytes()).map_err(cu(me, "allocating the GPU heap"))?;
        clock.mark("heap");
        let (peers, ipc) = open_peers(&s, &ctx, &heap)?;
        warn_about_proxy_settings(me, &peers, &s.cfg.gpu);
        clock.mark("peer heaps");
        let misc = Bookkeeping::write(&ctx, me, &peers)?;
        let (shape, proxied) = proxy_shape(&s, ordinal, &peers)?;
        let rings = GpuRings::create(&s, &ctx, shape.rings)?;
        clock.mark("rings");
        let runtime = cuda::load(&ctx, pshmem_kernels::RUNTIME)
            .map_err(cu(me, "loading the runtime kernels"))?;
        clock.mark("kernels");
        let rings_of = (&rings.rings[..], shape.threads);
        let started = start_proxies(&s, (&ctx, &runtime), (&heap, ordinal), rings_of, proxied)?;
        clock.mark("proxies");
        // The teams' sync words: the first allocation of the GPU heap, the same on every PE.
        let mut alloc = Allocator::new(s.heap_bytes() as u64);
        let sync_base = alloc
            .alloc(TeamTable::sync_bytes(s.cfg.max_teams, n), 256)
            .ok_or_else(|| Error::Config {
                me,
                detail: format!(
                    "the GPU heap ({} bytes) cannot hold the sync words of {} teams of {n} PEs",
                    s.heap_bytes(),
                    s.cfg.max_teams
                ),
            })?;
        let teams = TeamTable::new(&ctx, s.cfg.max_teams, n, sync_base)
            .map_err(cu(me, "allocating the team table"))?;
        let cell = HostAlloc::pinned(&ctx, 8).map_err(cu(me, "allocating a result cell"))?;
        let host = host_ops::HostKernels::new(&ctx, &runtime, cell)
            .map_err(cu(me, "loading the runtime kernels"))?;
        let state = device_state(&s, &heap, &misc, (&rings, &peers, &teams));
        let stream = ctx
            .new_stream()
            .map_err(|e| cu(me, "creating a stream")(driver("cuStreamCreate")(e)))?;
        let g = Self {
            proxies: Mutex::new(started.proxies),
            ring_table: (rings.table.ptr, shape.rings),
            rings: rings.heads(),
            ring: rings.rings[0].clone(),
            registration: started.registration,
            res: Mutex::new(Some(Resources {
                _ipc: ipc,
                _landing: started.landing,
                _dmabuf: started.dmabuf,
                _ring_table: rings.table,
                _misc: misc.mem,
                _heap: heap,
            })),
            ctx,
            stream,
            state,
            peers,
            copy_engine_min: s.cfg.gpu.copy_engine_min,
            teams,
            host,
            alloc: Mutex::new(alloc),
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

/// The device-side bookkeeping the device API reads through the state: the peer table, the
/// result cells and their owners, the barrier epoch and the error word, in one allocation.
struct Bookkeeping {
    mem: DevAlloc,
    owner_off: usize,
    cell_off: usize,
    epoch_off: usize,
    err_off: usize,
}

impl Bookkeeping {
    /// Allocates it and writes the peer table (each PE's heap on this GPU; 0: through the ring).
    fn write(ctx: &Arc<CudaContext>, me: usize, peers: &[u64]) -> Result<Self> {
        let n = peers.len();
        let owner_off = n * 8;
        let cell_off = (owner_off + CELLS * 4).next_multiple_of(64);
        let epoch_off = cell_off + CELLS * 8;
        let err_off = epoch_off + 64;
        let mem = DevAlloc::new(ctx, err_off + 64).map_err(cu(me, "allocating GPU bookkeeping"))?;
        // SAFETY: the peer table fits at the start of `mem`; `peers` is live until the copy
        // finished (synchronized below).
        let rc = unsafe { sys::cuMemcpyHtoD_v2(mem.ptr, peers.as_ptr().cast(), n * 8) };
        check(rc, "cuMemcpyHtoD (peer table)").map_err(cu(me, "writing the peer table"))?;
        // SAFETY: a plain synchronization of the bound context.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
            .map_err(cu(me, "writing the peer table"))?;
        Ok(Self {
            mem,
            owner_off,
            cell_off,
            epoch_off,
            err_off,
        })
    }
}

/// The GPU's rings (ring 0: the device API's) and the device table of their handles, which
/// kernels that spread descriptors over rings take.
struct GpuRings {
    rings: Vec<Arc<Ring>>,
    handles: Vec<RingDeviceHandle>,
    table: DevAlloc,
}

impl GpuRings {
    fn create(s: &GpuSetup<'_>, ctx: &Arc<CudaContext>, count: usize) -> Result<Self> {
        let me = s.me;
        let mut rings = Vec::with_capacity(count);
        let mut handles = Vec::with_capacity(count);
        for _ in 0..count {
            let (ring, handle) =
                cuda::gpu_ring(ctx, s.cfg.ring_slots).map_err(cu(me, "creating the GPU ring"))?;
            rings.push(ring);
            handles.push(handle);
        }
        s.health.watch(rings.iter().cloned());
        let bytes = count * std::mem::size_of::<RingDeviceHandle>();
        let table = DevAlloc::new(ctx, bytes).map_err(cu(me, "allocating the ring table"))?;
        // SAFETY: the table holds exactly `handles`, which live until the synchronization.
        let rc = unsafe { sys::cuMemcpyHtoD_v2(table.ptr, handles.as_ptr().cast(), bytes) };
        check(rc, "cuMemcpyHtoD (ring table)").map_err(cu(me, "writing the ring table"))?;
        // SAFETY: a plain synchronization of the bound context.
        check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
            .map_err(cu(me, "writing the ring table"))?;
        Ok(Self {
            rings,
            handles,
            table,
        })
    }

    /// Every ring with the device address of its reservation counter (finalize drains them).
    fn heads(&self) -> Vec<(Arc<Ring>, u64)> {
        let heads = self.handles.iter().map(|h| h.head);
        self.rings.iter().cloned().zip(heads).collect()
    }
}

/// The GPU proxies and what their registrations hold until finalize.
struct Started {
    proxies: Vec<Proxy>,
    landing: Vec<HostAlloc>,
    dmabuf: Vec<std::os::fd::OwnedFd>,
    /// The first thread's registration of the heap, and why (every thread chooses alike).
    registration: Option<(HeapRegistration, String)>,
}

/// The GPU's proxy threads (to every PE not mapped: RMA into the registered GPU heap where the
/// provider takes GPU memory, else the host-staged path): ring r drained by thread r mod threads,
/// thread t of every PE talking to thread t; each with its own AMO kernel and result cell.
fn start_proxies(
    s: &GpuSetup<'_>,
    (ctx, runtime): (&Arc<CudaContext>, &Arc<CudaModule>),
    (heap, ordinal): (&DevAlloc, usize),
    (rings, threads): (&[Arc<Ring>], usize),
    proxied: bool,
) -> Result<Started> {
    let me = s.me;
    let mut out = Started {
        proxies: Vec::with_capacity(threads),
        landing: Vec::new(),
        dmabuf: Vec::new(),
        registration: None,
    };
    if !proxied {
        // No PE reaches a peer through a GPU proxy: none is started, so no transport endpoint
        // is opened (kernels push nothing: `any_ring` is 0 on every PE).
        tracing::info!("PE {me}: every GPU heap is mapped through CUDA IPC: no GPU proxy");
        return Ok(out);
    }
    let threads = threads.min(rings.len()).max(1);
    // On an RDMA provider, every proxy thread stripes over the NICs placement put next to this
    // GPU (2 on p5en, 4 on p5), so its traffic never crosses a PCIe switch.
    let rails = crate::placement::gpu_proxy_rails(
        s.cfg.sources(),
        (s.bs.local_size(), s.bs.local_rank()),
        ordinal,
        me,
    );
    // Providers answer FI_HMEM only when asked: ask unless the heap is to be staged anyway.
    let mut transport = s.cfg.transport.clone();
    transport.ofi.gpu_memory = s.cfg.gpu.registration != Want::Only(HeapRegistration::Staged);
    let start = crate::proxies::Start {
        bs: s.bs,
        transport: &transport,
        rails: &rails,
        proxy: &s.cfg.proxy,
        cpus: &[],
        health: &s.health,
        name: "pshmem-gpu-proxy",
        heap: "the GPU heap",
    };
    for t in 0..threads {
        // Fetched here, once: with CUDA's lazy loading, fetching a function while a kernel
        // waits on a peer can stall the context (and the proxy the peer's progress needs).
        let amo = Kernel::load(ctx, runtime, "pshmem_k_amo")
            .map_err(cu(me, "loading the runtime kernels"))?;
        out.proxies.push(start.thread(t, threads, rings, |tr| {
            let reg = super::register::register(s, ctx, (heap, ordinal), tr)?;
            let result =
                HostAlloc::pinned(ctx, 64).map_err(cu(me, "allocating the AMO result cell"))?;
            let heap_range = (heap.ptr, s.heap_bytes() as u64);
            let dev = CudaDeviceMem::new(ctx.clone(), amo, heap_range, result)
                .map_err(cu(me, "preparing the proxy's stream and AMO kernel"))?;
            let registered = reg.kind.registered();
            if t == 0 {
                out.registration = Some((reg.kind, reg.why));
            }
            out.landing.extend(reg.landing);
            out.dmabuf.extend(reg.dmabuf);
            Ok(crate::proxies::Served {
                region: reg.region,
                mr: reg.mr,
                device: Some(Box::new(dev)),
                registered,
            })
        })?);
    }
    Ok(out)
}

/// The state the device API reads (`pshmem_device_state_t`).
fn device_state(
    s: &GpuSetup<'_>,
    heap: &DevAlloc,
    misc: &Bookkeeping,
    (rings, peers, teams): (&GpuRings, &[u64], &TeamTable),
) -> DeviceState {
    let at = |off: usize| misc.mem.ptr + off as u64;
    DeviceState {
        my_pe: s.me as i32,
        n_pes: s.n as i32,
        heap_base: heap.ptr,
        heap_size: s.heap_bytes() as u64,
        peer_base: at(0),
        ring: rings.handles[0],
        cell_owner: at(misc.owner_off),
        cells: at(misc.cell_off),
        n_cells: CELLS as u32,
        any_ring: u32::from(peers.contains(&0)),
        barrier_epoch: at(misc.epoch_off),
        barrier_off: 0,
        dev_error: at(misc.err_off),
        timeout_ns: s.cfg.op_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
        teams: teams.entries(),
        max_teams: teams.max() as u32,
        version: STATE_VERSION,
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
    rec.extend((s.heap_bytes() as u64).to_le_bytes());
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

/// The rings and proxy threads of this GPU's path: the user's (`PSHMEM_GPU_RINGS`,
/// `PSHMEM_GPU_PROXY_THREADS`, the same on every PE: compared at init), each unset one from
/// the topology (`placement::default_gpu_proxy_shape`), then the least over every PE, so that
/// thread t of each PE has a thread t to talk to. Collective.
/// The GPU proxies' rings and threads (the least any PE asks for), and whether any PE of the
/// job reaches a peer through them (then every PE starts them: starting is collective).
fn proxy_shape(s: &GpuSetup<'_>, ordinal: usize, peers: &[u64]) -> Result<(ProxyShape, bool)> {
    let me = s.me;
    let gpu = &s.cfg.gpu;
    let network = peers.iter().enumerate().any(|(pe, &b)| pe != me && b == 0);
    let src = s.cfg.sources();
    let named_not_rdma = src.provider.is_some_and(|p| !crate::placement::is_rdma(p));
    let (shape, why) = if gpu.rings.is_some() && gpu.proxy_threads.is_some() {
        (ProxyShape::ONE, "set by the user".to_string())
    } else if !network || named_not_rdma {
        let why = "no peer is reached through an RDMA provider";
        (ProxyShape::ONE, why.to_string())
    } else {
        let plan = crate::placement::host_plan(src, s.bs.local_size(), 1, true);
        crate::placement::default_gpu_proxy_shape(&plan, ordinal, network)
    };
    let mine = [
        gpu.rings.unwrap_or(shape.rings) as u32,
        gpu.proxy_threads.unwrap_or(shape.threads) as u32,
        u32::from(network),
    ];
    let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    let all = s.bs.allgather(&bytes)?;
    let least = |k: usize| {
        all.iter()
            .filter_map(|b| b.get(4 * k..4 * k + 4))
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .min()
            .unwrap_or(1)
            .max(1)
    };
    let proxied = all
        .iter()
        .any(|b| b.get(8..12).is_some_and(|w| w != [0; 4]));
    let shape = ProxyShape {
        rings: least(0),
        threads: least(1),
    };
    if proxied {
        tracing::info!(
            "PE {me}: GPU proxy: {} rings, {} threads ({why})",
            shape.rings,
            shape.threads
        );
    }
    Ok((shape, proxied))
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
