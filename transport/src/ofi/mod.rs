//! The libfabric backend: [`OfiTransport`] implements [`Transport`] over FI_EP_RDM endpoints.
//!
//! - **Rails**: `rails` endpoints per PE (one fabric/domain/CQ/AV each), on the NIC domains the
//!   configuration names (topology picks them) or all on the first matching domain. Operations
//!   to a peer use the peer's home rail (`pe % rails`, so PEs do not all start on one NIC);
//!   writes and reads of at least [`OfiConfig::stripe_min`] bytes are split over every rail;
//!   writes with remote CQ data (never split) take turns over the rails.
//! - **Keys**: registrations ask for program-chosen keys (unique per domain) when the provider
//!   lacks FI_MR_PROV_KEY; remote addresses are virtual addresses under FI_MR_VIRT_ADDR and
//!   offsets otherwise.
//! - **Completions**: every operation asks for a completion and, where the provider accepts it,
//!   delivery-complete semantics (a write's completion means the bytes are at the target).
//!   Operations whose payload fits the inject size are posted with FI_INJECT so the caller's
//!   buffer is free at once. `-FI_EAGAIN` becomes [`PostError::Retry`].
//! - **Messages**: `send` copies into (or injects from) internal registered buffers; a pool of
//!   posted receive buffers turns into [`Event::Recv`].

pub mod fabric;
mod shm;

/// Removes the shm provider's region files that this user's dead processes left in /dev/shm
/// (a SIGKILLed endpoint never removes its own); returns how many. Every transport open runs it.
pub fn sweep_stale_shm() -> usize {
    let stale = shm::sweep_stale();
    if stale > 0 {
        tracing::info!("removed {stale} shm region file(s) left by killed processes");
    }
    stale
}

use std::{
    ffi::c_void,
    mem::size_of,
    sync::{Arc, Mutex},
};

use pshmem_env as env;
use pshmem_libfabric_sys as sys;

use self::fabric::{
    Av, Cq, CqError, CqRead, Domain, Endpoint, Fabric, Hints, InfoList, InfoRef, Mr, MrSource,
    bits, check, strerror,
};
use crate::{
    Caps, Event, Job, LocalMem, LocalRef, MemKind, MrId, Pe, PostError, RemoteMrId, RemoteRef,
    Result, Transport, TransportError, check_bounds, slab::Slab,
};

/// Provider preference when none is named.
pub const DEFAULT_PROVIDERS: &[&str] = &["efa", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"];

/// How to open the libfabric transport.
#[derive(Debug, Clone)]
pub struct OfiConfig {
    /// Providers to try, in order.
    pub providers: Vec<String>,
    /// Node (address or interface) to bind; `None` lets the provider choose.
    pub node: Option<String>,
    /// Domain names (NICs) for the rails, in order; empty means the first matching domain.
    pub domains: Vec<String>,
    /// Number of rails.
    pub rails: usize,
    /// Operations outstanding per rail before `Retry`.
    pub max_outstanding: usize,
    /// Posted receive buffers per rail.
    pub recv_buffers: usize,
    /// Largest `send` payload.
    pub max_send: usize,
    /// Writes/reads at least this long are striped over the rails.
    pub stripe_min: usize,
    /// Writes with immediate data one peer may have in flight to this PE (the proxy's
    /// per-destination limit): completion queues are sized for all peers' (see
    /// [`cq_entries`]).
    pub incoming_per_peer: usize,
}

impl OfiConfig {
    /// Defaults for `provider` (or the preference order), with `PSHMEM_FABRIC_IFACE` and
    /// `PSHMEM_RAILS` from the environment.
    pub fn from_env(provider: Option<&str>) -> std::result::Result<Self, env::EnvError> {
        Ok(Self {
            providers: match provider {
                Some(p) => vec![p.to_string()],
                None => DEFAULT_PROVIDERS.iter().map(|s| s.to_string()).collect(),
            },
            node: env::FABRIC_IFACE.raw(),
            domains: Vec::new(),
            rails: env::RAILS.opt_usize()?.unwrap_or(1).max(1),
            max_outstanding: 1024,
            recv_buffers: 256,
            max_send: 4096,
            stripe_min: 256 << 10,
            incoming_per_peer: env::PROXY_MAX_INFLIGHT_PER_PE
                .opt_usize()?
                .unwrap_or(DEFAULT_INCOMING_PER_PEER),
        })
    }
}

/// Kinds of in-flight operations (for errors and completion handling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Write,
    Read,
    Send,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::Read => "read",
            OpKind::Send => "send",
        }
    }
}

/// An event kept for the next poll.
#[derive(Debug)]
enum OwnedEvent {
    Done(u64),
    Failed(u64, TransportError),
    RemoteWrite(u64),
    Recv(Vec<u8>),
}

impl OwnedEvent {
    fn of(e: Event<'_>) -> Self {
        match e {
            Event::Done { ctx } => Self::Done(ctx),
            Event::Failed { ctx, error } => Self::Failed(ctx, error),
            Event::RemoteWrite { data } => Self::RemoteWrite(data),
            Event::Recv { data } => Self::Recv(data.to_vec()),
        }
    }

