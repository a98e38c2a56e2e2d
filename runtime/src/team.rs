//! Teams: ordered subsets of the job's PEs, named by a small integer that is the same on every
//! member (so that a handle can be passed to kernels and index a device table).
//!
//! Four teams exist from init, with NVSHMEM's handles: the world (0), the PEs sharing this
//! PE's memory domain (1: the same host, or only this PE when the direct path is off), the PEs
//! of this host (2), and the PEs of every host with this PE's local rank (3). Others are made by
//! [`Pshmem::team_split_strided`], collective over the parent team, where PEs may pass different
//! triples (disjoint sub-teams in one call, as DeepEP does).
//!
//! The exchanges of team operations (split, sync) run among the members only, on the host
//! symmetric heap: a region allocated at init holds, per team slot, an arrival counter and two
//! record buffers, each with its arrival counter. A member puts its record into every member's
//! buffer of this generation's parity with a put-with-signal that adds 1 to that buffer's
//! counter (the signal lands after the record), then waits for the counter to reach
//! (generation / 2 + 1) × size. Two buffers, alternating by generation, keep a fast member's
//! next exchange from overwriting records a slow member has not read, and from being counted
//! as this one's: it cannot start the one after next before the slow member has contributed
//! to the next. (One counter for both let a fast member's next arrival stand in for a slow
//! member's missing one: the slow member's record was read before it landed.) A member zeroes
//! its own counter when the team is destroyed (every member has received every contribution of
//! every exchange it took part in by then), so a reused slot starts from zero.

use crate::{Cmp, Error, Pshmem, Result, SignalOp, SymPtr, lock};

/// A team handle (NVSHMEM's `nvshmem_team_t`).
pub type Team = i32;
/// No team (what a PE outside a split's triple gets).
pub const TEAM_INVALID: Team = -1;
/// Every PE.
pub const TEAM_WORLD: Team = 0;
/// The PEs whose memory this PE maps (same host; only itself under PSHMEM_DISABLE_P2P).
pub const TEAM_SHARED: Team = 1;
/// The PEs of this host.
pub const TEAM_NODE: Team = 2;
/// The PEs with this PE's local rank, one per host.
pub const TEAM_SAME_MYPE_NODE: Team = 3;
/// Teams that exist from init.
pub const PREDEFINED: usize = 4;

/// Bytes of one exchanged record: (start, stride, size, free slots bitmap).
const REC: u64 = 32;
/// Bytes before a slot's record buffers (their two counters, on a cache line of their own).
const HEAD: u64 = 64;

/// One team as this PE knows it.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// World PE numbers of the members, in team order.
    pub members: Vec<usize>,
    /// This PE's index among them.
    pub my_index: usize,
    /// Exchanges done (the same on every member).
    round: u64,
}

/// Every team slot of this PE, and where their exchanges happen.
#[derive(Debug)]
pub(crate) struct Teams {
    pub slots: Vec<Option<Slot>>,
    area: SymPtr,
    n: usize,
}

impl Teams {
    /// Bytes of the exchange area for `max` slots of an `n`-PE job.
    pub fn area_bytes(max: usize, n: usize) -> u64 {
        max as u64 * Self::slot_bytes(n)
    }

    fn slot_bytes(n: usize) -> u64 {
        HEAD + 2 * n as u64 * REC
    }

    /// The predefined teams of PE `me`, given each PE's host id and whether this PE maps its
    /// same-host peers.
    pub fn new(area: SymPtr, max: usize, me: usize, hosts: &[&str], direct: bool) -> Self {
        let n = hosts.len();
        let same_host: Vec<usize> = (0..n).filter(|&r| hosts[r] == hosts[me]).collect();
        let local_index = |r: usize| (0..r).filter(|&q| hosts[q] == hosts[r]).count();
        let same_local: Vec<usize> = (0..n)
            .filter(|&r| local_index(r) == local_index(me))
            .collect();
        let shared = if direct { same_host.clone() } else { vec![me] };
        let slot = |members: Vec<usize>| {
            let my_index = members.iter().position(|&m| m == me).expect("a member");
            Some(Slot {
                members,
                my_index,
                round: 0,
            })
        };
        let mut slots = vec![None; max];
        slots[TEAM_WORLD as usize] = slot((0..n).collect());
        slots[TEAM_SHARED as usize] = slot(shared);
        slots[TEAM_NODE as usize] = slot(same_host);
        slots[TEAM_SAME_MYPE_NODE as usize] = slot(same_local);
        Self { slots, area, n }
    }

