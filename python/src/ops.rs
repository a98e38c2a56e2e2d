//! The functions of `pshmem._pshmem`. They take addresses (`tensor.data_ptr()`), byte or
//! element counts and, for the GPU heap, a raw CUDA stream (`torch.cuda.Stream.cuda_stream`);
//! the Python half checks tensors (device, dtype, contiguity, sizes) before calling them.
//!
//! Each call goes to the heap its symmetric address lies in: the host heap (blocking host
//! calls), or the GPU heap (the runtime's kernels: launched on the given stream, so ordered
//! with the torch work on it; with no stream, blocking on the runtime's internal stream).

use std::{
    ffi::c_void,
    sync::Arc,
    time::{Duration, Instant},
};

use pshmem::{
    AmoOp, Cmp, Config, DType, Pshmem, RedOp, SignalOp, SymPtr,
    gpu::{Gpu, host_ops::Coll},
    team::Team,
};
use pshmem_bootstrap::{Bootstrap, UniqueId};
use pyo3::{prelude::*, types::PyBytes};

use crate::{
    STATE, dlpack,
    errors::{self, invalid, to_py},
    state,
};

/// How long a host-side wait runs before it checks for Python signals (Ctrl-C).
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// Where a symmetric address lives.
enum Heap {
    /// The host heap, at this offset.
    Host(SymPtr),
    /// The GPU heap, at this offset.
    Gpu(SymPtr),
}

/// The heap holding `len` bytes at `addr` on this PE.
fn classify(s: &Pshmem, op: &str, addr: u64, len: usize) -> PyResult<Heap> {
    let base = s.ptr(SymPtr::from_offset(0)) as u64;
    let size = s.config().heap_size as u64;
    if addr >= base && addr - base < size && len as u64 <= size - (addr - base) {
        return Ok(Heap::Host(SymPtr::from_offset(addr - base)));
    }
    if let Ok(gpu) = s.gpu()
        && let Some(off) = gpu.offset_of(addr, len)
    {
        return Ok(Heap::Gpu(SymPtr::from_offset(off)));
    }
    Err(invalid(
        s.my_pe(),
        op,
        format!(
            "{addr:#x} (+{len} bytes) is not on a symmetric heap of this PE: allocate it with \
             pshmem.empty/zeros/full"
        ),
    ))
}

pub(crate) fn gpu_of<'a>(s: &'a Pshmem, op: &str) -> PyResult<&'a Gpu> {
    s.gpu().map_err(|_| {
        errors::CudaError::new_err(format!(
            "PE {}: {op}: the GPU part is not initialized (allocate a CUDA tensor or call \
             pshmem.init(device='cuda') first)",
            s.my_pe()
        ))
    })
}

/// A raw CUDA stream handle.
pub(crate) fn raw(stream: u64) -> pshmem::gpu::host_ops::RawStream {
    (stream as usize as *mut c_void).cast()
}

fn symbol(c: Cmp) -> &'static str {
    match c {
        Cmp::Eq => "==",
        Cmp::Ne => "!=",
        Cmp::Gt => ">",
        Cmp::Ge => ">=",
        Cmp::Lt => "<",
        Cmp::Le => "<=",
    }
}

fn cmp_arg(s: &Pshmem, op: &str, cmp: u8) -> PyResult<Cmp> {
    Cmp::from_code(cmp).ok_or_else(|| invalid(s.my_pe(), op, format!("{cmp} is not a comparison")))
}

fn sig_arg(s: &Pshmem, op: &str, code: u8) -> PyResult<SignalOp> {
    SignalOp::from_code(code)
        .ok_or_else(|| invalid(s.my_pe(), op, format!("{code} is not a signal operation")))
}

// ---- init -------------------------------------------------------------------------------------

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

/// Starts this PE from the launcher's environment (pshmrun, torchrun, srun, mpirun).
/// Collective.
#[pyfunction]
fn init(py: Python<'_>) -> PyResult<()> {
    start(py, Pshmem::init)
}

