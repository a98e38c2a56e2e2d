//! Starting and leaving the job: init (the phases in order: settings every PE must share,
//! placement, the heap, the transports and their registrations, peer heaps, rings, proxies,
//! teams), finalize, the GPU path's start, and the error-path drop.

use super::*;
use crate::{
    config::Emulate,
    memory::{differences, words},
};
use pshmem_proxy::DeviceMem;

impl Pshmem {
    /// Starts this PE: bootstrap and configuration from the environment.
    pub fn init() -> Result<Self> {
        pshmem_env::validate_all()?;
        let t0 = std::time::Instant::now();
        let bs = Bootstrap::from_env()?;
        tracing::info!(
            "PE {}: the bootstrap took {:.1} ms",
            bs.rank(),
            t0.elapsed().as_secs_f64() * 1e3
        );
        let cfg = Config::from_env()?;
        Self::init_with(bs, cfg)
    }

    /// Starts this PE on an existing bootstrap (unique-id launches) with `cfg`. Collective:
    /// every PE runs the phases in the same order, each timed (`PSHMEM_LOG=info`).
    pub fn init_with(bs: Bootstrap, cfg: Config) -> Result<Self> {
        let (me, n) = (bs.rank(), bs.world_size());
        let mut clock = startup::Phases::start(me, "init (after the bootstrap)");
        agree_on_settings(&bs, &cfg)?;
        clock.mark("settings");
        let (proxy_cpus, rails) = place(&bs, &cfg, &mut clock);
        clock.mark("placement");
        // A memfd only where same-host peers will map the heap; private memory otherwise.
        let shared = !cfg.disable_p2p && (0..n).any(|r| r != me && bs.same_host(r));
        let local = if shared {
            Mapping::create(me, cfg.heap_size)?
        } else {
            Mapping::anonymous(me, cfg.heap_size)?
        };
        let rings: Vec<Arc<Ring>> = (0..cfg.rings)
            .map(|_| Ring::new_host(cfg.ring_slots))
            .collect();
        let health = watch_health(&bs, &rings);
        let started = start_proxies(
            &bs,
            &cfg,
            local.view(),
            &rings,
            (&proxy_cpus, &rails),
            &health,
        )?;
        clock.mark("proxies");
        let peer_maps = if cfg.disable_p2p {
            (0..n).map(|_| None).collect()
        } else {
            // Collective (every PE takes part, with or without same-host peers).
            share::share_with_local_peers(&bs, &local, Duration::from_secs(30))?
        };
        let peers = (0..n)
            .map(|r| match &peer_maps[r] {
                _ if cfg.disable_p2p => None,
                _ if r == me => Some(local.view()),
                Some(m) => Some(m.view()),
                None => None,
            })
            .collect();
        clock.mark("peer heaps");
        let (alloc, teams) = team_area(&bs, &cfg)?;
        bs.barrier()?;
        clock.mark("barrier");
        clock.log();
        Ok(Self {
            gpu: std::sync::OnceLock::new(),
            proxies: Mutex::new(started.proxies),
            _landings: started.landings,
            peers,
            _peer_maps: peer_maps,
            mem: local.view(),
            _local: local,
            producers: rings.into_iter().map(Producer::new).collect(),
            health,
            bs: Mutex::new(Some(bs)),
            alloc: Mutex::new(alloc),
            teams: Mutex::new(teams),
            barrier_epoch: Mutex::new(0),
            finalized: AtomicBool::new(false),
            me,
            n,
            cfg,
            transport: started.transport,
        })
    }