    fn counter(&self, slot: usize) -> SymPtr {
        self.area + (slot as u64 * Self::slot_bytes(self.n)) as usize
    }

    fn record(&self, slot: usize, buf: u64, index: usize) -> SymPtr {
        self.counter(slot) + (HEAD + (buf * self.n as u64 + index as u64) * REC) as usize
    }

    /// Slots free here, as a bitmap of the first 64.
    fn free_bitmap(&self) -> u64 {
        self.slots
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, s)| s.is_none())
            .fold(0, |m, (i, _)| m | 1 << i)
    }
}

impl Pshmem {
    pub(crate) fn team_slot(&self, op: &'static str, team: Team) -> Result<Slot> {
        let t = lock(&self.teams);
        usize::try_from(team)
            .ok()
            .and_then(|i| t.slots.get(i).cloned().flatten())
            .ok_or(Error::InvalidTeam {
                me: self.me,
                op,
                team,
            })
    }

    /// This PE's number in `team`, or -1 when it is not a member (or the team does not exist).
    pub fn team_my_pe(&self, team: Team) -> i32 {
        self.team_slot("team_my_pe", team)
            .map_or(-1, |s| s.my_index as i32)
    }

    /// The number of PEs in `team`, or -1 when the team does not exist here.
    pub fn team_n_pes(&self, team: Team) -> i32 {
        self.team_slot("team_n_pes", team)
            .map_or(-1, |s| s.members.len() as i32)
    }

    /// The world PE numbers of `team`'s members, in team order.
    pub fn team_members(&self, team: Team) -> Result<Vec<usize>> {
        self.team_slot("team_members", team).map(|s| s.members)
    }

    /// PE `pe` of `src` as numbered in `dest`, or -1 when it is not a member of both.
    pub fn team_translate_pe(&self, src: Team, pe: i32, dest: Team) -> i32 {
        let (Ok(s), Ok(d)) = (
            self.team_slot("team_translate_pe", src),
            self.team_slot("team_translate_pe", dest),
        ) else {
            return -1;
        };
        usize::try_from(pe)
            .ok()
            .and_then(|i| s.members.get(i))
            .and_then(|w| d.members.iter().position(|m| m == w))
            .map_or(-1, |i| i as i32)
    }

    /// Puts `record` into every member's buffer and returns every member's, in team order.
    /// Collective over the team's members.
    fn team_exchange(
        &self,
        op: &'static str,
        team: Team,
        record: [u64; 4],
    ) -> Result<Vec<[u64; 4]>> {
        let (members, my_index, round, counter, mine) = {
            let t = lock(&self.teams);
            let s = usize::try_from(team)
                .ok()
                .and_then(|i| t.slots.get(i).cloned().flatten())
                .ok_or(Error::InvalidTeam {
                    me: self.me,
                    op,
                    team,
                })?;
            let slot = team as usize;
            let buf = s.round % 2;
            (
                s.members.clone(),
                s.my_index,
                s.round,
                t.counter(slot) + (buf * 8) as usize,
                (0..s.members.len())
                    .map(|i| t.record(slot, buf, i))
                    .collect::<Vec<_>>(),
            )
        };
        let bytes: Vec<u8> = record.iter().flat_map(|x| x.to_le_bytes()).collect();
        for &pe in &members {
            self.put_signal(mine[my_index], &bytes, counter, 1, SignalOp::Add, pe)?;
        }
        // One arrival counter per buffer: a member that finished this exchange may already add
        // its next one (other buffer), but not the one after (it needs this PE's next first),
        // so each counter counts exactly the exchanges of its buffer.
        let want = (round / 2 + 1) * members.len() as u64;
        self.wait_until::<u64>(counter, Cmp::Ge, want)?;
        let mut out = Vec::with_capacity(members.len());
        for at in &mine {
            let mut b = [0u8; REC as usize];
            self.local_copy_out(*at, &mut b)?;
            let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8"));
            out.push([w(0), w(1), w(2), w(3)]);
        }
        if let Some(Some(s)) = lock(&self.teams).slots.get_mut(team as usize) {
            s.round += 1;
        }
        Ok(out)
    }