/// A new unique id (bytes) for `init_unique_id`: made on one rank, sent to the others.
#[pyfunction]
fn unique_id(py: Python<'_>) -> PyResult<Bound<'_, PyBytes>> {
    let id = UniqueId::new().map_err(|e| to_py(e.into()))?;
    Ok(PyBytes::new(py, &id.to_bytes()))
}

/// Starts this PE as `rank` of `nranks` from a unique id. Collective.
#[pyfunction]
fn init_unique_id(py: Python<'_>, uid: &[u8], rank: usize, nranks: usize) -> PyResult<()> {
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
fn finalize(py: Python<'_>) -> PyResult<()> {
    let s = STATE
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .ok_or_else(|| errors::NotInitialized::new_err("pshmem is not initialized"))?;
    py.detach(|| s.finalize()).map_err(to_py)
}

#[pyfunction]
fn initialized() -> bool {
    STATE.read().unwrap_or_else(|p| p.into_inner()).is_some()
}

#[pyfunction]
fn my_pe() -> PyResult<usize> {
    Ok(state()?.my_pe())
}

#[pyfunction]
fn n_pes() -> PyResult<usize> {
    Ok(state()?.n_pes())
}

/// The transport the proxies use (e.g. `tcp;ofi_rxm`).
#[pyfunction]
fn transport() -> PyResult<String> {
    Ok(state()?.transport_name().to_string())
}

/// The operation timeout in seconds (`PSHMEM_OP_TIMEOUT`).
#[pyfunction]
fn op_timeout() -> PyResult<f64> {
    Ok(state()?.config().op_timeout.as_secs_f64())
}

/// Starts the GPU part on CUDA device `device` (None: the device current on this thread).
/// Collective; a no-op once started.
#[pyfunction]
#[pyo3(signature = (device=None))]
fn gpu_init(py: Python<'_>, device: Option<usize>) -> PyResult<usize> {
    let s = state()?;
    py.detach(|| {
        let dev = device.or_else(pshmem::cuda::current_device);
        s.gpu_init_on(dev).map(|g| g.ordinal())
    })
    .map_err(to_py)
}

/// The CUDA device of the GPU part, or None before it started.
#[pyfunction]
fn gpu_device() -> PyResult<Option<usize>> {
    Ok(state()?.gpu().ok().map(|g| g.ordinal()))
}

/// Whether `pe` is reached by loads and stores (same host, mapped) on the `gpu` heap or the
/// host heap.
#[pyfunction]
fn is_direct(pe: usize, gpu: bool) -> PyResult<bool> {
    let s = state()?;
    if gpu {
        Ok(gpu_of(&s, "is_direct")?.is_direct(pe))
    } else {
        Ok(s.is_direct(pe))
    }
}

// ---- memory -----------------------------------------------------------------------------------

/// Allocates `nbytes` (at least 1) of the GPU or the host symmetric heap; returns the address.
/// Collective.
#[pyfunction]
fn malloc(py: Python<'_>, nbytes: usize, gpu: bool, zero: bool) -> PyResult<u64> {
    let s = state()?;
    let n = nbytes.max(1);
    py.detach(|| -> pshmem::Result<u64> {
        if gpu {
            let p = if zero {
                s.gpu_calloc(n)?
            } else {
                s.gpu_malloc(n)?
            };
            Ok(s.gpu()?.ptr(p))
        } else {
            // 64-byte aligned; zeroed before the collective completes, so no peer's write
            // can land before the zeros.
            let p = if zero { s.calloc(1, n)? } else { s.malloc(n)? };
            Ok(s.ptr(p) as u64)
        }
    })
    .map_err(to_py)
}

/// Frees the allocation at `addr` (its start). Collective.
#[pyfunction]
fn free(py: Python<'_>, addr: u64) -> PyResult<()> {
    let s = state()?;
    let heap = classify(&s, "free", addr, 0)?;
    py.detach(|| match heap {
        Heap::Host(at) => s.free(at),
        Heap::Gpu(at) => s.gpu_free(at),
    })
    .map_err(to_py)
}

/// Which symmetric heap of this PE holds the `nbytes` at `addr`: "host", "gpu", or None.
#[pyfunction]
fn heap_of(addr: u64, nbytes: usize) -> PyResult<Option<&'static str>> {
    let s = state()?;
    Ok(match classify(&s, "heap_of", addr, nbytes) {
        Ok(Heap::Host(_)) => Some("host"),
        Ok(Heap::Gpu(_)) => Some("gpu"),
        Err(_) => None,
    })
}

/// A `dltensor` capsule of `pe`'s copy of the `extent` bytes at `addr` (a symmetric address of
/// this PE), with the given shape, strides (in elements) and DLPack type; None where this PE
/// does not map `pe`'s heap.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn capsule<'py>(
    py: Python<'py>,
    addr: u64,
    extent: usize,
    pe: usize,
    shape: Vec<i64>,
    strides: Vec<i64>,
    code: u8,
    bits: u8,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let s = state()?;
    let op = "tensor view";
    if pe >= s.n_pes() {
        return Err(invalid(
            s.my_pe(),
            op,
            format!("PE {pe}, but the job has {} PEs", s.n_pes()),
        ));
    }
    if shape.len() != strides.len() || shape.iter().chain(&strides).any(|&d| d < 0) {
        return Err(invalid(s.my_pe(), op, "bad shape or strides"));
    }
    let (data, device_type, device_id) = match classify(&s, op, addr, extent)? {
        Heap::Host(at) => {
            let p = if pe == s.my_pe() {
                Some(s.ptr(at))
            } else {
                s.peer_ptr(at, pe)
            };
            (p.map(|p| p as u64), dlpack::CPU, 0)
        }
        Heap::Gpu(at) => {
            let g = gpu_of(&s, op)?;
            (
                g.peer_addr(at.offset(), pe),
                dlpack::CUDA,
                g.ordinal() as i32,
            )
        }
    };
    let Some(data) = data else { return Ok(None) };
    let d = dlpack::Desc {
        data,
        device_type,
        device_id,
        code,
        bits,
        shape,
        strides,
    };
    // SAFETY: the range was checked to lie in a symmetric heap of this PE, whose mappings of
    // its own and of its peers' copies stay until finalize.
    unsafe { dlpack::capsule(py, d) }.map(Some)
}

