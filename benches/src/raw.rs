//! The raw transport between two ranks, through our safe libfabric layer and nothing else: the
//! baseline that fabric-bench compares with the C API and that datapath-bench compares the full
//! runtime with.

#![allow(unsafe_code)]

use std::time::Instant;

use pshmem::net::BootstrapExchange;
use pshmem_bootstrap::Bootstrap;
use pshmem_transport::{
    Caps, Event, LocalMem, LocalRef, MemKind, Pe, PostError, RemoteRef, Transport, TransportError,
    establish, exchange_mr,
    ofi::{OfiConfig, OfiTransport, RawHandles},
};

/// Bytes at the start of the buffer kept for the latency flags of a C baseline sharing the
/// endpoint (see [`RawPair::handles`]); this layer's flag is at 0, the bandwidth runs write
/// from and to the bytes after it.
pub const FLAG_AREA: usize = 4096;

/// One endpoint of a two-rank raw transport with a registered buffer, and its peer's buffer.
pub struct RawPair {
    t: OfiTransport,
    buf: &'static mut [u64],
    local: LocalRef,
    remote: RemoteRef,
    peer: Pe,
}

impl std::fmt::Debug for RawPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPair")
            .field("transport", &Transport::caps(&self.t).name)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl RawPair {
    /// Opens `provider` (libfabric name) on `node`, registers `len` bytes and exchanges them
    /// with the other rank of a 2-rank job. Collective over the bootstrap.
    pub fn open(
        bs: &Bootstrap,
        provider: &str,
        node: Option<&str>,
        len: usize,
    ) -> Result<Self, TransportError> {
        let mut cfg = OfiConfig::from_env(Some(provider))?;
        cfg.node = node.map(str::to_string);
        let mut t = OfiTransport::open(pshmem::net::job(bs), &cfg)?;
        establish(&mut t, &BootstrapExchange(bs))?;
        let len = len + 2 * FLAG_AREA;
        // Page-aligned and touched, like the C side's posix_memalign + memset.
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: non-zero size. Never freed: the registration refers to it until process exit.
        let base = unsafe { std::alloc::alloc(layout) }.cast::<u64>();
        assert!(!base.is_null(), "out of memory");
        // Touch every page, as the C side's memset does: untouched zeroed memory would read as
        // the kernel's shared zero page (a source that is always in cache) until written.
        // SAFETY: `base` is a fresh allocation of `len` writable bytes.
        unsafe { std::ptr::write_bytes(base.cast::<u8>(), 0, len) };
        // SAFETY: base is a fresh allocation of len bytes, 8-aligned, zeroed above (valid u64s).
        let buf: &'static mut [u64] = unsafe { std::slice::from_raw_parts_mut(base, len / 8) };
        let mem = LocalMem {
            ptr: buf.as_mut_ptr().cast(),
            len,
            kind: MemKind::Host,
        };
        // SAFETY: buf is never freed.
        let mr = unsafe { t.mr_reg(mem) }?;
        let remotes = exchange_mr(&mut t, &BootstrapExchange(bs), mr)?;
        let peer = Pe::from_idx(1 - bs.rank());
        Ok(Self {
            t,
            buf,
            local: LocalRef {
                mr,
                offset: 2 * FLAG_AREA,
            },
            remote: RemoteRef {
                mr: remotes[peer.idx()],
                offset: 2 * FLAG_AREA as u64,
            },
            peer,
        })
    }

    /// The transport's capabilities.
    pub fn caps(&self) -> &Caps {
        Transport::caps(&self.t)
    }

    /// The endpoint, CQ and registrations for a C baseline that posts on this very endpoint:
    /// it may use the bytes from [`FLAG_AREA`] to `2 * FLAG_AREA` for its latency flags, and
    /// must read every completion of what it posts before this pair polls again.
    pub fn handles(&self) -> Result<RawHandles, TransportError> {
        self.t.raw_handles(self.peer, self.local.mr, self.remote.mr)
    }

    /// Progresses the endpoint; returns how many events it reported.
    pub fn poll(&mut self) -> usize {
        let mut n = 0;
        self.t
            .poll(&mut |e| {
                if let Event::Failed { error, .. } = e {
                    panic!("raw transport operation failed: {error}");
                }
                n += 1;
            })
            .expect("poll");
        n
    }

    /// Seconds to write `count` messages of `size` bytes with at most `window` in flight.
    pub fn bw(&mut self, size: usize, count: usize, window: usize) -> f64 {
        let (mut posted, mut done) = (0, 0);
        let t0 = Instant::now();
        while done < count {
            while posted < count && posted - done < window {
                // SAFETY: the registered buffer outlives the transport and is never modified.
                match unsafe {
                    self.t
                        .write(self.peer, self.local, self.remote, size, posted as u64)
                } {
                    Ok(()) => posted += 1,
                    Err(PostError::Retry) => break,
                    Err(PostError::Failed(e)) => panic!("write: {e}"),
                }
            }
            done += self.poll();
        }
        t0.elapsed().as_secs_f64()
    }

    /// Half round trip, in seconds, of an 8-byte write ping-pong (`rank` 0 starts).
    pub fn lat(&mut self, rank: usize, iters: usize) -> f64 {
        let flag = self.buf.as_ptr();
        let from = LocalRef {
            mr: self.local.mr,
            offset: 64,
        };
        let to = RemoteRef {
            mr: self.remote.mr,
            offset: 0,
        };
        let (mut posted, mut done) = (0usize, 0usize);
        let mut t0 = Instant::now();
        for i in 1..=(iters + 10) as u64 {
            if i == 11 {
                t0 = Instant::now();
            }
            // SAFETY: flag points into the registered buffer the peer writes; volatile reads see
            // the NIC's stores.
            let seen = |_: ()| unsafe { std::ptr::read_volatile(flag) };
            if rank == 1 {
                while seen(()) != i {
                    done += self.poll();
                }
            }
            self.buf[8] = i;
            loop {
                // SAFETY: 8 bytes ≤ inject size: copied at post, buffer free at once.
                let r = unsafe { self.t.write(self.peer, from, to, 8, i) };
                match r {
                    Ok(()) => {
                        posted += 1;
                        break;
                    }
                    Err(PostError::Retry) => {
                        done += self.poll();
                    }
                    Err(PostError::Failed(e)) => panic!("write: {e}"),
                }
            }
            if rank == 0 {
                while seen(()) != i {
                    done += self.poll();
                }
            }
        }
        let t = t0.elapsed().as_secs_f64() / (2.0 * iters as f64);
        // Leave no completion behind for a C baseline reading the same CQ next.
        while done < posted {
            done += self.poll();
        }
        t
    }
}
