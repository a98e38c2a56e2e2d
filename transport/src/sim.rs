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
//! - **Lost peers**: a peer whose connection ends fails every outstanding operation to it with
//!   [`TransportError::PeerLost`]; [`Transport::fail_peer`] does the same on request.

use std::{
    collections::{HashMap, VecDeque},
    io::{Read, Write},
    os::{
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixListener, UnixStream},
    },
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use pshmem_env as env;
use rand::{Rng, SeedableRng, rngs::SmallRng, seq::SliceRandom};

use crate::{
    Caps, Event, Job, LocalMem, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Result,
    Transport, TransportError, check_bounds,
};

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
}

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

impl SimConfig {
    /// From `PSHMEM_SIM_REORDER`, `PSHMEM_SIM_DELAY_US`, `PSHMEM_SIM_BANDWIDTH_GBPS`.
    pub fn from_env() -> std::result::Result<Self, env::EnvError> {
        let gbps = env::SIM_BANDWIDTH_GBPS.number_value()?;
        Ok(Self {
            reorder: env::SIM_REORDER.bool()?,
            max_delay: env::SIM_DELAY_US.micros()?,
            bandwidth: gbps.max(0.0) * 1e9,
            profile: match env::SIM_PROFILE.checked()?.as_str() {
                "efa" => SimProfile::Efa,
                _ => SimProfile::Full,
            },
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
        let mut h = [0u8; HDR];
        r.read_exact(&mut h)?;
        let q = |i: usize| u64::from_le_bytes(h[8 + 8 * i..16 + 8 * i].try_into().expect("8"));
        let plen = u64::from_le_bytes(h[56..64].try_into().expect("8"));
        if plen > 1 << 34 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "sim payload too large",
            ));
        }
        let mut payload = vec![0u8; plen as usize];
        r.read_exact(&mut payload)?;
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
    /// Where read data goes.
    read_into: Option<(usize, usize)>,
}

/// State shared by the application thread and the NIC threads.
#[derive(Debug)]
struct Shared {
    me: Pe,
    /// Local registrations open to remote access: (address, length).
    regions: RwLock<Vec<Option<(usize, usize)>>>,
    events: Mutex<VecDeque<Ev>>,
    pending: Mutex<HashMap<u64, Pending>>,
    dead: Mutex<Vec<Option<String>>>,
    shutdown: AtomicBool,
}

