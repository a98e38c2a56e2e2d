//! Collectives on the host symmetric heap, per team: broadcast, fcollect, alltoall, reduce
//! (an allreduce: every member gets the result) and reducescatter, with NVSHMEM's semantics
//! (byte counts here; the C ABI and the Python package count elements). The GPU heap has the
//! same collectives as kernels (`kernels/include/pshmem/coll.cuh`, [`crate::gpu::Gpu`]).
//!
//! Every collective starts with a team sync, so that no member writes into a destination that
//! another member still reads from an earlier call, and ends with one (a barrier where it
//! wrote into peers: quiet, then sync), so that the results are complete everywhere on return
//! and every source may be reused. The data moves by the data path itself, so the same code
//! runs on the direct path, through the proxy and in mixed teams:
//!
//! - broadcast: the root puts its source into every member's destination (itself included);
//! - fcollect: every member puts its block into every member's destination at its own index;
//! - alltoall: block j of every member's source goes to member j, at the sender's index;
//! - reduce and reducescatter pull: every member gets the members' contributions (chunks of at
//!   most [`CHUNK`] bytes each) and folds them in member order, so that every member computes
//!   bit-identical results, floating-point ones included. A destination that overlaps the
//!   source (an in-place reduce) is written chunk by chunk after a team sync, once no member
//!   reads that chunk any more.

use pshmem_abi::{DType, RedOp};

use crate::{Error, Pshmem, Result, SymPtr, team::Team};

/// A collective of the host API by address ([`crate::addr::ByAddr::collective`]): on the GPU
/// heap run by the block forms of the device API (`kernels/include/pshmem/coll.cuh`) in the
/// runtime's `pshmem_k_coll`, on the host heap by the algorithms below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    /// The root member's `n` bytes into every member's destination.
    Broadcast {
        /// The root's number in the team.
        root: usize,
    },
    /// Every member's `n` bytes into every member's destination at its index.
    Fcollect,
    /// Block j (`n` bytes) of every member's source to member j, at the sender's index.
    Alltoall,
    /// Element-wise reduction of `n` elements into every member (an allreduce).
    Reduce(DType, RedOp),
    /// Member i gets the reduction of block i (`n` elements) of every member's source.
    ReduceScatter(DType, RedOp),
}

impl Coll {
    /// The operation's name (in errors).
    pub fn name(self) -> &'static str {
        match self {
            Coll::Broadcast { .. } => "broadcast",
            Coll::Fcollect => "fcollect",
            Coll::Alltoall => "alltoall",
            Coll::Reduce(..) => "reduce",
            Coll::ReduceScatter(..) => "reducescatter",
        }
    }

    /// The bytes of the destination and of the source of a call with count `n` (bytes, or
    /// elements for the reductions) over a team of `members`; `None` when they overflow.
    pub fn lens(self, n: usize, members: usize) -> Option<(usize, usize)> {
        let m = |a: usize, b: usize| a.checked_mul(b);
        Some(match self {
            Coll::Broadcast { .. } => (n, n),
            Coll::Fcollect => (m(n, members)?, n),
            Coll::Alltoall => (m(n, members)?, m(n, members)?),
            Coll::Reduce(dt, _) => (m(n, dt.size())?, m(n, dt.size())?),
            Coll::ReduceScatter(dt, _) => (m(n, dt.size())?, m(m(n, dt.size())?, members)?),
        })
    }

    /// (kind, arg, dtype) of `pshmem_k_coll` (`None`: a root beyond a C int).
    pub(crate) fn encode(self) -> Option<(i32, i32, i32)> {
        Some(match self {
            Coll::Broadcast { root } => (0, i32::try_from(root).ok()?, 0),
            Coll::Fcollect => (1, 0, 0),
            Coll::Alltoall => (2, 0, 0),
            Coll::Reduce(dt, op) => (3, i32::from(op.code()), i32::from(dt.code())),
            Coll::ReduceScatter(dt, op) => (4, i32::from(op.code()), i32::from(dt.code())),
        })
    }
}

/// Bytes of one member's contribution folded per step of a reduction.
pub const CHUNK: usize = 256 << 10;

