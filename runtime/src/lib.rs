//! # pshmem
//!
//! The proxyshmem runtime: what an application links. It owns
//!
//! - **init/finalize**: the bootstrap, the transports (one per proxy thread), the symmetric
//!   heap and its registration, the command rings and the proxy threads;
//! - the **symmetric heap** (a memfd per PE in host mode) and its collective allocator, which
//!   detects calls that differ across PEs ([`Pshmem::malloc`], [`Pshmem::free`], ...);
//! - the **host API**: `put`/`get`/`p`/`g` (blocking and nbi), `put_signal`, `signal_op`,
//!   `signal_wait_until`/`wait_until`, atomics, `quiet`, `fence`, `barrier_all`. Every remote
//!   operation goes through the same command ring and proxy a GPU producer uses, so host mode
//!   exercises the device path;
//! - the **direct path**: same-host peers map each other's heaps (memfd over SCM_RIGHTS) and
//!   load and store directly, the host analogue of CUDA IPC; `PSHMEM_DISABLE_P2P=1` forces
//!   everything (this PE included) through the proxy;
//! - the **GPU path** ([`gpu`], [`cuda`]): a GPU symmetric heap, same-host peers through CUDA
//!   IPC, the GPU's command ring and its proxy, the state the device API reads, CUDA errors that
//!   keep the driver's own; and the placement of PEs, NICs and proxy cores ([`placement`]).
//!
//! ```
//! # fn main() -> pshmem::Result<()> {
//! // Without launcher variables this is a 1-PE job; under pshmrun every rank runs the same code.
//! let s = pshmem::Pshmem::init()?; // collective
//! let buf = s.malloc(1 << 20)?; // symmetric: same address on every PE
//! let next = (s.my_pe() + 1) % s.n_pes();
//! s.put(buf, b"hello", next)?; // blocking put
//! s.p(buf + 64, 42u64, next)?; // single value, complete at quiet
//! s.quiet()?;
//! s.barrier_all()?;
//! let x: u64 = s.atomic_fetch_add(buf + 128, 1, 0)?;
//! assert_eq!(x, 0);
//! s.finalize()?;
//! # Ok(())
//! # }
//! ```
//!
//! Addresses are [`SymPtr`]s: byte offsets into the symmetric heap, equal on every PE.
//! Non-blocking operations on raw buffers are `unsafe` (the buffer must outlive the operation,
//! up to the next [`Pshmem::quiet`]); their `_sym` forms on symmetric buffers are safe.

pub mod alloc;
mod barrier;
pub mod coll;
pub mod config;
pub mod cuda;
mod elem;
pub mod error;
pub mod gpu;
mod heap;
pub mod net;
pub mod placement;
mod share;
mod startup;
pub mod team;