impl Shared {
    fn push(&self, e: Ev) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(e);
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
        for id in ids {
            let p = pending.remove(&id).expect("listed");
            self.push(Ev::Failed(
                p.ctx,
                TransportError::PeerLost {
                    pe,
                    op: p.op,
                    reason: reason.to_string(),
                },
            ));
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
    shared: Arc<Shared>,
    name: Vec<u8>,
    /// Request streams to each peer (written by this thread only).
    conns: Vec<Option<UnixStream>>,
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

impl SimTransport {
    /// Opens the simulated NIC of this PE of `job` (not yet connected: see
    /// [`crate::establish`]).
    pub fn open(job: Job, cfg: SimConfig) -> Result<Self> {
        Self::open_raw(job.rank, job.n_pes, cfg)
    }

    /// Opens with explicit rank and world size (threads in one process may each open one).
    pub fn open_raw(me: Pe, n: usize, cfg: SimConfig) -> Result<Self> {
        let unique = format!(
            "pshmem-sim-{}-{}-{me}-{}",
            std::process::id(),
            rand::random::<u32>(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let addr = SocketAddr::from_abstract_name(unique.as_bytes())
            .map_err(io_err("sim: socket name"))?;
        let listener = UnixListener::bind_addr(&addr).map_err(io_err("sim: listen"))?;
        let shared = Arc::new(Shared {
            me,
            regions: RwLock::new(Vec::new()),
            events: Mutex::new(VecDeque::new()),
            pending: Mutex::new(HashMap::new()),
            dead: Mutex::new(vec![None; n]),
            shutdown: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel::<Incoming>();
        {
            let shared = shared.clone();
            let cfg = cfg.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-nic-{me}"))
                .spawn(move || engine(shared, cfg, rx))
                .map_err(io_err("sim: spawn"))?;
        }
        {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-accept-{me}"))
                .spawn(move || acceptor(shared, listener, tx))
                .map_err(io_err("sim: spawn"))?;
        }
        let efa = (cfg.profile == SimProfile::Efa).then_some(());
        let caps = Caps {
            fabric: format!(
                "simulated fabric ({}{})",
                if cfg.reorder { "unordered" } else { "ordered" },
                if efa.is_some() { ", efa profile" } else { "" }
            ),
            name: format!(
                "simulated fabric ({}{}, delay ≤ {:?}, {})",
                if cfg.reorder { "unordered" } else { "ordered" },
                if efa.is_some() { ", efa profile" } else { "" },
                cfg.max_delay,
                if cfg.bandwidth > 0.0 {
                    format!("{:.1} GB/s", cfg.bandwidth / 1e9)
                } else {
                    "unlimited".into()
                }
            ),
            ordered: !cfg.reorder,
            delivery_complete: true,
            gpu_memory: false,
            dmabuf: false,
            cq_data_size: efa.map_or(8, |_| 4),
            inject_size: efa.map_or(64, |_| 32),
            max_msg_size: 1 << 34,
            max_send_size: efa.map_or(4096, |_| 8192),
            max_outstanding: 4096,
            manual_progress: false,
            rails: 1,
        };
        Ok(Self {
            me,
            n,
            caps,
            shared,
            name: unique.into_bytes(),
            conns: (0..n).map(|_| None).collect(),
            remotes: Vec::new(),
            next_id: 1,
            outstanding: Arc::new(AtomicU64::new(0)),
        })
    }

    fn check_peer(&self, pe: Pe, op: &'static str) -> Result<(), PostError> {
        if pe.idx() >= self.n {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} out of range for {} PEs", self.n),
            }
            .into());
        }
        if let Some(r) = &self.shared.dead.lock().unwrap_or_else(|p| p.into_inner())[pe.idx()] {
            return Err(TransportError::PeerLost {
                pe,
                op,
                reason: r.clone(),
            }
            .into());
        }
        Ok(())
    }

    fn local(&self, l: LocalRef, len: usize, pe: Pe, op: &'static str) -> Result<usize, PostError> {
        let regions = self
            .shared
            .regions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let (addr, rlen) = regions
            .get(l.mr.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("unknown local registration {:?}", l.mr),
            })?;
        check_bounds(pe, op, "local", l.offset as u64, len, rlen as u64)?;
        Ok(addr + l.offset)
    }

    fn remote(&self, r: RemoteRef, len: usize, pe: Pe, op: &'static str) -> Result<u32, PostError> {
        let &(owner, idx, rlen) =
            self.remotes
                .get(r.mr.0 as usize)
                .ok_or_else(|| TransportError::InvalidArgument {
                    op,
                    reason: format!("unknown remote registration {:?}", r.mr),
                })?;
        if owner != pe {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("remote registration of PE {owner} used for PE {pe}"),
            }
            .into());
        }
        check_bounds(pe, op, "remote", r.offset, len, rlen)?;
        Ok(idx)
    }

