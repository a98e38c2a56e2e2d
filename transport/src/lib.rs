//! # pshmem-transport
//!
//! Owns every way proxyshmem moves bytes between PEs that are not reached by direct loads and
//! stores: the [`Transport`] trait the proxy drives, and its backends, one module each:
//!
//! - [`ofi`]: libfabric (efa, verbs;ofi_rxm, tcp;ofi_rxm, shm, …) through a safe RAII layer
//!   over `pshmem-libfabric-sys`, with rails (several endpoints striped per PE);
//! - [`sim`]: a simulated fabric across processes (Unix sockets) that can deliver out of order,
//!   delay, throttle and lose peers, so that EFA-SRD-like behaviour is testable without EFA;
//! - [`instant`]: a transport that completes every operation at once without moving data, to
//!   measure the proxy machinery alone;
//! - [`inproc`]: a deterministic in-process fabric stepped by its caller, reordering and
//!   delaying by a seed, for unit tests of the proxy engine without sockets or threads.
//!
//! Capabilities are data ([`Caps`]) that the proxy reads, never provider-name branches.
//!
//! The transport never sees the bootstrap: a backend opens with where its PE stands in the job
//! ([`Job`]: rank, size, PEs on this host), and the layer above (the runtime) exchanges the
//! opaque endpoint records and registration keys through whatever collectives it has, handed in
//! as an [`Exchange`] ([`establish`], [`exchange_mr`]).

pub mod error;
pub mod inproc;
pub mod instant;
pub mod ofi;
pub mod sim;
mod slab;

pub use error::{PostError, Result, TransportError};
pub use pshmem_libfabric_sys::hold_signals_through_load;

/// A PE number (`pshmem-abi`'s: one type from the ring to the transport).
pub use pshmem_abi::Pe;

/// A local registration, as returned by [`Transport::mr_reg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrId(pub u32);

/// A peer's registration, as returned by [`Transport::mr_import`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteMrId(pub u32);

/// Where registered memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    /// Ordinary (or pinned) host memory.
    Host,
    /// CUDA device memory; `dmabuf_fd` (with its offset) is used where the run-time libfabric
    /// is ≥ 1.20 and the provider reports FI_HMEM.
    Cuda {
        /// CUDA device ordinal.
        device: i32,
        /// A DMA-BUF fd exported for the allocation, if any.
        dmabuf_fd: Option<i32>,
        /// Offset of `ptr` within the DMA-BUF.
        dmabuf_offset: u64,
    },
}

/// Copies between host memory and device memory at device addresses, for a transport whose
/// "NIC" is host threads (the simulated fabric with `PSHMEM_SIM_GPU_MEMORY=1`). Called from
/// several threads at once.
pub trait DeviceCopy: Send + Sync + std::fmt::Debug {
    /// Copies `dst.len()` bytes from device address `src`.
    fn read(&self, src: u64, dst: &mut [u8]) -> std::result::Result<(), String>;
    /// Copies `src` to device address `dst`.
    fn write(&self, dst: u64, src: &[u8]) -> std::result::Result<(), String>;
}

/// Memory to register.
#[derive(Debug, Clone, Copy)]
pub struct LocalMem {
    /// Start.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
    /// Host or device.
    pub kind: MemKind,
}

/// A place in a local registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalRef {
    /// The registration.
    pub mr: MrId,
    /// Byte offset within it.
    pub offset: usize,
}

/// A place in a peer's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRef {
    /// The peer's registration (imported).
    pub mr: RemoteMrId,
    /// Byte offset within it.
    pub offset: u64,
}

/// Where a PE stands in its job: all a backend needs to open. How the PEs found each other
/// (the bootstrap) stays with the layer above, which exchanges what [`establish`] and
/// [`exchange_mr`] ask it to through an [`Exchange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// This PE.
    pub rank: Pe,
    /// PEs in the job.
    pub n_pes: usize,
    /// PEs on this host (all of them: the libfabric backends bind loopback).
    pub local_size: usize,
    /// Every PE runs on this machine, whatever hosts they stand for (the bootstrap met over a
    /// loopback address, as emulated hosts do): the libfabric backends bind loopback too.
    pub same_machine: bool,
}