// ---- RMA and signals --------------------------------------------------------------------------

/// Copies `nbytes` at `src` (local, on the device of `dest`'s heap) into `dest` on `pe`.
/// GPU heap: on `stream` (None: blocking on the runtime's stream); `nbi`: complete at quiet.
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, pe, nbi=false, stream=None))]
fn put(
    py: Python<'_>,
    dest: u64,
    src: u64,
    nbytes: usize,
    pe: usize,
    nbi: bool,
    stream: Option<u64>,
) -> PyResult<()> {
    rma(py, true, dest, src, nbytes, pe, nbi, stream)
}

/// Copies `nbytes` of `src` on `pe` into `dest` (local). As `put` otherwise.
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, pe, nbi=false, stream=None))]
fn get(
    py: Python<'_>,
    dest: u64,
    src: u64,
    nbytes: usize,
    pe: usize,
    nbi: bool,
    stream: Option<u64>,
) -> PyResult<()> {
    rma(py, false, src, dest, nbytes, pe, nbi, stream)
}

/// put (`is_put`) or get: `remote` is the symmetric address, `local` the caller's buffer.
#[allow(clippy::too_many_arguments)]
fn rma(
    py: Python<'_>,
    is_put: bool,
    remote: u64,
    local: u64,
    nbytes: usize,
    pe: usize,
    nbi: bool,
    stream: Option<u64>,
) -> PyResult<()> {
    let s = state()?;
    let op = if is_put { "put" } else { "get" };
    let heap = classify(&s, op, remote, nbytes)?;
    py.detach(|| -> pshmem::Result<()> {
        let lp = local as usize as *mut u8;
        match heap {
            Heap::Host(at) if is_put => {
                if nbi {
                    // SAFETY: the Python half passes a live host tensor's storage, which it
                    // keeps referenced until the next quiet.
                    unsafe { s.put_nbi(at, lp, nbytes, pe) }
                } else {
                    // SAFETY: a live host tensor's storage of `nbytes`, until the call returns.
                    let b = unsafe { std::slice::from_raw_parts(lp.cast_const(), nbytes) };
                    s.put(at, b, pe)
                }
            }
            Heap::Host(at) => {
                if nbi {
                    // SAFETY: as above, writable.
                    unsafe { s.get_nbi(lp, at, nbytes, pe) }
                } else {
                    // SAFETY: as above, writable and not read by Python during the call (the
                    // GIL is released, but the tensor's owner waits for this call).
                    let b = unsafe { std::slice::from_raw_parts_mut(lp, nbytes) };
                    s.get(b, at, pe)
                }
            }
            Heap::Gpu(_) => {
                let g = s.gpu()?;
                match stream {
                    // SAFETY: a live stream of this PE's device (torch's); the local tensor
                    // is kept referenced by the Python half until the stream ran the call.
                    Some(st) => unsafe {
                        g.rma_on_stream(is_put, remote, lp.cast_const(), nbytes, pe, nbi, raw(st))
                    },
                    // SAFETY: as above, until the call returns (or quiet, for nbi).
                    None if is_put => unsafe {
                        g.host_put(remote, lp.cast_const(), nbytes, pe, nbi)
                    },
                    // SAFETY: as above.
                    None => unsafe { g.host_get(lp, remote, nbytes, pe, nbi) },
                }
            }
        }
    })
    .map_err(to_py)
}