    /// Waits until every member of `team` has called it (no operation is completed: see
    /// [`Pshmem::team_barrier`]). Collective over the team's members.
    pub fn team_sync(&self, team: Team) -> Result<()> {
        self.live("team_sync")?;
        self.team_exchange("team_sync", team, [0; 4]).map(|_| ())
    }

    /// Completes this PE's operations, then [`Pshmem::team_sync`]. Collective over the team.
    pub fn team_barrier(&self, team: Team) -> Result<()> {
        self.live("team_barrier")?;
        self.quiet()?;
        self.team_exchange("team_barrier", team, [0; 4]).map(|_| ())
    }

    /// Splits the parent's members into a 2-D grid numbered row by row, `xrange` per row (all
    /// of them when `xrange` exceeds the team): returns this PE's row team (x axis) and column
    /// team (y axis), as NVSHMEM's `team_split_2d`. Collective over the parent's members.
    pub fn team_split_2d(&self, parent: Team, xrange: i32) -> Result<(Team, Team)> {
        let op = "team_split_2d";
        self.live(op)?;
        let p = self.team_slot(op, parent)?;
        let n = p.members.len() as i32;
        if xrange < 1 {
            return Err(Error::InvalidArgument {
                me: self.me,
                op,
                detail: format!("xrange {xrange} must be at least 1"),
            });
        }
        let x = xrange.min(n);
        let me = p.my_index as i32;
        let row = me / x * x;
        let xaxis = self.team_split_strided(parent, row, 1, x.min(n - row))?;
        let col = me % x;
        let yaxis = self.team_split_strided(parent, col, x, (n - col + x - 1) / x)?;
        Ok((xaxis, yaxis))
    }

    /// Makes a team of the parent's PEs `start`, `start + stride`, … (`size` of them, in the
    /// parent's numbering). Collective over the parent's members, each of which may pass a
    /// different triple (its own sub-team's): every PE named by a triple must pass that same
    /// triple. Returns [`TEAM_INVALID`] on a PE outside its triple (a `size` of 0 included).
    /// The new team's handle is the same on all its members.
    pub fn team_split_strided(
        &self,
        parent: Team,
        start: i32,
        stride: i32,
        size: i32,
    ) -> Result<Team> {
        let op = "team_split_strided";
        self.live(op)?;
        let p = self.team_slot(op, parent)?;
        let free = lock(&self.teams).free_bitmap();
        let rec = [
            start as i64 as u64,
            stride as i64 as u64,
            size as i64 as u64,
            free,
        ];
        let all = self.team_exchange(op, parent, rec)?;
        let mut teams =
            sub_teams(&all, p.members.len() as i64).map_err(
                |(detail, mismatch)| match mismatch {
                    true => Error::CollectiveMismatch {
                        me: self.me,
                        op,
                        detail,
                    },
                    false => Error::InvalidArgument {
                        me: self.me,
                        op,
                        detail,
                    },
                },
            )?;
        // Slots: for each new team in order of its first PE, the lowest slot free on all its
        // members and not given to an earlier team of this split.
        teams.sort_by_key(|(idx, _)| idx[0]);
        let mut taken = 0u64;
        let mut mine = TEAM_INVALID;
        for (idx, _) in &teams {
            let free = idx.iter().fold(!taken, |m, &j| m & all[j][3]);
            if free == 0 {
                return Err(Error::TeamsExhausted {
                    me: self.me,
                    op,
                    max: lock(&self.teams).slots.len().min(64),
                });
            }
            let slot = free.trailing_zeros() as usize;
            taken |= 1 << slot;
            let my_parent_index = p.my_index;
            if let Some(k) = idx.iter().position(|&j| j == my_parent_index) {
                let members: Vec<usize> = idx.iter().map(|&j| p.members[j]).collect();
                let mut t = lock(&self.teams);
                t.slots[slot] = Some(Slot {
                    members,
                    my_index: k,
                    round: 0,
                });
                mine = slot as Team;
            }
        }
        if mine != TEAM_INVALID
            && let Some(g) = self.gpu.get()
        {
            let s = self.team_slot(op, mine)?;
            g.set_team(mine, &s.members, s.my_index)?;
        }
        Ok(mine)
    }