    /// Leaves the job: completes this PE's operations, waits for every PE (so that no proxy
    /// stops while a peer still needs it), stops the proxies and the bootstrap. Collective.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Err(Error::Finalized {
                me: self.me,
                op: "finalize",
            });
        }
        let mut res = self
            .barrier_inner("finalize")
            .and_then(|()| self.quiet_inner("finalize"))
            .and_then(|()| self.drain_gpu_rings());
        let bs = lock(&self.bs).take();
        if let Some(bs) = &bs
            && res.is_ok()
        {
            // Out of band: once every PE is here, no proxy is needed by anyone any more.
            res = bs.barrier().map_err(Error::from);
        }
        if let Some(g) = self.gpu.get()
            && let Err(e) = g.stop()
        {
            res = res.and(Err(e));
        }
        for p in lock(&self.proxies).drain(..) {
            if let Err(e) = p.stop() {
                res = res.and(Err(e.into()));
            }
        }
        if let Some(bs) = bs {
            if res.is_ok() {
                res = bs.finalize().map_err(Error::from);
            } else {
                drop(bs);
            }
        }
        res
    }

    /// Leaves the job alone (not collective), for a process that ends without [`finalize`]
    /// (`Self::finalize`): stops the GPU path and the proxies (bounded drains), then says
    /// goodbye, so that the other PEs see this one leave rather than die — no "died or
    /// disconnected" error and no data-path fault on them. Operations this PE left in flight
    /// may not complete; a collective that waits for it fails on the others naming it.
    pub fn leave(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Err(Error::Finalized {
                me: self.me,
                op: "leave",
            });
        }
        let mut res = Ok(());
        if let Some(g) = self.gpu.get()
            && let Err(e) = g.stop()
        {
            res = Err(e);
        }
        for p in lock(&self.proxies).drain(..) {
            if let Err(e) = p.stop() {
                res = res.and(Err(e.into()));
            }
        }
        if let Some(bs) = lock(&self.bs).take() {
            bs.leave();
        }
        res
    }

    /// Starts the GPU path (collective): a GPU symmetric heap with `PSHMEM_GPU_SYMMETRIC_SIZE`
    /// bytes for the program (and the runtime's own part on top) on device `PSHMEM_CUDA_DEVICE` (default: local rank modulo the device count),
    /// same-host peers' heaps opened through CUDA IPC unless `PSHMEM_DISABLE_P2P=1`, and a
    /// GPU command ring drained by a proxy that reaches the other PEs through host staging.
    /// Fails with [`Error::Cuda`] (on every PE) where there is no GPU.
    pub fn gpu_init(&self) -> Result<&gpu::Gpu> {
        self.gpu_init_on(None)
    }

    /// [`Pshmem::gpu_init`] on CUDA device `device` (the NVSHMEM layer passes the device
    /// current when the GPU part of its two-stage init completes); `None` as `gpu_init`.
    pub fn gpu_init_on(&self, device: Option<usize>) -> Result<&gpu::Gpu> {
        self.live("gpu_init")?;
        if let Some(g) = self.gpu.get() {
            return Ok(g);
        }
        let g = &self.cfg.gpu;
        let probe = gpu::probe();
        let rec = [
            g.heap_size as u64,
            self.cfg.proxy.staging_chunk as u64,
            g.landing_slots as u64,
            u64::from(probe.is_ok()),
        ]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect::<Vec<u8>>();
        self.agree("gpu_init", &rec, |b| {
            let w = words(b);
            format!(
                "GPU heap {} bytes, staging chunk {}, landing slots {}, GPU present {}",
                w[0], w[1], w[2], w[3]
            )
        })?;
        if let Err(source) = probe {
            return Err(Error::Cuda {
                me: self.me,
                what: "gpu_init",
                source,
            });
        }
        let g = {
            let bs = self.bs("gpu_init")?;
            gpu::Gpu::create(gpu::GpuSetup {
                bs: bs.as_ref().expect("bootstrap"),
                me: self.me,
                n: self.n,
                cfg: &self.cfg,
                health: self.health.clone(),
                device,
            })?
        };
        // Every team known so far gets its device entry.
        let known: Vec<(team::Team, Vec<usize>, usize)> = lock(&self.teams)
            .slots
            .iter()
            .enumerate()
            .filter_map(|(t, s)| {
                s.as_ref()
                    .map(|s| (t as team::Team, s.members.clone(), s.my_index))
            })
            .collect();
        for (t, members, mine) in known {
            g.set_team(t, &members, mine)?;
        }
        Ok(self.gpu.get_or_init(|| g))
    }

    /// The GPU path, if [`Pshmem::gpu_init`] ran.
    pub fn gpu(&self) -> Result<&gpu::Gpu> {
        self.gpu.get().ok_or(Error::Cuda {
            me: self.me,
            what: "gpu",
            source: cuda::CudaError::Unusable("gpu_init has not been called".into()),
        })
    }
}

impl Drop for Pshmem {
    fn drop(&mut self) {
        if !self.finalized.load(Ordering::Acquire) {
            // An error path: no collective goodbye. Stop the proxies (bounded drain) before the
            // heap goes; dropping the bootstrap tells the peers this PE is gone.
            self.halt_proxies();
        }
    }
}

/// Milliseconds, as the bootstrap's variables give them.
fn ms(d: std::time::Duration) -> String {
    d.as_millis().to_string()
}