    fn post(&mut self, pe: Pe, mut msg: Msg, p: Pending) -> Result<(), PostError> {
        if self.outstanding.load(Ordering::Relaxed) >= self.caps.max_outstanding as u64 {
            return Err(PostError::Retry);
        }
        let id = self.next_id;
        self.next_id += 1;
        msg.id = id;
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, p);
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        let conn =
            self.conns[pe.idx()]
                .as_mut()
                .ok_or_else(|| TransportError::InvalidArgument {
                    op: p.op,
                    reason: "not connected (call establish first)".into(),
                })?;
        if let Err(e) = conn.write_all(&msg.encode()) {
            self.shared.lose(pe, &format!("connection lost: {e}"));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn rma(
        &mut self,
        kind: Kind,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<(), PostError> {
        let op = match kind {
            Kind::Read => "read",
            Kind::WriteData => "write_data",
            _ => "write",
        };
        self.check_peer(pe, op)?;
        let addr = self.local(local, len, pe, op)?;
        let region = self.remote(remote, len, pe, op)?;
        let payload = if kind == Kind::Read {
            Vec::new()
        } else {
            // SAFETY: addr..addr+len lies in a registration the caller keeps valid (mr_reg).
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
        };
        let msg = Msg {
            kind: kind as u8,
            region,
            offset: remote.offset,
            len: len as u64,
            data,
            payload,
            ..Msg::default()
        };
        let read_into = (kind == Kind::Read).then_some((addr, len));
        self.post(
            pe,
            msg,
            Pending {
                ctx,
                pe,
                op,
                read_into,
            },
        )
    }
}

/// Accepts connections from peers; each gets a reader thread feeding the engine.
fn acceptor(shared: Arc<Shared>, listener: UnixListener, tx: mpsc::Sender<Incoming>) {
    for conn in listener.incoming() {
        if shared.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        let Ok(hello) = Msg::read_from(&mut conn) else {
            continue;
        };
        if hello.kind != Kind::Hello as u8 {
            continue;
        }
        // A hello names its sender in 32 bits, as every PE number is.
        let Ok(from) = u32::try_from(hello.id).map(Pe::new) else {
            continue;
        };
        let Ok(writer) = conn.try_clone() else {
            continue;
        };
        let reply = Arc::new(Mutex::new(writer));
        let tx = tx.clone();
        let shared = shared.clone();
        let _ = thread::Builder::new()
            .name(format!("pshmem-sim-rx-{}", shared.me))
            .spawn(move || {
                while let Ok(msg) = Msg::read_from(&mut conn) {
                    let inc = Incoming {
                        msg,
                        from,
                        reply: reply.clone(),
                        due: Instant::now(),
                    };
                    if tx.send(inc).is_err() {
                        return;
                    }
                }
            });
    }
}

/// The target side: applies requests (in arrival order, or shuffled/delayed), answers them.
fn engine(shared: Arc<Shared>, cfg: SimConfig, rx: mpsc::Receiver<Incoming>) {
    let mut rng = SmallRng::from_os_rng();
    let mut queue: Vec<Incoming> = Vec::new();
    let mut link_free = Instant::now();
    // In ordered mode a later request is never due before an earlier one.
    let mut last_due = Instant::now();
    loop {
        if shared.shutdown.load(Ordering::Relaxed) {
            return;
        }
        // Gather what has arrived (block briefly when idle).
        let first = if queue.is_empty() {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(i) => Some(i),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        } else {
            None
        };
        for mut inc in first.into_iter().chain(rx.try_iter()) {
            if !cfg.max_delay.is_zero() {
                inc.due += cfg.max_delay.mul_f64(rng.random::<f64>());
                if !cfg.reorder {
                    inc.due = inc.due.max(last_due);
                    last_due = inc.due;
                }
            }
            queue.push(inc);
        }
        if cfg.reorder {
            queue.shuffle(&mut rng);
        }
        // Apply what is due; with delays, the earliest due first.
        let now = Instant::now();
        let pick = if cfg.max_delay.is_zero() {
            Some(0)
        } else if !cfg.reorder {
            (queue[0].due <= now).then_some(0)
        } else {
            queue
                .iter()
                .enumerate()
                .filter(|(_, i)| i.due <= now)
                .min_by_key(|(_, i)| i.due)
                .map(|(k, _)| k)
        };
        let Some(k) = pick else {
            let next = queue.iter().map(|i| i.due).min().expect("non-empty");
            thread::sleep(
                next.saturating_duration_since(now)
                    .min(Duration::from_millis(1)),
            );
            continue;
        };
        let inc = if cfg.reorder {
            queue.swap_remove(k)
        } else {
            queue.remove(k)
        };
        if cfg.bandwidth > 0.0 {
            let bytes = inc.msg.payload.len().max(inc.msg.len as usize) as f64;
            let start = link_free.max(Instant::now());
            link_free = start + Duration::from_secs_f64(bytes / cfg.bandwidth);
            let wait = link_free.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                thread::sleep(wait);
            }
        }
        let answer = apply(&shared, &inc.msg, inc.from);
        let mut w = inc.reply.lock().unwrap_or_else(|p| p.into_inner());
        let _ = w.write_all(&answer.encode());
    }
}

/// Applies one request to local memory and builds the answer.
fn apply(shared: &Shared, m: &Msg, from: Pe) -> Msg {
    let fail = |why: String| Msg {
        kind: Kind::Error as u8,
        id: m.id,
        payload: why.into_bytes(),
        ..Msg::default()
    };
    let regions = shared.regions.read().unwrap_or_else(|p| p.into_inner());
    let Some(Some((base, rlen))) = regions.get(m.region as usize).copied() else {
        if m.kind == Kind::Send as u8 {
            drop(regions);
            shared.push(Ev::Recv(m.payload.clone()));
            return Msg {
                kind: Kind::Ack as u8,
                id: m.id,
                ..Msg::default()
            };
        }
        return fail(format!(
            "PE {} has no registration {} (remote access error)",
            shared.me, m.region
        ));
    };
    let kind = Kind::from_u8(m.kind);
    let len = m.len;
    if kind != Some(Kind::Send) && m.offset.checked_add(len).is_none_or(|e| e > rlen as u64) {
        return fail(format!(
            "remote access error: bytes {}..{} from PE {from} outside PE {}'s region of {rlen} bytes",
            m.offset,
            m.offset.saturating_add(len),
            shared.me
        ));
    }
    let at = base + m.offset as usize;
    match kind {
        Some(Kind::Write | Kind::WriteData) => {
            // SAFETY: the target range was bounds-checked against a live registration, which
            // cannot be removed while we hold the read lock; the owner gave peers write access.
            unsafe {
                std::ptr::copy_nonoverlapping(m.payload.as_ptr(), at as *mut u8, m.payload.len())
            };
            drop(regions);
            if kind == Some(Kind::WriteData) {
                shared.push(Ev::RemoteWrite(m.data));
            }
            Msg {
                kind: Kind::Ack as u8,
                id: m.id,
                ..Msg::default()
            }
        }
        Some(Kind::Read) => {
            // SAFETY: as above, for reading.
            let payload =
                unsafe { std::slice::from_raw_parts(at as *const u8, m.len as usize) }.to_vec();
            Msg {
                kind: Kind::ReadData as u8,
                id: m.id,
                payload,
                ..Msg::default()
            }
        }
        Some(Kind::Send) => {
            drop(regions);
            shared.push(Ev::Recv(m.payload.clone()));
            Msg {
                kind: Kind::Ack as u8,
                id: m.id,
                ..Msg::default()
            }
        }
        _ => fail(format!("unknown request kind {}", m.kind)),
    }
}

/// The initiator side: reads answers from one peer and completes operations.
fn answers(shared: Arc<Shared>, pe: Pe, mut conn: UnixStream, outstanding: Arc<AtomicU64>) {
    loop {
        let m = match Msg::read_from(&mut conn) {
            Ok(m) => m,
            Err(e) => {
                shared.lose(pe, &format!("connection closed: {e}"));
                return;
            }
        };
        let Some(p) = shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&m.id)
        else {
            continue;
        };
        outstanding.fetch_sub(1, Ordering::Relaxed);
        let ev = match Kind::from_u8(m.kind) {
            Some(Kind::Ack) => Ev::Done(p.ctx),
            Some(Kind::ReadData) => {
                if let Some((addr, len)) = p.read_into {
                    let n = len.min(m.payload.len());
                    // SAFETY: the destination is the caller's registered local range, reserved
                    // for this read until its completion (Transport::read's contract).
                    unsafe {
                        std::ptr::copy_nonoverlapping(m.payload.as_ptr(), addr as *mut u8, n)
                    };
                }
                Ev::Done(p.ctx)
            }
            _ => Ev::Failed(
                p.ctx,
                TransportError::Completion {
                    pe,
                    op: p.op,
                    code: 0,
                    prov_errno: 0,
                    text: String::from_utf8_lossy(&m.payload).into_owned(),
                },
            ),
        };
        shared.push(ev);
    }
}