/// put-with-signal: the data, then the signal word `sig` on `pe` updated by `sig_op`
/// (`SIGNAL_SET`, `SIGNAL_ADD`) with `value`, visible only after the data.
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, sig, value, sig_op, pe, nbi=false, stream=None))]
#[allow(clippy::too_many_arguments)]
fn put_signal(
    py: Python<'_>,
    dest: u64,
    src: u64,
    nbytes: usize,
    sig: u64,
    value: u64,
    sig_op: u8,
    pe: usize,
    nbi: bool,
    stream: Option<u64>,
) -> PyResult<()> {
    let s = state()?;
    let op = "put_signal";
    let sop = sig_arg(&s, op, sig_op)?;
    let (d, sg) = (classify(&s, op, dest, nbytes)?, classify(&s, op, sig, 8)?);
    py.detach(|| -> PyResult<()> {
        match (d, sg) {
            (Heap::Host(at), Heap::Host(sa)) => {
                // SAFETY: a live host tensor's storage of `nbytes`, until the call returns.
                let b = unsafe { std::slice::from_raw_parts(src as usize as *const u8, nbytes) };
                s.put_signal(at, b, sa, value, sop, pe).map_err(to_py)
            }
            (Heap::Gpu(_), Heap::Gpu(_)) => {
                let g = s.gpu().map_err(to_py)?;
                // SAFETY: a live device tensor, kept referenced until the stream ran the call
                // (or the call returned); a live stream of this PE's device.
                unsafe {
                    g.host_put_signal(
                        dest,
                        src as usize as *const u8,
                        nbytes,
                        sig,
                        value,
                        sop.code(),
                        pe,
                        nbi || stream.is_some(),
                        stream.map(raw),
                    )
                }
                .map_err(to_py)
            }
            _ => Err(invalid(
                s.my_pe(),
                op,
                "the destination and the signal are on different heaps",
            )),
        }
    })
}

/// Updates the signal word `sig` on `pe` (`sig_op`: `SIGNAL_SET` or `SIGNAL_ADD`).
#[pyfunction]
#[pyo3(signature = (sig, value, sig_op, pe, stream=None))]
fn signal_op(
    py: Python<'_>,
    sig: u64,
    value: u64,
    sig_op: u8,
    pe: usize,
    stream: Option<u64>,
) -> PyResult<()> {
    let s = state()?;
    let op = "signal_op";
    let sop = sig_arg(&s, op, sig_op)?;
    let heap = classify(&s, op, sig, 8)?;
    py.detach(|| match heap {
        Heap::Host(at) => s.signal_op(at, value, sop, pe),
        // SAFETY: a live stream of this PE's device, when given.
        Heap::Gpu(_) => unsafe {
            s.gpu()?
                .host_signal_op(sig, value, sop.code(), pe, stream.map(raw))
        },
    })
    .map_err(to_py)
}

/// This PE's signal word at `sig` now.
#[pyfunction]
fn signal_fetch(py: Python<'_>, sig: u64) -> PyResult<u64> {
    let s = state()?;
    let heap = classify(&s, "signal_fetch", sig, 8)?;
    py.detach(|| read_word(&s, &heap)).map_err(to_py)
}

fn read_word(s: &Pshmem, heap: &Heap) -> pshmem::Result<u64> {
    match *heap {
        Heap::Host(at) => s.local_read::<u64>(at),
        Heap::Gpu(at) => {
            let mut b = [0u8; 8];
            s.gpu()?.copy_out(at, &mut b)?;
            Ok(u64::from_le_bytes(b))
        }
    }
}