/// A running reduction of one chunk: 16-bit floating types are folded in `f32` and rounded
/// once at the end (as the GPU kernels do), integers wrap.
enum Acc {
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

macro_rules! decode {
    ($bytes:expr, $t:ty) => {
        $bytes
            .chunks_exact(size_of::<$t>())
            .map(|c| <$t>::from_le_bytes(c.try_into().expect("element")))
            .collect::<Vec<$t>>()
    };
}

macro_rules! fold_int {
    ($acc:expr, $x:expr, $op:expr) => {
        for (a, b) in $acc.iter_mut().zip($x) {
            *a = match $op {
                RedOp::Sum => a.wrapping_add(b),
                RedOp::Prod => a.wrapping_mul(b),
                RedOp::Min => (*a).min(b),
                RedOp::Max => (*a).max(b),
                RedOp::And => *a & b,
                RedOp::Or => *a | b,
                RedOp::Xor => *a ^ b,
            }
        }
    };
}

macro_rules! fold_float {
    ($acc:expr, $x:expr, $op:expr) => {
        for (a, b) in $acc.iter_mut().zip($x) {
            *a = match $op {
                RedOp::Sum => *a + b,
                RedOp::Prod => *a * b,
                RedOp::Min => a.min(b),
                RedOp::Max => a.max(b),
                // Refused before any data moves (`check_reduce`).
                RedOp::And | RedOp::Or | RedOp::Xor => *a,
            }
        }
    };
}

impl Acc {
    /// The first contribution.
    fn new(dt: DType, bytes: &[u8]) -> Self {
        match dt {
            DType::I32 => Acc::I32(decode!(bytes, i32)),
            DType::U32 => Acc::U32(decode!(bytes, u32)),
            DType::I64 => Acc::I64(decode!(bytes, i64)),
            DType::U64 => Acc::U64(decode!(bytes, u64)),
            DType::F32 => Acc::F32(decode!(bytes, f32)),
            DType::F64 => Acc::F64(decode!(bytes, f64)),
            DType::F16 => Acc::F32(
                decode!(bytes, u16)
                    .into_iter()
                    .map(|h| half::f16::from_bits(h).to_f32())
                    .collect(),
            ),
            DType::BF16 => Acc::F32(
                decode!(bytes, u16)
                    .into_iter()
                    .map(|h| half::bf16::from_bits(h).to_f32())
                    .collect(),
            ),
        }
    }

    /// Folds the next member's contribution in.
    fn fold(&mut self, dt: DType, op: RedOp, bytes: &[u8]) {
        match (self, Acc::new(dt, bytes)) {
            (Acc::I32(a), Acc::I32(x)) => fold_int!(a, x, op),
            (Acc::U32(a), Acc::U32(x)) => fold_int!(a, x, op),
            (Acc::I64(a), Acc::I64(x)) => fold_int!(a, x, op),
            (Acc::U64(a), Acc::U64(x)) => fold_int!(a, x, op),
            (Acc::F32(a), Acc::F32(x)) => fold_float!(a, x, op),
            (Acc::F64(a), Acc::F64(x)) => fold_float!(a, x, op),
            _ => unreachable!("one element type per reduction"),
        }
    }

