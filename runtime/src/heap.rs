//! The symmetric heap's memory in host mode: a memfd per PE, mapped shared, registered with the
//! transport; same-host peers receive the fd over a Unix socket (SCM_RIGHTS) and map it too —
//! the host analogue of CUDA IPC — so that they can load and store directly.

use std::{
    io::{IoSlice, IoSliceMut, Read, Write},
    num::NonZeroUsize,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixListener, UnixStream},
    },
    ptr::NonNull,
    time::{Duration, Instant},
};

use nix::{
    cmsg_space,
    sys::{
        mman::{MapFlags, ProtFlags, mmap, munmap},
        socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg},
    },
};
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::HeapMem;

use crate::error::{Error, Result};

/// A mapping of a heap: this PE's own (a memfd when same-host peers will map it, else private
/// anonymous memory), or a peer's memfd.
#[derive(Debug)]
pub struct Mapping {
    fd: Option<OwnedFd>,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed only through `HeapMem`'s checked copies and
// atomics; the pointer stays valid until drop.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Creates this PE's heap: a memfd of `len` bytes (zero-filled, allocated on first touch).
    pub fn create(me: usize, len: usize) -> Result<Self> {
        let err = |what, e: nix::Error| Error::Heap {
            me,
            what,
            detail: e.to_string(),
        };
        let fd = nix::sys::memfd::memfd_create(
            format!("pshmem-heap-{me}").as_str(),
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .map_err(|e| err("memfd_create", e))?;
        nix::unistd::ftruncate(&fd, len as i64).map_err(|e| err("sizing the memfd", e))?;
        Self::map(me, fd, len)
    }

    /// This PE's heap when no same-host peer maps it: private anonymous memory, reserved lazily
    /// and eligible for transparent huge pages (fewer TLB misses when the NIC or the kernel's
    /// socket path copies large transfers). The memfd's shared memory is only needed to share.
    pub fn anonymous(me: usize, len: usize) -> Result<Self> {
        let size = heap_size(me, len)?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let base = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
            )
        }
        .map_err(|e| mmap_error(me, e))?;
        advise_huge(base, len);
        Ok(Self {
            fd: None,
            base: base.cast(),
            len,
        })
    }

    /// Maps `fd` (`len` bytes) read-write and shared.
    pub fn map(me: usize, fd: OwnedFd, len: usize) -> Result<Self> {
        let size = heap_size(me, len)?;
        // SAFETY: a fresh shared mapping of a file we hold; no existing memory is affected.
        let base = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| mmap_error(me, e))?;
        advise_huge(base, len);
        Ok(Self {
            fd: Some(fd),
            base: base.cast(),
            len,
        })
    }

    /// A checked view for copies and atomics.
    pub fn view(&self) -> HeapMem {
        // SAFETY: the mapping lives as long as `self`, and the runtime keeps every mapping
        // alive until its proxies and direct paths are gone.
        unsafe { HeapMem::new(self.base.as_ptr(), self.len) }
    }

    /// The memfd (`None` for an anonymous heap, which cannot be shared).
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }
}

/// The heap size as a mapping length (a zero size is a configuration error).
fn heap_size(me: usize, len: usize) -> Result<NonZeroUsize> {
    NonZeroUsize::new(len).ok_or_else(|| Error::Heap {
        me,
        what: "mapping",
        detail: "the heap size is zero".into(),
    })
}

fn mmap_error(me: usize, e: nix::Error) -> Error {
    Error::Heap {
        me,
        what: "mmap",
        detail: e.to_string(),
    }
}

/// Asks for transparent huge pages on a mapping; best effort (refused where THP is off, or for
/// shared memory unless the system allows it).
fn advise_huge(base: NonNull<std::ffi::c_void>, len: usize) {
    // SAFETY: the range is a mapping we just created; the advice changes no contents.
    let _ =
        unsafe { nix::sys::mman::madvise(base, len, nix::sys::mman::MmapAdvise::MADV_HUGEPAGE) };
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the region was mapped by `map` with this length and is no longer used.
        let _ = unsafe { munmap(self.base.cast(), self.len) };
    }
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
    let locals: Vec<usize> = (0..n).filter(|&r| r != me && bs.same_host(r)).collect();
    // The socket name is unique per job (secret, and rank 0's pid) and rank.
    let job = format!(
        "{:x}-{}",
        bs.config().secret,
        bs.peers().first().map_or(0, |p| p.pid)
    );
    let name = |r: usize| format!("pshmem-heap-{job}-{r}");
    let err = |what, detail: String| Error::Heap { me, what, detail };
    let listener = if locals.is_empty() {
        None
    } else {
        let addr = SocketAddr::from_abstract_name(name(me).as_bytes())
            .map_err(|e| err("naming the fd socket", e.to_string()))?;
        Some(
            UnixListener::bind_addr(&addr)
                .map_err(|e| err("binding the fd socket", e.to_string()))?,
        )
    };
    bs.barrier()?;
    let deadline = Instant::now() + timeout;
    let mut maps: Vec<Option<Mapping>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| -> Result<()> {
        let server = listener.as_ref().map(|l| {
            let count = locals.len();
            let fd = mine.fd().expect("a shared heap is a memfd");
            s.spawn(move || serve_fd(l, fd, count, deadline))
        });
        let mut first_err = None;
        for &r in &locals {
            match fetch_fd(&name(r), me, deadline) {
                Ok(fd) => match check_len(&fd, mine.len)
                    .and_then(|()| Mapping::map(me, fd, mine.len).map_err(|e| e.to_string()))
                {
                    Ok(m) => maps[r] = Some(m),
                    Err(e) => {
                        first_err
                            .get_or_insert(err("mapping a peer's heap", format!("PE {r}: {e}")));
                    }
                },
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

/// Accepts `count` connections, sending `fd` to each.
fn serve_fd(
    l: &UnixListener,
    fd: RawFd,
    count: usize,
    deadline: Instant,
) -> std::result::Result<(), String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut served = 0;
    while served < count {
        match l.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                let mut rank = [0u8; 4];
                s.set_read_timeout(Some(Duration::from_secs(5)))
                    .map_err(|e| e.to_string())?;
                s.read_exact(&mut rank).map_err(|e| e.to_string())?;
                let fds = [fd];
                let cmsg = [ControlMessage::ScmRights(&fds)];
                sendmsg::<()>(
                    s.as_raw_fd(),
                    &[IoSlice::new(b"F")],
                    &cmsg,
                    MsgFlags::empty(),
                    None,
                )
                .map_err(|e| format!("sending the fd: {e}"))?;
                served += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(format!(
                        "only {served} of {count} same-host peers fetched the heap in time"
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Connects to a peer's fd socket and receives its heap fd.
fn fetch_fd(name: &str, me: usize, deadline: Instant) -> std::result::Result<OwnedFd, String> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| e.to_string())?;
    let mut s = loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => return Err(format!("connecting: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    s.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))
    .map_err(|e| e.to_string())?;
    s.write_all(&(me as u32).to_le_bytes())
        .map_err(|e| e.to_string())?;
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        s.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| format!("receiving the fd: {e}"))?;
    for c in msg.cmsgs().map_err(|e| e.to_string())? {
        if let ControlMessageOwned::ScmRights(fds) = c
            && let Some(&fd) = fds.first()
        {
            // SAFETY: the kernel just installed this descriptor in our table for us.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    Err("the peer sent no descriptor".into())
}
