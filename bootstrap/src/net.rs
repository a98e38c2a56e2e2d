//! Asynchronous socket work (tokio): reading and writing framed messages, the join handshake,
//! and the reader, writer and heartbeat tasks that keep every connection watched.
//!
//! Topology: a star. Rank 0 accepts one connection from every other rank and relays collectives.
//! Failure detection: a connection that closes without a `Goodbye`, or stays silent for the peer
//! timeout while heartbeats should flow, marks its peer dead. Rank 0 relays a death to everyone
//! with an `Abort` frame, so every rank learns of any rank's death within the peer timeout.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
};

use crate::{
    config::{BootstrapConfig, hostname},
    error::{BootstrapError, Result},
    frame::{
        self, FLAG_MORE, FrameError, HEADER_LEN, Hello, Kind, MAX_FRAME, MAX_HELLO, Reader,
        RejectCode, Writer,
    },
};

/// How a frame read can fail.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Clean end of stream before a header.
    Eof,
    /// Nothing arrived for the idle timeout.
    Idle(Duration),
    /// Socket error or a stream cut inside a frame.
    Io(String),
    /// The peer reset the connection (it turned us away).
    Reset,
    /// The bytes are not a valid frame; the secret the peer sent comes along when it can be read.
    Frame(FrameError, Option<u64>),
}

/// Fills `buf`, failing when no byte arrives for `idle`. `at_boundary` makes an immediate end of
/// stream a clean [`ReadError::Eof`].
async fn read_full<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    idle: Duration,
    at_boundary: bool,
) -> Result<(), ReadError> {
    let mut off = 0;
    while off < buf.len() {
        match tokio::time::timeout(idle, r.read(&mut buf[off..])).await {
            Err(_) => return Err(ReadError::Idle(idle)),
            Ok(Ok(0)) if off == 0 && at_boundary => return Err(ReadError::Eof),
            Ok(Ok(0)) => return Err(ReadError::Io("connection closed inside a frame".into())),
            Ok(Ok(n)) => off += n,
            Ok(Err(e)) if is_reset(&e) => return Err(ReadError::Reset),
            Ok(Err(e)) => return Err(ReadError::Io(e.to_string())),
        }
    }
    Ok(())
}

/// Reads one whole message (one or more frames of one kind). The payload buffer grows in steps
/// of at most 64 KiB as bytes arrive, never by the length a header claims.
pub(crate) async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    secret: u64,
    max_frame: u32,
    idle: Duration,
) -> Result<(Kind, Vec<u8>), ReadError> {
    let mut payload = Vec::new();
    let mut kind = None;
    loop {
        let mut hb = [0u8; HEADER_LEN];
        read_full(r, &mut hb, idle, kind.is_none()).await?;
        let h = frame::decode_header(&hb, secret, max_frame).map_err(|e| {
            let theirs = u64::from_le_bytes(hb[8..16].try_into().expect("8 bytes"));
            ReadError::Frame(e, Some(theirs))
        })?;
        if kind.is_some_and(|k| k != h.kind) {
            return Err(ReadError::Frame(
                FrameError::Malformed("continuation frame of another kind"),
                None,
            ));
        }
        kind = Some(h.kind);
        let mut left = h.len as usize;
        while left > 0 {
            let step = left.min(64 << 10);
            let start = payload.len();
            payload.resize(start + step, 0);
            read_full(r, &mut payload[start..], idle, false).await?;
            left -= step;
        }
        if h.flags & FLAG_MORE == 0 {
            return Ok((h.kind, payload));
        }
    }
}

/// Writes one message, split into frames of at most [`MAX_FRAME`] bytes.
pub(crate) async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: Kind,
    secret: u64,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut chunks = payload.chunks(MAX_FRAME as usize).peekable();
    if chunks.peek().is_none() {
        return w.write_all(&frame::encode_header(kind, 0, secret, 0)).await;
    }
    while let Some(c) = chunks.next() {
        let flags = if chunks.peek().is_some() {
            FLAG_MORE
        } else {
            0
        };
        let h = frame::encode_header(kind, flags, secret, c.len() as u32);
        if c.len() <= 16 << 10 {
            // One write for small frames: with TCP_NODELAY two writes would be two packets.
            let mut one = Vec::with_capacity(HEADER_LEN + c.len());
            one.extend_from_slice(&h);
            one.extend_from_slice(c);
            w.write_all(&one).await?;
        } else {
            w.write_all(&h).await?;
            w.write_all(c).await?;
        }
    }
    Ok(())
}

