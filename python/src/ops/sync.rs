//! Ordering, synchronization and collectives.

use super::*;

/// Completes this PE's operations: the host's now; the GPU's on `stream` when the GPU part is
/// up (blocking on the runtime's stream without one).
#[pyfunction]
#[pyo3(signature = (stream=None))]
pub(super) fn quiet(py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
    order(py, false, stream)
}

/// Orders this PE's operations to each PE (on the GPU: a quiet on `stream`, the simplest
/// correct fence of operations that each run in their own kernel).
#[pyfunction]
#[pyo3(signature = (stream=None))]
pub(super) fn fence(py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
    order(py, true, stream)
}

/// quiet, or (`fence`) fence, of the host's operations; then a quiet of the GPU's.
fn order(py: Python<'_>, fence: bool, stream: Option<u64>) -> PyResult<()> {
    let s = state()?;
    let st = stream_of(stream);
    py.detach(|| s.by_addr().quiet(fence, st)).map_err(to_py)
}

/// A barrier (`barrier`: quiet first) or sync over `team`. With the GPU part up: on `stream`
/// (blocking on the runtime's stream without one), after a quiet of the host's operations;
/// otherwise on the host, blocking.
#[pyfunction]
#[pyo3(signature = (team, barrier, stream=None))]
pub(super) fn team_sync(
    py: Python<'_>,
    team: Team,
    barrier: bool,
    stream: Option<u64>,
) -> PyResult<()> {
    let s = state()?;
    let st = stream_of(stream);
    py.detach(|| s.by_addr().sync(team, barrier, st))
        .map_err(to_py)
}

/// A collective over `team`: `kind` one of broadcast, fcollect, alltoall, reduce,
/// reducescatter; `n` bytes (elements for the reductions, with `dtype` and `red` their
/// PSHMEM_DT_* and PSHMEM_RED_* codes); `root` the team index of broadcast's root. GPU heap:
/// on `stream` (blocking without one); host heap: blocking.
#[pyfunction]
#[pyo3(signature = (kind, team, dest, src, n, root=0, dtype=0, red=0, stream=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn collective(
    py: Python<'_>,
    kind: &str,
    team: Team,
    dest: u64,
    src: u64,
    n: usize,
    root: usize,
    dtype: u8,
    red: u8,
    stream: Option<u64>,
) -> PyResult<()> {
    let s = state()?;
    let me = s.my_pe();
    let reduction = || -> PyResult<(DType, RedOp)> {
        match (DType::from_code(dtype), RedOp::from_code(red)) {
            (Some(d), Some(o)) => Ok((d, o)),
            _ => Err(invalid(
                me,
                kind,
                format!("no reduction type {dtype} or operator {red}"),
            )),
        }
    };
    let coll = match kind {
        "broadcast" => Coll::Broadcast { root },
        "fcollect" => Coll::Fcollect,
        "alltoall" => Coll::Alltoall,
        "reduce" => {
            let (d, o) = reduction()?;
            Coll::Reduce(d, o)
        }
        "reducescatter" => {
            let (d, o) = reduction()?;
            Coll::ReduceScatter(d, o)
        }
        _ => return Err(invalid(me, "collective", format!("no collective {kind:?}"))),
    };
    let st = stream_of(stream);
    py.detach(|| s.by_addr().collective(coll, team, (dest, src), n, st))
        .map_err(to_py)
}
