//! Same-host peers hand each other their heap's memfd (the host analogue of CUDA IPC), so that
//! they can load and store directly. A heap descriptor is a read-write mapping of a PE's memory:
//! it goes only to a process that is a PE of this job, proven three ways before it is sent:
//!
//! 1. **Where to connect is not public.** Each PE listens on an abstract Unix socket with a random
//!    128-bit name (abstract names are listed in `/proc/net/unix` for every user to read, so the
//!    name carries no secret), published only through the job's authenticated bootstrap.
//! 2. **The kernel's word on who connected** (`SO_PEERCRED`): the same uid as this process, and
//!    the pid of the local PE the connection claims to be.
//! 3. **An exchange keyed by the job secret**: the server sends a fresh nonce; the client answers
//!    with its rank, a nonce of its own and an HMAC-SHA256 over both ranks and the server's
//!    nonce; the server checks it and sends its own HMAC over the client's nonce together with
//!    the descriptor; the client checks the server's credentials and HMAC before it keeps the
//!    descriptor. The client also knows its server is genuine because the name came through
//!    the bootstrap after the server had bound it.
//!
//! Every connection is served on its own thread with a short deadline, so a failed or hostile
//! one is dropped (and logged) without stalling or failing the job; the exchange fails only if
//! a legitimate peer did not get the heap by the overall deadline.

use std::{
    io::{IoSlice, IoSliceMut, Read, Write},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixListener, UnixStream},
    },
    sync::mpsc,
    time::{Duration, Instant},
};

use hmac::{Hmac, Mac};
use nix::{
    cmsg_space,
    sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg, sockopt},
};
use pshmem_bootstrap::Bootstrap;
use sha2::Sha256;

use crate::{
    error::{Error, Result},
    heap::Mapping,
};

/// Protocol tag and version of the server's first message.
const MAGIC: &[u8; 4] = b"PSH1";
const NONCE: usize = 32;
const MAC: usize = 32;
/// Longest one connection may take from accept to descriptor.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(2);
/// Most connections served at once.
const MAX_BUSY: usize = 64;

/// What the server must know to tell a PE of this job from anyone else.
struct Auth {
    secret: u64,
    me: u32,
    uid: u32,
    /// Pid of each local PE (by rank); `None` for PEs on other hosts.
    pids: Vec<Option<u32>>,
}

fn mac(secret: u64, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(&secret.to_le_bytes()).expect("any key length");
    for p in parts {
        m.update(p);
    }
    m
}

/// Gives every same-host peer this PE's heap fd and maps theirs. Returns one mapping per PE
/// (`None` for this PE and for peers on other hosts). Collective over the bootstrap.
pub fn share_with_local_peers(
    bs: &Bootstrap,
    mine: &Mapping,
    timeout: Duration,
) -> Result<Vec<Option<Mapping>>> {
    let me = bs.rank();
    let n = bs.world_size();
    let err = |what, detail: String| Error::Heap { me, what, detail };
    let locals: Vec<usize> = (0..n).filter(|&r| r != me && bs.same_host(r)).collect();
    let auth = Auth {
        secret: bs.config().secret,
        me: me as u32,
        uid: nix::unistd::getuid().as_raw(),
        pids: (0..n)
            .map(|r| bs.same_host(r).then(|| bs.peers()[r].pid))
            .collect(),
    };
    let name = format!("pshmem-heap-{:032x}", rand::random::<u128>());
    let listener = if locals.is_empty() {
        None
    } else {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| err("naming the fd socket", e.to_string()))?;
        Some(
            UnixListener::bind_addr(&addr)
                .map_err(|e| err("binding the fd socket", e.to_string()))?,
        )
    };
    // The names travel through the bootstrap only after every server is bound.
    let names = bs.allgather(name.as_bytes())?;
    let deadline = Instant::now() + timeout;
    let mut maps: Vec<Option<Mapping>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| -> Result<()> {
        let server = listener.as_ref().map(|l| {
            let fd = mine.fd().expect("a shared heap is a memfd");
            let (auth, locals) = (&auth, &locals);
            s.spawn(move || serve(l, fd, auth, locals, deadline))
        });
        let mut first_err = None;
        for &r in &locals {
            let fetched = std::str::from_utf8(&names[r])
                .map_err(|_| "its socket name is not text".to_string())
                .and_then(|peer| fetch_until(peer, r, &auth, deadline));
            let mapped = fetched.and_then(|fd| {
                check_len(&fd, mine.len())?;
                Mapping::map(me, fd, mine.len()).map_err(|e| e.to_string())
            });
            match mapped {
                Ok(m) => maps[r] = Some(m),
                Err(e) => {
                    first_err.get_or_insert(err("receiving a peer's heap", format!("PE {r}: {e}")));
                }
            }
        }
        if let Some(h) = server {
            let r = h
                .join()
                .unwrap_or_else(|_| Err("the fd server panicked".into()));
            if let Err(e) = r {
                first_err.get_or_insert(err("handing out the heap", e));
            }
        }
        first_err.map_or(Ok(()), Err)
    })?;
    bs.barrier()?;
    Ok(maps)
}