/// Waits until this PE's signal word at `sig` satisfies `cmp value` (a `CMP_*` code), then
/// sets the word to `reset` when given. With a stream (GPU heap): the stream waits, the call
/// returns None at once. Otherwise the host waits (GIL released, Ctrl-C interrupts it,
/// `PSHMEM_OP_TIMEOUT` bounds it) and returns the word it saw.
#[pyfunction]
#[pyo3(signature = (sig, cmp, value, stream=None, reset=None))]
fn signal_wait_until(
    py: Python<'_>,
    sig: u64,
    cmp: u8,
    value: u64,
    stream: Option<u64>,
    reset: Option<u64>,
) -> PyResult<Option<u64>> {
    let s = state()?;
    let op = "signal_wait_until";
    let c = cmp_arg(&s, op, cmp)?;
    let heap = classify(&s, op, sig, 8)?;
    if let (Heap::Gpu(_), Some(st)) = (&heap, stream) {
        let g = gpu_of(&s, op)?;
        // SAFETY: a live stream of this PE's device.
        unsafe { g.signal_wait_on_stream(sig, cmp, value, reset, raw(st)) }.map_err(to_py)?;
        return Ok(None);
    }
    let seen = wait_on_host(py, &s, &heap, c, value)?;
    if let Some(to) = reset {
        // The word is this PE's own: a local store ends the wait's use of it.
        py.detach(|| write_word(&s, &heap, to)).map_err(to_py)?;
    }
    Ok(Some(seen))
}

/// Stores `v` into this PE's word.
fn write_word(s: &Pshmem, heap: &Heap, v: u64) -> pshmem::Result<()> {
    match *heap {
        // A swap, not a set: a fetching AMO is complete on return on every path (through the
        // proxy too), so a later read sees it.
        Heap::Host(at) => s
            .atomic::<u64>(AmoOp::Swap, at, v, 0, s.my_pe())
            .map(|_| ()),
        Heap::Gpu(at) => s.gpu()?.copy_in(at, &v.to_le_bytes()),
    }
}

/// The host side of `signal_wait_until`: slices of [`WAIT_SLICE`], Python signals checked
/// between them, `PSHMEM_OP_TIMEOUT` overall.
fn wait_on_host(py: Python<'_>, s: &Pshmem, heap: &Heap, c: Cmp, value: u64) -> PyResult<u64> {
    let op = "signal_wait_until";
    let limit = s.config().op_timeout;
    let start = Instant::now();
    loop {
        let seen = py
            .detach(|| -> pshmem::Result<Option<u64>> {
                match heap {
                    Heap::Host(at) => s.wait_until_within::<u64>(*at, c, value, WAIT_SLICE),
                    Heap::Gpu(_) => {
                        // Polled: a device-to-host copy per look, a few µs apart.
                        let t = Instant::now();
                        while t.elapsed() < WAIT_SLICE {
                            let v = read_word(s, heap)?;
                            if c.holds(v, value) {
                                return Ok(Some(v));
                            }
                            std::thread::sleep(Duration::from_micros(5));
                        }
                        Ok(None)
                    }
                }
            })
            .map_err(to_py)?;
        if let Some(v) = seen {
            return Ok(v);
        }
        py.check_signals()?;
        if start.elapsed() > limit {
            let v = py.detach(|| read_word(s, heap)).map_err(to_py)?;
            return Err(errors::Timeout::new_err(format!(
                "PE {}: {op}: waited {limit:.1?} (PSHMEM_OP_TIMEOUT) for the signal to be \
                 {} {value}; it is {v}",
                s.my_pe(),
                symbol(c)
            )));
        }
    }
}

/// An atomic on the 8-byte (`wide`) or 4-byte word at `dest` on `pe`: `op` a PSHMEM_AMO_*
/// code. Returns the old value (0 for the non-fetching operations). Blocking.
#[pyfunction]
#[pyo3(signature = (op, dest, wide, operand, compare, pe))]
fn atomic(
    py: Python<'_>,
    op: u8,
    dest: u64,
    wide: bool,
    operand: u64,
    compare: u64,
    pe: usize,
) -> PyResult<u64> {
    let s = state()?;
    let name = "atomic";
    let amo = AmoOp::from_code(op)
        .ok_or_else(|| invalid(s.my_pe(), name, format!("{op} is not an AMO operation")))?;
    let heap = classify(&s, name, dest, if wide { 8 } else { 4 })?;
    py.detach(|| match heap {
        Heap::Host(at) if wide => s.atomic::<u64>(amo, at, operand, compare, pe),
        Heap::Host(at) => s
            .atomic::<u32>(amo, at, operand as u32, compare as u32, pe)
            .map(u64::from),
        Heap::Gpu(_) => s
            .gpu()?
            .host_atomic(amo.code(), wide, dest, operand, compare, pe),
    })
    .map_err(to_py)
}

