//! Collectives on the host heap, every one checked against a reference that each PE computes
//! for itself from the members' deterministic inputs: broadcast (every root), fcollect,
//! alltoall, reduce (every element type × operator, in place too) and reducescatter, on the
//! world team, an even/odd split made in one call with different triples, a strided team and
//! one-PE teams, at sizes 0, 1, odd, and over 1 MiB. Prints `OK coll ...` lines and a `DIGEST`.

use pshmem::{
    DType, Pshmem, RedOp, SymPtr,
    coll::reduce_bytes,
    team::{TEAM_INVALID, TEAM_WORLD, Team},
};

use crate::runtime::e;

type R<T> = Result<T, String>;

/// Member `pe`'s input of `nelems` elements for `op` (small values, so that products and
/// 16-bit floats stay exact; bit patterns for the bitwise operators).
pub fn input(dt: DType, op: RedOp, pe: usize, nelems: usize, salt: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(nelems * dt.size());
    for i in 0..nelems {
        let h = (pe * 7919 + i * 31 + salt * 131) % 97;
        let v: i64 = match op {
            RedOp::Prod => 1 + ((pe + i + salt) % 2) as i64,
            RedOp::And | RedOp::Or | RedOp::Xor => ((h as i64) * 0x0101_0101) ^ ((pe as i64) << 3),
            _ => h as i64 - 40,
        };
        match dt {
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::U32 => out.extend((v as u32).to_le_bytes()),
            DType::I64 => out.extend(v.to_le_bytes()),
            DType::U64 => out.extend((v as u64).to_le_bytes()),
            DType::F32 => out.extend((v as f32 / 4.0).to_le_bytes()),
            DType::F64 => out.extend((v as f64 / 4.0).to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f32(v as f32 / 4.0).to_bits().to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f32(v as f32 / 4.0).to_bits().to_le_bytes()),
        }
    }
    out
}

fn bytes_of(pe: usize, n: usize, salt: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (pe as u8).wrapping_mul(37) ^ (i as u8).wrapping_add(salt as u8) ^ (i >> 8) as u8)
        .collect()
}

struct Ctx<'a> {
    s: &'a Pshmem,
    team: Team,
    members: Vec<usize>,
    me: usize,
    a: SymPtr,
    b: SymPtr,
    cap: usize,
    digest: u64,
}

impl Ctx<'_> {
    fn fill(&self, at: SymPtr, data: &[u8]) -> R<()> {
        self.s.local_copy_in(at, data).map_err(e)
    }

    fn read(&self, at: SymPtr, len: usize) -> R<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.s.local_copy_out(at, &mut v).map_err(e)?;
        Ok(v)
    }

    fn check(&mut self, what: &str, got: &[u8], want: &[u8]) -> R<()> {
        if got != want {
            let at = got.iter().zip(want).position(|(x, y)| x != y).unwrap_or(0);
            return Err(format!(
                "{what} (team {} of {} PEs, member {}): {} bytes differ from byte {at}",
                self.team,
                self.members.len(),
                self.me,
                got.iter().zip(want).filter(|(x, y)| x != y).count()
            ));
        }
        for x in got {
            self.digest ^= u64::from(*x);
            self.digest = self.digest.wrapping_mul(0x100_0000_01b3);
        }
        Ok(())
    }

    fn bytes_colls(&mut self, sizes: &[usize], salt: usize) -> R<()> {
        let n = self.members.len();
        let cap = self.cap;
        for &nb in sizes.iter().filter(|&&nb| nb * n <= cap) {
            for root in 0..n {
                let mine = bytes_of(self.members[self.me], nb, salt + root);
                self.fill(self.a, &mine)?;
                self.fill(self.b, &vec![0xee; nb])?;
                self.s
                    .broadcast(self.team, self.b, self.a, nb, root)
                    .map_err(e)?;
                let want = bytes_of(self.members[root], nb, salt + root);
                let got = self.read(self.b, nb)?;
                self.check(&format!("broadcast {nb} B from {root}"), &got, &want)?;
            }
            self.fill(self.a, &bytes_of(self.members[self.me], nb, salt))?;
            self.s.fcollect(self.team, self.b, self.a, nb).map_err(e)?;
            let want: Vec<u8> = (0..n)
                .flat_map(|j| bytes_of(self.members[j], nb, salt))
                .collect();
            let got = self.read(self.b, nb * n)?;
            self.check(&format!("fcollect {nb} B"), &got, &want)?;
            // Block j of member p's source: bytes_of(p, nb, salt + j).
            let src: Vec<u8> = (0..n)
                .flat_map(|j| bytes_of(self.members[self.me], nb, salt + j))
                .collect();
            self.fill(self.a, &src)?;
            self.s.alltoall(self.team, self.b, self.a, nb).map_err(e)?;
            let want: Vec<u8> = (0..n)
                .flat_map(|p| bytes_of(self.members[p], nb, salt + self.me))
                .collect();
            let got = self.read(self.b, nb * n)?;
            self.check(&format!("alltoall {nb} B"), &got, &want)?;
        }
        println!(
            "OK coll bytes team={} n={n} sizes={}",
            self.team,
            sizes.len()
        );
        Ok(())
    }

    fn reduction(&mut self, dt: DType, op: RedOp, nelems: usize, salt: usize) -> R<()> {
        let n = self.members.len();
        let bytes = nelems * dt.size();
        if bytes * n > self.cap {
            return Ok(());
        }
        // reduce, out of place then in place.
        let parts: Vec<Vec<u8>> = self
            .members
            .iter()
            .map(|&p| input(dt, op, p, nelems, salt))
            .collect();
        let views: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let want = reduce_bytes(dt, op, &views);
        self.fill(self.a, &parts[self.me])?;
        self.s
            .reduce(self.team, dt, op, self.b, self.a, nelems)
            .map_err(e)?;
        let got = self.read(self.b, bytes)?;
        self.check(
            &format!("{dt:?} {} reduce of {nelems}", op.name()),
            &got,
            &want,
        )?;
        self.s
            .reduce(self.team, dt, op, self.a, self.a, nelems)
            .map_err(e)?;
        let got = self.read(self.a, bytes)?;
        self.check(
            &format!("{dt:?} {} in-place reduce", op.name()),
            &got,
            &want,
        )?;
        // reducescatter: member p's source is n blocks of nelems.
        let srcs: Vec<Vec<u8>> = self
            .members
            .iter()
            .map(|&p| input(dt, op, p, nelems * n, salt + 1))
            .collect();
        let mine: Vec<&[u8]> = srcs
            .iter()
            .map(|v| &v[self.me * bytes..(self.me + 1) * bytes])
            .collect();
        let want = reduce_bytes(dt, op, &mine);
        self.fill(self.a, &srcs[self.me])?;
        self.s
            .reducescatter(self.team, dt, op, self.b, self.a, nelems)
            .map_err(e)?;
        let got = self.read(self.b, bytes)?;
        self.check(
            &format!("{dt:?} {} reducescatter of {nelems}", op.name()),
            &got,
            &want,
        )
    }

    fn reductions(&mut self, big: bool) -> R<()> {
        let mut count = 0;
        for dt in DType::ALL {
            for op in RedOp::ALL {
                if op.bitwise() && !dt.integer() {
                    continue;
                }
                for nelems in [0, 1, 7, 1001] {
                    self.reduction(dt, op, nelems, count)?;
                    count += 1;
                }
            }
        }
        if big {
            // Over 1 MiB per member: several chunks of the pull.
            for (dt, op) in [
                (DType::I32, RedOp::Sum),
                (DType::F32, RedOp::Sum),
                (DType::BF16, RedOp::Max),
                (DType::U64, RedOp::Xor),
            ] {
                self.reduction(dt, op, (1 << 20) / dt.size() + 3, count)?;
                count += 1;
            }
        }
        println!(
            "OK coll reductions team={} n={} cases={count}",
            self.team,
            self.members.len()
        );
        Ok(())
    }
}

