//! The simulated fabric: a software NIC per PE, across processes (or threads) over Unix
//! sockets, implementing [`Transport`] with the failure and ordering behaviour of real fabrics.
//!
//! Each PE's NIC is a set of threads. Posting sends a request to the target's NIC, which
//! applies it to the target's registered memory the way a NIC's DMA engine would and answers;
//! the answer becomes the initiator's completion. So a completion means the data
//! is at the target (delivery complete), as with EFA SRD.
//!
//! - **Unordered delivery** (`reorder`, default on): the target applies pending requests in a
//!   random order (a random delay each, or a shuffle of what is pending), so writes and sends
//!   to one peer land out of order, and completions come back out of order — what
//!   EFA's SRD does and what put-with-signal and fence must survive.
//! - **Delay and bandwidth model**: a random extra delay per request, and a serialising link
//!   of the given bandwidth at each target, so that later work can simulate many PEs.
//! - **Rails** (`rails`, from `PSHMEM_RAILS`): several NICs per PE, each with its own
//!   connection to each peer and its own serialising link at the target; writes and reads of at
//!   least [`STRIPE_MIN`] without remote CQ data are split over every rail, writes with CQ data
//!   take turns, everything else goes on the destination's home rail (the libfabric
//!   transport's rules). [`crate::Transport::rail_bytes`] counts the bytes per rail.
//! - **Duplicated completions** (`duplicate`): a local completion reported twice, with the
//!   given probability — what the proxy must ignore rather than count twice. Deliveries are
//!   never duplicated: EFA's SRD and RC deliver exactly once.
//! - **Device memory** (`PSHMEM_SIM_GPU_MEMORY=1`, through
//!   [`crate::Transport::attach_device_copy`]): registrations of GPU memory, which the NIC
//!   threads read and write through the runtime's CUDA copies, so that a GPU heap is served as
//!   a DMA-BUF registration would be (on the `efa` profile too, where the host-staged path is
//!   refused).
//! - **Lost peers**: a peer whose connection ends fails every outstanding operation to it with
//!   [`TransportError::PeerLost`]; [`Transport::fail_peer`] does the same on request.
//!
//! Beside the types here: `initiator` (opening a PE's NIC, posting requests), `nic` (the NIC
//! threads: target and answers) and `transport` (the trait implementation).
//!
//! [`Transport`]: crate::Transport
//! [`Transport::fail_peer`]: crate::Transport::fail_peer

mod initiator;
mod nic;
#[cfg(test)]
mod tests;
mod transport;

use std::{
    collections::{HashMap, VecDeque},
    io::Read,
    os::unix::net::UnixStream,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use pshmem_env as env;

use crate::{Caps, Pe, TransportError};

/// Behaviour of the simulated fabric.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Apply requests to a peer out of order.
    pub reorder: bool,
    /// Random extra delay per request, up to this.
    pub max_delay: Duration,
    /// Modelled link bandwidth into each PE, bytes per second (0 = unlimited).
    pub bandwidth: f64,
    /// Whose capabilities it offers.
    pub profile: SimProfile,
    /// NICs (rails) per PE.
    pub rails: usize,
    /// Probability that a local completion is reported twice.
    pub duplicate: f64,
    /// Take GPU memory through a device copy (`PSHMEM_SIM_GPU_MEMORY`).
    pub gpu_memory: bool,
}

/// Writes and reads of at least this many bytes are striped over every rail (as the libfabric
/// transport's default).
pub const STRIPE_MIN: usize = 256 << 10;

/// The capabilities the simulated fabric offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SimProfile {
    /// Everything: 64-bit remote CQ data, 64-byte inject, 4 KiB sends.
    #[default]
    Full,
    /// EFA's (fi_efa(7)): remote CQ data of 4 bytes (EFA's immediate data: a write whose data is
    /// wider is refused), 32-byte inject, 8 KiB sends.
    Efa,
}

/// The slowest modelled link: 1 MB/s.
const MIN_GBPS: f64 = 1e-3;

impl SimConfig {
    /// From `PSHMEM_SIM_REORDER`, `PSHMEM_SIM_DELAY_US`, `PSHMEM_SIM_BANDWIDTH_GBPS`,
    /// `PSHMEM_SIM_PROFILE`, `PSHMEM_SIM_DUPLICATE`, `PSHMEM_SIM_GPU_MEMORY` and `PSHMEM_RAILS`.
    pub fn from_env() -> std::result::Result<Self, env::EnvError> {
        let gbps = env::SIM_BANDWIDTH_GBPS.number_value()?;
        // (A rate so small that one message takes longer than a Duration can hold panicked
        // the NIC threads and hung the job.)
        if gbps > 0.0 && gbps < MIN_GBPS {
            return Err(env::SIM_BANDWIDTH_GBPS.bad(
                &gbps.to_string(),
                &format!("0 (unlimited) or at least {MIN_GBPS} GB/s"),
            ));
        }
        Ok(Self {
            reorder: env::SIM_REORDER.bool()?,
            max_delay: env::SIM_DELAY_US.micros()?,
            bandwidth: gbps.max(0.0) * 1e9,
            profile: match env::SIM_PROFILE.checked()?.as_str() {
                "efa" => SimProfile::Efa,
                _ => SimProfile::Full,
            },
            rails: env::RAILS.opt_usize()?.unwrap_or(1).max(1),
            duplicate: env::SIM_DUPLICATE.number_value()?,
            gpu_memory: env::SIM_GPU_MEMORY.bool()?,
        })
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            reorder: true,
            max_delay: Duration::ZERO,
            bandwidth: 0.0,
            profile: SimProfile::Full,
            rails: 1,
            duplicate: 0.0,
            gpu_memory: false,
        }
    }
}