/// What went wrong with the job, recorded once; every later call reports it.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// A rank died.
    Died { dead: usize, detail: String },
    /// Rank 0 aborted the job for a reason that is not a death.
    Aborted { reason: String },
    /// A second process claimed a rank of the running job (seen by rank 0's join guard).
    Duplicate {
        rank: usize,
        first: String,
        second: String,
    },
    /// A peer sent garbage after joining.
    Protocol { peer: String, error: FrameError },
}

impl Failure {
    pub(crate) fn to_error(&self, me: usize, op: &str) -> BootstrapError {
        match self {
            Failure::Died { dead, detail } => BootstrapError::PeerDied {
                rank: me,
                dead: *dead,
                op: op.to_string(),
                detail: detail.clone(),
            },
            Failure::Aborted { reason } => BootstrapError::Aborted {
                rank: me,
                reason: reason.clone(),
                op: op.to_string(),
            },
            Failure::Duplicate {
                rank,
                first,
                second,
            } => BootstrapError::DuplicateRank {
                rank: *rank,
                first: first.clone(),
                second: second.clone(),
            },
            Failure::Protocol { peer, error } => BootstrapError::Protocol {
                rank: me,
                peer: peer.clone(),
                source: error.clone(),
            },
        }
    }
}

/// Outgoing work for a connection's writer task.
#[derive(Debug)]
pub(crate) enum Out {
    /// A message.
    Msg(Kind, Bytes),
    /// Flush, shut the socket down and report.
    Close(oneshot::Sender<()>),
}

/// A callback run once when the job fails.
pub(crate) type Hook = Box<dyn Fn(&BootstrapError) + Send + Sync>;

/// Mutable state shared by the application thread and the tasks.
#[derive(Default)]
pub(crate) struct State {
    /// Messages received per peer rank, in arrival order.
    pub inbox: Vec<VecDeque<Vec<u8>>>,
    /// The first failure.
    pub failure: Option<Failure>,
    /// Peers that said goodbye.
    pub leaving: Vec<bool>,
    /// This rank is finalizing: connection ends are expected.
    pub finalizing: bool,
    /// Callbacks to run on failure.
    pub hooks: Vec<Hook>,
}