/// The settings every PE must share, compared at init: each PE's values, and a mismatch named
/// with each differing PE's values.
pub(crate) fn agree_on_settings(bs: &Bootstrap, cfg: &Config) -> Result<()> {
    // A count, or "auto" where the topology decides at GPU init (which makes every PE agree).
    let auto = |v: Option<usize>| v.map_or_else(|| "auto".to_string(), |v| v.to_string());
    use pshmem_env as env;
    let settings = [
        (env::SYMMETRIC_SIZE.name, cfg.heap_size.to_string()),
        (env::PROXY_THREADS.name, cfg.proxy_threads.to_string()),
        (env::DISABLE_P2P.name, u8::from(cfg.disable_p2p).to_string()),
        (env::STAGING_CHUNK.name, cfg.proxy.staging_chunk.to_string()),
        (
            env::GPU_LANDING_SLOTS.name,
            cfg.gpu.landing_slots.to_string(),
        ),
        (env::EMULATE_GPU_HEAP.name, cfg.emulate.name().to_string()),
        (env::GPU_PROXY_THREADS.name, auto(cfg.gpu.proxy_threads)),
        (env::GPU_RINGS.name, auto(cfg.gpu.rings)),
        // Team slots size every PE's sync words: unequal, the first team split or malloc
        // failed with a misleading mismatch (issue 41, item 6).
        (env::MAX_TEAMS.name, cfg.max_teams.to_string()),
        (
            env::GPU_REGISTRATION.name,
            cfg.gpu.registration.name().to_string(),
        ),
        // A peer's heartbeats must come well within this PE's timeout: unequal, a healthy job
        // could be declared dead.
        (env::HEARTBEAT_MS.name, ms(bs.config().heartbeat)),
        (env::PEER_TIMEOUT_MS.name, ms(bs.config().peer_timeout)),
    ];
    let mine: String = settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    let all = bs.allgather(mine.as_bytes())?;
    match differences(&all, |b| String::from_utf8_lossy(b).into_owned()) {
        None => Ok(()),
        Some(detail) => Err(Error::CollectiveMismatch {
            me: bs.rank(),
            op: "init (these settings must be the same on every PE)",
            detail,
        }),
    }
}

/// Placement: the proxy threads' cores and, for RDMA providers, this PE's NICs as rails. A
/// configured core list (`PSHMEM_PROXY_CPU`) skips the topology.
fn place(bs: &Bootstrap, cfg: &Config, clock: &mut startup::Phases) -> (Vec<usize>, Vec<String>) {
    if let Some(list) = &cfg.proxy_cpus {
        return (list.clone(), Vec::new());
    }
    let me = bs.rank();
    // Discovery first, timed on its own (host_plan reuses both).
    if cfg.topology_xml.is_none() {
        placement::this_machine();
    }
    clock.mark("topology");
    placement::provider(cfg.sources().provider);
    clock.mark("provider");
    let plan = placement::host_plan(cfg.sources(), bs.local_size(), cfg.proxy_threads, false);
    let pe = plan.placement.pes.get(bs.local_rank());
    for w in plan.machine.warnings.iter().chain(&plan.placement.warnings) {
        tracing::info!("PE {me}: placement: {w}");
    }
    let rails = match (pe, plan.provider.as_deref()) {
        (Some(pe), Some(p)) if placement::is_rdma(p) => plan.nic_names(pe.nics.iter().copied()),
        _ => Vec::new(),
    };
    (pe.map(|p| p.proxy_cpus.clone()).unwrap_or_default(), rails)
}

/// The job's failure reports feed this PE's health (which the rings watch), and a peer lost to
/// the health monitor is reported to the job.
fn watch_health(bs: &Bootstrap, rings: &[Arc<Ring>]) -> Arc<Health> {
    let health = Health::new();
    health.watch(rings.iter().cloned());
    let h = health.clone();
    bs.on_failure(move |e| match e.dead_rank() {
        Some(d) if e.is_leave() => h.peer_left(d, e.to_string()),
        Some(d) => h.peer_dead(d, e.to_string()),
        None => h.raise(code::PROXY, None, e.to_string()),
    });
    let job = bs.death_reporter();
    health.on_peer_lost(move |pe, how| job.peer_lost(pe, how));
    health
}

/// The transport's name where none was opened ([`needs_proxies`]).
pub(crate) const NO_TRANSPORT: &str = "none (every peer's heap is mapped directly)";

