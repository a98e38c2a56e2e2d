//! A hostile local process: watches `/proc/net/unix` for the heap sockets of running jobs and
//! tries to take a heap descriptor from each while it exists — with the old protocol's 4-byte
//! request and with bytes the size of the current one's. Prints how many connections it made
//! and how many descriptors it received (there must be none).

use std::{
    collections::HashSet,
    io::{IoSliceMut, Write},
    os::{
        fd::{AsRawFd, RawFd},
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixStream},
    },
    path::Path,
    process::ExitCode,
    time::{Duration, Instant},
};

use nix::{
    cmsg_space,
    sys::socket::{ControlMessageOwned, MsgFlags, recvmsg},
};

/// Runs until `stop` exists or `seconds` passed.
pub fn run(seconds: f64, stop: &Path) -> ExitCode {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut attempts, mut fds) = (0u64, 0u64);
    let mut names = HashSet::new();
    while Instant::now() < end && !stop.exists() {
        let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        for name in table
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter_map(|p| p.strip_prefix('@'))
            .filter(|p| p.starts_with("pshmem-heap-"))
        {
            names.insert(name.to_string());
            // Hammer the socket while it lasts.
            for _ in 0..100 {
                match try_take(name) {
                    Some(got) => {
                        attempts += 1;
                        fds += got;
                    }
                    None => break,
                }
            }
        }
    }
    println!(
        "SNOOP attempts={attempts} fds={fds} names={} uid={}",
        names.len(),
        nix::unistd::getuid()
    );
    ExitCode::SUCCESS
}

/// One connection: `None` when the socket is gone, else the descriptors received.
fn try_take(name: &str) -> Option<u64> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).ok()?;
    let mut s = UnixStream::connect_addr(&addr).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    // The old protocol's request (a rank), then as many bytes as the current one's.
    let _ = s.write_all(&[0u8; 4]);
    let _ = s.write_all(&[7u8; 64]);
    let mut got = 0;
    for _ in 0..2 {
        let mut buf = [0u8; 128];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = cmsg_space!([RawFd; 4]);
        let Ok(msg) = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty())
        else {
            break;
        };
        let n = msg.bytes;
        for c in msg.cmsgs().into_iter().flatten() {
            if let ControlMessageOwned::ScmRights(received) = c {
                got += received.len() as u64;
                for f in received {
                    let _ = nix::unistd::close(f);
                }
            }
        }
        if n == 0 {
            break;
        }
    }
    Some(got)
}