    fn deliver(self, on_event: &mut dyn FnMut(Event<'_>)) {
        match self {
            Self::Done(ctx) => on_event(Event::Done { ctx }),
            Self::Failed(ctx, error) => on_event(Event::Failed { ctx, error }),
            Self::RemoteWrite(data) => on_event(Event::RemoteWrite { data }),
            Self::Recv(data) => on_event(Event::Recv { data: &data }),
        }
    }
}

/// One in-flight operation.
#[derive(Debug)]
struct OpRec {
    ctx: u64,
    pe: Pe,
    kind: OpKind,
    /// Parts (stripes) still to complete.
    remaining: u32,
    /// First error among the parts (boxed: records are copied on every post).
    error: Option<Box<TransportError>>,
    /// Already reported to the user (peer declared dead); free silently when it completes.
    abandoned: bool,
}

/// A local registration on every rail.
#[derive(Debug)]
struct Region {
    ptr: *mut u8,
    len: usize,
    mrs: Vec<Mr>,
}

/// A peer's registration, per rail: (address base, key).
#[derive(Debug, Clone)]
struct RemoteRegion {
    pe: Pe,
    len: u64,
    rails: Vec<(u64, u64)>,
}

/// One endpoint with its CQ, AV, internal buffers and contexts. Fields drop in declaration
/// order: the endpoint closes first (no more accesses to anything), then the internal
/// registration, then its memory, then CQ, AV, domain and fabric.
struct Rail {
    ep: Endpoint,
    internal_mr: Mr,
    /// Internal memory: [send buffers | receive buffers].
    internal: Vec<u8>,
    /// Operation contexts (stable addresses): `max_outstanding` op slots, then receives.
    ctxs: Box<[sys::fi_context2]>,
    cq: Arc<Cq>,
    av: Arc<Av>,
    domain: Arc<Domain>,
    _fabric: Arc<Fabric>,
    info: InfoList,
    virt_addr: bool,
    ep_bind: bool,
    peers: Vec<sys::fi_addr_t>,
    next_key: u64,
}

// SAFETY: a Rail is used by one thread at a time (the transport is Send, not Sync); its raw
// pointers refer to memory it owns or to libfabric objects usable from any thread.
unsafe impl Send for Rail {}

/// Raw libfabric handles of one local registration and one peer's, on rail 0 (see
/// [`OfiTransport::raw_handles`]). Valid while the transport lives.
#[derive(Debug, Clone, Copy)]
pub struct RawHandles {
    /// The endpoint.
    pub ep: *mut sys::fid_ep,
    /// Its completion queue (`FI_CQ_FORMAT_DATA`).
    pub cq: *mut sys::fid_cq,
    /// The peer's address in the endpoint's address vector.
    pub peer: sys::fi_addr_t,
    /// Start of the local registration.
    pub local: *mut u8,
    /// Its length.
    pub local_len: usize,
    /// Its descriptor for posting.
    pub local_desc: *mut c_void,
    /// Remote address of the peer registration's first byte (0 without FI_MR_VIRT_ADDR).
    pub remote_addr: u64,
    /// Its length.
    pub remote_len: u64,
    /// Its key.
    pub remote_key: u64,
    /// Largest payload posted with FI_INJECT.
    pub inject: usize,
    /// Operation flags this layer posts writes with (FI_COMPLETION, FI_DELIVERY_COMPLETE
    /// where accepted).
    pub flags: u64,
}

/// The libfabric transport.
pub struct OfiTransport {
    me: Pe,
    n: usize,
    cfg: OfiConfig,
    caps: Caps,
    rails: Vec<Rail>,
    ops: Slab<OpRec>,
    regions: Vec<Option<Region>>,
    remotes: Vec<RemoteRegion>,
    dead: Vec<Option<String>>,
    /// Events produced outside `poll` (abandoned operations of dead peers, completions read
    /// while retrying a stripe), reported by the next poll.
    deferred: Vec<OwnedEvent>,
    entries: Vec<sys::fi_cq_data_entry>,
    /// Rail of the next write with remote CQ data (they take turns over the rails).
    next_data_rail: usize,
    /// The shm provider's region files of this PE's endpoints (unlinked once every PE has
    /// connected; see `shm`).
    shm_regions: Vec<String>,
    /// The provider runs over sockets and reports a socket's errno as its provider error (see
    /// [`connection_lost`]).
    socket_errnos: bool,
}

// SAFETY: the transport is used by one thread at a time; its raw pointers (registration
// starts, CQ entry scratch) refer to memory whose validity the mr_reg contract guarantees or
// that the transport owns.
unsafe impl Send for OfiTransport {}

impl std::fmt::Debug for OfiTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfiTransport")
            .field("me", &self.me)
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

/// The libfabric API version asked for: 1.20 (which DMA-BUF registration needs) where the
/// library has it, else 1.17.
fn api_version() -> u32 {
    if fabric::runtime_version() >= sys::FI_VERSION(1, 20) {
        sys::FI_VERSION(1, 20)
    } else {
        sys::FI_VERSION(1, 17)
    }
}

fn required_caps() -> u64 {
    bits!(
        FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV
    )
}

/// Finds providers: with delivery complete first, then without.
/// Providers (with the API version asked) that offered no endpoint of the required
/// capabilities at any address: the answer cannot change within a process (libfabric reads its
/// providers and their devices once), and each `fi_getinfo` for an absent provider costs
/// milliseconds, several per process start (placement's probe, then each transport's open
/// walking the preference order).
static ABSENT: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

fn discover(provider: &str, node: Option<&str>, version: u32) -> Result<(InfoList, bool)> {
    let absent = |a: &Vec<(String, u32)>| a.iter().any(|(p, v)| p == provider && *v == version);
    if absent(&ABSENT.lock().unwrap_or_else(|p| p.into_inner())) {
        return Err(TransportError::NoProvider {
            wanted: provider.to_string(),
            reason: "no matching endpoint on this host (found by an earlier probe)".into(),
        });
    }
    let mut last = None;
    for dc in [true, false] {
        let hints = Hints {
            provider: Some(provider.to_string()),
            node: node.map(str::to_string),
            caps: required_caps(),
            tx_op_flags: if dc { bits!(FI_DELIVERY_COMPLETE) } else { 0 },
            version,
        };
        match InfoList::get(&hints) {
            Ok(list) if list.iter().next().is_some() => return Ok((list, dc)),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
    }
    // The loosest hints (no address, no delivery-complete) found nothing: no
    // narrower question can find anything either.
    if node.is_none() {
        let mut a = ABSENT.lock().unwrap_or_else(|p| p.into_inner());
        if !absent(&a) {
            a.push((provider.to_string(), version));
        }
    }
    Err(TransportError::NoProvider {
        wanted: provider.to_string(),
        reason: last
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no matching endpoint".into()),
    })
}

/// A libfabric domain (NIC or interface) that offers what proxyshmem needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainInfo {
    /// Provider ("efa", "tcp;ofi_rxm").
    pub provider: String,
    /// Fabric name.
    pub fabric: String,
    /// Domain name (a NIC such as "rdmap16s27-rdm", or an interface such as "eth0").
    pub domain: String,
    /// The NIC's PCI address, when the provider reports it.
    pub pci: Option<String>,
}

/// The domains of `provider` that offer FI_EP_RDM with RMA and messages, in the provider's
/// order (one entry per domain; the same domain may be offered several times by fi_getinfo).
pub fn list_domains(provider: &str) -> Result<Vec<DomainInfo>> {
    let version = api_version();
    let (list, _) = discover(provider, None, version)?;
    let mut out: Vec<DomainInfo> = Vec::new();
    for i in list.iter() {
        let d = DomainInfo {
            provider: i.provider(),
            fabric: i.fabric(),
            domain: i.domain(),
            pci: i.pci_address(),
        };
        if !out
            .iter()
            .any(|o| o.domain == d.domain && o.provider == d.provider)
        {
            out.push(d);
        }
    }
    Ok(out)
}

impl OfiTransport {
    /// Opens the transport for this PE of `job` (not yet connected: see [`crate::establish`]).
    pub fn open(job: Job, cfg: &OfiConfig) -> Result<Self> {
        let mut cfg = cfg.clone();
        if cfg.node.is_none() && job.local_size == job.n_pes {
            // Every PE on this host: bind loopback so that no external interface is needed.
            cfg.node = Some("127.0.0.1".into());
        }
        Self::open_raw(job.rank, job.n_pes, &cfg)
    }