use std::{
    cell::Cell,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use pshmem_abi::error as code;
pub use pshmem_abi::{DType, RedOp};
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{Health, HeapMem, MemError, Proxy, ProxySetup};
pub use pshmem_ring::{AmoOp, SignalOp};
use pshmem_ring::{Desc, Local, Pe, Producer, Ring, RingError, WaitLimit};
/// For executables: `pshmem::hold_signals_through_load!();` at the top level of the binary's
/// crate makes a SIGTERM sent while the process loads end it by that signal (see
/// `pshmem_libfabric_sys::hold_signals_through_load`).
pub use pshmem_transport::hold_signals_through_load;
use pshmem_transport::{LocalMem, MemKind};

use crate::{alloc::Allocator, heap::Mapping};
pub use crate::{
    config::Config,
    elem::{AmoElem, Cmp, Elem},
    error::{Error, Result},
};

/// A symmetric address: a byte offset into the symmetric heap, the same on every PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SymPtr(u64);

impl SymPtr {
    /// The address at heap offset `offset` (for tests and tools; normally from `malloc`).
    pub fn from_offset(offset: u64) -> Self {
        Self(offset)
    }

    /// The heap offset.
    pub fn offset(self) -> u64 {
        self.0
    }
}

impl std::ops::Add<usize> for SymPtr {
    type Output = SymPtr;

    /// The address `bytes` further on.
    fn add(self, bytes: usize) -> SymPtr {
        SymPtr(self.0 + bytes as u64)
    }
}

/// Where an operation to a PE goes.
enum Route {
    /// Loads and stores on a mapping of the PE's heap.
    Direct(HeapMem),
    /// Through the command ring and the proxy.
    Ring,
}

thread_local! {
    /// The ring this thread issues on (assigned round-robin at first use).
    static RING: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_RING: AtomicUsize = AtomicUsize::new(0);

/// One PE of a proxyshmem job.
pub struct Pshmem {
    /// The GPU path, once `gpu_init` ran (dropped first: its proxy uses the bootstrap's peers).
    gpu: std::sync::OnceLock<gpu::Gpu>,
    // Drop order matters: proxies (which use the heap and own the transports that registered
    // it) go first, then the direct mappings, then the heap itself.
    proxies: Mutex<Vec<Proxy>>,
    /// Landing areas of the emulated GPU path (registered by the proxies' transports).
    _landings: Vec<Mapping>,
    peers: Vec<Option<HeapMem>>,
    _peer_maps: Vec<Option<Mapping>>,
    mem: HeapMem,
    _local: Mapping,
    producers: Vec<Producer>,
    health: Arc<Health>,
    bs: Mutex<Option<Bootstrap>>,
    alloc: Mutex<Allocator>,
    teams: Mutex<team::Teams>,
    barrier_epoch: Mutex<u64>,
    finalized: AtomicBool,
    me: usize,
    n: usize,
    cfg: Config,
    transport: String,
}

impl std::fmt::Debug for Pshmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pshmem")
            .field("pe", &self.me)
            .field("n_pes", &self.n)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

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

    /// Starts this PE on an existing bootstrap (unique-id launches) with `cfg`. Collective.
    pub fn init_with(bs: Bootstrap, cfg: Config) -> Result<Self> {
        let (me, n) = (bs.rank(), bs.world_size());
        let mut clock = startup::Phases::start(me, "init (after the bootstrap)");
        agree_on_settings(&bs, &cfg)?;
        clock.mark("settings");
        // Placement: proxy cores and, for RDMA providers, this PE's NICs as rails.
        let (proxy_cpus, rails) = match &cfg.proxy_cpus {
            Some(list) => (list.clone(), Vec::new()),
            None => {
                // Discovery first, timed on its own (host_plan reuses both).
                if pshmem_env::TOPOLOGY_XML.raw().is_none() {
                    placement::this_machine();
                }
                clock.mark("topology");
                placement::provider();
                clock.mark("provider");
                let plan = placement::host_plan(bs.local_size(), cfg.proxy_threads, false);
                let pe = plan.placement.pes.get(bs.local_rank());
                for w in plan.machine.warnings.iter().chain(&plan.placement.warnings) {
                    tracing::info!("PE {me}: placement: {w}");
                }
                let rails = match (pe, plan.provider.as_deref()) {
                    (Some(pe), Some(p)) if placement::is_rdma(p) => {
                        plan.nic_names(pe.nics.iter().copied())
                    }
                    _ => Vec::new(),
                };
                (pe.map(|p| p.proxy_cpus.clone()).unwrap_or_default(), rails)
            }
        };
        clock.mark("placement");
        // A memfd only where same-host peers will map the heap; private memory otherwise.
        let shared = !cfg.disable_p2p && (0..n).any(|r| r != me && bs.same_host(r));
        let local = if shared {
            Mapping::create(me, cfg.heap_size)?
        } else {
            Mapping::anonymous(me, cfg.heap_size)?
        };
        let mem = local.view();
        let terr = |what| {
            move |source| Error::Transport {
                me,
                what,
                source: Box::new(source),
            }
        };
        let mut setups = Vec::new();
        let mut transport = String::new();
        // The host-staged GPU path on a host heap (tests of its protocol without a GPU): each
        // proxy registers a landing area instead of the heap.
        // "registered": the heap registered as a GPU heap would be by DMA-BUF.
        let emulate_mode = pshmem_env::EMULATE_GPU_HEAP.value();
        let registered = emulate_mode == "registered";
        let emulate = registered
            || match emulate_mode.as_str() {
                "0" | "" => false,
                "1" | "staged" => true,
                other => {
                    return Err(Error::Config {
                        me,
                        detail: format!(
                            "PSHMEM_EMULATE_GPU_HEAP={other}: expected 0, 1 (staged) or registered"
                        ),
                    });
                }
            };
        let mut landings = Vec::new();
        for _ in 0..cfg.proxy_threads {
            let mut t = net::open_transport(&bs, &rails).map_err(terr("opening the transport"))?;
            clock.mark("transport");
            let region = if emulate && !registered {
                let slots = pshmem_env::GPU_LANDING_SLOTS.usize()?.max(1);
                let slot = pshmem_proxy::landing_slot_bytes(cfg.proxy.staging_chunk);
                let m = Mapping::anonymous(me, n * slots * slot)?;
                let v = m.view();
                landings.push(m);
                v
            } else {
                mem
            };
            // SAFETY: the heap mapping (or landing area) outlives the transport: the proxies
            // that own the transports are dropped (and joined) before them (field order).
            let mr = unsafe {
                t.mr_reg(LocalMem {
                    ptr: region.base(),
                    len: region.len(),
                    kind: MemKind::Host,
                })
            }
            .map_err(terr("registering the symmetric heap"))?;
            let remotes = net::exchange_mr(t.as_mut(), &bs, mr)
                .map_err(terr("exchanging heap registrations"))?;
            transport = t.caps().name.clone();
            setups.push((t, mr, remotes, region));
            clock.mark("registration");
        }
        let peer_maps = if cfg.disable_p2p {
            (0..n).map(|_| None).collect()
        } else {
            // Collective (every PE takes part, with or without same-host peers).
            share::share_with_local_peers(&bs, &local, Duration::from_secs(30))?
        };
        clock.mark("peer heaps");
        let peers = (0..n)
            .map(|r| match (&peer_maps[r], cfg.disable_p2p) {
                (_, true) => None,
                (_, false) if r == me => Some(mem),
                (Some(m), false) => Some(m.view()),
                (None, false) => None,
            })
            .collect();
        let rings: Vec<Arc<Ring>> = (0..cfg.rings)
            .map(|_| Ring::new_host(cfg.ring_slots))
            .collect();
        let health = Health::new();
        health.watch(rings.iter().cloned());
        {
            let h = health.clone();
            bs.on_failure(move |e| match e.dead_rank() {
                Some(d) => h.peer_dead(d, e.to_string()),
                None => h.raise(code::PROXY, None, e.to_string()),
            });
            let job = bs.death_reporter();
            health.on_peer_lost(move |pe, how| job.peer_lost(pe, how));
        }
        let threads = cfg.proxy_threads;
        let mut proxies = Vec::new();
        for (t, (transport, heap_mr, remote_heaps, region)) in setups.into_iter().enumerate() {
            let mine = rings
                .iter()
                .enumerate()
                .filter(|(i, _)| i % threads == t)
                .map(|(_, r)| r.clone())
                .collect();
            let mut pc = cfg.proxy.clone();
            pc.cpu = (!proxy_cpus.is_empty()).then(|| proxy_cpus[t % proxy_cpus.len()]);
            proxies.push(Proxy::spawn(
                format!("pshmem-proxy-{me}.{t}"),
                ProxySetup {
                    transport,
                    heap: region,
                    heap_mr,
                    remote_heaps,
                    rings: mine,
                    device: emulate.then(|| {
                        Box::new(pshmem_proxy::mem::HostDevice::new(mem))
                            as Box<dyn pshmem_proxy::DeviceMem>
                    }),
                    device_registered: registered,
                },
                pc,
                health.clone(),
            )?);
        }
        // The teams' exchange area: the first allocation, the same offset on every PE.
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
        clock.mark("proxies");
        bs.barrier()?;
        clock.mark("barrier");
        clock.log();
        Ok(Self {
            gpu: std::sync::OnceLock::new(),
            proxies: Mutex::new(proxies),
            _landings: landings,
            peers,
            _peer_maps: peer_maps,
            mem,
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
            transport,
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

    /// This PE's number.
    pub fn my_pe(&self) -> usize {
        self.me
    }

    /// Number of PEs.
    pub fn n_pes(&self) -> usize {
        self.n
    }

    /// The transport's name (provider and rails).
    pub fn transport_name(&self) -> &str {
        &self.transport
    }

    /// Runs `f` on proxy thread `proxy` (0 in the default configuration of one) once it has
    /// nothing in flight, with its transport to itself, and returns what `f` returns (see
    /// [`pshmem_proxy::Proxy::exclusive`]): writes between symmetric heaps by
    /// [`SymPtr::offset`] on the runtime's own endpoint, connection and registrations. For
    /// measurements (datapath-bench's raw baseline) and diagnostics; this PE's rings wait while
    /// `f` runs. Fails after `timeout`, or when there is no such proxy thread.
    pub fn exclusive<R: Send + 'static>(
        &self,
        proxy: usize,
        timeout: std::time::Duration,
        f: impl FnOnce(&mut pshmem_proxy::Exclusive<'_>) -> R + Send + 'static,
    ) -> Result<R> {
        self.live("exclusive")?;
        let proxies = lock(&self.proxies);
        let p = proxies.get(proxy).ok_or_else(|| Error::Config {
            me: self.me,
            detail: format!(
                "exclusive: no proxy thread {proxy} (this PE runs {})",
                proxies.len()
            ),
        })?;
        Ok(p.exclusive(timeout, f)?)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Whether operations to `pe` use the direct path.
    pub fn is_direct(&self, pe: usize) -> bool {
        self.peers.get(pe).is_some_and(Option::is_some)
    }

    // ---- checks and routing -----------------------------------------------------------------

    /// Refuses work after finalize, and after a failure of the job (sticky): a dead peer's
    /// memory may stay mapped on the direct path, but nothing may go on as if it were alive.
    fn live(&self, op: &'static str) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Error::Finalized { me: self.me, op });
        }
        if self.health.faulted() {
            return Err(self.fault_err(op, code::PROXY, None));
        }
        Ok(())
    }

    fn check_pe(&self, op: &'static str, pe: usize) -> Result<()> {
        if pe >= self.n {
            return Err(Error::InvalidPe {
                me: self.me,
                op,
                pe,
                n_pes: self.n,
            });
        }
        Ok(())
    }

    fn check_range(&self, op: &'static str, at: SymPtr, len: usize) -> Result<()> {
        let end = at.0.checked_add(len as u64);
        match end {
            Some(end) if at.0 >= alloc::RESERVED && end <= self.mem.len() as u64 => Ok(()),
            _ => Err(Error::OutOfHeap {
                me: self.me,
                op,
                offset: at.0,
                end: end.unwrap_or(u64::MAX),
                start: alloc::RESERVED,
                heap: self.mem.len() as u64,
            }),
        }
    }

    fn check_aligned(&self, op: &'static str, at: SymPtr, align: u64) -> Result<()> {
        if at.0 % align != 0 {
            return Err(Error::Misaligned {
                me: self.me,
                op,
                offset: at.0,
                align,
            });
        }
        Ok(())
    }

    /// Common checks of a remote operation on `len` bytes at `at` of `pe`.
    fn check(&self, op: &'static str, pe: usize, at: SymPtr, len: usize) -> Result<Route> {
        self.live(op)?;
        self.check_pe(op, pe)?;
        self.check_range(op, at, len)?;
        Ok(self.route(pe))
    }

    fn route(&self, pe: usize) -> Route {
        match self.peers[pe] {
            Some(h) => Route::Direct(h),
            None => Route::Ring,
        }
    }

    fn mem_err(&self, op: &'static str, pe: usize, e: MemError) -> Error {
        Error::OpFailed {
            me: self.me,
            op,
            pe: Some(pe),
            detail: e.to_string(),
            cause: Some(Box::new(e.into())),
        }
    }

    /// The heap offset of a local buffer if it lies in this PE's heap.
    fn local_ref(&self, ptr: *const u8, len: usize) -> Local {
        match self.mem.offset_of(ptr, len) {
            Some(off) => Local::Heap(off),
            None => Local::Raw(ptr as u64),
        }
    }

    fn producer(&self) -> &Producer {
        let n = self.producers.len();
        let i = RING.with(|c| {
            if c.get() == usize::MAX {
                c.set(NEXT_RING.fetch_add(1, Ordering::Relaxed));
            }
            c.get()
        });
        &self.producers[i % n]
    }

    fn limit(&self) -> WaitLimit {
        WaitLimit::new(Some(self.cfg.op_timeout))
    }

    /// Publishes an operation on this thread's ring; returns where it ends.
    fn push(&self, op: &'static str, d: Desc) -> Result<(&Producer, u64)> {
        let p = self.producer();
        let (slots, n) = d.encode();
        let end = p
            .push(&slots[..n], &self.limit())
            .map_err(|e| self.ring_err(op, e))?;
        Ok((p, end))
    }

    /// Publishes an operation and waits for it (and everything before it on the ring).
    fn push_wait(&self, op: &'static str, d: Desc) -> Result<()> {
        let (p, end) = self.push(op, d)?;
        p.ring()
            .wait_completed(end, &self.limit())
            .map_err(|e| self.ring_err(op, e))
    }

    /// Waits (bounded) until the proxies finished what kernels published on the GPU rings, so
    /// that no PE leaves while a peer still owes it an ack.
    fn drain_gpu_rings(&self) -> Result<()> {
        let Some(g) = self.gpu.get() else {
            return Ok(());
        };
        for (ring, head) in g.ring_heads()? {
            ring.wait_completed(head, &self.limit())
                .map_err(|e| self.ring_err("finalize", e))?;
        }
        Ok(())
    }

    fn ring_err(&self, op: &'static str, e: RingError) -> Error {
        match &e {
            RingError::Raised { .. } => self.halt_proxies(),
            RingError::Timeout { waited, .. } => {
                // The operation may still sit in the ring or the proxy, which would read (or
                // write) the caller's buffer after this call returned and the caller freed it;
                // nothing bounds when that ends. So a timed-out wait ends the data path: the
                // fault makes every later call fail at once, naming this timeout, and the
                // proxies are stopped before the caller gets its buffer back.
                self.health.raise(
                    code::TIMEOUT,
                    None,
                    format!(
                        "{op} waited {waited:.1?} (PSHMEM_OP_TIMEOUT) without completing, so PE \
                         {} stopped its proxies",
                        self.me
                    ),
                );
                self.halt_proxies();
            }
            _ => {}
        }
        match e {
            RingError::Timeout { waited, .. } => Error::Timeout {
                me: self.me,
                op,
                waited,
            },
            RingError::Raised { code: c, pe } => self.fault_err(op, c, pe.map(|p| p as usize)),
            other => Error::OpFailed {
                me: self.me,
                op,
                pe: None,
                detail: other.to_string(),
                cause: None,
            },
        }
    }

    /// Stops the proxies (a bounded drain) once a fault is raised. Every later call fails
    /// anyway (the fault is sticky), and a wait that ends on the fault returns before the proxy
    /// may have read the descriptors it covers: a blocking put's caller frees its source as
    /// soon as the put returns, error or not, so no proxy may read it after that.
    fn halt_proxies(&self) {
        for p in lock(&self.proxies).drain(..) {
            let _ = p.stop();
        }
    }

    /// The error for a raised fault, with the details the proxy or the bootstrap recorded.
    fn fault_err(&self, op: &'static str, c: u32, pe: Option<usize>) -> Error {
        fault_error(self.me, op, self.health.fault(), c, pe)
    }

    // ---- symmetric heap ---------------------------------------------------------------------

    fn bs(&self, op: &'static str) -> Result<MutexGuard<'_, Option<Bootstrap>>> {
        let g = lock(&self.bs);
        if g.is_none() {
            return Err(Error::Finalized { me: self.me, op });
        }
        Ok(g)
    }

    /// Checks that every PE made the same collective call (`rec`); `describe` renders one.
    fn agree(
        &self,
        op: &'static str,
        rec: &[u8],
        describe: impl Fn(&[u8]) -> String,
    ) -> Result<()> {
        let all = {
            let g = self.bs(op)?;
            g.as_ref().expect("bootstrap").allgather(rec)?
        };
        match differences(&all, describe) {
            Some(detail) => Err(Error::CollectiveMismatch {
                me: self.me,
                op,
                detail,
            }),
            None => Ok(()),
        }
    }

    fn allocate(&self, op: &'static str, size: u64, align: u64, zero: bool) -> Result<SymPtr> {
        self.allocate_in(&self.alloc, op, size, align, |at, len| {
            if !zero {
                return Ok(());
            }
            let zeros = vec![0u8; len as usize];
            // SAFETY: `zeros` is a live buffer of `len` bytes.
            unsafe { self.mem.write_from_raw(at, zeros.as_ptr(), zeros.len()) }
                .map_err(|e| self.mem_err(op, self.me, e))
        })
    }

    /// A collective allocation from `alloc`; `prepare` runs on the new block (at, len) before
    /// the PEs compare their calls.
    fn allocate_in(
        &self,
        alloc: &Mutex<Allocator>,
        op: &'static str,
        size: u64,
        align: u64,
        prepare: impl FnOnce(u64, u64) -> Result<()>,
    ) -> Result<SymPtr> {
        self.live(op)?;
        let mut a = lock(alloc);
        let at = a.alloc(size, align);
        if let Some(at) = at {
            // Before the collective check: once any PE returns, peers may write here.
            prepare(at, a.size_of(at).unwrap_or(0))?;
        }
        let rec = [1u64, size, align, at.unwrap_or(u64::MAX)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>();
        let agreed = self.agree(op, &rec, describe_alloc);
        if let Err(e) = agreed {
            if let Some(at) = at {
                a.free(at);
            }
            return Err(e);
        }
        match at {
            Some(at) => Ok(SymPtr(at)),
            None => Err(Error::HeapExhausted {
                me: self.me,
                op,
                requested: size,
                largest_free: a.largest_free(),
            }),
        }
    }

    // ---- GPU path ---------------------------------------------------------------------------

    /// Starts the GPU path (collective): a GPU symmetric heap of `PSHMEM_GPU_SYMMETRIC_SIZE`
    /// bytes on device `PSHMEM_CUDA_DEVICE` (default: local rank modulo the device count),
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
        let size = {
            let v = pshmem_env::GPU_SYMMETRIC_SIZE.value();
            pshmem_env::parse_size(&v).ok_or_else(|| Error::Config {
                me: self.me,
                detail: format!("PSHMEM_GPU_SYMMETRIC_SIZE={v} is not a byte count"),
            })?
        };
        let landing_slots = pshmem_env::GPU_LANDING_SLOTS.usize()?.max(1);
        let probe = gpu::probe();
        let rec = [
            size as u64,
            self.cfg.proxy.staging_chunk as u64,
            landing_slots as u64,
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
                heap_len: size,
                disable_p2p: self.cfg.disable_p2p,
                ring_slots: self.cfg.ring_slots,
                rings: pshmem_env::GPU_RINGS.usize()?.max(1),
                proxy_threads: pshmem_env::GPU_PROXY_THREADS.usize()?.max(1),
                landing_slots,
                copy_engine_min: pshmem_env::COPY_ENGINE_MIN.usize()?,
                op_timeout: self.cfg.op_timeout,
                proxy: self.cfg.proxy.clone(),
                health: self.health.clone(),
                max_teams: self.cfg.max_teams,
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

    /// Allocates `size` bytes of GPU symmetric memory (256-byte aligned). Collective.
    pub fn gpu_malloc(&self, size: usize) -> Result<SymPtr> {
        let g = self.gpu()?;
        self.allocate_in(&g.alloc, "gpu_malloc", size as u64, 256, |_, _| Ok(()))
    }

    /// Allocates `size` zeroed bytes of GPU symmetric memory. Collective.
    pub fn gpu_calloc(&self, size: usize) -> Result<SymPtr> {
        let g = self.gpu()?;
        self.allocate_in(&g.alloc, "gpu_calloc", size as u64, 256, |at, len| {
            g.zero(at, len as usize)
        })
    }

    /// Frees GPU symmetric memory. Collective; no kernel may still use it.
    pub fn gpu_free(&self, p: SymPtr) -> Result<()> {
        let g = self.gpu()?;
        self.live("gpu_free")?;
        let mut a = lock(&g.alloc);
        let known = a.size_of(p.0).is_some();
        let rec = [3u64, p.0, u64::from(known)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>();
        self.agree("gpu_free", &rec, describe_free)?;
        if !known {
            return Err(Error::BadFree {
                me: self.me,
                offset: p.0,
            });
        }
        a.free(p.0);
        Ok(())
    }

    /// Allocates `size` bytes of symmetric memory (64-byte aligned). Collective: every PE
    /// must call it with the same size, in the same order.
    pub fn malloc(&self, size: usize) -> Result<SymPtr> {
        self.allocate("malloc", size as u64, alloc::MIN_ALIGN, false)
    }

    /// Allocates `size` bytes aligned to `alignment` (a power of two). Collective.
    pub fn align(&self, alignment: usize, size: usize) -> Result<SymPtr> {
        if !alignment.is_power_of_two() {
            return Err(Error::BadAlignment {
                me: self.me,
                op: "align",
                align: alignment,
            });
        }
        self.allocate("align", size as u64, alignment as u64, false)
    }

    /// Allocates `count * size` zeroed bytes. Collective.
    pub fn calloc(&self, count: usize, size: usize) -> Result<SymPtr> {
        let total = count.checked_mul(size).ok_or(Error::SizeOverflow {
            me: self.me,
            op: "calloc",
            count,
            size,
        })?;
        self.allocate("calloc", total as u64, alloc::MIN_ALIGN, true)
    }

    /// Frees an allocation. Collective: completes this PE's operations first, and every PE must
    /// free the same address in the same order.
    pub fn free(&self, p: SymPtr) -> Result<()> {
        self.live("free")?;
        self.quiet_inner("free")?;
        let mut a = lock(&self.alloc);
        let known = a.size_of(p.0).is_some();
        let rec = [2u64, p.0, u64::from(known)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>();
        self.agree("free", &rec, describe_free)?;
        if !known {
            return Err(Error::BadFree {
                me: self.me,
                offset: p.0,
            });
        }
        a.free(p.0);
        Ok(())
    }

    /// This PE's address of a symmetric object.
    pub fn ptr(&self, p: SymPtr) -> *mut u8 {
        self.mem.base().wrapping_add(p.0 as usize)
    }

    /// The address of `pe`'s copy of a symmetric object, if this PE maps it directly
    /// (same host, direct path enabled); as `nvshmem_ptr`.
    pub fn peer_ptr(&self, p: SymPtr, pe: usize) -> Option<*mut u8> {
        self.peers
            .get(pe)
            .copied()
            .flatten()
            .map(|h| h.base().wrapping_add(p.0 as usize))
    }

    /// Reads this PE's copy of a symmetric value (an atomic load for aligned 32/64-bit values).
    pub fn local_read<T: AmoElem>(&self, p: SymPtr) -> Result<T> {
        self.check_range("local_read", p, T::SIZE as usize)?;
        self.check_aligned("local_read", p, u64::from(T::SIZE))?;
        let v = self
            .mem
            .load(p.0, T::WIDE)
            .map_err(|e| self.mem_err("local_read", self.me, e))?;
        Ok(T::from_bits(v))
    }

    /// Copies bytes out of this PE's copy of symmetric memory.
    pub fn local_copy_out(&self, p: SymPtr, dst: &mut [u8]) -> Result<()> {
        self.check_range("local_copy_out", p, dst.len())?;
        // SAFETY: `dst` is a live exclusive buffer of its length.
        unsafe { self.mem.read_to_raw(p.0, dst.as_mut_ptr(), dst.len()) }
            .map_err(|e| self.mem_err("local_copy_out", self.me, e))
    }

    /// Copies bytes into this PE's copy of symmetric memory.
    pub fn local_copy_in(&self, p: SymPtr, src: &[u8]) -> Result<()> {
        self.check_range("local_copy_in", p, src.len())?;
        // SAFETY: `src` is a live buffer of its length.
        unsafe { self.mem.write_from_raw(p.0, src.as_ptr(), src.len()) }
            .map_err(|e| self.mem_err("local_copy_in", self.me, e))
    }

    // ---- RMA --------------------------------------------------------------------------------

    /// Publishes `d`, and waits for it when `blocking`.
    fn submit(&self, op: &'static str, d: Desc, blocking: bool) -> Result<()> {
        if blocking {
            self.push_wait(op, d)
        } else {
            self.push(op, d).map(|_| ())
        }
    }

    /// Every put: a copy on the direct path, or a descriptor (waited for when `blocking`).
    ///
    /// # Safety
    /// `src..src + len` must be readable, and unchanged until the operation completes.
    unsafe fn put_at(
        &self,
        op: &'static str,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        pe: usize,
        blocking: bool,
    ) -> Result<()> {
        match self.check(op, pe, dest, len)? {
            Route::Direct(h) => {
                // SAFETY: forwarded from the caller.
                unsafe { h.write_from_raw(dest.0, src, len) }.map_err(|e| self.mem_err(op, pe, e))
            }
            Route::Ring => {
                let d = Desc::Put {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    local: self.local_ref(src, len),
                    len: len as u64,
                };
                self.submit(op, d, blocking)
            }
        }
    }

    /// Every get: a copy on the direct path, or a descriptor (waited for when `blocking`).
    ///
    /// # Safety
    /// `dest..dest + len` must be writable and untouched by others until the operation
    /// completes.
    unsafe fn get_at(
        &self,
        op: &'static str,
        dest: *mut u8,
        src: SymPtr,
        len: usize,
        pe: usize,
        blocking: bool,
    ) -> Result<()> {
        match self.check(op, pe, src, len)? {
            Route::Direct(h) => {
                // SAFETY: forwarded from the caller.
                unsafe { h.read_to_raw(src.0, dest, len) }.map_err(|e| self.mem_err(op, pe, e))
            }
            Route::Ring => {
                let d = Desc::Get {
                    pe: Pe::from_idx(pe),
                    remote: src.0,
                    local: self.local_ref(dest, len),
                    len: len as u64,
                };
                self.submit(op, d, blocking)
            }
        }
    }

    /// Copies `src` to `dest` on `pe`; returns when `src` may be reused (the data is then
    /// delivered as well).
    pub fn put(&self, dest: SymPtr, src: &[u8], pe: usize) -> Result<()> {
        // SAFETY: `src` is a live slice, and the put has completed when this returns.
        unsafe { self.put_at("put", dest, src.as_ptr(), src.len(), pe, true) }
    }

    /// Starts copying `len` bytes at `src` to `dest` on `pe`; complete after [`Pshmem::quiet`].
    ///
    /// # Safety
    /// `src..src + len` must stay valid and unchanged until the next `quiet` (or a blocking
    /// operation) on this thread returns.
    pub unsafe fn put_nbi(
        &self,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.put_at("put_nbi", dest, src, len, pe, false) }
    }

    /// Starts copying `len` bytes of this PE's `src` (symmetric) to `dest` on `pe`.
    pub fn put_nbi_sym(&self, dest: SymPtr, src: SymPtr, len: usize, pe: usize) -> Result<()> {
        self.check_range("put_nbi", src, len)?;
        // SAFETY: `src` lies in this PE's heap (checked), which stays mapped while `self` lives.
        unsafe { self.put_nbi(dest, self.ptr(src), len, pe) }
    }

    /// Copies `dest.len()` bytes from `src` on `pe` into `dest`.
    pub fn get(&self, dest: &mut [u8], src: SymPtr, pe: usize) -> Result<()> {
        // SAFETY: `dest` is a live exclusive slice, and the get has completed when this returns.
        unsafe { self.get_at("get", dest.as_mut_ptr(), src, dest.len(), pe, true) }
    }

    /// Starts copying `len` bytes from `src` on `pe` to `dest`; complete after `quiet`.
    ///
    /// # Safety
    /// `dest..dest + len` must stay valid, and unread and unwritten by anyone else, until the
    /// next `quiet` (or a blocking operation) on this thread returns.
    pub unsafe fn get_nbi(&self, dest: *mut u8, src: SymPtr, len: usize, pe: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.get_at("get_nbi", dest, src, len, pe, false) }
    }

    /// Starts copying `len` bytes from `src` on `pe` into this PE's `dest` (symmetric).
    pub fn get_nbi_sym(&self, dest: SymPtr, src: SymPtr, len: usize, pe: usize) -> Result<()> {
        self.check_range("get_nbi", dest, len)?;
        // SAFETY: `dest` lies in this PE's heap (checked), mapped while `self` lives.
        unsafe { self.get_nbi(self.ptr(dest), src, len, pe) }
    }

    /// Stores `value` at `dest` on `pe` (complete after `quiet`).
    pub fn p<T: Elem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<()> {
        match self.check("p", pe, dest, T::SIZE as usize)? {
            Route::Direct(h) => h
                .store(dest.0, value.to_bits(), T::SIZE)
                .map_err(|e| self.mem_err("p", pe, e)),
            Route::Ring => self
                .push(
                    "p",
                    Desc::P {
                        pe: Pe::from_idx(pe),
                        remote: dest.0,
                        value: value.to_bits(),
                        width: T::SIZE,
                    },
                )
                .map(|_| ()),
        }
    }

    /// Reads the value at `src` on `pe`.
    pub fn g<T: Elem>(&self, src: SymPtr, pe: usize) -> Result<T> {
        let mut bits = [0u8; 8];
        self.get(&mut bits[..T::SIZE as usize], src, pe)?;
        Ok(T::from_bits(u64::from_le_bytes(bits)))
    }

    // ---- signals ----------------------------------------------------------------------------

    /// Every put-with-signal: copy then signal on the direct path, or one descriptor (waited
    /// for when `blocking`).
    ///
    /// # Safety
    /// As [`Pshmem::put_at`] for `src`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn put_signal_at(
        &self,
        op_name: &'static str,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
        blocking: bool,
    ) -> Result<()> {
        let route = self.check(op_name, pe, dest, len)?;
        self.check_signal(op_name, sig)?;
        match route {
            // SAFETY: forwarded from the caller. The signal's AcqRel update follows the copy.
            Route::Direct(h) => unsafe { h.write_from_raw(dest.0, src, len) }
                .and_then(|()| h.amo(sig.0, true, op.as_amo(), value, 0))
                .map(|_| ())
                .map_err(|e| self.mem_err(op_name, pe, e)),
            Route::Ring => {
                let d = Desc::PutSignal {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    local: self.local_ref(src, len),
                    len: len as u64,
                    sig: sig.0,
                    value,
                    op,
                };
                self.submit(op_name, d, blocking)
            }
        }
    }

    /// Copies `src` to `dest` on `pe`, then updates the 64-bit signal `sig` there; the signal
    /// is never visible before the data. Returns when `src` may be reused.
    pub fn put_signal(
        &self,
        dest: SymPtr,
        src: &[u8],
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: `src` is a live slice, and the operation has completed when this returns.
        unsafe {
            self.put_signal_at(
                "put_signal",
                dest,
                src.as_ptr(),
                src.len(),
                sig,
                value,
                op,
                pe,
                true,
            )
        }
    }

    /// Non-blocking [`Pshmem::put_signal`].
    ///
    /// # Safety
    /// As [`Pshmem::put_nbi`] for `src`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn put_signal_nbi(
        &self,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.put_signal_at("put_signal_nbi", dest, src, len, sig, value, op, pe, false) }
    }

    /// Non-blocking put-with-signal from this PE's symmetric `src`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal_nbi_sym(
        &self,
        dest: SymPtr,
        src: SymPtr,
        len: usize,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        self.check_range("put_signal_nbi", src, len)?;
        // SAFETY: `src` lies in this PE's heap (checked).
        unsafe { self.put_signal_nbi(dest, self.ptr(src), len, sig, value, op, pe) }
    }

    /// Non-blocking put from this PE's symmetric `src` that counts towards the counted signal
    /// `sig` on `pe` ([`Pshmem::signal_counted`]). Nothing else orders it: many counted puts
    /// and one counted signal replace a put-with-signal per message, on any fabric.
    pub fn put_counted_nbi_sym(
        &self,
        dest: SymPtr,
        src: SymPtr,
        len: usize,
        sig: SymPtr,
        pe: usize,
    ) -> Result<()> {
        const NAME: &str = "put_counted_nbi";
        self.check_range(NAME, src, len)?;
        let route = self.check(NAME, pe, dest, len)?;
        self.check_signal(NAME, sig)?;
        match route {
            // SAFETY: `src` lies in this PE's heap (checked), `dest` in the peer's mapping.
            Route::Direct(h) => unsafe { h.write_from_raw(dest.0, self.ptr(src), len) }
                .map_err(|e| self.mem_err(NAME, pe, e)),
            Route::Ring => {
                let d = Desc::PutCounted {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    local: Local::Heap(src.0),
                    len: len as u64,
                    sig: sig.0,
                };
                self.submit(NAME, d, false)
            }
        }
    }

    /// Updates the signal `sig` on `pe` once every [`Pshmem::put_counted_nbi_sym`] for it
    /// issued by this thread since its previous counted signal has landed (complete after
    /// `quiet`). The target's proxy counts the writes (the tagged path), or the signal waits
    /// for their completion (the host-staged path), or follows them (ordered transports).
    pub fn signal_counted(&self, sig: SymPtr, value: u64, op: SignalOp, pe: usize) -> Result<()> {
        const NAME: &str = "signal_counted";
        let route = self.check(NAME, pe, sig, 8)?;
        self.check_aligned(NAME, sig, 8)?;
        match route {
            // The AcqRel update follows this thread's copies (the direct path is in order).
            Route::Direct(_) => self.signal_inner(NAME, route, sig, value, op, pe),
            Route::Ring => self
                .push(
                    NAME,
                    Desc::SignalCounted {
                        pe: Pe::from_idx(pe),
                        remote: sig.0,
                        value,
                        op,
                    },
                )
                .map(drop),
        }
    }

    fn check_signal(&self, op: &'static str, sig: SymPtr) -> Result<()> {
        self.check_range(op, sig, 8)?;
        self.check_aligned(op, sig, 8)
    }

    /// Updates the signal `sig` on `pe` (complete after `quiet`).
    pub fn signal_op(&self, sig: SymPtr, value: u64, op: SignalOp, pe: usize) -> Result<()> {
        let route = self.check("signal_op", pe, sig, 8)?;
        self.check_aligned("signal_op", sig, 8)?;
        self.signal_inner("signal_op", route, sig, value, op, pe)
    }

    fn signal_inner(
        &self,
        name: &'static str,
        route: Route,
        sig: SymPtr,
        value: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        match route {
            Route::Direct(h) => h
                .amo(sig.0, true, op.as_amo(), value, 0)
                .map(|_| ())
                .map_err(|e| self.mem_err(name, pe, e)),
            Route::Ring => self
                .push(
                    name,
                    Desc::Signal {
                        pe: Pe::from_idx(pe),
                        remote: sig.0,
                        value,
                        op,
                    },
                )
                .map(|_| ()),
        }
    }

    /// Waits until this PE's signal `sig` satisfies `cmp value`; returns its value.
    pub fn signal_wait_until(&self, sig: SymPtr, cmp: Cmp, value: u64) -> Result<u64> {
        self.live("signal_wait_until")?;
        self.check_signal("signal_wait_until", sig)?;
        self.wait_local("signal_wait_until", sig, cmp, value)
    }

    /// Waits until this PE's `ivar` satisfies `cmp value`; returns its value.
    pub fn wait_until<T: AmoElem>(&self, ivar: SymPtr, cmp: Cmp, value: T) -> Result<T> {
        self.live("wait_until")?;
        self.check_range("wait_until", ivar, T::SIZE as usize)?;
        self.check_aligned("wait_until", ivar, u64::from(T::SIZE))?;
        self.wait_local("wait_until", ivar, cmp, value)
    }

    /// [`Pshmem::wait_until`] for at most `within` (capped by `PSHMEM_OP_TIMEOUT`): `None` when
    /// that passed first. Bindings wait in such slices to stay interruptible (Ctrl-C in Python)
    /// and apply the overall timeout themselves.
    pub fn wait_until_within<T: AmoElem>(
        &self,
        ivar: SymPtr,
        cmp: Cmp,
        value: T,
        within: Duration,
    ) -> Result<Option<T>> {
        let op = "wait_until";
        self.live(op)?;
        self.check_range(op, ivar, T::SIZE as usize)?;
        self.check_aligned(op, ivar, u64::from(T::SIZE))?;
        match self.wait_local_for(op, ivar, cmp, value, within.min(self.cfg.op_timeout)) {
            Err(Error::Timeout { .. }) => Ok(None),
            r => r.map(Some),
        }
    }

    /// Spins on a local word (acquire loads) until the condition holds, a fault is raised, or
    /// `PSHMEM_OP_TIMEOUT` passes.
    fn wait_local<T: AmoElem>(
        &self,
        op: &'static str,
        at: SymPtr,
        cmp: Cmp,
        value: T,
    ) -> Result<T> {
        self.wait_local_for(op, at, cmp, value, self.cfg.op_timeout)
    }

    /// [`Pshmem::wait_local`] bounded by `limit`.
    fn wait_local_for<T: AmoElem>(
        &self,
        op: &'static str,
        at: SymPtr,
        cmp: Cmp,
        value: T,
        limit: Duration,
    ) -> Result<T> {
        let start = Instant::now();
        let mut step = 0u32;
        loop {
            let v = T::from_bits(
                self.mem
                    .load(at.0, T::WIDE)
                    .map_err(|e| self.mem_err(op, self.me, e))?,
            );
            if cmp.holds(v, value) {
                return Ok(v);
            }
            step = step.wrapping_add(1);
            if step % 256 == 0 {
                if self.health.faulted() {
                    return Err(self.fault_err(op, code::PROXY, None));
                }
                if start.elapsed() > limit {
                    return Err(Error::Timeout {
                        me: self.me,
                        op,
                        waited: start.elapsed(),
                    });
                }
            }
            if step < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    // ---- atomics ----------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn amo<T: AmoElem>(
        &self,
        name: &'static str,
        dest: SymPtr,
        op: AmoOp,
        operand: T,
        compare: T,
        pe: usize,
    ) -> Result<T> {
        let route = self.check(name, pe, dest, T::SIZE as usize)?;
        self.check_aligned(name, dest, u64::from(T::SIZE))?;
        match route {
            Route::Direct(h) => h
                .amo(dest.0, T::WIDE, op, operand.to_bits(), compare.to_bits())
                .map(T::from_bits)
                .map_err(|e| self.mem_err(name, pe, e)),
            Route::Ring => {
                let mut cell = 0u64;
                let d = Desc::Amo {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    op,
                    wide: T::WIDE,
                    operand: operand.to_bits(),
                    compare: compare.to_bits(),
                    result: if op.fetches() {
                        std::ptr::addr_of_mut!(cell) as u64
                    } else {
                        0
                    },
                };
                if op.fetches() {
                    // The proxy writes `cell` before the operation completes, and we wait for
                    // that completion before `cell` goes out of scope.
                    self.push_wait(name, d)?;
                    // SAFETY: the completion's acquire ordered the proxy's write before this read.
                    let v = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(cell)) };
                    Ok(T::from_bits(v))
                } else {
                    self.push(name, d).map(|_| T::from_bits(0))
                }
            }
        }
    }

    /// Adds `value` to `dest` on `pe`; returns the old value.
    pub fn atomic_fetch_add<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<T> {
        self.amo("atomic_fetch_add", dest, AmoOp::FetchAdd, value, value, pe)
    }

    /// Adds `value` to `dest` on `pe` (complete after `quiet`).
    pub fn atomic_add<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<()> {
        self.amo("atomic_add", dest, AmoOp::Add, value, value, pe)
            .map(|_| ())
    }

    /// Stores `value` at `dest` on `pe`; returns the old value.
    pub fn atomic_swap<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<T> {
        self.amo("atomic_swap", dest, AmoOp::Swap, value, value, pe)
    }

    /// Stores `value` at `dest` on `pe` if it equals `cond`; returns the old value.
    pub fn atomic_compare_swap<T: AmoElem>(
        &self,
        dest: SymPtr,
        cond: T,
        value: T,
        pe: usize,
    ) -> Result<T> {
        self.amo(
            "atomic_compare_swap",
            dest,
            AmoOp::CompareSwap,
            value,
            cond,
            pe,
        )
    }

    /// Reads `dest` on `pe` atomically.
    pub fn atomic_fetch<T: AmoElem>(&self, dest: SymPtr, pe: usize) -> Result<T> {
        self.amo(
            "atomic_fetch",
            dest,
            AmoOp::Fetch,
            T::from_bits(0),
            T::from_bits(0),
            pe,
        )
    }

    /// Stores `value` at `dest` on `pe` atomically (complete after `quiet`).
    pub fn atomic_set<T: AmoElem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<()> {
        self.amo("atomic_set", dest, AmoOp::Set, value, value, pe)
            .map(|_| ())
    }

    /// Any atomic: `op` on `dest` at `pe` with `operand` (and `compare` for compare-swap).
    /// Returns the old value for the fetching operations; the others return 0 and complete
    /// after `quiet`.
    pub fn atomic<T: AmoElem>(
        &self,
        op: AmoOp,
        dest: SymPtr,
        operand: T,
        compare: T,
        pe: usize,
    ) -> Result<T> {
        let name = match op {
            AmoOp::FetchAdd => "atomic_fetch_add",
            AmoOp::Add => "atomic_add",
            AmoOp::Swap => "atomic_swap",
            AmoOp::CompareSwap => "atomic_compare_swap",
            AmoOp::Fetch => "atomic_fetch",
            AmoOp::Set => "atomic_set",
            AmoOp::FetchAnd => "atomic_fetch_and",
            AmoOp::And => "atomic_and",
            AmoOp::FetchOr => "atomic_fetch_or",
            AmoOp::Or => "atomic_or",
            AmoOp::FetchXor => "atomic_fetch_xor",
            AmoOp::Xor => "atomic_xor",
        };
        self.amo(name, dest, op, operand, compare, pe)
    }

    // ---- ordering and synchronisation -------------------------------------------------------

    /// Completes every operation this PE issued (on every ring): after it, their effects are
    /// visible at their targets.
    pub fn quiet(&self) -> Result<()> {
        self.live("quiet")?;
        self.quiet_inner("quiet")
    }

    fn quiet_inner(&self, op: &'static str) -> Result<()> {
        let limit = self.limit();
        for p in &self.producers {
            p.quiet(&limit).map_err(|e| self.ring_err(op, e))?;
        }
        // Direct stores are complete once issued; the fence orders them before what follows.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.health.faulted() {
            self.halt_proxies();
            return Err(self.fault_err(op, code::PROXY, None));
        }
        Ok(())
    }

    /// Orders this thread's operations: those to a PE issued after the fence land after those
    /// to that PE before it.
    pub fn fence(&self) -> Result<()> {
        self.live("fence")?;
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.peers.iter().any(Option::is_none) {
            self.push("fence", Desc::Fence)?;
        }
        Ok(())
    }

    /// Waits until every PE arrives, with every PE's earlier operations complete. Collective.
    pub fn barrier_all(&self) -> Result<()> {
        self.live("barrier_all")?;
        self.barrier_inner("barrier_all")
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

/// The settings every PE must share, compared at init: each PE's values, and a mismatch named
/// with each differing PE's values.
fn agree_on_settings(bs: &Bootstrap, cfg: &Config) -> Result<()> {
    let emulate = pshmem_env::EMULATE_GPU_HEAP.checked()?;
    let settings = [
        (pshmem_env::SYMMETRIC_SIZE.name, cfg.heap_size.to_string()),
        (
            pshmem_env::PROXY_THREADS.name,
            cfg.proxy_threads.to_string(),
        ),
        (
            pshmem_env::DISABLE_P2P.name,
            u8::from(cfg.disable_p2p).to_string(),
        ),
        (
            pshmem_env::STAGING_CHUNK.name,
            cfg.proxy.staging_chunk.to_string(),
        ),
        (
            pshmem_env::GPU_LANDING_SLOTS.name,
            pshmem_env::GPU_LANDING_SLOTS.usize()?.to_string(),
        ),
        (pshmem_env::EMULATE_GPU_HEAP.name, emulate),
        (
            pshmem_env::GPU_PROXY_THREADS.name,
            pshmem_env::GPU_PROXY_THREADS.usize()?.to_string(),
        ),
        (
            pshmem_env::GPU_RINGS.name,
            pshmem_env::GPU_RINGS.usize()?.to_string(),
        ),
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

/// The error for a raised fault of `code` (for `pe`), with what the proxy or the bootstrap
/// recorded about it: a dead peer, or a failed data path with its typed cause.
pub(crate) fn fault_error(
    me: usize,
    op: &'static str,
    fault: Option<pshmem_proxy::Fault>,
    code: u32,
    pe: Option<usize>,
) -> Error {
    let (code, pe, detail, cause) = match fault {
        Some(f) => (f.code, f.pe.or(pe), f.detail, f.cause.map(Box::new)),
        None => (code, pe, "no details".into(), None),
    };
    if code == code::PEER_DEAD {
        Error::PeerDied {
            me,
            op,
            pe,
            detail,
            cause,
        }
    } else {
        Error::OpFailed {
            me,
            op,
            pe,
            detail,
            cause,
        }
    }
}

/// `None` if every PE's record is the same; otherwise which PEs differ from PE 0, and how.
fn differences(all: &[Vec<u8>], describe: impl Fn(&[u8]) -> String) -> Option<String> {
    let first = all.first()?;
    let odd: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| *r != first)
        .map(|(pe, r)| format!("PE {pe}: {}", describe(r)))
        .collect();
    (!odd.is_empty()).then(|| format!("PE 0: {}; {}", describe(first), odd.join("; ")))
}

fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
        .collect()
}

fn describe_alloc(b: &[u8]) -> String {
    let w = words(b);
    match w.as_slice() {
        [1, size, align, at] => {
            let at = if *at == u64::MAX {
                "no room".to_string()
            } else {
                format!("offset {at}")
            };
            format!("allocation of {size} bytes aligned {align} -> {at}")
        }
        [2, off, _] => format!("free of offset {off}"),
        _ => "another collective".into(),
    }
}

fn describe_free(b: &[u8]) -> String {
    let w = words(b);
    match w.as_slice() {
        [2, off, known] => format!(
            "free of offset {off}{}",
            if *known == 1 { "" } else { " (not allocated)" }
        ),
        _ => describe_alloc(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_odd_pe() {
        let a = vec![vec![1u8, 2], vec![1, 2], vec![1, 3]];
        let d = differences(&a, |b| format!("{b:?}")).unwrap();
        assert!(d.contains("PE 2: [1, 3]"), "{d}");
        assert!(differences(&a[..2], |b| format!("{b:?}")).is_none());
    }
}