/// Bad arguments refused before anything moves: a bitwise reduction of a floating type, and a
/// strided split whose one triple (the same on every PE) names PEs outside the parent.
fn refusals(s: &Pshmem, (a, b): (SymPtr, SymPtr), n: usize) -> R<()> {
    match s.reduce(TEAM_WORLD, DType::F32, RedOp::Xor, b, a, 4) {
        Err(err) if crate::runtime::kind(&err) == "InvalidArgument" => {}
        other => return Err(format!("a float xor reduce gave {other:?}")),
    }
    // The same out-of-range triple on every PE is a bad argument, not a mismatch (issue 41).
    match s.team_split_strided(TEAM_WORLD, 0, 1, n as i32 + 1) {
        Err(err) if crate::runtime::kind(&err) == "InvalidArgument" => {}
        other => return Err(format!("an out-of-range split gave {other:?}")),
    }
    Ok(())
}

/// Every collective on every team shape; `big` adds the sizes over 1 MiB.
pub fn run(s: &Pshmem, big: bool) -> R<()> {
    let me = s.my_pe();
    let n = s.n_pes();
    let cap = 24 << 20;
    let a = s.malloc(cap).map_err(e)?;
    let b = s.malloc(cap).map_err(e)?;
    // Evens and odds in one call, each PE passing its own team's triple.
    let parity = me % 2;
    let halves = s
        .team_split_strided(
            TEAM_WORLD,
            parity as i32,
            2,
            (n - parity).div_ceil(2) as i32,
        )
        .map_err(e)?;
    // A strided team of every third PE from 1 (others outside it), and one-PE teams.
    let third = s
        .team_split_strided(TEAM_WORLD, 1, 3, (n.saturating_sub(1)).div_ceil(3) as i32)
        .map_err(e)?;
    let single = s
        .team_split_strided(TEAM_WORLD, me as i32, 1, 1)
        .map_err(e)?;
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let big_sizes = [0usize, 1, 7, 4099, (1 << 20) + 5];
    let small_sizes = [0usize, 1, 7, 4099];
    for (team, full) in [
        (TEAM_WORLD, true),
        (halves, false),
        (third, false),
        (single, false),
    ] {
        if team == TEAM_INVALID {
            // Outside this split (every third PE from 1): nothing to run.
            continue;
        }
        let members: Vec<usize> = (0..s.team_n_pes(team))
            .map(|i| s.team_translate_pe(team, i, TEAM_WORLD) as usize)
            .collect();
        let mut c = Ctx {
            s,
            team,
            members,
            me: s.team_my_pe(team) as usize,
            a,
            b,
            cap,
            digest,
        };
        c.bytes_colls(
            if full && big {
                &big_sizes
            } else {
                &small_sizes
            },
            team as usize,
        )?;
        if full {
            c.reductions(big)?;
        } else {
            c.reduction(DType::I64, RedOp::Sum, 513, 3)?;
            c.reduction(DType::F16, RedOp::Min, 9, 4)?;
            println!("OK coll reductions team={team} n={}", c.members.len());
        }
        digest = c.digest;
    }
    for t in [halves, third, single] {
        if t != TEAM_INVALID {
            s.team_destroy(t).map_err(e)?;
        }
    }
    refusals(s, (a, b), n)?;
    s.free(b).map_err(e)?;
    s.free(a).map_err(e)?;
    println!("OK coll all");
    println!("DIGEST rank={me} value={digest:016x}");
    Ok(())
}