    /// The libfabric objects behind a write from `local` to PE `pe`'s `remote` on rail 0, so
    /// that a baseline written against the C API can post on the very endpoint, connection and
    /// registrations this layer uses (fabric-bench: the two then differ only in the code that
    /// posts and polls). Completions of operations posted through these handles arrive on this
    /// transport's CQ: the caller reads them all itself before it polls the transport again.
    pub fn raw_handles(&self, pe: Pe, local: MrId, remote: RemoteMrId) -> Result<RawHandles> {
        let bad = |reason: String| TransportError::InvalidArgument {
            op: "raw_handles",
            reason,
        };
        let region = self
            .regions
            .get(local.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad(format!("unknown local registration {local:?}")))?;
        let rr = self
            .remotes
            .get(remote.0 as usize)
            .filter(|r| r.pe == pe)
            .ok_or_else(|| bad(format!("no registration {remote:?} of PE {pe}")))?;
        let rail = &self.rails[0];
        let (base, key) = rr.rails[0];
        let mut flags = bits!(FI_COMPLETION);
        if self.caps.delivery_complete {
            flags |= bits!(FI_DELIVERY_COMPLETE);
        }
        Ok(RawHandles {
            ep: rail.ep.raw(),
            cq: rail.cq.fid,
            peer: rail.peers[pe.idx()],
            local: region.ptr,
            local_len: region.len,
            local_desc: region.mrs[0].desc,
            remote_addr: if rail.virt_addr { base } else { 0 },
            remote_len: rr.len,
            remote_key: key,
            inject: self.caps.inject_size,
            flags,
        })
    }

    /// Opens with explicit rank and world size.
    pub fn open_raw(me: Pe, n: usize, cfg: &OfiConfig) -> Result<Self> {
        let version = api_version();
        let mut errors = Vec::new();
        for prov in &cfg.providers {
            // shm binds by name, not address: a node would give every process the same name.
            let node = if prov == "shm" {
                None
            } else {
                cfg.node.as_deref()
            };
            match Self::open_provider(me, n, cfg, prov, node, version) {
                Ok(t) => return Ok(t),
                Err(TransportError::NoProvider { reason, .. }) => {
                    errors.push(format!("{prov}: {reason}"))
                }
                Err(e) => errors.push(format!("{prov}: {e}")),
            }
        }
        Err(TransportError::NoProvider {
            wanted: cfg.providers.join(" > "),
            reason: errors.join("; "),
        })
    }

    fn open_provider(
        me: Pe,
        n: usize,
        cfg: &OfiConfig,
        prov: &str,
        node: Option<&str>,
        version: u32,
    ) -> Result<Self> {
        let (probe, dc) = discover(prov, node, version)?;
        let first = probe.iter().next().expect("non-empty");
        let domain_names: Vec<String> = if cfg.domains.is_empty() {
            vec![first.domain()]
        } else {
            cfg.domains.clone()
        };
        let cap = cfg.max_outstanding;
        // Every peer may have its in-flight limit of writes with immediate data outstanding to
        // this PE, each needing a completion entry here.
        let incoming = n.saturating_sub(1) * cfg.incoming_per_peer;
        let mut rails = Vec::with_capacity(cfg.rails);
        for r in 0..cfg.rails {
            let want = &domain_names[r % domain_names.len()];
            let (info, _) = discover(prov, node, version)?;
            let rail = match Rail::open(info, want, cfg, cap, incoming) {
                // shm names a region by pid, and pids are reused: a region file left by a
                // killed process whose pid this one now has is refused with EBUSY, after
                // libfabric has unlinked it (its check of the region's owner sees a live pid,
                // ours). The name is free for a second try.
                Err(TransportError::Ofi { code, .. }) if prov == "shm" && code == libc::EBUSY => {
                    tracing::info!(
                        "shm: this pid's region name was taken by a file a dead process left \
                         (libfabric removed it); opening the endpoint again"
                    );
                    let (info, _) = discover(prov, node, version)?;
                    Rail::open(info, want, cfg, cap, incoming)?
                }
                r => r?,
            };
            rails.push(rail);
        }
        let i = rails[0].info.iter().next().expect("non-empty");
        let tx = i.tx_attr();
        let rx = i.rx_attr();
        let order = tx.msg_order & rx.msg_order;
        let need = bits!(FI_ORDER_WAW | FI_ORDER_SAW | FI_ORDER_SAS | FI_ORDER_WAS);
        let gpu_memory = i.caps() & bits!(FI_HMEM) != 0;
        let caps = Caps {
            name: format!(
                "libfabric {} ({}) x{} rail(s)",
                i.provider(),
                i.domain(),
                cfg.rails
            ),
            // EFA's two fabrics speak different protocols: every PE must use the same one.
            fabric: if is_efa(&i.provider()) {
                format!("libfabric {} ({})", i.provider(), i.fabric())
            } else {
                format!("libfabric {}", i.provider())
            },
            ordered: order & need == need && cfg.rails == 1,
            delivery_complete: dc,
            gpu_memory,
            dmabuf: gpu_memory && version >= sys::FI_VERSION(1, 20),
            cq_data_size: i.domain_attr().cq_data_size.min(8),
            inject_size: tx.inject_size,
            max_msg_size: i.ep_attr().max_msg_size,
            max_send_size: cfg.max_send,
            max_outstanding: cap,
            manual_progress: i.domain_attr().data_progress == sys::fi_progress_FI_PROGRESS_MANUAL,
            rails: cfg.rails,
        };
        let socket_errnos = over_sockets(&i.provider());
        let mut t = Self {
            me,
            n,
            cfg: cfg.clone(),
            caps,
            rails,
            ops: Slab::new(cap),
            regions: Vec::new(),
            remotes: Vec::new(),
            dead: vec![None; n],
            deferred: Vec::new(),
            entries: vec![sys::fi_cq_data_entry::default(); 64],
            next_data_rail: 0,
            shm_regions: Vec::new(),
            socket_errnos,
        };
        if prov == "shm" {
            t.shm_regions = t
                .rails
                .iter()
                .filter_map(|r| shm::region_of(&r.ep.name().ok()?))
                .collect();
        }
        for r in 0..t.rails.len() {
            for b in 0..t.cfg.recv_buffers {
                t.post_recv(r, b)?;
            }
        }
        Ok(t)
    }

    fn send_off(&self, slot: u32) -> usize {
        slot as usize * self.cfg.max_send
    }

    fn recv_off(&self, b: usize) -> usize {
        (self.cfg.max_outstanding + b) * self.cfg.max_send
    }