/// Whether some operation of this job can go through a proxy: a peer on another host, peer
/// mappings turned off, or the emulated GPU heap (served by the proxies). Otherwise every route
/// is direct, so no transport is opened and nothing listens on the fabric. The same answer on
/// every PE: the hosts come from the bootstrap, and both settings are agreed at init.
fn needs_proxies(bs: &Bootstrap, cfg: &Config) -> bool {
    cfg.disable_p2p || cfg.emulate.on() || (0..bs.world_size()).any(|r| !bs.same_host(r))
}

/// The host heap's proxy threads, their landing areas (emulated GPU heap, staged) and the
/// transport's name.
struct Started {
    proxies: Vec<Proxy>,
    landings: Vec<Mapping>,
    transport: String,
}

/// One proxy thread per `PSHMEM_PROXY_THREADS`, each on its own transport and registration of
/// `heap`; none where no route can use them ([`needs_proxies`]). Where the heap emulates a GPU heap (`PSHMEM_EMULATE_GPU_HEAP`), the proxies serve it
/// as one: through a landing area of the host-staged path, or registered as DMA-BUF would.
fn start_proxies(
    bs: &Bootstrap,
    cfg: &Config,
    heap: HeapMem,
    rings: &[Arc<Ring>],
    (cpus, rails): (&[usize], &[String]),
    health: &Arc<Health>,
) -> Result<Started> {
    let (me, n) = (bs.rank(), bs.world_size());
    if !needs_proxies(bs, cfg) {
        // Nothing is opened, but a provider that does not exist is still refused.
        pshmem_transport::check(&cfg.transport)
            .map_err(proxies::transport_error(me, "checking the transport"))?;
        tracing::info!(
            "PE {me}: every PE maps the others' heaps on this machine: no proxy thread, no \
             transport endpoint"
        );
        return Ok(Started {
            proxies: Vec::new(),
            landings: Vec::new(),
            transport: NO_TRANSPORT.to_string(),
        });
    }
    let start = proxies::Start {
        bs,
        transport: &cfg.transport,
        rails,
        proxy: &cfg.proxy,
        cpus,
        health,
        name: "pshmem-proxy",
        heap: "the symmetric heap",
    };
    let mut landings = Vec::new();
    let mut transport = String::new();
    let mut proxies = Vec::with_capacity(cfg.proxy_threads);
    for t in 0..cfg.proxy_threads {
        proxies.push(start.thread(t, cfg.proxy_threads, rings, |tr| {
            let region = if cfg.emulate == Emulate::Staged {
                let slot = pshmem_proxy::landing_slot_bytes(cfg.proxy.staging_chunk);
                let m = Mapping::anonymous(me, n * cfg.gpu.landing_slots * slot)?;
                let v = m.view();
                landings.push(m);
                v
            } else {
                heap
            };
            // SAFETY: the heap mapping (or landing area) outlives the transport: the proxies
            // that own the transports are dropped (and joined) before them (field order).
            let mr = unsafe {
                tr.mr_reg(LocalMem {
                    ptr: region.base(),
                    len: region.len(),
                    kind: MemKind::Host,
                })
            }
            .map_err(proxies::transport_error(
                me,
                "registering the symmetric heap",
            ))?;
            transport = tr.caps().name.clone();
            Ok(proxies::Served {
                region,
                mr,
                device: cfg.emulate.on().then(|| {
                    Box::new(pshmem_proxy::mem::HostDevice::new(heap)) as Box<dyn DeviceMem>
                }),
                registered: cfg.emulate == Emulate::Registered,
            })
        })?);
    }
    Ok(Started {
        proxies,
        landings,
        transport,
    })
}

/// The teams' exchange area: the heap's first allocation, at the same offset on every PE.
fn team_area(bs: &Bootstrap, cfg: &Config) -> Result<(Allocator, team::Teams)> {
    let (me, n) = (bs.rank(), bs.world_size());
    let mut alloc = Allocator::new(cfg.heap_size as u64);
    let area_bytes = team::Teams::area_bytes(cfg.max_teams, n);
    let area = alloc.alloc(area_bytes, 64).ok_or_else(|| Error::Config {
        me,
        detail: format!(
            "PSHMEM_SYMMETRIC_SIZE={} cannot hold the team area ({area_bytes} bytes for {} \
             teams of {n} PEs)",
            cfg.heap_size, cfg.max_teams
        ),
    })?;
    let hosts: Vec<&str> = bs.peers().iter().map(|p| p.host_id.as_str()).collect();
    let teams = team::Teams::new(SymPtr(area), cfg.max_teams, me, &hosts, !cfg.disable_p2p);
    Ok((alloc, teams))
}
