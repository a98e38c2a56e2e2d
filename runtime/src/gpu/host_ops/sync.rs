//! Team syncs, collectives, quiet and barrier of the host on the GPU heap: on an application
//! stream (only kernel launches: graph-capturable), or blocking on the internal stream.

use super::*;

impl Gpu {
    /// A team sync (or barrier: quiet first) on `stream`, or blocking on the internal stream.
    ///
    /// # Safety
    /// `stream`, when given, is a live stream of this PE's context.
    pub(crate) unsafe fn team_sync_on(
        &self,
        team: Team,
        barrier: bool,
        stream: Option<RawStream>,
    ) -> Result<()> {
        let op = if barrier { "barrier" } else { "team_sync" };
        let live = self.live(op)?;
        let _g = self.host_lock();
        let st = stream.unwrap_or_else(|| self.stream.cu_stream());
        let args = TeamSyncArgs {
            team,
            barrier: i32::from(barrier),
        };
        // SAFETY: no memory beyond the device state.
        unsafe { self.launch(op, &self.host.team_sync, (1, 1), st, args)? };
        if stream.is_some() {
            Ok(())
        } else {
            self.finish(op, Some(live))
        }
    }

    /// Runs `coll` over `team` (whose members, world PEs in team order, are `members`) on the
    /// GPU heap addresses `dest` and `src` (`n` bytes, or elements for the reductions), waited
    /// for. Collective over the team.
    pub(crate) fn collective(
        &self,
        coll: Coll,
        team: Team,
        members: &[usize],
        dest: u64,
        src: u64,
        n: usize,
    ) -> Result<()> {
        // SAFETY: no application stream (the internal one, waited for).
        unsafe { self.collective_impl(coll, team, members, dest, src, n, None) }
    }

    /// [`Gpu::collective`] launched on the application's `stream` (only a kernel launch:
    /// graph-capturable); complete when the stream has run it.
    ///
    /// # Safety
    /// `stream` is a live stream of this PE's context.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn collective_on_stream(
        &self,
        coll: Coll,
        team: Team,
        members: &[usize],
        dest: u64,
        src: u64,
        n: usize,
        stream: RawStream,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.collective_impl(coll, team, members, dest, src, n, Some(stream)) }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn collective_impl(
        &self,
        coll: Coll,
        team: Team,
        team_members: &[usize],
        dest: u64,
        src: u64,
        n: usize,
        stream: Option<RawStream>,
    ) -> Result<()> {
        let op = coll.name();
        let (args, (dest_len, src_len)) =
            self.coll_args(coll, team, team_members.len(), (dest, src), n)?;
        let live = self.live(op)?;
        let _g = self.host_lock();
        let st = stream.unwrap_or_else(|| self.stream.cu_stream());
        // Large messages among members this GPU all maps: the data part spread over a grid,
        // between team syncs launched on the same stream (the same choice on every member:
        // the same sizes, and mappings are symmetric). In-place reductions stay in one block
        // (it writes each chunk after a sync).
        let per_member = if matches!(
            coll,
            Coll::Broadcast { .. } | Coll::Fcollect | Coll::Alltoall
        ) {
            n
        } else {
            dest_len
        };
        let in_place = dest < src + src_len as u64 && src < dest + dest_len as u64;
        let mapped = team_members
            .iter()
            .all(|&pe| self.peer_addr(0, pe).is_some());
        if mapped && per_member >= WIDE_BYTES && !in_place {
            let grid = (per_member / WIDE_SLICE).clamp(1, WIDE_BLOCKS) as u32;
            let sync = |barrier: i32| -> Result<()> {
                let args = TeamSyncArgs { team, barrier };
                // SAFETY: no memory beyond the device state.
                unsafe { self.launch(op, &self.host.team_sync, (1, 1), st, args) }
            };
            sync(0)?;
            // SAFETY: both ranges are in the symmetric heap (checked) and every member maps
            // them.
            unsafe { self.launch(op, &self.host.coll_wide, (grid, THREADS), st, args)? };
            sync(1)?;
        } else {
            // SAFETY: both ranges are in the symmetric heap (checked).
            unsafe { self.launch(op, &self.host.coll, (1, THREADS), st, args)? };
        }
        if stream.is_some() {
            Ok(())
        } else {
            self.finish(op, Some(live))
        }
    }

    /// The checked arguments of `coll` over a team of `members` on `dest` and `src`, and the
    /// bytes of each: a root inside the team, a bitwise reduction only of integers, both ranges
    /// in the heap.
    fn coll_args(
        &self,
        coll: Coll,
        team: Team,
        members: usize,
        (dest, src): (u64, u64),
        n: usize,
    ) -> Result<(CollArgs, (usize, usize))> {
        let op = coll.name();
        let bad = |detail: String| Error::InvalidArgument {
            me: self.me,
            op,
            detail,
        };
        let (dest_len, src_len) = coll.lens(n, members).ok_or(Error::SizeOverflow {
            me: self.me,
            op,
            count: n,
            size: members,
        })?;
        match coll {
            Coll::Broadcast { root } if root >= members => {
                return Err(bad(format!(
                    "root {root} is outside the team's {members} PEs"
                )));
            }
            Coll::Reduce(dt, red) | Coll::ReduceScatter(dt, red)
                if red.bitwise() && !dt.integer() =>
            {
                return Err(bad(format!(
                    "{} is not defined for {dt:?} (integer types only)",
                    red.name()
                )));
            }
            _ => {}
        }
        // A root beyond a C int was refused above (it is beyond the team).
        let (kind, arg, dtype) = coll.encode().ok_or_else(|| bad(format!("{coll:?}")))?;
        if dest_len > 0 {
            self.sym(op, dest, dest_len)?;
        }
        if src_len > 0 {
            self.sym(op, src, src_len)?;
        }
        let args = CollArgs {
            dest,
            src,
            n: n as u64,
            kind,
            team,
            arg,
            dtype,
        };
        Ok((args, (dest_len, src_len)))
    }

    /// Quiet of the host's operations (blocking).
    pub(crate) fn host_quiet(&self) -> Result<()> {
        let s = self.stream.clone();
        self.quiet_on_stream(&s)?;
        self.finish("quiet", None)
    }

    /// The barrier kernel on the internal stream, waited for.
    pub(crate) fn host_barrier_all(&self) -> Result<()> {
        let s = self.stream.clone();
        self.barrier_all_on_stream(&s)?;
        self.finish("barrier_all", None)
    }

    /// quiet or barrier_all on an application stream.
    ///
    /// # Safety
    /// `stream` is a live stream of this PE's context.
    pub(crate) unsafe fn on_raw_stream(&self, barrier: bool, stream: RawStream) -> Result<()> {
        let op = if barrier {
            "barrier_all_on_stream"
        } else {
            "quiet_on_stream"
        };
        let _live = self.live(op)?;
        let k = if barrier {
            &self.host.barrier_all
        } else {
            &self.host.quiet
        };
        // SAFETY: a kernel without parameters, on the caller's live stream.
        unsafe { self.launch(op, k, (1, 1), stream, ()) }
    }
}
