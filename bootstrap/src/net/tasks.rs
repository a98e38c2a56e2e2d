//! The tasks that watch an established connection: a reader dispatching messages and noticing
//! deaths, and a writer sending queued messages and heartbeats.

use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
    sync::mpsc,
};

use super::{
    ReadError, read_message,
    shared::{Failure, Out, Shared, abort_failure},
    write_message,
};
use crate::{
    config::BootstrapConfig,
    frame::{FrameError, Kind, MAX_FRAME},
};

/// Reads messages from `peer` until the connection ends or the peer aborts, dispatching them,
/// then records that this reader has stopped.
pub(crate) async fn reader_task<R: AsyncRead + Unpin>(
    shared: Arc<Shared>,
    peer: usize,
    r: R,
    idle: Duration,
) {
    read_loop(&shared, peer, r, idle).await;
    let mut st = shared.lock();
    st.ended[peer] = true;
    shared.cv.notify_all();
}

async fn read_loop<R: AsyncRead + Unpin>(shared: &Shared, peer: usize, mut r: R, idle: Duration) {
    loop {
        match read_message(&mut r, shared.secret, MAX_FRAME, idle).await {
            Ok((Kind::Heartbeat, _)) => {}
            Ok((Kind::Contrib | Kind::Result, payload)) => {
                let mut st = shared.lock();
                st.inbox[peer].push_back(payload);
                shared.cv.notify_all();
            }
            Ok((Kind::Goodbye, payload)) => {
                shared.lock().leaving[peer] = true;
                if payload.as_slice() == super::GOODBYE_ALONE {
                    // Quietly a death: whoever waits for it fails at once, naming it.
                    shared.fail(Failure::Died {
                        dead: peer,
                        detail: super::LEFT.into(),
                    });
                }
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