/// State shared between the blocking API and the tasks.
pub(crate) struct Shared {
    pub me: usize,
    pub n: usize,
    pub secret: u64,
    pub state: Mutex<State>,
    pub cv: Condvar,
    /// Senders to each peer's writer task (rank 0: all others; others: rank 0 only).
    pub peers: Mutex<Vec<Option<mpsc::UnboundedSender<Out>>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("me", &self.me)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(me: usize, n: usize, secret: u64) -> Self {
        let state = State {
            inbox: vec![VecDeque::new(); n],
            leaving: vec![false; n],
            ..State::default()
        };
        Self {
            me,
            n,
            secret,
            state: Mutex::new(state),
            cv: Condvar::new(),
            peers: Mutex::new(vec![None; n]),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (plain pushes/pops), so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a message to a peer. Returns false if the peer has no live writer.
    pub(crate) fn send(&self, to: usize, kind: Kind, payload: Bytes) -> bool {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers[to]
            .as_ref()
            .is_some_and(|tx| tx.send(Out::Msg(kind, payload)).is_ok())
    }

    /// Records the job's first failure, (on rank 0) queues an `Abort` to every other rank, then
    /// wakes every waiter and runs the hooks. The aborts are queued before any waiter can see the
    /// failure: a waiter that returns at once and drops the bootstrap closes the writers, and a
    /// close queued ahead of an abort would leave the others believing rank 0 itself died.
    pub(crate) fn fail(&self, failure: Failure) {
        let hooks = {
            let mut st = self.lock();
            if st.failure.is_some() || st.finalizing {
                return;
            }
            if self.me == 0 {
                self.relay_abort(&failure);
            }
            st.failure = Some(failure.clone());
            self.cv.notify_all();
            std::mem::take(&mut st.hooks)
        };
        let err = failure.to_error(self.me, "job");
        tracing::error!("{err}");
        for h in &hooks {
            h(&err);
        }
    }

    /// This rank learned, outside the bootstrap (its data path lost the connection), that rank
    /// `dead` died. A rank other than 0 tells rank 0 first, which relays it to everyone, so
    /// that the others hear which rank died rather than only see this rank leave: non-root
    /// ranks are connected to rank 0 alone, and rank 0 may read this rank's exit before the
    /// dead rank's. Then the failure is recorded here as if the bootstrap had seen it.
    pub(crate) fn report_dead(&self, dead: usize, detail: &str) {
        if dead >= self.n || dead == self.me {
            return;
        }
        {
            let st = self.lock();
            if st.failure.is_some() || st.finalizing {
                return;
            }
        }
        // Rank 0 prefixes "reported by rank N" when it reads the report; here it is local.
        let detail = format!("seen by the data path: {detail}");
        if self.me != 0 {
            // Queued before `fail` wakes the waiters: a waiter that returns at once and drops
            // the bootstrap flushes what is queued before it closes.
            let mut w = Writer::default();
            w.u32(dead as u32).str(&detail);
            self.send(0, Kind::Abort, Bytes::from(w.0));
        }
        self.fail(Failure::Died { dead, detail });
    }

    /// Rank 0: queues an `Abort` describing `failure` to every other rank.
    fn relay_abort(&self, failure: &Failure) {
        let (dead, reason) = match failure {
            Failure::Died { dead, detail } => (*dead as u32, detail.clone()),
            Failure::Aborted { reason } => (u32::MAX, reason.clone()),
            Failure::Duplicate {
                rank,
                first,
                second,
            } => (
                u32::MAX,
                format!("rank {rank} joined twice (from {first} and {second})"),
            ),
            Failure::Protocol { peer, error } => {
                (u32::MAX, format!("bad frame from {peer}: {error}"))
            }
        };
        let mut w = Writer::default();
        w.u32(dead).str(&reason);
        let payload = Bytes::from(w.0);
        for r in 1..self.n {
            self.send(r, Kind::Abort, payload.clone());
        }
    }

    fn is_quiet_end(&self, peer: usize) -> bool {
        let st = self.lock();
        st.finalizing || st.leaving[peer] || st.failure.is_some()
    }
}

/// Decodes an `Abort` payload sent by rank `from` into a failure (rank 0 relays aborts to the
/// others; the others report a death they saw to rank 0).
fn abort_failure(from: usize, payload: &[u8]) -> Failure {
    let mut r = Reader::new(payload, "abort");
    match (r.u32(), r.str()) {
        (Ok(dead), Ok(reason)) if dead != u32::MAX => Failure::Died {
            dead: dead as usize,
            detail: format!("reported by rank {from}: {reason}"),
        },
        (Ok(_), Ok(reason)) => Failure::Aborted {
            reason: reason.to_string(),
        },
        _ => Failure::Aborted {
            reason: format!("rank {from} aborted the job (unreadable reason)"),
        },
    }
}

/// Reads messages from `peer` until the connection ends, dispatching them.
pub(crate) async fn reader_task<R: AsyncRead + Unpin>(
    shared: Arc<Shared>,
    peer: usize,
    mut r: R,
    idle: Duration,
) {
    loop {
        match read_message(&mut r, shared.secret, MAX_FRAME, idle).await {
            Ok((Kind::Heartbeat, _)) => {}
            Ok((Kind::Contrib | Kind::Result, payload)) => {
                let mut st = shared.lock();
                st.inbox[peer].push_back(payload);
                shared.cv.notify_all();
            }
            Ok((Kind::Goodbye, _)) => {
                shared.lock().leaving[peer] = true;
            }
            Ok((Kind::Abort, payload)) => {
                shared.fail(abort_failure(peer, &payload));
                return;
            }
            Ok((kind, _)) => {
                let error = FrameError::Unexpected {
                    got: kind,
                    expected: "a collective frame",
                };
                shared.fail(Failure::Protocol {
                    peer: format!("rank {peer}"),
                    error,
                });
                return;
            }
            Err(e) => {
                if shared.is_quiet_end(peer) {
                    return;
                }
                let detail = match e {
                    ReadError::Eof => "connection closed without goodbye".to_string(),
                    ReadError::Reset => "connection reset".to_string(),
                    ReadError::Idle(d) => format!("no heartbeat for {d:.1?}"),
                    ReadError::Io(m) => m,
                    ReadError::Frame(error, _) => {
                        shared.fail(Failure::Protocol {
                            peer: format!("rank {peer}"),
                            error,
                        });
                        return;
                    }
                };
                shared.fail(Failure::Died { dead: peer, detail });
                return;
            }
        }
    }
}

/// Writes queued messages to `peer`, and a heartbeat whenever the connection was idle for
/// `heartbeat`.
pub(crate) async fn writer_task<W: AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    peer: usize,
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Out>,
    heartbeat: Duration,
) {
    let secret = shared.secret;
    loop {
        let res = match tokio::time::timeout(heartbeat, rx.recv()).await {
            Err(_) => write_message(&mut w, Kind::Heartbeat, secret, &[]).await,
            Ok(Some(Out::Msg(kind, payload))) => {
                write_message(&mut w, kind, secret, &payload).await
            }
            Ok(Some(Out::Close(done))) => {
                let _ = w.flush().await;
                let _ = w.shutdown().await;
                let _ = done.send(());
                return;
            }
            Ok(None) => return,
        };
        if let Err(e) = res {
            if !shared.is_quiet_end(peer) {
                shared.fail(Failure::Died {
                    dead: peer,
                    detail: format!("send failed: {e}"),
                });
            }
            return;
        }
    }
}

/// Starts reader and writer tasks for an established connection.
pub(crate) fn spawn_peer(
    shared: &Arc<Shared>,
    peer: usize,
    stream: TcpStream,
    cfg: &BootstrapConfig,
) {
    let (r, w) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    shared.peers.lock().unwrap_or_else(|p| p.into_inner())[peer] = Some(tx);
    tokio::spawn(reader_task(shared.clone(), peer, r, cfg.peer_timeout));
    tokio::spawn(writer_task(shared.clone(), peer, w, rx, cfg.heartbeat));
}

/// One rank's entry in the world table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The rank.
    pub rank: usize,
    /// Host identity (equal ⇔ same host).
    pub host_id: String,
    /// Host name.
    pub hostname: String,
    /// Process id.
    pub pid: u32,
}

