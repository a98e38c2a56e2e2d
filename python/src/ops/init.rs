//! Init, finalize, queries and teams.

use super::*;

fn start(py: Python<'_>, make: impl FnOnce() -> pshmem::Result<Pshmem> + Send) -> PyResult<()> {
    // The runtime logs through `tracing`: the PSHMEM_LOG subscriber (warnings by default).
    pshmem_env::init_logging();
    let mut st = STATE.write().unwrap_or_else(|p| p.into_inner());
    if st.is_some() {
        return Err(errors::PshmemError::new_err(
            "pshmem is already initialized in this process (finalize it first)",
        ));
    }
    let s = py.detach(make).map_err(to_py)?;
    *st = Some(Arc::new(s));
    Ok(())
}

/// Starts this PE from the launcher's environment (pshmrun, torchrun, or the ranks mpirun,
/// mpiexec or srun gave: `pshmem_bootstrap::Bootstrap::from_env`).
/// Collective.
#[pyfunction]
pub(super) fn init(py: Python<'_>) -> PyResult<()> {
    start(py, Pshmem::init)
}

/// A new unique id (bytes) for `init_unique_id`: made on one rank, sent to the others.
#[pyfunction]
pub(super) fn unique_id(py: Python<'_>) -> PyResult<Bound<'_, PyBytes>> {
    let id = UniqueId::new().map_err(|e| to_py(e.into()))?;
    Ok(PyBytes::new(py, &id.to_bytes()))
}

/// Starts this PE as `rank` of `nranks` from a unique id. Collective.
#[pyfunction]
pub(super) fn init_unique_id(
    py: Python<'_>,
    uid: &[u8],
    rank: usize,
    nranks: usize,
) -> PyResult<()> {
    if rank >= nranks {
        return Err(errors::InvalidArgument::new_err(format!(
            "init: rank {rank} of {nranks} ranks"
        )));
    }
    let uid = UniqueId::from_bytes(uid).map_err(|e| to_py(e.into()))?;
    start(py, move || {
        pshmem_env::validate_all()?;
        let bs = Bootstrap::init_unique_id(&uid, rank, nranks)?;
        Pshmem::init_with(bs, Config::from_env()?)
    })
}

/// Ends this PE (collective); frees the symmetric heaps.
#[pyfunction]
pub(super) fn finalize(py: Python<'_>) -> PyResult<()> {
    let s = STATE
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .ok_or_else(|| errors::NotInitialized::new_err("pshmem is not initialized"))?;
    let r = py.detach(|| s.finalize());
    let warned = release(py, s);
    r.map_err(to_py)?;
    warned
}

/// Drops this PE's runtime, unless tensors still view its heaps: then the runtime (its heaps'
/// memory with it) is kept until the process ends, with a warning, so that such a tensor reads
/// its last values instead of faulting on memory gone (host) or freed (GPU).
fn release(py: Python<'_>, s: std::sync::Arc<pshmem::Pshmem>) -> PyResult<()> {
    let live = crate::dlpack::end_runtime();
    if live == 0 {
        py.detach(move || drop(s));
        return Ok(());
    }
    std::mem::forget(s);
    let msg = format!(
        "{live} tensor(s) on the symmetric heaps outlive finalize: the heaps stay mapped (not \
         freed) until the process ends; such tensors keep their last values, and no PE sees \
         their writes. Delete them before finalize to free the memory."
    );
    let msg = std::ffi::CString::new(msg).expect("no NUL");
    let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
    PyErr::warn(py, &category, &msg, 1)
}

/// Leaves the job alone (not collective): what the package does at interpreter exit when the
/// program did not finalize.
#[pyfunction]
pub(super) fn leave(py: Python<'_>) -> PyResult<()> {
    let Some(s) = STATE.write().unwrap_or_else(|p| p.into_inner()).take() else {
        return Ok(());
    };
    let r = py.detach(|| s.leave());
    let warned = release(py, s);
    r.map_err(to_py)?;
    warned
}

#[pyfunction]
pub(super) fn initialized() -> bool {
    STATE.read().unwrap_or_else(|p| p.into_inner()).is_some()
}

#[pyfunction]
pub(super) fn my_pe() -> PyResult<usize> {
    Ok(state()?.my_pe())
}

#[pyfunction]
pub(super) fn n_pes() -> PyResult<usize> {
    Ok(state()?.n_pes())
}

/// The transport the proxies use (e.g. `tcp;ofi_rxm`).
#[pyfunction]
pub(super) fn transport() -> PyResult<String> {
    Ok(state()?.transport_name().to_string())
}

/// The operation timeout in seconds (`PSHMEM_OP_TIMEOUT`).
#[pyfunction]
pub(super) fn op_timeout() -> PyResult<f64> {
    Ok(state()?.config().op_timeout.as_secs_f64())
}

/// Starts the GPU part on CUDA device `device` (None: the device current on this thread).
/// Collective; a no-op once started.
#[pyfunction]
#[pyo3(signature = (device=None))]
pub(super) fn gpu_init(py: Python<'_>, device: Option<usize>) -> PyResult<usize> {
    let s = state()?;
    py.detach(|| {
        let dev = device.or_else(pshmem::cuda::current_device);
        s.gpu_init_on(dev).map(|g| g.ordinal())
    })
    .map_err(to_py)
}

/// The CUDA device of the GPU part, or None before it started.
#[pyfunction]
pub(super) fn gpu_device() -> PyResult<Option<usize>> {
    Ok(state()?.gpu().ok().map(|g| g.ordinal()))
}

/// Whether `pe` is reached by loads and stores (same host, mapped) on the `gpu` heap or the
/// host heap.
#[pyfunction]
pub(super) fn is_direct(pe: usize, gpu: bool) -> PyResult<bool> {
    let s = state()?;
    if gpu {
        gpu_of(&s, "is_direct")?;
    }
    let heap = if gpu { HeapKind::Gpu } else { HeapKind::Host };
    s.by_addr().is_direct(heap, pe).map_err(to_py)
}

#[pyfunction]
pub(super) fn team_my_pe(team: Team) -> PyResult<i32> {
    Ok(state()?.team_my_pe(team))
}

#[pyfunction]
pub(super) fn team_n_pes(team: Team) -> PyResult<i32> {
    Ok(state()?.team_n_pes(team))
}

#[pyfunction]
pub(super) fn team_translate_pe(src: Team, pe: i32, dest: Team) -> PyResult<i32> {
    Ok(state()?.team_translate_pe(src, pe, dest))
}

/// A new team of `size` PEs of `parent` from `start`, `stride` apart (TEAM_INVALID, -1, for
/// PEs outside it). Collective over `parent`.
#[pyfunction]
pub(super) fn team_split_strided(
    py: Python<'_>,
    parent: Team,
    start: i32,
    stride: i32,
    size: i32,
) -> PyResult<Team> {
    let s = state()?;
    py.detach(|| s.team_split_strided(parent, start, stride, size))
        .map_err(to_py)
}

/// The x- and y-axis teams of a 2-D grid of `parent` with rows of `xrange`. Collective.
#[pyfunction]
pub(super) fn team_split_2d(py: Python<'_>, parent: Team, xrange: i32) -> PyResult<(Team, Team)> {
    let s = state()?;
    py.detach(|| s.team_split_2d(parent, xrange)).map_err(to_py)
}

#[pyfunction]
pub(super) fn team_destroy(py: Python<'_>, team: Team) -> PyResult<()> {
    let s = state()?;
    py.detach(|| s.team_destroy(team)).map_err(to_py)
}
