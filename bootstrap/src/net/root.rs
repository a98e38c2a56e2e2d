//! Rank 0's side of the join: the acceptor and its bounded handshakes, the refusal of bad
//! hellos, the world table sent to all, and the guard that refuses late claimants of a rank.

use std::{collections::VecDeque, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::AsyncReadExt,
    net::{TcpListener, TcpStream},
    sync::mpsc,
};

use super::{
    PeerInfo, ReadError, encode_world, read_message,
    shared::{Failure, Shared},
    tasks::spawn_peer,
    write_message,
};
use crate::{
    config::{BootstrapConfig, hostname},
    error::{BootstrapError, Result},
    frame::{FrameError, HEADER_LEN, Hello, Kind, MAX_HELLO, RejectCode, Writer},
};

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

/// Longest a connection may take to deliver the 24-byte header of its hello: a rank sends it
/// as soon as it has connected, so a connection that stays silent is not one.
pub(crate) const HEADER_DEADLINE: Duration = Duration::from_secs(1);

/// Most handshakes rank 0 has pending at once: past it, the oldest pending one is closed to
/// make room (a rank delivers its hello within milliseconds of connecting, so a flood of
/// connections that never finish cannot keep a late rank out, as refusing newcomers would);
/// neither can slow or hostile connections exhaust rank 0's descriptors.
pub(crate) fn max_pending(n: usize) -> usize {
    (2 * n).clamp(64, 1024)
}

/// Connections rank 0 closed without a handshake: counted, and logged at powers of two.
struct Dropped(u64);

impl Dropped {
    fn note(&mut self, from: SocketAddr, why: &str) {
        self.0 += 1;
        if self.0.is_power_of_two() {
            tracing::warn!(
                "rank 0: closed the connection from {from} before its hello: {why} ({} so far)",
                self.0
            );
        }
    }
}

/// Rank 0's acceptor, until finalize: each connection gets a handshake task (at most
/// `cap` at once, the oldest evicted past that; each bounded by [`HEADER_DEADLINE`] and
/// [`HANDSHAKE_DEADLINE`]) whose outcome goes to `tx`. A connection from a process of another
/// user on this machine is closed at once.
async fn accept_loop(
    listener: TcpListener,
    tx: mpsc::UnboundedSender<Handshake>,
    secret: u64,
    cap: usize,
) {
    let mut pending: VecDeque<(tokio::task::JoinHandle<()>, SocketAddr)> = VecDeque::new();
    let mut dropped = Dropped(0);
    let me = nix::unistd::geteuid().as_raw();
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
        // The kernel's answer is a blocking netlink exchange: off the runtime's workers.
        let here = s.local_addr().ok();
        let owner = tokio::task::spawn_blocking(move || {
            here.and_then(|l| crate::peer_uid::local_peer_uid(from, l))
        })
        .await
        .ok()
        .flatten();
        if let Some(uid) = owner {
            if uid != me {
                dropped.note(
                    from,
                    &format!("a process of uid {uid}, not this job's {me}"),
                );
                continue;
            }
        }
        pending.retain(|(h, _)| !h.is_finished());
        while pending.len() >= cap {
            let (oldest, who) = pending.pop_front().expect("cap > 0");
            oldest.abort();
            dropped.note(who, &format!("{cap} handshakes pending, this the oldest"));
        }
        let _ = s.set_nodelay(true);
        let tx = tx.clone();
        let task = tokio::spawn(async move {
            let h = tokio::time::timeout(HANDSHAKE_DEADLINE, handshake(s, from, secret))
                .await
                .unwrap_or_else(|_| Handshake::Stray {
                    from,
                    why: format!("no complete hello within {HANDSHAKE_DEADLINE:?}"),
                });
            let _ = tx.send(h);
        });
        pending.push_back((task, from));
    }
}

/// Reads the hello of an accepted connection (bounded in time and size) and checks the secret.
async fn handshake(mut s: TcpStream, from: SocketAddr, secret: u64) -> Handshake {
    let mut header = [0u8; HEADER_LEN];
    let first = tokio::time::timeout(HEADER_DEADLINE, s.read_exact(&mut header)).await;
    let why = match first {
        Ok(Ok(_)) => None,
        Ok(Err(_)) => Some("closed before hello".to_string()),
        Err(_) => Some(format!("no hello header within {HEADER_DEADLINE:?}")),
    };
    if let Some(why) = why {
        return Handshake::Stray { from, why };
    }
    let idle = Duration::from_secs(5);
    let mut r = (&header[..]).chain(s);
    let read = read_message(&mut r, secret, MAX_HELLO, idle).await;
    let mut s = r.into_inner().1;
    match read {
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
    let outcome = hellos_collect(cfg, &mut rx, deadline, &mut joined).await;
    if let Err(err) = outcome {
        acceptor.abort();
        // Tell every rank that did join why the job will not start.
        join_failed_tell(&mut joined, &err, secret).await;
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
    // The listener stays open until finalize (`Bootstrap::close_listener`): a process that
    // claims a rank of the running job (a launcher that started one twice, a restarted rank)
    // is refused and the job aborted, rather than one of the two silently running on as that
    // rank.
    tokio::spawn(join_guard(shared.clone(), rx, froms, n, secret));
    *shared.acceptor.lock().unwrap_or_else(|p| p.into_inner()) = Some(acceptor);
    Ok(world)
}

/// Rank 0's join proper: files the hellos of ranks 1..n into `joined` until every rank is in,
/// the join timeout passes, or a hello is refused (its sender is told why).
async fn hellos_collect(
    cfg: &BootstrapConfig,
    rx: &mut mpsc::UnboundedReceiver<Handshake>,
    deadline: tokio::time::Instant,
    joined: &mut [Option<(Hello, TcpStream, SocketAddr)>],
) -> Result<()> {
    let n = cfg.world_size;
    let secret = cfg.secret;
    let mut count = 1;
    loop {
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
    }
}

/// Sends `err`, the reason the join failed, to every rank in `joined`.
async fn join_failed_tell(
    joined: &mut [Option<(Hello, TcpStream, SocketAddr)>],
    err: &BootstrapError,
    secret: u64,
) {
    let missing: Vec<u64> = match err {
        BootstrapError::JoinTimeout { missing, .. } => missing.iter().map(|m| *m as u64).collect(),
        _ => vec![],
    };
    let p = reject_payload(RejectCode::JoinFailed, &err.to_string(), &missing);
    for (_, s, _) in joined.iter_mut().flatten() {
        let _ = write_message(s, Kind::Reject, secret, &p).await;
    }
}