fn encode_world(world: &[PeerInfo]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u32(world.len() as u32);
    for p in world {
        w.str(&p.host_id).str(&p.hostname).u32(p.pid);
    }
    w.0
}

fn decode_world(b: &[u8], n: usize) -> Result<Vec<PeerInfo>, FrameError> {
    let mut r = Reader::new(b, "welcome");
    if r.u32()? as usize != n {
        return Err(FrameError::BadPayload {
            what: "welcome",
            reason: "world size differs",
        });
    }
    let world = (0..n)
        .map(|rank| {
            Ok(PeerInfo {
                rank,
                host_id: r.str()?.to_string(),
                hostname: r.str()?.to_string(),
                pid: r.u32()?,
            })
        })
        .collect::<Result<Vec<_>, FrameError>>()?;
    r.finish()?;
    Ok(world)
}

fn reject_payload(code: RejectCode, text: &str, extra: &[u64]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(code as u8).str(text).u32(extra.len() as u32);
    for x in extra {
        w.u64(*x);
    }
    w.0
}

/// What the handshake with one accepted connection concluded.
enum Handshake {
    Joined {
        hello: Hello,
        stream: TcpStream,
        from: SocketAddr,
    },
    Stray {
        from: SocketAddr,
        why: String,
    },
}

/// Longest a connection may take to deliver its whole hello (a slow one cannot hold a
/// handshake slot by trickling bytes: the idle timer alone restarts with every byte).
pub(crate) const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// Most handshakes rank 0 has pending at once: past it, new connections are closed at once, so
/// that slow or hostile connections can neither exhaust rank 0's descriptors nor stall the
/// join (the ranks retry until the join timeout, and a pending handshake lasts at most
/// [`HANDSHAKE_DEADLINE`]).
pub(crate) fn max_pending(n: usize) -> usize {
    (2 * n).clamp(64, 1024)
}