/// The job's byte collectives, lent by the layer above for the exchanges that connect a
/// transport (the runtime lends its bootstrap's). The transport names what was being exchanged
/// and keeps the exchange's error as the source.
pub trait Exchange {
    /// Every PE's `mine`, in PE order.
    fn allgather(&self, mine: &[u8]) -> std::result::Result<Vec<Vec<u8>>, ExchangeError>;
    /// Returns once every PE called it.
    fn barrier(&self) -> std::result::Result<(), ExchangeError>;
}

/// An [`Exchange`]'s own error, kept as the source of [`TransportError::Exchange`] (shared:
/// transport errors are cloned into every completion they fail).
pub type ExchangeError = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What a transport can do, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Backend and provider, e.g. "libfabric tcp;ofi_rxm (lo) x1 rail(s)".
    pub name: String,
    /// What every PE of a job must use alike (backend and provider, without the local domain),
    /// e.g. "libfabric tcp;ofi_rxm": compared across PEs when the transport is established.
    pub fabric: String,
    /// Writes and sends to one peer are delivered in the order posted (false for EFA SRD, shm,
    /// the reordering simulated fabric, and for several rails).
    pub ordered: bool,
    /// A completion means the data is visible at the target (delivery complete).
    pub delivery_complete: bool,
    /// GPU memory can be registered (FI_HMEM).
    pub gpu_memory: bool,
    /// GPU memory can be registered by DMA-BUF fd (FI_HMEM and libfabric ≥ 1.20 at run time).
    pub dmabuf: bool,
    /// Bytes of remote completion data a write can carry (`write_data`): 0 (not offered), 4
    /// (EFA's immediate data) or 8.
    pub cq_data_size: usize,
    /// Largest payload sent inline.
    pub inject_size: usize,
    /// Largest single message.
    pub max_msg_size: usize,
    /// Largest `send` payload.
    pub max_send_size: usize,
    /// Operations that may be outstanding at once before `Retry`.
    pub max_outstanding: usize,
    /// The target must poll for incoming RMA to make progress.
    pub manual_progress: bool,
    /// Endpoints striped per PE.
    pub rails: usize,
    /// Writes and reads of at least this many bytes without remote CQ data are striped over
    /// the rails by the transport; a caller that wants a write with CQ data spread the same
    /// way cuts it into this many parts itself (each part's data arrives whole, on one rail).
    pub stripe_min: usize,
}

impl Caps {
    /// Whether a write may carry `data` as its remote completion data: `Unsupported` when the
    /// transport offers none, `InvalidArgument` when `data` is wider than what it carries
    /// (a caller that packs more bits than [`Caps::cq_data_size`] would lose them silently).
    pub fn check_cq_data(&self, data: u64) -> Result<()> {
        if self.cq_data_size == 0 {
            return Err(TransportError::Unsupported {
                op: "a write with remote CQ data",
                transport: self.name.clone(),
            });
        }
        if self.cq_data_size < 8 && data >> (8 * self.cq_data_size) != 0 {
            return Err(TransportError::InvalidArgument {
                op: "a write with remote CQ data",
                reason: format!(
                    "{data:#x} does not fit the {} bytes of remote CQ data that {} carries",
                    self.cq_data_size, self.name
                ),
            });
        }
        Ok(())
    }
}

/// What polling reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// A posted operation completed (for writes: delivered, see [`Caps::delivery_complete`]).
    Done {
        /// The context given at post.
        ctx: u64,
    },
    /// A posted operation failed.
    Failed {
        /// The context given at post.
        ctx: u64,
        /// Why.
        error: TransportError,
    },
    /// A peer's `write_data` landed here, carrying `data`.
    RemoteWrite {
        /// The remote completion data.
        data: u64,
    },
    /// A peer's `send` arrived.
    Recv {
        /// The message (valid only during the callback).
        data: &'a [u8],
    },
}