    /// The result as `dt`'s bytes.
    fn into_bytes(self, dt: DType) -> Vec<u8> {
        match self {
            Acc::I32(v) => v.into_iter().flat_map(i32::to_le_bytes).collect(),
            Acc::U32(v) => v.into_iter().flat_map(u32::to_le_bytes).collect(),
            Acc::I64(v) => v.into_iter().flat_map(i64::to_le_bytes).collect(),
            Acc::U64(v) => v.into_iter().flat_map(u64::to_le_bytes).collect(),
            Acc::F64(v) => v.into_iter().flat_map(f64::to_le_bytes).collect(),
            Acc::F32(v) => match dt {
                DType::F16 => v
                    .into_iter()
                    .flat_map(|x| half::f16::from_f32(x).to_bits().to_le_bytes())
                    .collect(),
                DType::BF16 => v
                    .into_iter()
                    .flat_map(|x| half::bf16::from_f32(x).to_bits().to_le_bytes())
                    .collect(),
                _ => v.into_iter().flat_map(f32::to_le_bytes).collect(),
            },
        }
    }
}

/// The reduction of `parts` (one slice per member, in member order) by `op`, as `dt`'s bytes:
/// what every member computes. Public so that tests can compute references the same way.
pub fn reduce_bytes(dt: DType, op: RedOp, parts: &[&[u8]]) -> Vec<u8> {
    let Some((first, rest)) = parts.split_first() else {
        return Vec::new();
    };
    let mut acc = Acc::new(dt, first);
    for p in rest {
        acc.fold(dt, op, p);
    }
    acc.into_bytes(dt)
}

/// Whether `[a, a + alen)` and `[b, b + blen)` share a byte.
fn overlap(a: SymPtr, alen: usize, b: SymPtr, blen: usize) -> bool {
    alen > 0 && blen > 0 && a.0 < b.0 + blen as u64 && b.0 < a.0 + alen as u64
}

impl Pshmem {
    fn check_reduce(&self, op: &'static str, dt: DType, red: RedOp) -> Result<()> {
        if red.bitwise() && !dt.integer() {
            return Err(Error::InvalidArgument {
                me: self.me,
                op,
                detail: format!(
                    "{} is not defined for {dt:?} (integer types only)",
                    red.name()
                ),
            });
        }
        Ok(())
    }

    /// Copies `nbytes` of the root member's `source` into every member's `dest` (the root's
    /// included). `root` is the root's number in `team`. Collective over the team.
    pub fn broadcast(
        &self,
        team: Team,
        dest: SymPtr,
        source: SymPtr,
        nbytes: usize,
        root: usize,
    ) -> Result<()> {
        let op = "broadcast";
        self.live(op)?;
        let t = self.team_slot(op, team)?;
        if root >= t.members.len() {
            return Err(Error::InvalidArgument {
                me: self.me,
                op,
                detail: format!("root {root} is outside the team's {} PEs", t.members.len()),
            });
        }
        self.team_sync(team)?;
        if t.my_index == root && nbytes > 0 {
            for k in 1..=t.members.len() {
                // Starting after this PE spreads the root's first puts over the members.
                let m = t.members[(root + k) % t.members.len()];
                self.put_nbi_sym(dest, source, nbytes, m)?;
            }
        }
        self.team_barrier(team)
    }

    /// Every member's `nbytes` of `source` into every member's `dest`, at offset
    /// `index × nbytes` for the member of that index. Collective over the team.
    pub fn fcollect(&self, team: Team, dest: SymPtr, source: SymPtr, nbytes: usize) -> Result<()> {
        let op = "fcollect";
        self.live(op)?;
        let t = self.team_slot(op, team)?;
        self.team_sync(team)?;
        if nbytes > 0 {
            let at = dest + t.my_index * nbytes;
            for k in 1..=t.members.len() {
                let m = t.members[(t.my_index + k) % t.members.len()];
                self.put_nbi_sym(at, source, nbytes, m)?;
            }
        }
        self.team_barrier(team)
    }

    /// Block j (`nbytes`) of every member's `source` into member j's `dest`, at offset
    /// `sender's index × nbytes`. Collective over the team.
    pub fn alltoall(&self, team: Team, dest: SymPtr, source: SymPtr, nbytes: usize) -> Result<()> {
        let op = "alltoall";
        self.live(op)?;
        let t = self.team_slot(op, team)?;
        self.team_sync(team)?;
        if nbytes > 0 {
            let n = t.members.len();
            for k in 1..=n {
                let j = (t.my_index + k) % n;
                self.put_nbi_sym(
                    dest + t.my_index * nbytes,
                    source + j * nbytes,
                    nbytes,
                    t.members[j],
                )?;
            }
        }
        self.team_barrier(team)
    }

    /// The element-wise reduction by `red` of every member's `nelems` elements of type `dt` at
    /// `source`, into every member's `dest` (an allreduce; `dest` may be `source`). Collective
    /// over the team.
    pub fn reduce(
        &self,
        team: Team,
        dt: DType,
        red: RedOp,
        dest: SymPtr,
        source: SymPtr,
        nelems: usize,
    ) -> Result<()> {
        self.reduce_impl("reduce", team, dt, red, dest, source, nelems, false)
    }