/// Rank 0's acceptor, for the job's whole life: each connection gets a handshake task (at most
/// `cap` at once, each bounded by [`HANDSHAKE_DEADLINE`]) whose outcome goes to `tx`.
async fn accept_loop(
    listener: TcpListener,
    tx: mpsc::UnboundedSender<Handshake>,
    secret: u64,
    cap: usize,
) {
    let pending = Arc::new(tokio::sync::Semaphore::new(cap));
    let mut dropped = 0u64;
    loop {
        let (s, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: wait for descriptors to come back rather than spin.
                tracing::warn!("rank 0: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(permit) = pending.clone().try_acquire_owned() else {
            dropped += 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    "rank 0: {cap} handshakes pending; closed the connection from {from} ({dropped} so far)"
                );
            }
            drop(s);
            continue;
        };
        let _ = s.set_nodelay(true);
        let tx = tx.clone();
        tokio::spawn(async move {
            let h = tokio::time::timeout(HANDSHAKE_DEADLINE, handshake(s, from, secret))
                .await
                .unwrap_or_else(|_| Handshake::Stray {
                    from,
                    why: format!("no complete hello within {HANDSHAKE_DEADLINE:?}"),
                });
            drop(permit);
            let _ = tx.send(h);
        });
    }
}

/// Reads the hello of an accepted connection (bounded in time and size) and checks the secret.
async fn handshake(mut s: TcpStream, from: SocketAddr, secret: u64) -> Handshake {
    let idle = Duration::from_secs(5);
    match read_message(&mut s, secret, MAX_HELLO, idle).await {
        Ok((Kind::Hello, payload)) => match Hello::decode(&payload) {
            Ok(hello) => Handshake::Joined {
                hello,
                stream: s,
                from,
            },
            Err(e) => Handshake::Stray {
                from,
                why: e.to_string(),
            },
        },
        Ok((kind, _)) => Handshake::Stray {
            from,
            why: format!("first frame is {kind:?}, not Hello"),
        },
        Err(ReadError::Frame(FrameError::BadSecret, Some(theirs))) => {
            // Answer in the peer's own secret so that it can read why it was refused.
            let p = reject_payload(RejectCode::BadSecret, "wrong job secret", &[]);
            let _ = write_message(&mut s, Kind::Reject, theirs, &p).await;
            Handshake::Stray {
                from,
                why: "wrong job secret".into(),
            }
        }
        Err(ReadError::Frame(FrameError::Version { theirs, ours }, Some(their_secret))) => {
            let text = format!("rank 0 speaks protocol version {ours}, you speak {theirs}");
            let p = reject_payload(RejectCode::Version, &text, &[u64::from(ours)]);
            let _ = write_message(&mut s, Kind::Reject, their_secret, &p).await;
            Handshake::Stray {
                from,
                why: format!("protocol version {theirs}"),
            }
        }
        Err(ReadError::Frame(e, _)) => Handshake::Stray {
            from,
            why: e.to_string(),
        },
        Err(ReadError::Eof | ReadError::Reset) => Handshake::Stray {
            from,
            why: "closed before hello".into(),
        },
        Err(ReadError::Idle(_)) => Handshake::Stray {
            from,
            why: "no hello within 5 s".into(),
        },
        Err(ReadError::Io(m)) => Handshake::Stray { from, why: m },
    }
}

fn my_hello(cfg: &BootstrapConfig) -> Hello {
    Hello {
        rank: cfg.rank as u32,
        world_size: cfg.world_size as u32,
        host_id: cfg.host_id.clone(),
        hostname: hostname(),
        pid: std::process::id(),
    }
}