/// The operations the proxy drives. One instance belongs to one thread (it is `Send`, not
/// shared); a PE with several proxy threads opens one transport per thread.
///
/// Posting is `unsafe` because the fabric reads or writes the local buffer after the call
/// returns: see each method's `# Safety`.
pub trait Transport: Send {
    /// Capabilities.
    fn caps(&self) -> &Caps;
    /// This PE.
    fn my_pe(&self) -> Pe;
    /// Number of PEs.
    fn n_pes(&self) -> usize;
    /// This endpoint's address, to be given to every peer's [`Transport::connect`].
    fn address(&self) -> Vec<u8>;
    /// Makes every PE reachable, given all addresses in PE order.
    fn connect(&mut self, addresses: &[Vec<u8>]) -> Result<()>;
    /// Called by [`establish`] once every PE's [`Transport::connect`] has returned (to drop
    /// what only connecting needed, such as the shm provider's region files).
    fn all_connected(&mut self) {}

    /// Registers memory for local use and remote access.
    ///
    /// # Safety
    /// `mem` must stay valid (allocated, not moved) until [`Transport::mr_dereg`] or until the
    /// transport is dropped, and peers may write it at any time while registered.
    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId>;
    /// Removes a registration.
    fn mr_dereg(&mut self, mr: MrId) -> Result<()>;
    /// What a peer needs to access a registration (give it to [`Transport::mr_import`]).
    fn mr_export(&self, mr: MrId) -> Vec<u8>;
    /// Makes a peer's exported registration usable here.
    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId>;

