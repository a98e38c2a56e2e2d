//! The libfabric backend: [`OfiTransport`] implements [`Transport`] over FI_EP_RDM endpoints.
//!
//! - **Rails**: `rails` endpoints per PE (one fabric/domain/CQ/AV each), on the NIC domains the
//!   configuration names (topology picks them) or all on the first matching domain. Operations
//!   to a peer use the pair's home rail (`(me + pe) % rails`: spread over the sender's NICs by
//!   destination and over the target's by source);
//!   writes and reads of at least [`OfiConfig::stripe_min`] bytes are split over every rail;
//!   writes with remote CQ data (never split) take turns over the rails.
//! - **Keys**: registrations ask for random 64-bit keys (`keys`) when the provider lacks
//!   FI_MR_PROV_KEY, exchanged only through the bootstrap; remote addresses are virtual addresses under FI_MR_VIRT_ADDR and
//!   offsets otherwise.
//! - **Completions**: every operation asks for a completion and, where the provider accepts it,
//!   delivery-complete semantics (a write's completion means the bytes are at the target).
//!   Operations whose payload fits the inject size are posted with FI_INJECT so the caller's
//!   buffer is free at once. `-FI_EAGAIN` becomes [`PostError::Retry`].
//! - **Messages**: `send` copies into (or injects from) internal registered buffers; a pool of
//!   posted receive buffers turns into [`Event::Recv`].
//!
//! Beside the types here: `discover` (providers and domains), `open` (transport and rails),
//! `post` (writes, reads, receives), `poll` (completions) and `transport` (the trait
//! implementation); `fabric` is the safe layer over libfabric's objects.
//!
//! [`Transport`]: crate::Transport
//! [`PostError::Retry`]: crate::PostError::Retry

pub mod fabric;
mod shm;

mod discover;
mod keys;
mod more;
mod open;
mod poll;
mod post;
mod transport;

#[cfg(test)]
mod entry_tests;

pub use self::discover::{DomainInfo, fabrics_of, gpu_memory_offer, list_domains, providers};

/// Removes the shm provider's region files that this user's dead processes left in /dev/shm
/// (a SIGKILLed endpoint never removes its own); returns how many. Every transport open runs it.
pub fn sweep_stale_shm() -> usize {
    let stale = shm::sweep_stale();
    if stale > 0 {
        tracing::info!("removed {stale} shm region file(s) left by killed processes");
    }
    stale
}

use std::{ffi::c_void, sync::Arc};

use pshmem_env as env;
use pshmem_libfabric_sys as sys;

use self::fabric::{Av, Cq, Domain, Endpoint, Fabric, InfoList, Mr};
use crate::{Caps, Event, Pe, TransportError, slab::Slab};

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
    /// Doorbell batching: most posts in a row with `FI_MORE` (0: off; see `more`).
    pub more: usize,
    /// Writes with immediate data one peer may have in flight to this PE (the proxy's
    /// per-destination limit): completion queues are sized for all peers' (see
    /// [`cq_entries`]).
    pub incoming_per_peer: usize,
    /// Ask for FI_HMEM first, so that GPU memory can be registered (set by the GPU path, not
    /// from the environment; providers leave GPU memory out of their answer unless asked).
    pub gpu_memory: bool,
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
            more: env::OFI_MORE.usize()?,
            incoming_per_peer: env::PROXY_MAX_INFLIGHT_PER_PE
                .opt_usize()?
                .unwrap_or(DEFAULT_INCOMING_PER_PEER),
            gpu_memory: false,
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
    keys: keys::Keys,
    /// Bytes of writes and reads posted on this rail.
    bytes: u64,
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
    /// Per rail: the post held back for doorbell batching (see `more`).
    held: Vec<Option<more::Held>>,
    /// Per rail: posts in a row that carried `FI_MORE`.
    chain: Vec<usize>,
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