/// Why rank 0 refuses `hello` (from `from`), if it does: a world-size mismatch, a rank out of
/// range, or a rank already claimed (`first` says by whom).
fn refusal(
    hello: &Hello,
    n: usize,
    first: Option<String>,
    from: SocketAddr,
) -> Option<(RejectCode, BootstrapError, Vec<u64>)> {
    let rank = hello.rank as usize;
    if hello.world_size as usize != n {
        let e = BootstrapError::WorldSizeMismatch {
            rank,
            expected: n,
            got: hello.world_size as usize,
        };
        return Some((RejectCode::WorldSize, e, vec![n as u64]));
    }
    if rank >= n {
        let e = BootstrapError::RankOutOfRange { rank, world: n };
        return Some((RejectCode::RankRange, e, vec![]));
    }
    let first = first?;
    let e = BootstrapError::DuplicateRank {
        rank,
        first,
        second: from.to_string(),
    };
    Some((RejectCode::DuplicateRank, e, vec![]))
}

/// Rank 0 after the join: every hello that still arrives carries this job's secret but claims
/// a rank that is already in (or does not fit the world). The newcomer is refused, and the job
/// is aborted on every rank, since nobody can tell which of the two processes is the right one.
async fn join_guard(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Handshake>,
    froms: Vec<String>,
    n: usize,
    secret: u64,
) {
    while let Some(h) = rx.recv().await {
        let (hello, mut stream, from) = match h {
            Handshake::Stray { from, why } => {
                tracing::warn!("rank 0: refused a connection from {from}: {why}");
                continue;
            }
            Handshake::Joined {
                hello,
                stream,
                from,
            } => (hello, stream, from),
        };
        let first = froms.get(hello.rank as usize).cloned();
        let Some((code, err, extra)) = refusal(&hello, n, first, from) else {
            continue; // unreachable: every rank below n is in `froms`
        };
        let p = reject_payload(code, &err.to_string(), &extra);
        let _ = write_message(&mut stream, Kind::Reject, secret, &p).await;
        let failure = match err {
            BootstrapError::DuplicateRank {
                rank,
                first,
                second,
            } => Failure::Duplicate {
                rank,
                first,
                second,
            },
            other => Failure::Aborted {
                reason: format!("a late process of this job was refused: {other}"),
            },
        };
        shared.fail(failure);
    }
}