    fn post_recv(&mut self, r: usize, b: usize) -> Result<()> {
        let off = self.recv_off(b);
        let len = self.cfg.max_send;
        let rail = &mut self.rails[r];
        let ctx: *mut sys::fi_context2 = &mut rail.ctxs[self.cfg.max_outstanding + b];
        // SAFETY: the receive buffer lies inside the rail's registered internal memory, which
        // lives as long as the endpoint; the context slot is reserved for this buffer.
        let rc = unsafe {
            sys::fi_recv(
                rail.ep.raw(),
                rail.internal.as_mut_ptr().add(off).cast(),
                len,
                rail.internal_mr.desc,
                sys::FI_ADDR_UNSPEC,
                ctx.cast(),
            )
        };
        check(rc, "fi_recv").map(|_| ())
    }

    /// The error of a failed completion of an operation of `kind` to `pe`: the peer lost when
    /// the provider says its connection is gone (the runtime then tells the whole job, which
    /// may not have seen the death yet), else the completion's own codes.
    fn completion_error(&self, pe: Pe, kind: OpKind, ce: CqError) -> TransportError {
        let text = if ce.text.is_empty() {
            strerror(ce.err)
        } else {
            ce.text
        };
        if pe.idx() < self.n && connection_lost(self.socket_errnos, ce.prov_errno) {
            return TransportError::PeerLost {
                pe,
                op: kind.name(),
                reason: format!(
                    "{text} (error {}, provider error {})",
                    ce.err, ce.prov_errno
                ),
            };
        }
        TransportError::Completion {
            pe,
            op: kind.name(),
            code: ce.err,
            prov_errno: ce.prov_errno,
            text,
        }
    }