const HDR: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Write = 1,
    WriteData = 2,
    Read = 3,
    Send = 5,
    Ack = 16,
    ReadData = 17,
    Error = 19,
    Hello = 32,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Write,
            2 => Self::WriteData,
            3 => Self::Read,
            5 => Self::Send,
            16 => Self::Ack,
            17 => Self::ReadData,
            19 => Self::Error,
            32 => Self::Hello,
            _ => return None,
        })
    }
}

/// One message on a sim connection: a 64-byte header and an optional payload.
#[derive(Debug, Clone, Default)]
struct Msg {
    kind: u8,
    region: u32,
    id: u64,
    offset: u64,
    len: u64,
    data: u64,
    payload: Vec<u8>,
}

impl Msg {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HDR + self.payload.len()];
        b[0] = self.kind;
        b[4..8].copy_from_slice(&self.region.to_le_bytes());
        for (i, v) in [self.id, self.offset, self.len, self.data]
            .iter()
            .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[56..64].copy_from_slice(&(self.payload.len() as u64).to_le_bytes());
        b[HDR..].copy_from_slice(&self.payload);
        b
    }

    fn read_from(r: &mut impl Read) -> std::io::Result<Self> {
        Self::read_bounded(r, MAX_PAYLOAD)
    }

    /// Reads one message whose payload may be at most `max` bytes. The payload is read as it
    /// arrives (never allocated whole on the word of its header), so a peer that announces
    /// more than it sends costs what it sent.
    fn read_bounded(r: &mut impl Read, max: u64) -> std::io::Result<Self> {
        let mut h = [0u8; HDR];
        r.read_exact(&mut h)?;
        let q = |i: usize| u64::from_le_bytes(h[8 + 8 * i..16 + 8 * i].try_into().expect("8"));
        let plen = u64::from_le_bytes(h[56..64].try_into().expect("8"));
        if plen > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("sim payload of {plen} bytes, more than {max}"),
            ));
        }
        // Room for the payload up front, up to a bound (a header that lies costs at most that):
        // growing from empty took a read and a reallocation per doubling, which cost the
        // simulated NIC a quarter of its message rate at 4 KiB.
        let mut payload = Vec::with_capacity(plen.min(PREALLOC_MAX) as usize);
        r.take(plen).read_to_end(&mut payload)?;
        if payload.len() as u64 != plen {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(Self {
            kind: h[0],
            region: u32::from_le_bytes(h[4..8].try_into().expect("4")),
            id: q(0),
            offset: q(1),
            len: q(2),
            data: q(3),
            payload,
        })
    }
}

/// An event owned by the completion queue.
#[derive(Debug)]
enum Ev {
    Done(u64),
    Failed(u64, TransportError),
    RemoteWrite(u64),
    Recv(Vec<u8>),
}

/// An operation this PE started, awaiting the target's answer.
#[derive(Debug, Clone, Copy)]
struct Pending {
    ctx: u64,
    pe: Pe,
    op: &'static str,
    /// Where read data goes: address, length, device memory.
    read_into: Option<(usize, usize, bool)>,
    /// A stripe of a striped operation: the id of its [`Shared::groups`] entry (0: not one).
    group: u64,
}

/// A striped operation's stripes not yet answered, and whether its failure was reported.
#[derive(Debug)]
struct Group {
    remaining: u32,
    failed: bool,
}

/// A local registration open to remote access.
#[derive(Debug, Clone, Copy)]
struct Region {
    addr: usize,
    len: usize,
    /// Device memory, reached through [`Shared::device`].
    device: bool,
}

/// State shared by the application thread and the NIC threads.
#[derive(Debug)]
struct Shared {
    me: Pe,
    /// Local registrations open to remote access.
    regions: RwLock<Vec<Option<Region>>>,
    /// How device memory is reached, once attached.
    device: std::sync::OnceLock<Arc<dyn crate::DeviceCopy>>,
    events: Mutex<VecDeque<Ev>>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Striped operations in flight, by the id of their first stripe.
    groups: Mutex<HashMap<u64, Group>>,
    dead: Mutex<Vec<Option<String>>>,
    shutdown: AtomicBool,
    /// Probability of reporting a completion twice.
    duplicate: f64,
    /// The token a peer's hello must carry: random, published with this NIC's socket name
    /// through the job's authenticated bootstrap only, so that nothing outside the job can
    /// reach the registrations (with the peer's uid, checked by the kernel).
    token: [u8; TOKEN_LEN],
}