// ---- ordering and synchronization --------------------------------------------------------------

/// Completes this PE's operations: the host's now; the GPU's on `stream` when the GPU part is
/// up (blocking on the runtime's stream without one).
#[pyfunction]
#[pyo3(signature = (stream=None))]
fn quiet(py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
    order(py, false, stream)
}

/// Orders this PE's operations to each PE (on the GPU: a quiet on `stream`, the simplest
/// correct fence of operations that each run in their own kernel).
#[pyfunction]
#[pyo3(signature = (stream=None))]
fn fence(py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
    order(py, true, stream)
}

/// quiet, or (`fence`) fence, of the host's operations; then a quiet of the GPU's.
fn order(py: Python<'_>, fence: bool, stream: Option<u64>) -> PyResult<()> {
    let s = state()?;
    py.detach(|| -> pshmem::Result<()> {
        if fence {
            s.fence()?
        } else {
            s.quiet()?
        }
        if let Ok(g) = s.gpu() {
            match stream {
                // SAFETY: a live stream of this PE's device.
                Some(st) => unsafe { g.on_raw_stream(false, raw(st)) }?,
                None => g.host_quiet()?,
            }
        }
        Ok(())
    })
    .map_err(to_py)
}

/// A barrier (`barrier`: quiet first) or sync over `team`. With the GPU part up: on `stream`
/// (blocking on the runtime's stream without one), after a quiet of the host's operations;
/// otherwise on the host, blocking.
#[pyfunction]
#[pyo3(signature = (team, barrier, stream=None))]
fn team_sync(py: Python<'_>, team: Team, barrier: bool, stream: Option<u64>) -> PyResult<()> {
    let s = state()?;
    py.detach(|| -> pshmem::Result<()> {
        match s.gpu() {
            Ok(g) => {
                if barrier {
                    s.quiet()?;
                }
                // SAFETY: a live stream of this PE's device, when given.
                unsafe { g.team_sync_on(team, barrier, stream.map(raw)) }
            }
            Err(_) if barrier => s.team_barrier(team),
            Err(_) => s.team_sync(team),
        }
    })
    .map_err(to_py)
}

// ---- collectives --------------------------------------------------------------------------------

/// A collective over `team`: `kind` one of broadcast, fcollect, alltoall, reduce,
/// reducescatter; `n` bytes (elements for the reductions, with `dtype` and `red` their
/// PSHMEM_DT_* and PSHMEM_RED_* codes); `root` the team index of broadcast's root. GPU heap:
/// on `stream` (blocking without one); host heap: blocking.
#[pyfunction]
#[pyo3(signature = (kind, team, dest, src, n, root=0, dtype=0, red=0, stream=None))]
#[allow(clippy::too_many_arguments)]
fn collective(
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
    let members = s.team_members(team).map_err(to_py)?;
    let (dest_len, src_len) = coll
        .lens(n, members.len())
        .ok_or_else(|| invalid(me, kind, format!("{n} elements overflow")))?;
    let (d, sr) = (
        classify(&s, kind, dest, dest_len)?,
        classify(&s, kind, src, src_len)?,
    );
    py.detach(|| -> PyResult<()> {
        match (d, sr) {
            (Heap::Gpu(_), Heap::Gpu(_)) => {
                let g = s.gpu().map_err(to_py)?;
                match stream {
                    // SAFETY: a live stream of this PE's device.
                    Some(st) => unsafe {
                        g.collective_on_stream(coll, team, &members, dest, src, n, raw(st))
                    },
                    None => g.collective(coll, team, &members, dest, src, n),
                }
                .map_err(to_py)
            }
            (Heap::Host(dp), Heap::Host(sp)) => match coll {
                Coll::Broadcast { root } => s.broadcast(team, dp, sp, n, root),
                Coll::Fcollect => s.fcollect(team, dp, sp, n),
                Coll::Alltoall => s.alltoall(team, dp, sp, n),
                Coll::Reduce(dt, op) => s.reduce(team, dt, op, dp, sp, n),
                Coll::ReduceScatter(dt, op) => s.reducescatter(team, dt, op, dp, sp, n),
            }
            .map_err(to_py),
            _ => Err(invalid(
                me,
                kind,
                "the destination and the source are on different heaps",
            )),
        }
    })
}