    fn peer_ok(&self, pe: Pe, op: &'static str) -> Result<(), PostError> {
        if pe.idx() >= self.n {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} out of range for {} PEs", self.n),
            }
            .into());
        }
        match &self.dead[pe.idx()] {
            Some(reason) => Err(TransportError::PeerLost {
                pe,
                op,
                reason: reason.clone(),
            }
            .into()),
            None => Ok(()),
        }
    }

    fn region(
        &self,
        local: LocalRef,
        pe: Pe,
        op: &'static str,
        len: usize,
    ) -> Result<&Region, PostError> {
        let r = self
            .regions
            .get(local.mr.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("unknown local registration {:?}", local.mr),
            })?;
        check_bounds(pe, op, "local", local.offset as u64, len, r.len as u64)?;
        Ok(r)
    }

    fn remote(
        &self,
        remote: RemoteRef,
        pe: Pe,
        op: &'static str,
        len: usize,
    ) -> Result<&RemoteRegion, PostError> {
        let r = self.remotes.get(remote.mr.0 as usize).ok_or_else(|| {
            TransportError::InvalidArgument {
                op,
                reason: format!("unknown remote registration {:?}", remote.mr),
            }
        })?;
        if r.pe != pe {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!(
                    "remote registration {:?} belongs to PE {}, not {pe}",
                    remote.mr, r.pe
                ),
            }
            .into());
        }
        check_bounds(pe, op, "remote", remote.offset, len, r.len)?;
        Ok(r)
    }

    fn home_rail(&self, pe: Pe) -> usize {
        match self.rails.len() {
            1 => 0,
            n => pe.idx() % n,
        }
    }

    fn new_op(&mut self, ctx: u64, pe: Pe, kind: OpKind, parts: u32) -> Result<u32, PostError> {
        self.ops
            .insert(OpRec {
                ctx,
                pe,
                kind,
                remaining: parts,
                error: None,
                abandoned: false,
            })
            .map_err(|_| PostError::Retry)
    }

    fn ctx_ptr(&mut self, rail: usize, slot: u32) -> *mut c_void {
        (&mut self.rails[rail].ctxs[slot as usize] as *mut sys::fi_context2).cast()
    }

    /// Posts one RMA part. Returns Ok(false) on EAGAIN.
    ///
    /// # Safety
    /// The local bytes must stay valid until completion (or be injectable).
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_rma(
        &mut self,
        rail: usize,
        slot: u32,
        write: bool,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
    ) -> Result<bool> {
        let region = self.regions[local.mr.0 as usize].as_ref().expect("checked");
        let rr = &self.remotes[remote.mr.0 as usize];
        let (base, key) = rr.rails[rail];
        let addr = if self.rails[rail].virt_addr {
            base + remote.offset
        } else {
            remote.offset
        };
        let mut desc = region.mrs[rail].desc;
        // SAFETY: offset checked against the region's length by the caller.
        let buf = unsafe { region.ptr.add(local.offset) };
        let iov = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let rma = sys::fi_rma_iov { addr, len, key };
        let context = self.ctx_ptr(rail, slot);
        let r = &self.rails[rail];
        let msg = sys::fi_msg_rma {
            msg_iov: (&iov as *const libc::iovec).cast(),
            desc: &mut desc,
            iov_count: 1,
            addr: r.peers[pe.idx()],
            rma_iov: &rma,
            rma_iov_count: 1,
            context,
            data: data.unwrap_or(0),
        };
        let mut flags = bits!(FI_COMPLETION);
        if self.caps.delivery_complete {
            flags |= bits!(FI_DELIVERY_COMPLETE);
        }
        if data.is_some() {
            flags |= bits!(FI_REMOTE_CQ_DATA);
        }
        if write && len <= self.caps.inject_size {
            flags |= bits!(FI_INJECT);
        }
        // SAFETY: msg and everything it points to are valid for the call; the caller keeps the
        // local bytes alive until completion; the context slot is reserved for this operation.
        let rc = unsafe {
            if write {
                sys::fi_writemsg(r.ep.raw(), &msg, flags)
            } else {
                sys::fi_readmsg(r.ep.raw(), &msg, flags)
            }
        };
        if rc == -(sys::FI_EAGAIN as isize) {
            return Ok(false);
        }
        check(rc, if write { "fi_writemsg" } else { "fi_readmsg" }).map(|_| true)
    }

    /// Posts a write or read, striped over the rails when long enough.
    ///
    /// # Safety
    /// As for [`Transport::write`]/[`Transport::read`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn rma(
        &mut self,
        write: bool,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        let op = if write { "write" } else { "read" };
        self.peer_ok(pe, op)?;
        self.region(local, pe, op, len)?;
        self.remote(remote, pe, op, len)?;
        let nrails = self.rails.len();
        // Remote CQ data must arrive once, after all the bytes: never stripe such writes.
        let parts = if nrails > 1 && data.is_none() && len >= self.cfg.stripe_min {
            nrails
        } else {
            1
        };
        // A write with remote CQ data is whole on one rail; such writes take turns over the
        // rails (each is self-describing at the target), so a stream of them uses every rail.
        let home = if data.is_some() && nrails > 1 {
            self.next_data_rail = (self.next_data_rail + 1) % nrails;
            self.next_data_rail
        } else {
            self.home_rail(pe)
        };
        let kind = if write { OpKind::Write } else { OpKind::Read };
        let slot = self.new_op(ctx, pe, kind, parts as u32)?;
        if parts == 1 {
            // The common case, without the striping arithmetic.
            // SAFETY: forwarded from the caller.
            return match unsafe { self.post_rma(home, slot, write, pe, local, remote, len, data) } {
                Ok(true) => Ok(()),
                Ok(false) => {
                    self.ops.remove(slot);
                    Err(PostError::Retry)
                }
                Err(e) => {
                    self.ops.remove(slot);
                    Err(e.into())
                }
            };
        }
        let chunk = len.div_ceil(parts);
        for p in 0..parts {
            let off = p * chunk;
            let this = chunk.min(len - off);
            let rail = (home + p) % nrails;
            let l = LocalRef {
                mr: local.mr,
                offset: local.offset + off,
            };
            let r = RemoteRef {
                mr: remote.mr,
                offset: remote.offset + off as u64,
            };
            // SAFETY: forwarded from the caller.
            let posted = unsafe { self.post_rma(rail, slot, write, pe, l, r, this, data) };
            match posted {
                Ok(true) => {}
                Ok(false) if p == 0 => {
                    self.ops.remove(slot);
                    return Err(PostError::Retry);
                }
                // A later stripe hit back-pressure: finish it synchronously by progressing this
                // rail's CQ until it goes (the earlier stripes are already in flight).
                Ok(false) => loop {
                    self.progress_rail_into_deferred(rail)?;
                    // SAFETY: as above.
                    if unsafe { self.post_rma(rail, slot, write, pe, l, r, this, data) }? {
                        break;
                    }
                },
                Err(e) => {
                    if p == 0 {
                        self.ops.remove(slot);
                        return Err(e.into());
                    }
                    let rec = self.ops.get_mut(slot).expect("live");
                    rec.remaining -= (parts - p) as u32;
                    rec.error.get_or_insert(Box::new(e));
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Reads one rail's CQ while no user callback is at hand, keeping every event for the
    /// next poll.
    fn progress_rail_into_deferred(&mut self, rail: usize) -> Result<()> {
        let mut events = Vec::new();
        self.poll_rail(rail, &mut |e| events.push(OwnedEvent::of(e)))?;
        self.deferred.extend(events);
        Ok(())
    }

    fn finish_part(
        &mut self,
        slot: u32,
        err: Option<TransportError>,
        on_event: &mut dyn FnMut(Event<'_>),
    ) {
        let Some(rec) = self.ops.get_mut(slot) else {
            return;
        };
        rec.remaining = rec.remaining.saturating_sub(1);
        if let Some(e) = err {
            rec.error.get_or_insert(Box::new(e));
        }
        if rec.remaining > 0 {
            return;
        }
        let rec = self.ops.remove(slot).expect("live");
        if rec.abandoned {
            return;
        }
        match rec.error {
            Some(error) => on_event(Event::Failed {
                ctx: rec.ctx,
                error: *error,
            }),
            None => on_event(Event::Done { ctx: rec.ctx }),
        }
    }

    fn poll_rail(&mut self, r: usize, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let mut entries = std::mem::take(&mut self.entries);
        let res = self.rails[r].cq.read(&mut entries);
        let mut count = 0;
        let base = self.rails[r].ctxs.as_ptr() as usize;
        let slot_of = |p: *mut c_void| -> Option<usize> {
            let a = p as usize;
            (a >= base && (a - base) % size_of::<sys::fi_context2>() == 0)
                .then(|| (a - base) / size_of::<sys::fi_context2>())
        };
        let out = match res {
            Err(e) => Err(e),
            Ok(CqRead::Entries(n)) => {
                for e in &entries[..n] {
                    count += 1;
                    let idx = slot_of(e.op_context);
                    let is_recv_slot = idx.is_some_and(|i| i >= self.cfg.max_outstanding);
                    if e.flags & bits!(FI_REMOTE_CQ_DATA) != 0 && e.flags & bits!(FI_RECV) == 0 {
                        on_event(Event::RemoteWrite { data: e.data });
                        continue;
                    }
                    if is_recv_slot {
                        let b = idx.expect("slot") - self.cfg.max_outstanding;
                        if e.flags & bits!(FI_REMOTE_CQ_DATA) != 0 {
                            on_event(Event::RemoteWrite { data: e.data });
                        } else {
                            let off = self.recv_off(b);
                            let len = e.len.min(self.cfg.max_send);
                            on_event(Event::Recv {
                                data: &self.rails[r].internal[off..off + len],
                            });
                        }
                        self.post_recv(r, b)?;
                        continue;
                    }
                    match idx {
                        Some(i) => self.finish_part(i as u32, None, on_event),
                        None => tracing::warn!(
                            "rail {r}: completion with unknown context {:p}",
                            e.op_context
                        ),
                    }
                }
                Ok(count)
            }
            Ok(CqRead::Error(ce)) => {
                count += 1;
                match slot_of(ce.op_context) {
                    Some(i) if i >= self.cfg.max_outstanding => {
                        // A receive buffer failed (e.g. cancelled at close): repost it.
                        let _ = self.post_recv(r, i - self.cfg.max_outstanding);
                    }
                    Some(i) => {
                        let (pe, kind) = match self.ops.get_mut(i as u32) {
                            Some(rec) => (rec.pe, rec.kind),
                            None => (Pe::new(u32::MAX), OpKind::Write),
                        };
                        let error = self.completion_error(pe, kind, ce);
                        self.finish_part(i as u32, Some(error), on_event);
                    }
                    None => {
                        tracing::warn!("rail {r}: error completion without context: {}", ce.text)
                    }
                }
                Ok(count)
            }
        };
        self.entries = entries;
        out
    }
}

/// Which of fi_getinfo's entries a rail opens, from each entry's (provider, fabric, domain):
/// the wanted domain's (any domain when none matches); for EFA, the "efa-direct" fabric when
/// offered — libfabric ≥ 1.22 offers two fabrics on every EFA device, "efa" (its own RDM
/// protocol over SRD) and "efa-direct" (the device's RDMA and write-with-immediate only: all
/// proxyshmem uses, without the protocol layer) — else the provider's first.
pub(crate) fn pick_entry(entries: &[(String, String, String)], want_domain: &str) -> usize {
    let mut idx: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].2 == want_domain)
        .collect();
    if idx.is_empty() {
        idx = (0..entries.len()).collect();
    }
    idx.iter()
        .copied()
        .find(|&i| is_efa(&entries[i].0) && entries[i].1 == EFA_DIRECT)
        .or_else(|| idx.first().copied())
        .unwrap_or(0)
}

/// [`OfiConfig::incoming_per_peer`] when `PSHMEM_PROXY_MAX_INFLIGHT_PER_PE` is unset.
pub const DEFAULT_INCOMING_PER_PEER: usize = 256;

/// Whether `provider` is libfabric's EFA provider (alone or under a utility provider).
fn is_efa(provider: &str) -> bool {
    provider.starts_with("efa")
}

/// Whether `provider` runs over sockets (tcp, sockets, udp; alone or under a utility
/// provider), whose provider error is the socket's errno.
fn over_sockets(provider: &str) -> bool {
    ["tcp", "sockets", "udp"]
        .iter()
        .any(|p| provider.split(';').next() == Some(p))
}

/// Whether a failed completion's provider error says the connection to its peer is gone.
/// Only a provider over sockets is read so: the others' codes are their own (EFA's are its
/// device's completion statuses), and nothing is inferred from them.
fn connection_lost(socket_errnos: bool, prov_errno: i32) -> bool {
    const GONE: [i32; 6] = [
        libc::ECONNRESET,
        libc::ENOTCONN,
        libc::ECONNREFUSED,
        libc::ECONNABORTED,
        libc::EPIPE,
        libc::EHOSTUNREACH,
    ];
    socket_errnos && GONE.contains(&prov_errno)
}

/// The fabric of EFA devices without the efa provider's own protocol (libfabric ≥ 1.22).
pub const EFA_DIRECT: &str = "efa-direct";

/// Completion-queue entries for a rail: its own operations and posted receives, plus one per
/// write with immediate data that peers may have in flight to it (each consumes an entry at
/// the target; an overrun loses completions on EFA). `incoming` is that bound.
pub(crate) fn cq_entries(cap: usize, recv_buffers: usize, incoming: usize) -> usize {
    cap + recv_buffers + 256 + incoming
}

impl Rail {
    fn open(
        info: InfoList,
        want_domain: &str,
        cfg: &OfiConfig,
        cap: usize,
        incoming: usize,
    ) -> Result<Self> {
        let all: Vec<InfoRef<'_>> = info.iter().collect();
        let keys: Vec<(String, String, String)> = all
            .iter()
            .map(|i| (i.provider(), i.fabric(), i.domain()))
            .collect();
        let entry = all[pick_entry(&keys, want_domain)];
        let efa = is_efa(&entry.provider());
        if efa && std::env::var(env::EFA_DEVICE_RDMA).ok().as_deref() != Some("1") {
            tracing::warn!(
                "efa: {} is not 1: the NIC may not read or write GPU memory (GPU heaps then \
                 fail to register or go through host staging); pshmrun sets it, other launchers \
                 should export {}=1",
                env::EFA_DEVICE_RDMA,
                env::EFA_DEVICE_RDMA
            );
        }
        if efa && entry.fabric() != EFA_DIRECT {
            tracing::warn!(
                "efa: the {EFA_DIRECT} fabric is not offered (libfabric {:#x}; it needs 1.22 and \
                 a device with RDMA write): using fabric {:?}, with the efa provider's own \
                 protocol on the data path",
                fabric::runtime_version(),
                entry.fabric()
            );
        }
        let mr_mode = entry.domain_attr().mr_mode as u64;
        let fab = Fabric::open(entry)?;
        let domain = Domain::open(&fab, entry)?;
        let cq = match Cq::open(&domain, cq_entries(cap, cfg.recv_buffers, incoming)) {
            Ok(cq) => cq,
            Err(e) if incoming > 0 => {
                tracing::warn!(
                    "a completion queue of {} entries (room for {incoming} incoming writes with \
                     immediate data) was refused ({e}); using {}: with more writes in flight to \
                     this PE than that, completions can be lost",
                    cq_entries(cap, cfg.recv_buffers, incoming),
                    cq_entries(cap, cfg.recv_buffers, 0)
                );
                Cq::open(&domain, cq_entries(cap, cfg.recv_buffers, 0))?
            }
            Err(e) => return Err(e),
        };
        let av = Av::open(&domain, 64)?;
        let ep = Endpoint::open(&domain, entry, &cq, &av)?;
        let internal_len = (cap + cfg.recv_buffers) * cfg.max_send;
        let mut internal = vec![0u8; internal_len];
        let ep_bind = mr_mode & bits!(FI_MR_ENDPOINT) != 0;
        // SAFETY: `internal` is moved into the rail (its heap buffer does not move) and is
        // dropped after the registration (see the field order of Rail).
        let internal_mr = unsafe {
            Mr::reg(
                &domain,
                MrSource::Addr {
                    ptr: internal.as_mut_ptr().cast(),
                    len: internal_len,
                    iface: sys::fi_hmem_iface_FI_HMEM_SYSTEM,
                    device: 0,
                },
                bits!(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE),
                1,
                ep_bind.then_some(&ep),
            )?
        };
        let ctxs = vec![sys::fi_context2::default(); cap + cfg.recv_buffers].into_boxed_slice();
        let virt_addr = mr_mode & bits!(FI_MR_VIRT_ADDR) != 0;
        Ok(Self {
            ep,
            internal_mr,
            internal,
            ctxs,
            cq,
            av,
            domain,
            _fabric: fab,
            info,
            virt_addr,
            ep_bind,
            peers: Vec::new(),
            next_key: 2,
        })
    }
}

fn access_all() -> u64 {
    bits!(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
}

impl Transport for OfiTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn my_pe(&self) -> Pe {
        self.me
    }

    fn n_pes(&self) -> usize {
        self.n
    }

    fn address(&self) -> Vec<u8> {
        let mut out = (self.rails.len() as u32).to_le_bytes().to_vec();
        for r in &self.rails {
            let name = r.ep.name().unwrap_or_default();
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(&name);
        }
        out
    }

    fn connect(&mut self, addresses: &[Vec<u8>]) -> Result<()> {
        if addresses.len() != self.n {
            return Err(TransportError::InvalidArgument {
                op: "connect",
                reason: format!("{} addresses for {} PEs", addresses.len(), self.n),
            });
        }
        let nr = self.rails.len();
        let mut per_rail: Vec<Vec<Vec<u8>>> = vec![Vec::with_capacity(self.n); nr];
        for (pe, a) in addresses.iter().enumerate() {
            let bad = || TransportError::InvalidArgument {
                op: "connect",
                reason: format!("malformed address of PE {pe}"),
            };
            let count =
                u32::from_le_bytes(a.get(..4).ok_or_else(bad)?.try_into().expect("4")) as usize;
            if count != nr {
                return Err(TransportError::InvalidArgument {
                    op: "connect",
                    reason: format!(
                        "PE {pe} has {count} rails, this PE {nr}: use the same PSHMEM_RAILS everywhere"
                    ),
                });
            }
            let mut off = 4;
            for names in per_rail.iter_mut() {
                let len =
                    u32::from_le_bytes(a.get(off..off + 4).ok_or_else(bad)?.try_into().expect("4"))
                        as usize;
                names.push(a.get(off + 4..off + 4 + len).ok_or_else(bad)?.to_vec());
                off += 4 + len;
            }
        }
        for (r, names) in per_rail.iter().enumerate() {
            let rail = &mut self.rails[r];
            let string_format = rail
                .info
                .iter()
                .next()
                .expect("non-empty")
                .raw()
                .addr_format
                == sys::FI_ADDR_STR;
            rail.peers = rail.av.insert(names, string_format)?;
        }
        Ok(())
    }

    fn all_connected(&mut self) {
        // Every peer mapped our shm regions when it inserted our address (it has connected):
        // the files are no longer needed, and a SIGKILL can no longer leave them behind.
        shm::unlink_own(&std::mem::take(&mut self.shm_regions));
    }

    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId> {
        let (iface, device) = match mem.kind {
            MemKind::Host => (sys::fi_hmem_iface_FI_HMEM_SYSTEM, 0),
            MemKind::Cuda { device, .. } => {
                if !self.caps.gpu_memory {
                    return Err(TransportError::Unsupported {
                        op: "registering GPU memory",
                        transport: self.caps.name.clone(),
                    });
                }
                (sys::fi_hmem_iface_FI_HMEM_CUDA, device)
            }
        };
        let id = self
            .regions
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.regions.len());
        let mut mrs = Vec::with_capacity(self.rails.len());
        if matches!(
            mem.kind,
            MemKind::Cuda {
                dmabuf_fd: Some(_),
                ..
            }
        ) && !self.caps.dmabuf
        {
            tracing::warn!(
                "registering GPU memory by address, not by its DMA-BUF: DMA-BUF \
                 registration is not offered here (it needs libfabric 1.20 at run time, \
                 this is {:#x}, and a provider taking GPU memory); the NIC then needs the \
                 peer-memory kernel module",
                fabric::runtime_version()
            );
        }
        for rail in &mut self.rails {
            let key = rail.next_key;
            rail.next_key += 1;
            let src = match mem.kind {
                MemKind::Cuda {
                    device,
                    dmabuf_fd: Some(fd),
                    dmabuf_offset,
                } if self.caps.dmabuf => MrSource::DmaBuf {
                    fd,
                    offset: dmabuf_offset,
                    len: mem.len,
                    base: mem.ptr.cast(),
                    device,
                },
                _ => MrSource::Addr {
                    ptr: mem.ptr.cast(),
                    len: mem.len,
                    iface,
                    device,
                },
            };
            // SAFETY: the caller keeps the memory valid while registered.
            mrs.push(unsafe {
                Mr::reg(
                    &rail.domain,
                    src,
                    access_all(),
                    key,
                    rail.ep_bind.then_some(&rail.ep),
                )?
            });
        }
        let region = Region {
            ptr: mem.ptr,
            len: mem.len,
            mrs,
        };
        if id == self.regions.len() {
            self.regions.push(Some(region));
        } else {
            self.regions[id] = Some(region);
        }
        Ok(MrId(id as u32))
    }

    fn mr_dereg(&mut self, mr: MrId) -> Result<()> {
        match self.regions.get_mut(mr.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(TransportError::InvalidArgument {
                op: "mr_dereg",
                reason: format!("unknown registration {mr:?}"),
            }),
        }
    }

    fn mr_export(&self, mr: MrId) -> Vec<u8> {
        let Some(Some(r)) = self.regions.get(mr.0 as usize) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(12 + 16 * r.mrs.len());
        out.extend_from_slice(&(r.len as u64).to_le_bytes());
        out.extend_from_slice(&(r.mrs.len() as u32).to_le_bytes());
        for m in &r.mrs {
            out.extend_from_slice(&(r.ptr as u64).to_le_bytes());
            out.extend_from_slice(&m.key.to_le_bytes());
        }
        out
    }

    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId> {
        let bad = |why: &str| TransportError::InvalidArgument {
            op: "mr_import",
            reason: format!("registration of PE {pe}: {why}"),
        };
        if blob.len() < 12 {
            return Err(bad("too short"));
        }
        let len = u64::from_le_bytes(blob[..8].try_into().expect("8"));
        let count = u32::from_le_bytes(blob[8..12].try_into().expect("4")) as usize;
        if count != self.rails.len() || blob.len() != 12 + 16 * count {
            return Err(bad("rail count differs"));
        }
        let rails = (0..count)
            .map(|i| {
                let o = 12 + 16 * i;
                (
                    u64::from_le_bytes(blob[o..o + 8].try_into().expect("8")),
                    u64::from_le_bytes(blob[o + 8..o + 16].try_into().expect("8")),
                )
            })
            .collect();
        self.remotes.push(RemoteRegion { pe, len, rails });
        Ok(RemoteMrId(self.remotes.len() as u32 - 1))
    }

    unsafe fn write(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(true, pe, local, remote, len, None, ctx) }
    }

    unsafe fn write_data(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.caps.check_cq_data(data)?;
        // SAFETY: forwarded contract.
        unsafe { self.rma(true, pe, local, remote, len, Some(data), ctx) }
    }

    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(false, pe, local, remote, len, None, ctx) }
    }

    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError> {
        self.peer_ok(pe, "send")?;
        if msg.len() > self.cfg.max_send {
            return Err(TransportError::InvalidArgument {
                op: "send",
                reason: format!("{} bytes > max {}", msg.len(), self.cfg.max_send),
            }
            .into());
        }
        let rail = self.home_rail(pe);
        let slot = self.new_op(ctx, pe, OpKind::Send, 1)?;
        let off = self.send_off(slot);
        let context = self.ctx_ptr(rail, slot);
        let inject = msg.len() <= self.caps.inject_size;
        let r = &mut self.rails[rail];
        r.internal[off..off + msg.len()].copy_from_slice(msg);
        let mut desc = r.internal_mr.desc;
        // SAFETY: `off` lies inside the internal buffer (slot < max_outstanding); the payload
        // was copied there and the slot stays reserved until completion.
        let payload = unsafe { r.internal.as_mut_ptr().add(off) };
        let iov = libc::iovec {
            iov_base: payload.cast(),
            iov_len: msg.len(),
        };
        let m = sys::fi_msg {
            msg_iov: (&iov as *const libc::iovec).cast(),
            desc: &mut desc,
            iov_count: 1,
            addr: r.peers[pe.idx()],
            context,
            data: 0,
        };
        let mut flags = bits!(FI_COMPLETION);
        if inject {
            flags |= bits!(FI_INJECT);
        }
        if self.caps.delivery_complete {
            flags |= bits!(FI_DELIVERY_COMPLETE);
        }
        // SAFETY: m and the buffer it names are valid; the context slot is reserved.
        let rc = unsafe { sys::fi_sendmsg(r.ep.raw(), &m, flags) };
        if rc == -(sys::FI_EAGAIN as isize) {
            self.ops.remove(slot);
            return Err(PostError::Retry);
        }
        if let Err(e) = check(rc, "fi_sendmsg") {
            self.ops.remove(slot);
            return Err(e.into());
        }
        Ok(())
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let mut count = 0;
        for e in std::mem::take(&mut self.deferred) {
            e.deliver(on_event);
            count += 1;
        }
        for r in 0..self.rails.len() {
            count += self.poll_rail(r, on_event)?;
        }
        Ok(count)
    }

    /// Blocks on the rails' CQ wait descriptors (poll(2)) when every rail has one and
    /// `fi_trywait` says nothing is pending; otherwise sleeps. Incoming traffic makes the
    /// descriptor readable, so a target wakes at once; the next poll then progresses it.
    fn wait(&mut self, timeout: std::time::Duration) -> bool {
        if !self.deferred.is_empty() {
            return true;
        }
        let fds: Option<Vec<libc::pollfd>> = self
            .rails
            .iter()
            .map(|r| {
                r.cq.wait_fd().map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
            })
            .collect();
        let Some(mut fds) = fds else {
            std::thread::sleep(timeout);
            return false;
        };
        if !self.rails.iter().all(|r| r.cq.trywait()) {
            // Completions or progress are already pending.
            return true;
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of pollfd for its length; no signal mask change.
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        ready > 0
    }

    fn fail_peer(&mut self, pe: Pe, reason: &str) {
        if pe.idx() >= self.n || self.dead[pe.idx()].is_some() {
            return;
        }
        self.dead[pe.idx()] = Some(reason.to_string());
        for slot in self.ops.indices_where(|r| r.pe == pe && !r.abandoned) {
            let rec = self.ops.get_mut(slot).expect("live");
            rec.abandoned = true;
            let error = TransportError::PeerLost {
                pe,
                op: rec.kind.name(),
                reason: reason.to_string(),
            };
            self.deferred.push(OwnedEvent::Failed(rec.ctx, error));
        }
    }
}

