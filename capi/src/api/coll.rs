//! Collectives on either heap, and their on-stream forms.

use super::*;

/// A collective of the C API: on the GPU heap as kernels (on `stream`, else waited for), on
/// the host heap by the host algorithms. `n` counts bytes, or elements for the reductions.
fn collective(
    coll: Coll,
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    stream: Option<CStream>,
) -> R<()> {
    let g = global_for(&stream)?;
    if stream.is_none() && g.on_demand() {
        ensure_gpu(&g)?;
    }
    let (d, s) = (dest as u64, src as u64);
    Ok(g.api()
        .collective(coll, team, (d, s), n, stream.map(stream_arg))?)
}

fn red_args(dtype: c_int, op: c_int) -> R<(DType, RedOp)> {
    let dt = u8::try_from(dtype).ok().and_then(DType::from_code);
    let red = u8::try_from(op).ok().and_then(RedOp::from_code);
    match (dt, red) {
        (Some(d), Some(o)) => Ok((d, o)),
        _ => Err(Fail::new(
            code::INVALID_ARG,
            format!("no reduction type {dtype} or operator {op} (PSHMEM_DT_*, PSHMEM_RED_*)"),
        )),
    }
}

fn root_arg(root: c_int) -> R<usize> {
    usize::try_from(root).map_err(|_| Fail::new(code::INVALID_ARG, format!("root {root}")))
}

/// `int pshmem_broadcastmem(pshmem_team_t, void *dest, const void *src, size_t, int root)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_broadcastmem(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    root: c_int,
) -> c_int {
    status("pshmem_broadcastmem", || {
        let root = root_arg(root)?;
        collective(Coll::Broadcast { root }, team, dest, src, nbytes, None)
    })
}

/// `int pshmem_fcollectmem(pshmem_team_t, void *dest, const void *src, size_t nbytes)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_fcollectmem(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    status("pshmem_fcollectmem", || {
        collective(Coll::Fcollect, team, dest, src, nbytes, None)
    })
}

/// `int pshmem_reduce(pshmem_team_t, int dtype, int op, void *dest, const void *src, size_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_reduce(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
) -> c_int {
    status("pshmem_reduce", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(Coll::Reduce(dt, red), team, dest, src, nelems, None)
    })
}

/// `int pshmem_reducescatter(pshmem_team_t, int dtype, int op, void *dest, const void *src,
/// size_t nelems)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_reducescatter(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
) -> c_int {
    status("pshmem_reducescatter", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(Coll::ReduceScatter(dt, red), team, dest, src, nelems, None)
    })
}

/// `int pshmemx_broadcastmem_on_stream(pshmem_team_t, void *, const void *, size_t, int root,
/// cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_broadcastmem_on_stream(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    root: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_broadcastmem_on_stream", || {
        let root = root_arg(root)?;
        collective(
            Coll::Broadcast { root },
            team,
            dest,
            src,
            nbytes,
            Some(stream),
        )
    })
}

/// `int pshmemx_fcollectmem_on_stream(pshmem_team_t, void *, const void *, size_t,
/// cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_fcollectmem_on_stream(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    stream: CStream,
) -> c_int {
    status("pshmemx_fcollectmem_on_stream", || {
        collective(Coll::Fcollect, team, dest, src, nbytes, Some(stream))
    })
}

/// `int pshmemx_reduce_on_stream(pshmem_team_t, int dtype, int op, void *, const void *,
/// size_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_reduce_on_stream(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
    stream: CStream,
) -> c_int {
    status("pshmemx_reduce_on_stream", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(Coll::Reduce(dt, red), team, dest, src, nelems, Some(stream))
    })
}

/// `int pshmemx_reducescatter_on_stream(pshmem_team_t, int dtype, int op, void *, const void
/// *, size_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_reducescatter_on_stream(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
    stream: CStream,
) -> c_int {
    status("pshmemx_reducescatter_on_stream", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(
            Coll::ReduceScatter(dt, red),
            team,
            dest,
            src,
            nelems,
            Some(stream),
        )
    })
}

/// `int pshmem_alltoallmem(pshmem_team_t, void *dest, const void *src, size_t nbytes)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_alltoallmem(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    status("pshmem_alltoallmem", || {
        collective(Coll::Alltoall, team, dest, src, nbytes, None)
    })
}

/// `int pshmemx_alltoallmem_on_stream(pshmem_team_t, void *dest, const void *src, size_t
/// nbytes, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_alltoallmem_on_stream(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    stream: CStream,
) -> c_int {
    status("pshmemx_alltoallmem_on_stream", || {
        collective(Coll::Alltoall, team, dest, src, nbytes, Some(stream))
    })
}