    /// Writes `len` bytes from `local` to `remote` on `pe`; completes with [`Event::Done`].
    ///
    /// # Safety
    /// The local bytes must stay valid and unchanged until the operation completes (or
    /// fails), except when `len <= caps().inject_size`, where they are copied at once.
    unsafe fn write(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError>;

    /// Like [`Transport::write`], and the target sees [`Event::RemoteWrite`] with `data` once
    /// the bytes are in place.
    ///
    /// # Safety
    /// As for [`Transport::write`].
    unsafe fn write_data(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<(), PostError>;

    /// Reads `len` bytes from `remote` on `pe` into `local`; completes with [`Event::Done`].
    ///
    /// # Safety
    /// The local bytes must stay valid and must not be read or written until completion.
    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError>;

    /// Sends a message (at most `caps().max_send_size` bytes, copied at once); the peer sees
    /// [`Event::Recv`], this side [`Event::Done`].
    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError>;

    /// Makes progress and reports up to a batch of events through `on_event`; returns how many.
    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize>;

    /// Declares `pe` dead (the bootstrap noticed): outstanding and later operations to it fail
    /// with [`TransportError::PeerLost`].
    fn fail_peer(&mut self, pe: Pe, reason: &str);

    /// Blocks for at most `timeout` or until the transport may have something to report
    /// (incoming traffic), whichever comes first; an idle proxy calls it instead of sleeping,
    /// so that a manual-progress target wakes as soon as a peer sends. May return early.
    /// Returns whether it returned because of traffic (or pending progress) rather than the
    /// timeout: a proxy woken by traffic spins again, since more is likely on its way. The
    /// default sleeps and reports no traffic.
    fn wait(&mut self, timeout: std::time::Duration) -> bool {
        std::thread::sleep(timeout);
        false
    }

    /// Ends a batch of posts: anything the transport held back to batch doorbells
    /// (`PSHMEM_OFI_MORE`) is posted now. The proxy calls it at the end of each batch; polls
    /// and waits do it too.
    fn flush(&mut self) {}

    /// Lets a transport that cannot reach device memory itself (the simulated fabric) take
    /// `MemKind::Cuda` registrations, copying through `copy`; false where the transport does
    /// not use it (a NIC reaches device memory through DMA-BUF or HMEM instead).
    fn attach_device_copy(&mut self, copy: std::sync::Arc<dyn DeviceCopy>) -> bool {
        let _ = copy;
        false
    }

    /// Bytes written and read through each rail so far (the proxy trace reports them, to
    /// show how traffic spreads over a PE's NICs); empty where the transport does not count.
    fn rail_bytes(&self) -> Vec<u64> {
        Vec::new()
    }
}

/// Exchanges endpoint records and connects every PE (collective), after checking that every PE
/// opened the same fabric with the same number of rails (a mismatch is named as such, rather
/// than surfacing as a peer's unreadable address).
pub fn establish(t: &mut dyn Transport, x: &dyn Exchange) -> Result<()> {
    let (fabric, rails) = (t.caps().fabric.clone(), t.caps().rails as u32);
    let mut mine = (fabric.len() as u32).to_le_bytes().to_vec();
    mine.extend_from_slice(fabric.as_bytes());
    mine.extend_from_slice(&rails.to_le_bytes());
    mine.extend_from_slice(&t.address());
    let all = x
        .allgather(&mine)
        .map_err(|source| TransportError::Exchange {
            what: "endpoint addresses",
            source,
        })?;
    let mut addresses = Vec::with_capacity(all.len());
    for (pe, a) in Pe::all(all.len()).zip(&all) {
        let (theirs, their_rails, address) =
            split_address(a).ok_or_else(|| TransportError::InvalidArgument {
                op: "connect",
                reason: format!("PE {pe} sent a malformed endpoint address"),
            })?;
        if theirs != fabric || their_rails != rails {
            return Err(TransportError::Mismatch {
                pe,
                theirs: format!("{theirs} with {their_rails} rail(s)"),
                ours: format!("{fabric} with {rails} rail(s)"),
            });
        }
        addresses.push(address.to_vec());
    }
    t.connect(&addresses)?;
    x.barrier().map_err(|source| TransportError::Exchange {
        what: "connecting",
        source,
    })?;
    t.all_connected();
    Ok(())
}

/// The fabric, rail count and address of an exchanged endpoint record.
fn split_address(a: &[u8]) -> Option<(&str, u32, &[u8])> {
    let len = u32::from_le_bytes(a.get(..4)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(a.get(4..4 + len)?).ok()?;
    let rails = u32::from_le_bytes(a.get(4 + len..8 + len)?.try_into().ok()?);
    Some((name, rails, a.get(8 + len..)?))
}

/// Exchanges a registration made on every PE (collectively) and imports every peer's,
/// returning the remote ids in PE order (the entry for this PE refers to itself).
pub fn exchange_mr(t: &mut dyn Transport, x: &dyn Exchange, mr: MrId) -> Result<Vec<RemoteMrId>> {
    let all = x
        .allgather(&t.mr_export(mr))
        .map_err(|source| TransportError::Exchange {
            what: "memory registrations",
            source,
        })?;
    Pe::all(all.len())
        .zip(&all)
        .map(|(pe, blob)| t.mr_import(pe, blob))
        .collect()
}

/// Checks `offset..offset+len` against a region of `region_len` bytes.
pub(crate) fn check_bounds(
    pe: Pe,
    op: &'static str,
    side: &'static str,
    offset: u64,
    len: usize,
    region_len: u64,
) -> Result<()> {
    let end = offset.checked_add(len as u64);
    match end {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(TransportError::OutOfBounds {
            pe,
            op,
            side,
            offset,
            end: end.unwrap_or(u64::MAX),
            region_len,
        }),
    }
}

/// Which transport a PE opens and with what settings: read once from the environment (with the
/// runtime's other settings) and passed to [`open`], which reads nothing itself.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// `PSHMEM_PROVIDER` (else `FI_PROVIDER`): `sim`, `instant` or a libfabric provider; `None`
    /// takes the first of efa > verbs;ofi_rxm > tcp;ofi_rxm > shm with domains here.
    pub provider: Option<String>,
    /// The simulated fabric's settings (used when the provider is `sim`).
    pub sim: sim::SimConfig,
    /// The libfabric settings (used for any other provider).
    pub ofi: ofi::OfiConfig,
    /// Whether `PSHMEM_RAILS` was given: if not, a PE placed on several NICs opens one rail
    /// per NIC.
    pub rails_given: bool,
}

impl TransportConfig {
    /// From `PSHMEM_PROVIDER`/`FI_PROVIDER` and the simulated fabric's and libfabric's
    /// variables.
    pub fn from_env() -> std::result::Result<Self, pshmem_env::EnvError> {
        let provider = pshmem_env::PROVIDER
            .raw()
            .or_else(|| pshmem_env::fallback("FI_PROVIDER"));
        Ok(Self {
            sim: sim::SimConfig::from_env()?,
            ofi: ofi::OfiConfig::from_env(provider.as_deref())?,
            rails_given: pshmem_env::RAILS.is_set(),
            provider,
        })
    }
}

/// Checks, without opening anything, that the transport `cfg` names exists here (for a job that
/// opens none: see [`open`]); `sim` and `instant` always do.
pub fn check(cfg: &TransportConfig) -> Result<()> {
    match cfg.provider.as_deref() {
        Some("sim" | "instant") => Ok(()),
        _ => ofi::OfiTransport::check(&cfg.ofi).map(|_| ()),
    }
}

/// Opens the transport `cfg` names for this PE of `job` (`sim`: the simulated fabric;
/// `instant`: the instant transport; otherwise libfabric), with its libfabric rails on
/// `domains` (this PE's NICs, from placement) when not empty, and connects it to every PE
/// through `x` ([`establish`]; collective).
pub fn open(
    job: Job,
    x: &dyn Exchange,
    cfg: &TransportConfig,
    domains: &[String],
) -> Result<Box<dyn Transport>> {
    // Whatever this job uses, clean up after killed jobs of any provider.
    ofi::sweep_stale_shm();
    let mut t: Box<dyn Transport> = match cfg.provider.as_deref() {
        Some("sim") => Box::new(sim::SimTransport::open(job, cfg.sim.clone())?),
        Some("instant") => Box::new(instant::InstantTransport::new(job.rank, job.n_pes)),
        _ => {
            let mut ofi = cfg.ofi.clone();
            if !domains.is_empty() {
                ofi.domains = domains.to_vec();
                if !cfg.rails_given {
                    ofi.rails = domains.len();
                }
            }
            Box::new(ofi::OfiTransport::open(job, &ofi)?)
        }
    };
    establish(t.as_mut(), x)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(cq_data_size: usize) -> Caps {
        Caps {
            name: "test".into(),
            fabric: "test".into(),
            ordered: false,
            delivery_complete: true,
            gpu_memory: false,
            dmabuf: false,
            cq_data_size,
            inject_size: 32,
            max_msg_size: 1 << 30,
            max_send_size: 8192,
            max_outstanding: 64,
            manual_progress: false,
            rails: 1,
            stripe_min: usize::MAX,
        }
    }

    /// A failing NIC among several is named: the error says the PE and the rail.
    #[test]
    fn a_failed_completion_names_its_pe_and_rail() {
        let e = TransportError::Completion {
            pe: Pe::new(3),
            rail: 2,
            op: "write",
            code: 5,
            prov_errno: 0,
            text: "remote access error".into(),
        };
        let text = e.to_string();
        assert!(text.contains("PE 3") && text.contains("rail 2"), "{text}");
        assert_eq!(e.pe(), Some(Pe::new(3)));
    }

    #[test]
    fn remote_cq_data_must_fit_its_width() {
        assert!(matches!(
            caps(0).check_cq_data(0),
            Err(TransportError::Unsupported { .. })
        ));
        assert!(caps(4).check_cq_data(u64::from(u32::MAX)).is_ok());
        let e = caps(4)
            .check_cq_data(1 << 32)
            .expect_err("33 bits in 4 bytes");
        assert!(e.to_string().contains("does not fit the 4 bytes"), "{e}");
        assert!(caps(8).check_cq_data(u64::MAX).is_ok());
    }
}