    /// Destroys a team made by a split (collective over its members; predefined teams cannot
    /// be destroyed). Its handle may be given to a later split.
    pub fn team_destroy(&self, team: Team) -> Result<()> {
        let op = "team_destroy";
        self.live(op)?;
        if (0..PREDEFINED as Team).contains(&team) {
            return Err(Error::InvalidTeam {
                me: self.me,
                op,
                team,
            });
        }
        self.team_slot(op, team)?;
        // Every member has received every contribution of the exchanges it took part in.
        self.team_exchange(op, team, [0; 4])?;
        let counter = {
            let mut t = lock(&self.teams);
            t.slots[team as usize] = None;
            t.counter(team as usize)
        };
        for c in [counter, counter + 8] {
            self.mem
                .store(c.offset(), 0, 8)
                .map_err(|e| self.mem_err(op, self.me, e))?;
        }
        if let Some(g) = self.gpu.get() {
            g.clear_team(team)?;
        }
        Ok(())
    }
}

/// A sub-team of a split: its parent indices and the triple (with free slots) that named it.
type SubTeam = (Vec<usize>, [u64; 4]);

/// The sub-teams a strided split's triples name, from every parent PE's `[start, stride, size,
/// free slots]`; or what is wrong and whether it is a disagreement between PEs (`true`) rather
/// than a bad argument on all of them.
fn sub_teams(all: &[[u64; 4]], psize: i64) -> std::result::Result<Vec<SubTeam>, (String, bool)> {
    // The parent indices a triple names, or None when it names PEs outside the parent.
    let named = |r: &[u64; 4]| -> Option<Vec<usize>> {
        let (s, d, k) = (r[0] as i64, r[1] as i64, r[2] as i64);
        if k == 0 {
            return Some(Vec::new());
        }
        if k < 0 || s < 0 || d < 1 || s + (k - 1) * d >= psize {
            return None;
        }
        Some((0..k).map(|i| (s + i * d) as usize).collect())
    };
    // The same triple everywhere, naming PEs outside the parent: a bad argument, not a
    // disagreement between PEs.
    if all.iter().all(|r| r[..3] == all[0][..3]) && named(&all[0]).is_none() {
        let r = &all[0];
        let detail = format!(
            "start {} stride {} size {} name PEs outside the parent's {psize}",
            r[0] as i64, r[1] as i64, r[2] as i64
        );
        return Err((detail, false));
    }
    let mut teams: Vec<SubTeam> = Vec::new();
    let mut problems = Vec::new();
    for (i, r) in all.iter().enumerate() {
        match named(r) {
            None => problems.push(format!(
                "parent PE {i} passed start {} stride {} size {}, outside the parent's {psize} PEs",
                r[0] as i64, r[1] as i64, r[2] as i64
            )),
            Some(idx) if idx.is_empty() => {}
            Some(idx) => {
                if !idx.contains(&i) {
                    continue;
                }
                if !teams.iter().any(|(t, _)| *t == idx) {
                    teams.push((idx, *r));
                }
            }
        }
    }
    // Every PE named by a triple must have passed it.
    for (idx, r) in &teams {
        for &j in idx {
            if all[j][..3] != r[..3] {
                problems.push(format!(
                    "parent PE {j} is named by triple ({}, {}, {}) but passed ({}, {}, {})",
                    r[0] as i64,
                    r[1] as i64,
                    r[2] as i64,
                    all[j][0] as i64,
                    all[j][1] as i64,
                    all[j][2] as i64
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err((problems.join("; "), true));
    }
    Ok(teams)
}
