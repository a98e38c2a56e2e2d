//! The NIC threads: accepting peers' connections, applying their requests to local memory (in
//! order or shuffled, delayed, through a bandwidth model), and completing operations from answers.

use std::{
    io::Write,
    os::unix::net::{UnixListener, UnixStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::SmallRng, seq::SliceRandom};

use super::{Ev, Incoming, Kind, Msg, Shared, SimConfig};
use crate::{Pe, TransportError};

/// How long a connection may take to send its hello.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// A connection's hello, if it comes from this user (the kernel's word, `SO_PEERCRED`) within
/// [`HELLO_WAIT`] and carries this NIC's token; anything else is dropped, with a warning.
fn admit(shared: &Shared, conn: &mut UnixStream) -> Option<Msg> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let me = shared.me;
    let uid = getsockopt(&*conn, PeerCredentials).ok()?.uid();
    if uid != nix::unistd::geteuid().as_raw() {
        tracing::warn!("sim: PE {me} refused a connection of uid {uid}");
        return None;
    }
    conn.set_read_timeout(Some(HELLO_WAIT)).ok()?;
    let hello = Msg::read_bounded(conn, super::TOKEN_LEN as u64).ok()?;
    let token = hello.payload.as_slice() == shared.token.as_slice();
    if hello.kind != Kind::Hello as u8 || !token {
        tracing::warn!("sim: PE {me} refused a connection without this job's token");
        return None;
    }
    conn.set_read_timeout(None).ok()?;
    Some(hello)
}

/// Accepts connections from peers; each gets a reader thread feeding the engine of the rail
/// its hello names.
pub(super) fn acceptor(
    shared: Arc<Shared>,
    listener: UnixListener,
    txs: Vec<mpsc::Sender<Incoming>>,
) {
    for conn in listener.incoming() {
        if shared.shutdown.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        let Some(hello) = admit(&shared, &mut conn) else {
            continue;
        };
        // A hello names its sender in 32 bits, as every PE number is.
        let Ok(from) = u32::try_from(hello.id).map(Pe::new) else {
            continue;
        };
        let Some(tx) = txs.get(hello.region as usize).cloned() else {
            continue;
        };
        let Ok(writer) = conn.try_clone() else {
            continue;
        };
        let reply = Arc::new(Mutex::new(writer));
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
pub(super) fn engine(shared: Arc<Shared>, cfg: SimConfig, rx: mpsc::Receiver<Incoming>) {
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
            // (Bounded: a configuration read elsewhere than from_env may be slower still.)
            let busy = Duration::try_from_secs_f64(bytes / cfg.bandwidth)
                .unwrap_or(Duration::MAX)
                .min(Duration::from_secs(3600));
            link_free = start + busy;
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

/// Why request `m` of `kind` from `from` may not touch a region of `rlen` bytes at `me`, if
/// it may not: a write whose payload differs from its length, or a range outside the region.
fn check_access(m: &Msg, kind: Option<Kind>, rlen: usize, from: Pe, me: Pe) -> Result<(), String> {
    let len = m.len;
    if matches!(kind, Some(Kind::Write | Kind::WriteData)) && m.payload.len() as u64 != len {
        return Err(format!(
            "PE {from} sent {} bytes for {len}",
            m.payload.len()
        ));
    }
    if kind != Some(Kind::Send) && m.offset.checked_add(len).is_none_or(|e| e > rlen as u64) {
        return Err(format!(
            "remote access error: bytes {}..{} from PE {from} outside PE {me}'s region of {rlen} bytes",
            m.offset,
            m.offset.saturating_add(len),
        ));
    }
    Ok(())
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
    let Some(Some(region)) = regions.get(m.region as usize).copied() else {
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
    if let Err(why) = check_access(m, kind, region.len, from, shared.me) {
        return fail(why);
    }
    // The target range was bounds-checked against a live registration, which cannot be removed
    // while we hold the read lock; the owner gave peers access to it.
    let at = region.addr + m.offset as usize;
    match kind {
        Some(Kind::Write | Kind::WriteData) => {
            if let Err(why) = shared.store(at, region.device, &m.payload) {
                return fail(why);
            }
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
            let payload = match shared.load((at, m.len as usize, region.device)) {
                Ok(p) => p,
                Err(why) => return fail(why),
            };
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

/// The initiator side: reads answers from one peer on one rail and completes operations.
pub(super) fn answers(
    shared: Arc<Shared>,
    pe: Pe,
    rail: usize,
    mut conn: UnixStream,
    outstanding: Arc<AtomicU64>,
) {
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
        let res = match Kind::from_u8(m.kind) {
            Some(Kind::Ack) => Ok(()),
            Some(Kind::ReadData) => {
                // The destination is the caller's registered local range, reserved for this
                // read until its completion (Transport::read's contract).
                match p.read_into {
                    Some((addr, len, device)) => {
                        let n = len.min(m.payload.len());
                        shared.store(addr, device, &m.payload[..n])
                    }
                    None => Ok(()),
                }
                .map_err(|text| TransportError::Completion {
                    pe,
                    rail,
                    op: p.op,
                    code: 0,
                    prov_errno: 0,
                    text,
                })
            }
            _ => Err(TransportError::Completion {
                pe,
                rail,
                op: p.op,
                code: 0,
                prov_errno: 0,
                text: String::from_utf8_lossy(&m.payload).into_owned(),
            }),
        };
        shared.finish(p, res);
    }
}
