//! The symmetric heap's memory in host mode: a memfd per PE, mapped shared, registered with the
//! transport; same-host peers receive the fd (`crate::share`) and map it too — the host analogue
//! of CUDA IPC — so that they can load and store directly.

use std::{
    num::NonZeroUsize,
    os::fd::{AsRawFd, OwnedFd, RawFd},
    ptr::NonNull,
};

use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
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

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
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