/// Rank 0's side of the join: accepts until every rank has said hello, then sends the world
/// table. Stray connections (garbage, wrong secret) are refused and logged, and the join goes
/// on; a duplicate rank or a world-size mismatch fails the join for everyone.
pub(crate) async fn root_join(
    shared: &Arc<Shared>,
    cfg: &BootstrapConfig,
    listener: TcpListener,
) -> Result<Vec<PeerInfo>> {
    let n = cfg.world_size;
    let deadline = tokio::time::Instant::now() + cfg.join_timeout;
    let (tx, mut rx) = mpsc::unbounded_channel::<Handshake>();
    let secret = cfg.secret;
    let acceptor = tokio::spawn(accept_loop(listener, tx, secret, max_pending(n)));
    let mut joined: Vec<Option<(Hello, TcpStream, SocketAddr)>> = (0..n).map(|_| None).collect();
    let mut count = 1;
    let outcome: Result<()> = loop {
        if count == n {
            break Ok(());
        }
        let h = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => {
                let missing: Vec<usize> = (1..n).filter(|r| joined[*r].is_none()).collect();
                break Err(BootstrapError::JoinTimeout {
                    rank: 0,
                    missing,
                    timeout: cfg.join_timeout,
                });
            }
            Ok(Some(h)) => h,
            Ok(None) => unreachable!("the acceptor holds a sender for as long as it runs"),
        };
        match h {
            Handshake::Stray { from, why } => {
                tracing::warn!("rank 0: refused a connection from {from}: {why}");
            }
            Handshake::Joined {
                hello,
                mut stream,
                from,
            } => {
                let rank = hello.rank as usize;
                let first = match joined.get(rank) {
                    _ if rank == 0 => Some("rank 0 itself".to_string()),
                    Some(Some((_, _, a))) => Some(a.to_string()),
                    _ => None,
                };
                let Some((code, err, extra)) = refusal(&hello, n, first, from) else {
                    joined[rank] = Some((hello, stream, from));
                    count += 1;
                    continue;
                };
                let p = reject_payload(code, &err.to_string(), &extra);
                let _ = write_message(&mut stream, Kind::Reject, secret, &p).await;
                break Err(err);
            }
        }
    };
    if let Err(err) = outcome {
        acceptor.abort();
        // Tell every rank that did join why the job will not start.
        let missing: Vec<u64> = match &err {
            BootstrapError::JoinTimeout { missing, .. } => {
                missing.iter().map(|m| *m as u64).collect()
            }
            _ => vec![],
        };
        let p = reject_payload(RejectCode::JoinFailed, &err.to_string(), &missing);
        for (_, s, _) in joined.iter_mut().flatten() {
            let _ = write_message(s, Kind::Reject, secret, &p).await;
        }
        return Err(err);
    }
    let mut froms = vec!["rank 0 itself".to_string()];
    froms.extend(
        joined
            .iter()
            .skip(1)
            .flatten()
            .map(|(_, _, a)| a.to_string()),
    );
    let mut world = vec![PeerInfo {
        rank: 0,
        host_id: cfg.host_id.clone(),
        hostname: hostname(),
        pid: std::process::id(),
    }];
    let mut streams = Vec::new();
    for (rank, j) in joined.into_iter().enumerate().skip(1) {
        let (hello, stream, _) = j.expect("all joined");
        world.push(PeerInfo {
            rank,
            host_id: hello.host_id,
            hostname: hello.hostname,
            pid: hello.pid,
        });
        streams.push((rank, stream));
    }
    let welcome = encode_world(&world);
    for (rank, mut stream) in streams {
        write_message(&mut stream, Kind::Welcome, secret, &welcome)
            .await
            .map_err(|e| BootstrapError::PeerDied {
                rank: 0,
                dead: rank,
                op: "join".into(),
                detail: format!("sending the world table failed: {e}"),
            })?;
        spawn_peer(shared, rank, stream, cfg);
    }
    // The listener stays open for the job's life: a process that claims a rank of the running
    // job (a launcher that started one twice, a restarted rank) is refused and the job aborted,
    // rather than one of the two silently running on as that rank.
    tokio::spawn(join_guard(shared.clone(), rx, froms, n, secret));
    Ok(world)
}

/// A non-root rank's side of the join: connect with retry and exponential backoff until the
/// join timeout, say hello, wait for the world table (or rank 0's reason for refusing). A
/// connection that rank 0 closes without a word (it had too many handshakes pending) is tried
/// again, within the same deadline.
pub(crate) async fn peer_join(
    shared: &Arc<Shared>,
    cfg: &BootstrapConfig,
) -> Result<Vec<PeerInfo>> {
    let start = Instant::now();
    let deadline = start + cfg.join_timeout;
    let mut backoff = Duration::from_millis(5);
    loop {
        let stream = connect_root(cfg, start, deadline).await?;
        match hello_root(cfg, stream).await? {
            Some((world, stream)) => {
                spawn_peer(shared, 0, stream, cfg);
                return Ok(world);
            }
            None if Instant::now() < deadline => {
                tracing::debug!(
                    "rank {}: rank 0 closed the connection unanswered; again",
                    cfg.rank
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            None => {
                return Err(BootstrapError::RootUnreachable {
                    rank: cfg.rank,
                    addr: cfg.root_addr.clone(),
                    waited: start.elapsed(),
                    last_error: "rank 0 closed every connection unanswered (busy?)".into(),
                });
            }
        }
    }
}

/// Connects to rank 0, retrying with exponential backoff until `deadline`.
async fn connect_root(
    cfg: &BootstrapConfig,
    start: Instant,
    deadline: Instant,
) -> Result<TcpStream> {
    let mut backoff = Duration::from_millis(5);
    let mut last_error = String::from("no attempt");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BootstrapError::RootUnreachable {
                rank: cfg.rank,
                addr: cfg.root_addr.clone(),
                waited: start.elapsed(),
                last_error,
            });
        }
        let attempt = left.min(Duration::from_secs(2));
        match tokio::time::timeout(attempt, TcpStream::connect(cfg.root_addr.as_str())).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last_error = e.to_string(),
            Err(_) => last_error = format!("connect timed out after {attempt:?}"),
        }
        tokio::time::sleep(backoff.min(deadline.saturating_duration_since(Instant::now()))).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// Says hello on a fresh connection to rank 0 and waits for its answer: the world table,