fn check_len(fd: &OwnedFd, len: usize) -> std::result::Result<(), String> {
    let st = nix::sys::stat::fstat(fd).map_err(|e| e.to_string())?;
    if st.st_size as usize != len {
        return Err(format!("its heap is {} bytes, ours {len}", st.st_size));
    }
    Ok(())
}

/// Accepts connections until every local peer was served (each at most once), serving each on
/// its own thread; refused connections are logged and dropped.
fn serve(
    l: &UnixListener,
    fd: RawFd,
    auth: &Auth,
    locals: &[usize],
    deadline: Instant,
) -> std::result::Result<(), String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel::<std::result::Result<u32, String>>();
    let mut served: Vec<u32> = Vec::new();
    // Connections being served (each on a thread for at most CONNECTION_DEADLINE): past the
    // cap, new ones are closed at once.
    let mut busy = 0usize;
    std::thread::scope(|s| {
        while served.len() < locals.len() {
            while let Ok(outcome) = rx.try_recv() {
                busy -= 1;
                match outcome {
                    Ok(rank) if !served.contains(&rank) => served.push(rank),
                    Ok(rank) => {
                        tracing::warn!("PE {}: PE {rank} fetched the heap a second time", auth.me)
                    }
                    Err(why) => tracing::warn!(
                        "PE {}: refused a connection to the heap socket: {why}",
                        auth.me
                    ),
                }
            }
            if served.len() == locals.len() {
                break;
            }
            match l.accept() {
                Ok((stream, _)) if busy >= MAX_BUSY => drop(stream),
                Ok((stream, _)) => {
                    busy += 1;
                    let tx = tx.clone();
                    s.spawn(move || {
                        let _ = tx.send(serve_one(stream, fd, auth));
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<usize> = locals
                            .iter()
                            .copied()
                            .filter(|r| !served.contains(&(*r as u32)))
                            .collect();
                        return Err(format!(
                            "same-host PEs {missing:?} did not fetch the heap in time"
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    })
}

/// One connection, server side: credentials, the keyed exchange, then the descriptor. Returns
/// the rank served, or why the connection was refused.
fn serve_one(mut s: UnixStream, fd: RawFd, auth: &Auth) -> std::result::Result<u32, String> {
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    let end = Instant::now() + CONNECTION_DEADLINE;
    let cred = nix::sys::socket::getsockopt(&s, sockopt::PeerCredentials)
        .map_err(|e| format!("reading its credentials: {e}"))?;
    if cred.uid() != auth.uid {
        return Err(format!(
            "uid {} (pid {}) is not this job's uid {}",
            cred.uid(),
            cred.pid(),
            auth.uid
        ));
    }
    let nonce: [u8; NONCE] = rand::random();
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&nonce);
    write_by(&mut s, &hello, end)?;
    let mut req = [0u8; 4 + NONCE + MAC];
    read_by(&mut s, &mut req, end)?;
    let rank = u32::from_le_bytes(req[..4].try_into().expect("4 bytes"));
    let (their_nonce, their_mac) = req[4..].split_at(NONCE);
    let expected_pid = auth.pids.get(rank as usize).copied().flatten();
    if rank == auth.me || expected_pid != Some(cred.pid() as u32) {
        return Err(format!(
            "pid {} is not the local PE {rank} of this job",
            cred.pid()
        ));
    }
    mac(
        auth.secret,
        &[
            b"request",
            &nonce,
            &rank.to_le_bytes(),
            &auth.me.to_le_bytes(),
        ],
    )
    .verify_slice(their_mac)
    .map_err(|_| format!("PE {rank} (pid {}) failed the keyed exchange", cred.pid()))?;
    let ours = mac(
        auth.secret,
        &[
            b"grant",
            their_nonce,
            &auth.me.to_le_bytes(),
            &rank.to_le_bytes(),
        ],
    )
    .finalize()
    .into_bytes();
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(
        s.as_raw_fd(),
        &[IoSlice::new(&ours)],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| format!("sending the heap to PE {rank}: {e}"))?;
    Ok(rank)
}

/// PE `owner`'s heap, tried again until `deadline` (its server may have been busy with
/// hostile connections and closed ours unanswered).
fn fetch_until(
    name: &str,
    owner: usize,
    auth: &Auth,
    deadline: Instant,
) -> std::result::Result<OwnedFd, String> {
    let mut pause = Duration::from_millis(1);
    loop {
        match fetch(name, owner, auth, deadline) {
            Ok(fd) => return Ok(fd),
            Err(e) if Instant::now() + pause >= deadline => return Err(e),
            Err(e) => {
                tracing::debug!("PE {}: fetching PE {owner}'s heap: {e}; again", auth.me);
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// One connection, client side: PE `owner`'s heap from its socket `name`.
fn fetch(
    name: &str,
    owner: usize,
    auth: &Auth,
    deadline: Instant,
) -> std::result::Result<OwnedFd, String> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| e.to_string())?;
    let mut s = UnixStream::connect_addr(&addr).map_err(|e| format!("connecting: {e}"))?;
    let end = deadline.min(Instant::now() + 4 * CONNECTION_DEADLINE);
    let cred = nix::sys::socket::getsockopt(&s, sockopt::PeerCredentials)
        .map_err(|e| format!("reading its credentials: {e}"))?;
    let expected = auth.pids.get(owner).copied().flatten();
    if cred.uid() != auth.uid || expected != Some(cred.pid() as u32) {
        return Err(format!(
            "the socket belongs to pid {} uid {}, not to PE {owner}",
            cred.pid(),
            cred.uid()
        ));
    }
    let mut hello = [0u8; 4 + NONCE];
    read_by(&mut s, &mut hello, end)?;
    if &hello[..4] != MAGIC {
        return Err("the heap socket speaks another protocol".into());
    }
    let their_nonce = &hello[4..];
    let nonce: [u8; NONCE] = rand::random();
    let owner32 = owner as u32;
    let ours = mac(
        auth.secret,
        &[
            b"request",
            their_nonce,
            &auth.me.to_le_bytes(),
            &owner32.to_le_bytes(),
        ],
    )
    .finalize()
    .into_bytes();
    let mut req = auth.me.to_le_bytes().to_vec();
    req.extend_from_slice(&nonce);
    req.extend_from_slice(&ours);
    write_by(&mut s, &req, end)?;
    let (grant, fd) = recv_fd(&s, end)?;
    mac(
        auth.secret,
        &[
            b"grant",
            &nonce,
            &owner32.to_le_bytes(),
            &auth.me.to_le_bytes(),
        ],
    )
    .verify_slice(&grant)
    .map_err(|_| format!("PE {owner}'s answer failed the keyed exchange"))?;
    Ok(fd)
}

/// Receives the grant and the descriptor sent with it.
fn recv_fd(s: &UnixStream, end: Instant) -> std::result::Result<([u8; MAC], OwnedFd), String> {
    set_deadline(s, end)?;
    let mut grant = [0u8; MAC];
    let mut iov = [IoSliceMut::new(&mut grant)];
    let mut space = cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        s.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_WAITALL,
    )
    .map_err(|e| format!("receiving the heap: {e}"))?;
    let got = msg.bytes;
    let mut fd = None;
    for c in msg.cmsgs().map_err(|e| e.to_string())? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for &f in &fds {
                // SAFETY: the kernel just installed these descriptors in our table for us; each
                // is owned (and closed, if unwanted) exactly once.
                let owned = unsafe { OwnedFd::from_raw_fd(f) };
                fd.get_or_insert(owned);
            }
        }
    }
    if got != MAC {
        return Err(format!("a grant of {got} bytes"));
    }
    fd.map(|f| (grant, f))
        .ok_or_else(|| "the peer sent no descriptor".into())
}

fn set_deadline(s: &UnixStream, end: Instant) -> std::result::Result<(), String> {
    let left = end
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(left)).map_err(|e| e.to_string())
}

fn read_by(s: &mut UnixStream, buf: &mut [u8], end: Instant) -> std::result::Result<(), String> {
    set_deadline(s, end)?;
    s.read_exact(buf).map_err(|e| format!("reading: {e}"))
}

fn write_by(s: &mut UnixStream, buf: &[u8], end: Instant) -> std::result::Result<(), String> {
    set_deadline(s, end)?;
    s.write_all(buf).map_err(|e| format!("writing: {e}"))
}
