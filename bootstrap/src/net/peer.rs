//! A non-root rank's side of the join: connecting to rank 0 with backoff, saying hello, and
//! reading the world table or rank 0's reason for refusing.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::net::TcpStream;

use super::{
    PeerInfo, ReadError, decode_world, is_reset, read_message, shared::Shared, tasks::spawn_peer,
    write_message,
};
use crate::{
    config::{BootstrapConfig, hostname},
    error::{BootstrapError, Result},
    frame::{self, FrameError, Hello, Kind, MAX_FRAME, Reader, RejectCode},
};

fn my_hello(cfg: &BootstrapConfig) -> Hello {
    Hello {
        rank: cfg.rank as u32,
        world_size: cfg.world_size as u32,
        host_id: cfg.host_id.clone(),
        hostname: hostname(),
        pid: std::process::id(),
    }
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