/// Bytes of a NIC's token (the address is the token, then the socket name).
const TOKEN_LEN: usize = 16;

/// The largest payload a message may announce: the largest write (`max_msg_size`).
const MAX_PAYLOAD: u64 = 1 << 34;

/// The most a message read allocates before its payload arrives (larger payloads grow as they
/// are read).
const PREALLOC_MAX: u64 = 1 << 20;

impl Shared {
    fn push(&self, e: Ev) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(e);
    }

    /// Reports the answer to `p`: once every stripe of a striped operation answered (or at its
    /// first failure, once), and sometimes twice when duplicates are injected.
    fn finish(&self, p: Pending, res: std::result::Result<(), TransportError>) {
        if p.group != 0 {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            let Some(g) = groups.get_mut(&p.group) else {
                return;
            };
            g.remaining -= 1;
            let report = match &res {
                Ok(()) => g.remaining == 0 && !g.failed,
                Err(_) => !std::mem::replace(&mut g.failed, true),
            };
            if g.remaining == 0 {
                groups.remove(&p.group);
            }
            if !report {
                return;
            }
        }
        match res {
            Ok(()) => {
                self.push(Ev::Done(p.ctx));
                if self.duplicate > 0.0 && rand::random::<f64>() < self.duplicate {
                    self.push(Ev::Done(p.ctx));
                }
            }
            Err(e) => self.push(Ev::Failed(p.ctx, e)),
        }
    }

    /// `len` bytes at `addr`, in device memory when `device`.
    fn load(
        &self,
        (addr, len, device): (usize, usize, bool),
    ) -> std::result::Result<Vec<u8>, String> {
        if !device {
            // SAFETY: callers pass a range inside a live registration (bounds-checked), which
            // its owner keeps valid while registered.
            return Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec());
        }
        let mut v = vec![0u8; len];
        self.device_copy()?.read(addr as u64, &mut v)?;
        Ok(v)
    }

    /// Writes `bytes` at `addr`, in device memory when `device`.
    fn store(&self, addr: usize, device: bool, bytes: &[u8]) -> std::result::Result<(), String> {
        if device {
            return self.device_copy()?.write(addr as u64, bytes);
        }
        // SAFETY: as in `load`, for writing: the owner gave access to the range.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
        Ok(())
    }

    fn device_copy(&self) -> std::result::Result<&Arc<dyn crate::DeviceCopy>, String> {
        self.device
            .get()
            .ok_or_else(|| "device memory without a device copy attached".to_string())
    }

    /// Fails every outstanding operation to `pe` and refuses later ones.
    fn lose(&self, pe: Pe, reason: &str) {
        {
            let mut dead = self.dead.lock().unwrap_or_else(|p| p.into_inner());
            if dead[pe.idx()].is_some() || self.shutdown.load(Ordering::Relaxed) {
                return;
            }
            dead[pe.idx()] = Some(reason.to_string());
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.pe == pe)
            .map(|(id, _)| *id)
            .collect();
        let lost: Vec<Pending> = ids
            .iter()
            .map(|id| pending.remove(id).expect("listed"))
            .collect();
        drop(pending);
        for p in lost {
            let e = TransportError::PeerLost {
                pe,
                op: p.op,
                reason: reason.to_string(),
            };
            self.finish(p, Err(e));
        }
    }
}

/// A request waiting at the target, with its answer channel.
struct Incoming {
    msg: Msg,
    from: Pe,
    reply: Arc<Mutex<UnixStream>>,
    due: Instant,
}

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// The simulated-fabric transport of one PE.
#[derive(Debug)]
pub struct SimTransport {
    me: Pe,
    n: usize,
    caps: Caps,
    /// Whether a device copy may be attached (`SimConfig::gpu_memory`).
    gpu_memory: bool,
    shared: Arc<Shared>,
    name: Vec<u8>,
    /// Request streams to each peer, one per rail (written by this thread only; empty until
    /// connected).
    conns: Vec<Vec<UnixStream>>,
    /// The rail the last write with remote CQ data went on (such writes take turns).
    next_data_rail: usize,
    /// Bytes written and read through each rail.
    rail_bytes: Vec<u64>,
    remotes: Vec<(Pe, u32, u64)>,
    next_id: u64,
    outstanding: Arc<AtomicU64>,
}

fn io_err(op: &'static str) -> impl Fn(std::io::Error) -> TransportError {
    move |e| TransportError::Io {
        op,
        message: e.to_string(),
    }
}