// ---- teams --------------------------------------------------------------------------------------

#[pyfunction]
fn team_my_pe(team: Team) -> PyResult<i32> {
    Ok(state()?.team_my_pe(team))
}

#[pyfunction]
fn team_n_pes(team: Team) -> PyResult<i32> {
    Ok(state()?.team_n_pes(team))
}

#[pyfunction]
fn team_translate_pe(src: Team, pe: i32, dest: Team) -> PyResult<i32> {
    Ok(state()?.team_translate_pe(src, pe, dest))
}

/// A new team of `size` PEs of `parent` from `start`, `stride` apart (TEAM_INVALID, -1, for
/// PEs outside it). Collective over `parent`.
#[pyfunction]
fn team_split_strided(
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
fn team_split_2d(py: Python<'_>, parent: Team, xrange: i32) -> PyResult<(Team, Team)> {
    let s = state()?;
    py.detach(|| s.team_split_2d(parent, xrange)).map_err(to_py)
}

#[pyfunction]
fn team_destroy(py: Python<'_>, team: Team) -> PyResult<()> {
    let s = state()?;
    py.detach(|| s.team_destroy(team)).map_err(to_py)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => { $( m.add_function(wrap_pyfunction!($f, m)?)?; )* };
    }
    add!(
        init,
        unique_id,
        init_unique_id,
        finalize,
        initialized,
        my_pe,
        n_pes,
        transport,
        op_timeout,
        gpu_init,
        gpu_device,
        is_direct,
        malloc,
        free,
        heap_of,
        capsule,
        put,
        get,
        put_signal,
        signal_op,
        signal_fetch,
        signal_wait_until,
        atomic,
        quiet,
        fence,
        team_sync,
        collective,
        team_my_pe,
        team_n_pes,
        team_translate_pe,
        team_split_strided,
        team_split_2d,
        team_destroy,
    );
    m.add("TEAM_WORLD", pshmem::team::TEAM_WORLD)?;
    m.add("TEAM_SHARED", pshmem::team::TEAM_SHARED)?;
    m.add("TEAM_NODE", pshmem::team::TEAM_NODE)?;
    m.add("TEAM_INVALID", pshmem::team::TEAM_INVALID)?;
    // The codes the Python half passes, from the one table that owns them (pshmem-abi).
    m.add("SIGNAL_SET", SignalOp::Set.code())?;
    m.add("SIGNAL_ADD", SignalOp::Add.code())?;
    for (name, c) in [
        ("CMP_EQ", Cmp::Eq),
        ("CMP_NE", Cmp::Ne),
        ("CMP_GT", Cmp::Gt),
        ("CMP_GE", Cmp::Ge),
        ("CMP_LT", Cmp::Lt),
        ("CMP_LE", Cmp::Le),
    ] {
        m.add(name, c.code())?;
    }
    for (name, o) in [
        ("AMO_FETCH_ADD", AmoOp::FetchAdd),
        ("AMO_ADD", AmoOp::Add),
        ("AMO_SWAP", AmoOp::Swap),
        ("AMO_COMPARE_SWAP", AmoOp::CompareSwap),
        ("AMO_FETCH", AmoOp::Fetch),
        ("AMO_SET", AmoOp::Set),
        ("AMO_FETCH_AND", AmoOp::FetchAnd),
        ("AMO_AND", AmoOp::And),
        ("AMO_FETCH_OR", AmoOp::FetchOr),
        ("AMO_OR", AmoOp::Or),
        ("AMO_FETCH_XOR", AmoOp::FetchXor),
        ("AMO_XOR", AmoOp::Xor),
    ] {
        m.add(name, o.code())?;
    }
    let dtypes = DType::ALL.map(|d| (format!("{d:?}").to_lowercase(), d.code()));
    m.add("DTYPES", dtypes.to_vec())?;
    let reds = [
        ("sum", RedOp::Sum),
        ("prod", RedOp::Prod),
        ("min", RedOp::Min),
        ("max", RedOp::Max),
        ("band", RedOp::And),
        ("bor", RedOp::Or),
        ("bxor", RedOp::Xor),
    ]
    .map(|(n, o)| (n, o.code()));
    m.add("REDUCE_OPS", reds.to_vec())?;
    Ok(())
}