    /// Member i gets, in `dest` (`nelems` elements), the reduction of block i of every
    /// member's `source` (`n × nelems` elements). Collective over the team.
    pub fn reducescatter(
        &self,
        team: Team,
        dt: DType,
        red: RedOp,
        dest: SymPtr,
        source: SymPtr,
        nelems: usize,
    ) -> Result<()> {
        self.reduce_impl("reducescatter", team, dt, red, dest, source, nelems, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_impl(
        &self,
        op: &'static str,
        team: Team,
        dt: DType,
        red: RedOp,
        dest: SymPtr,
        source: SymPtr,
        nelems: usize,
        scatter: bool,
    ) -> Result<()> {
        self.live(op)?;
        self.check_reduce(op, dt, red)?;
        let t = self.team_slot(op, team)?;
        let n = t.members.len();
        let overflow = Error::SizeOverflow {
            me: self.me,
            op,
            count: nelems,
            size: dt.size(),
        };
        let bytes = nelems.checked_mul(dt.size()).ok_or(overflow)?;
        let block = if scatter {
            source + t.my_index * bytes
        } else {
            source
        };
        let src_len = if scatter { n * bytes } else { bytes };
        let in_place = overlap(dest, bytes, source, src_len);
        self.team_sync(team)?;
        let step = CHUNK / dt.size() * dt.size();
        let mut parts = vec![vec![0u8; step.min(bytes)]; n];
        let mut at = 0;
        while at < bytes {
            let len = step.min(bytes - at);
            for (j, &m) in t.members.iter().enumerate() {
                self.get(&mut parts[j][..len], block + at, m)?;
            }
            let views: Vec<&[u8]> = parts.iter().map(|p| &p[..len]).collect();
            let out = reduce_bytes(dt, red, &views);
            if in_place {
                // Every member has read this chunk of every source before it is overwritten.
                self.team_sync(team)?;
            }
            self.local_copy_in(dest + at, &out)?;
            at += len;
        }
        // No member returns (and reuses its source) before every member has read it.
        self.team_sync(team)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le<T: Copy, const N: usize>(v: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    #[test]
    fn integer_reductions_wrap_and_fold_in_member_order() {
        let a = le(&[i32::MAX, 3, -4], i32::to_le_bytes);
        let b = le(&[1, 5, 6], i32::to_le_bytes);
        let sum = reduce_bytes(DType::I32, RedOp::Sum, &[&a, &b]);
        assert_eq!(sum, le(&[i32::MIN, 8, 2], i32::to_le_bytes));
        let min = reduce_bytes(DType::I32, RedOp::Min, &[&a, &b]);
        assert_eq!(min, le(&[1, 3, -4], i32::to_le_bytes));
        let x = reduce_bytes(
            DType::U64,
            RedOp::Xor,
            &[
                &le(&[0b1100u64], u64::to_le_bytes),
                &le(&[0b1010u64], u64::to_le_bytes),
            ],
        );
        assert_eq!(x, le(&[0b0110u64], u64::to_le_bytes));
    }

    #[test]
    fn half_types_fold_in_f32_and_round_once() {
        // 2048 + 1 + 1 in f16 step by step stays 2048 (the spacing there is 2); folded in f32
        // and rounded once it is 2050.
        let h = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes().to_vec();
        let out = reduce_bytes(DType::F16, RedOp::Sum, &[&h(2048.0), &h(1.0), &h(1.0)]);
        assert_eq!(out, h(2050.0));
        let b = |x: f32| half::bf16::from_f32(x).to_bits().to_le_bytes().to_vec();
        let out = reduce_bytes(DType::BF16, RedOp::Max, &[&b(-1.0), &b(3.5), &b(2.0)]);
        assert_eq!(out, b(3.5));
    }

    #[test]
    fn overlap_is_exact_at_the_edges() {
        assert!(overlap(SymPtr(100), 8, SymPtr(107), 8));
        assert!(!overlap(SymPtr(100), 8, SymPtr(108), 8));
        assert!(!overlap(SymPtr(100), 0, SymPtr(100), 8));
    }
}