/// rank 0's reason for refusing (an error), or `None` when rank 0 closed the connection
/// without a word (worth another try).
async fn hello_root(
    cfg: &BootstrapConfig,
    mut stream: TcpStream,
) -> Result<Option<(Vec<PeerInfo>, TcpStream)>> {
    let io = |op: &str, e: String| BootstrapError::Io {
        rank: cfg.rank,
        op: op.into(),
        message: e,
    };
    let hello = my_hello(cfg).encode();
    match write_message(&mut stream, Kind::Hello, cfg.secret, &hello).await {
        Ok(()) => {}
        // Closed before we spoke: rank 0 turned the connection away.
        Err(e) if is_reset(&e) => return Ok(None),
        Err(e) => return Err(io("join: sending hello to rank 0", e.to_string())),
    }
    // Rank 0 answers when everyone has joined, or with its reason at its own join timeout;
    // wait a little longer than that so its reason arrives first.
    let wait = cfg.join_timeout + Duration::from_secs(5);
    let protocol = |source| BootstrapError::Protocol {
        rank: cfg.rank,
        peer: "rank 0".into(),
        source,
    };
    let (kind, payload) = match read_message(&mut stream, cfg.secret, MAX_FRAME, wait).await {
        Ok(m) => m,
        Err(ReadError::Idle(_)) => {
            return Err(BootstrapError::JoinTimeout {
                rank: cfg.rank,
                missing: vec![],
                timeout: cfg.join_timeout,
            });
        }
        Err(ReadError::Frame(e, _)) => return Err(protocol(e)),
        Err(ReadError::Eof | ReadError::Reset) => return Ok(None),
        Err(ReadError::Io(m)) => return Err(io("join: waiting for rank 0", m)),
    };
    match kind {
        Kind::Welcome => {
            let world = decode_world(&payload, cfg.world_size).map_err(protocol)?;
            Ok(Some((world, stream)))
        }
        Kind::Reject => Err(decode_reject(cfg, &payload)),
        other => Err(protocol(FrameError::Unexpected {
            got: other,
            expected: "Welcome or Reject",
        })),
    }
}

/// Whether an I/O error says the peer closed or reset the connection.
fn is_reset(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted)
}

fn decode_reject(cfg: &BootstrapConfig, payload: &[u8]) -> BootstrapError {
    let mut r = Reader::new(payload, "reject");
    let parsed = (|| -> Result<(u8, String, Vec<u64>), FrameError> {
        let code = r.u8()?;
        let text = r.str()?.to_string();
        let n = r.u32()? as usize;
        let extra = (0..n.min(1 << 16))
            .map(|_| r.u64())
            .collect::<Result<_, _>>()?;
        Ok((code, text, extra))
    })();
    let Ok((code, text, extra)) = parsed else {
        return BootstrapError::Rejected {
            rank: cfg.rank,
            reason: "unreadable reason".into(),
        };
    };
    match RejectCode::from_u8(code) {
        Some(RejectCode::WorldSize) => BootstrapError::WorldSizeMismatch {
            rank: cfg.rank,
            expected: extra.first().copied().unwrap_or(0) as usize,
            got: cfg.world_size,
        },
        Some(RejectCode::Version) => BootstrapError::VersionMismatch {
            peer: "rank 0".into(),
            ours: frame::VERSION,
            theirs: extra.first().copied().unwrap_or(0) as u16,
        },
        Some(RejectCode::JoinFailed) if !extra.is_empty() => BootstrapError::JoinTimeout {
            rank: cfg.rank,
            missing: extra.iter().map(|m| *m as usize).collect(),
            timeout: cfg.join_timeout,
        },
        _ => BootstrapError::Rejected {
            rank: cfg.rank,
            reason: text,
        },
    }
}