#[cfg(test)]
mod entry_tests {
    use super::*;

    #[test]
    fn only_a_socket_providers_connection_errors_mean_a_lost_peer() {
        for p in ["tcp", "tcp;ofi_rxm", "sockets", "udp;ofi_rxd"] {
            assert!(over_sockets(p), "{p}");
        }
        for p in ["efa", "efa-direct", "verbs;ofi_rxm", "shm", "tcpx"] {
            assert!(!over_sockets(p), "{p}");
        }
        assert!(connection_lost(true, libc::ENOTCONN));
        assert!(connection_lost(true, libc::ECONNRESET));
        assert!(!connection_lost(true, libc::EIO));
        // EFA's completion statuses are small numbers too: never read as errnos.
        assert!(!connection_lost(false, libc::ENOTCONN));
    }

    fn e(p: &str, f: &str, d: &str) -> (String, String, String) {
        (p.into(), f.into(), d.into())
    }

    #[test]
    fn efa_direct_is_preferred_on_the_wanted_domain() {
        // libfabric ≥ 1.22 lists both fabrics for every EFA device.
        let list = [
            e("efa", "efa", "rdmap16s27-rdm"),
            e("efa", "efa-direct", "rdmap16s27-rdm"),
            e("efa", "efa", "rdmap32s27-rdm"),
            e("efa", "efa-direct", "rdmap32s27-rdm"),
        ];
        assert_eq!(pick_entry(&list, "rdmap32s27-rdm"), 3);
        assert_eq!(pick_entry(&list, "rdmap16s27-rdm"), 1);
        // An unknown domain: the first efa-direct entry.
        assert_eq!(pick_entry(&list, "nope"), 1);
    }

