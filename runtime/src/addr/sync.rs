//! Ordering, synchronization, collectives and allocation, by address.

use super::*;

impl ByAddr<'_> {
    /// Completes this PE's host-initiated operations (`fence`: orders them per PE): the host
    /// rings', then the GPU heap's (on `stream`, else waited for), once the GPU part is up.
    pub fn quiet(&self, fence: bool, stream: Option<Stream>) -> Result<()> {
        let op = if fence { "fence" } else { "quiet" };
        if stream.is_some() {
            self.gpu(op)?;
        }
        if fence {
            self.s.fence()?;
        } else {
            self.s.quiet()?;
        }
        // GPU-heap operations of the host each run in their own kernel, one after another on
        // one stream, or ordered by the ring: a quiet of them is the simplest correct fence.
        match (self.s.gpu.get(), stream) {
            // SAFETY: a live stream (`Stream::from_raw`).
            (Some(g), Some(st)) => unsafe { g.on_raw_stream(false, st.raw()) },
            (Some(g), None) => g.host_quiet(),
            (None, _) => Ok(()),
        }
    }

    /// A sync (or `barrier`: quiet first) over `team`: with the GPU part up, a kernel on
    /// `stream` (else waited for) after a quiet of the host rings; otherwise on the host.
    pub fn sync(&self, team: Team, barrier: bool, stream: Option<Stream>) -> Result<()> {
        let op = if barrier { "barrier" } else { "team_sync" };
        match self.s.gpu.get() {
            Some(g) => {
                if barrier {
                    self.s.quiet()?;
                }
                // SAFETY: a live stream, when given.
                unsafe { g.team_sync_on(team, barrier, stream.map(Stream::raw)) }
            }
            None => {
                self.host_only(op, stream)?;
                if barrier {
                    self.s.team_barrier(team)
                } else {
                    self.s.team_sync(team)
                }
            }
        }
    }

    /// Quiet, then every PE arrives: with the GPU part up, its barrier kernel on `stream`
    /// (else waited for); otherwise the host barrier.
    pub fn barrier_all(&self, stream: Option<Stream>) -> Result<()> {
        match self.s.gpu.get() {
            Some(g) => {
                self.s.quiet()?;
                match stream {
                    // SAFETY: a live stream.
                    Some(st) => unsafe { g.on_raw_stream(true, st.raw()) },
                    None => g.host_barrier_all(),
                }
            }
            None => {
                self.host_only("barrier_all", stream)?;
                self.s.barrier_all()
            }
        }
    }

    /// Collective `coll` over `team` on the symmetric `dest` and `src` (`n` bytes, or
    /// elements for the reductions): kernels on the GPU heap (on `stream`, else waited for),
    /// the host algorithms on the host heap. Collective over the team.
    pub fn collective(
        &self,
        coll: Coll,
        team: Team,
        (dest, src): (u64, u64),
        n: usize,
        stream: Option<Stream>,
    ) -> Result<()> {
        let op = coll.name();
        let members = self.s.team_members(team)?;
        let (dest_len, src_len) = coll.lens(n, members.len()).ok_or(Error::SizeOverflow {
            me: self.me(),
            op,
            count: n,
            size: members.len(),
        })?;
        let (d, s) = self.resolve_pair(op, (dest, dest_len), (src, src_len))?;
        if d.heap == HeapKind::Gpu {
            let g = self.gpu(op)?;
            return match stream {
                // SAFETY: a live stream.
                Some(st) => unsafe {
                    g.collective_on_stream(coll, team, &members, dest, src, n, st.raw())
                },
                None => g.collective(coll, team, &members, dest, src, n),
            };
        }
        self.host_only(op, stream)?;
        let (dp, sp) = (SymPtr(d.offset), SymPtr(s.offset));
        match coll {
            Coll::Broadcast { root } => self.s.broadcast(team, dp, sp, n, root),
            Coll::Fcollect => self.s.fcollect(team, dp, sp, n),
            Coll::Alltoall => self.s.alltoall(team, dp, sp, n),
            Coll::Reduce(dt, red) => self.s.reduce(team, dt, red, dp, sp, n),
            Coll::ReduceScatter(dt, red) => self.s.reducescatter(team, dt, red, dp, sp, n),
        }
    }

    /// Allocates `size` bytes (at least 1) of `heap`, aligned to `align` (a power of two;
    /// at least the heap's own 64 or 256 bytes), zeroed when `zero` (before any peer can write
    /// there): this PE's address of the block. Collective. The heap's offsets are aligned, so
    /// the address is too where the heap's base is: an alignment beyond the base's is refused.
    pub fn malloc(&self, heap: HeapKind, size: usize, align: usize, zero: bool) -> Result<u64> {
        let op = if zero { "calloc" } else { "malloc" };
        let base = match heap {
            HeapKind::Host => self.s.mem.base() as u64,
            HeapKind::Gpu => self.gpu(op)?.ptr(SymPtr(0)),
        };
        if !align.is_power_of_two() || base % align as u64 != 0 {
            return Err(Error::BadAlignment {
                me: self.me(),
                op,
                align,
            });
        }
        let size = size.max(1) as u64;
        match heap {
            HeapKind::Host => {
                let at = self.s.allocate(op, size, align as u64, zero)?;
                Ok(base + at.0)
            }
            HeapKind::Gpu => {
                let g = self.gpu(op)?;
                let at =
                    self.s
                        .allocate_in(&g.alloc, op, size, align.max(256) as u64, |at, len| {
                            if zero {
                                g.zero(at, len as usize)
                            } else {
                                Ok(())
                            }
                        })?;
                Ok(base + at.0)
            }
        }
    }

    /// Frees the block starting at `addr` (either heap). Collective.
    pub fn free(&self, addr: u64) -> Result<()> {
        let sym = self.resolve("free", addr, 0)?;
        match sym.heap {
            HeapKind::Host => self.s.free(SymPtr(sym.offset)),
            HeapKind::Gpu => self.s.gpu_free(SymPtr(sym.offset)),
        }
    }
}