impl Transport for SimTransport {
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
        self.name.clone()
    }

    fn connect(&mut self, addresses: &[Vec<u8>]) -> Result<()> {
        if addresses.len() != self.n {
            return Err(TransportError::InvalidArgument {
                op: "connect",
                reason: format!("{} addresses for {} PEs", addresses.len(), self.n),
            });
        }
        for (pe, name) in Pe::all(self.n).zip(addresses) {
            let addr = SocketAddr::from_abstract_name(name).map_err(io_err("sim: peer name"))?;
            let mut conn =
                UnixStream::connect_addr(&addr).map_err(|e| TransportError::PeerLost {
                    pe,
                    op: "connect",
                    reason: e.to_string(),
                })?;
            conn.write_all(
                &Msg {
                    kind: Kind::Hello as u8,
                    id: u64::from(self.me.get()),
                    ..Msg::default()
                }
                .encode(),
            )
            .map_err(io_err("sim: hello"))?;
            let reader = conn.try_clone().map_err(io_err("sim: clone"))?;
            let shared = self.shared.clone();
            let outstanding = self.outstanding.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-cq-{}", self.me))
                .spawn(move || answers(shared, pe, reader, outstanding))
                .map_err(io_err("sim: spawn"))?;
            self.conns[pe.idx()] = Some(conn);
        }
        Ok(())
    }

    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId> {
        if !matches!(mem.kind, crate::MemKind::Host) {
            return Err(TransportError::Unsupported {
                op: "registering GPU memory",
                transport: self.caps.name.clone(),
            });
        }
        let mut regions = self
            .shared
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let id = regions
            .iter()
            .position(Option::is_none)
            .unwrap_or(regions.len());
        let entry = Some((mem.ptr as usize, mem.len));
        if id == regions.len() {
            regions.push(entry);
        } else {
            regions[id] = entry;
        }
        Ok(MrId(id as u32))
    }

    fn mr_dereg(&mut self, mr: MrId) -> Result<()> {
        // Taking the write lock waits for any request being applied to this memory.
        let mut regions = self
            .shared
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        match regions.get_mut(mr.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(TransportError::InvalidArgument {
                op: "mr_dereg",
                reason: format!("unknown registration {mr:?}"),
            }),
        }
    }

    fn mr_export(&self, mr: MrId) -> Vec<u8> {
        let regions = self
            .shared
            .regions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let len = regions
            .get(mr.0 as usize)
            .copied()
            .flatten()
            .map_or(0, |(_, l)| l);
        let mut b = mr.0.to_le_bytes().to_vec();
        b.extend_from_slice(&(len as u64).to_le_bytes());
        b
    }

    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId> {
        if blob.len() != 12 {
            return Err(TransportError::InvalidArgument {
                op: "mr_import",
                reason: format!("malformed registration of PE {pe}"),
            });
        }
        let idx = u32::from_le_bytes(blob[..4].try_into().expect("4"));
        let len = u64::from_le_bytes(blob[4..].try_into().expect("8"));
        self.remotes.push((pe, idx, len));
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
        self.rma(Kind::Write, pe, local, remote, len, 0, ctx)
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
        self.rma(Kind::WriteData, pe, local, remote, len, data, ctx)
    }

    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.rma(Kind::Read, pe, local, remote, len, 0, ctx)
    }

    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError> {
        self.check_peer(pe, "send")?;
        if msg.len() > self.caps.max_send_size {
            return Err(TransportError::InvalidArgument {
                op: "send",
                reason: format!("{} bytes > max {}", msg.len(), self.caps.max_send_size),
            }
            .into());
        }
        let m = Msg {
            kind: Kind::Send as u8,
            region: u32::MAX,
            payload: msg.to_vec(),
            ..Msg::default()
        };
        self.post(
            pe,
            m,
            Pending {
                ctx,
                pe,
                op: "send",
                read_into: None,
            },
        )
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let batch: Vec<Ev> = {
            let mut q = self.shared.events.lock().unwrap_or_else(|p| p.into_inner());
            let n = q.len().min(256);
            q.drain(..n).collect()
        };
        let n = batch.len();
        for e in batch {
            match e {
                Ev::Done(ctx) => on_event(Event::Done { ctx }),
                Ev::Failed(ctx, error) => on_event(Event::Failed { ctx, error }),
                Ev::RemoteWrite(data) => on_event(Event::RemoteWrite { data }),
                Ev::Recv(data) => on_event(Event::Recv { data: &data }),
            }
        }
        Ok(n)
    }

    fn fail_peer(&mut self, pe: Pe, reason: &str) {
        if pe.idx() < self.n {
            self.shared.lose(pe, reason);
        }
    }
}

impl Drop for SimTransport {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // No request may touch this PE's memory once the registrations are gone.
        self.shared
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        for c in self.conns.iter().flatten() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        // Wake the acceptor so it sees the shutdown flag.
        if let Ok(addr) = SocketAddr::from_abstract_name(&self.name) {
            let _ = UnixStream::connect_addr(&addr);
        }
    }
}