    #[test]
    fn without_efa_direct_the_providers_first_entry_of_the_domain() {
        let old = [e("efa", "efa", "a"), e("efa", "efa", "b")];
        assert_eq!(pick_entry(&old, "b"), 1);
        assert_eq!(pick_entry(&old, "c"), 0);
        // Other providers never switch fabric, whatever the names.
        let tcp = [
            e("tcp;ofi_rxm", "10.0.0.0/24", "eth0"),
            e("tcp;ofi_rxm", "efa-direct", "eth0"),
        ];
        assert_eq!(pick_entry(&tcp, "eth0"), 0);
    }

    /// shm's endpoint names carry the creating pid, so a job whose pids straddle a power of ten
    /// (9999 and 10000) has names of different lengths: they must all go into one AV, each at
    /// the index of its insertion. (A packed insert refused them: CI saw "endpoint names of
    /// different lengths" from a 3-PE shm job at pid 9996.)
    #[test]
    fn shm_names_of_different_lengths_go_into_one_av() {
        let version = api_version();
        let (list, _) = discover("shm", None, version).expect("libfabric's shm provider");
        let entry = list.iter().next().expect("an shm entry");
        let fab = Fabric::open(entry).expect("fabric");
        let domain = Domain::open(&fab, entry).expect("domain");
        let cq = Cq::open(&domain, 64).expect("cq");
        let av = Av::open(&domain, 8).expect("av");
        let ep = Endpoint::open(&domain, entry, &cq, &av).expect("endpoint");
        let own = ep.name().expect("name");
        let region = shm::region_of(&own).expect("an shm name holds <pid>:<uid>:<n>");
        // The same name with one more digit in its pid (a process that may not exist: shm
        // maps a peer's region when it first reaches it, not at insertion).
        let at = own
            .windows(region.len())
            .position(|w| w == region.as_bytes())
            .expect("the region in the name");
        let mut longer = own.clone();
        longer.insert(at, b'9');
        assert_eq!(entry.raw().addr_format, sys::FI_ADDR_STR);
        let names = vec![own, longer];
        // Read as a fixed format, the lengths must agree (the provider reads one length).
        let refused = av
            .insert(&names, false)
            .expect_err("a fixed format of two lengths");
        assert!(
            refused.to_string().contains("PE 1's endpoint name"),
            "{refused}"
        );
        let addrs = av
            .insert(&names, true)
            .expect("names of two lengths in one AV");
        assert_eq!(addrs.len(), 2);
        assert_ne!(addrs[0], addrs[1], "two names, two addresses: {addrs:?}");
        shm::unlink_own(&[region]);
    }

    #[test]
    fn completion_queues_leave_room_for_every_peers_immediates() {
        let cfg = OfiConfig::from_env(Some("tcp")).expect("config");
        let local = cq_entries(1024, 256, 0);
        // 64 PEs, each with its per-destination limit in flight to this one.
        let n = 64;
        let want = cq_entries(1024, 256, (n - 1) * cfg.incoming_per_peer);
        assert_eq!(want - local, 63 * cfg.incoming_per_peer);
        assert!(cfg.incoming_per_peer >= 1);
    }
}
