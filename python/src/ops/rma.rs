//! Puts, gets, signals, waits and atomics on either heap.

use super::*;

/// Copies `nbytes` at `src` (local, on the device of `dest`'s heap) into `dest` on `pe`.
/// GPU heap: on `stream` (None: blocking on the runtime's stream); `nbi`: complete at quiet.
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, pe, nbi=false, stream=None))]
pub(super) fn put(
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
pub(super) fn get(
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
    let st = stream_of(stream);
    py.detach(|| {
        let api = s.by_addr();
        let lp = local as usize as *mut u8;
        if is_put {
            // SAFETY: the Python half passes a live tensor's storage of `nbytes` on the
            // symmetric tensor's device, which it keeps referenced until the call returns (or
            // quiet, for nbi; or until the stream ran it).
            unsafe { api.put(remote, lp.cast_const(), nbytes, pe, nbi, st) }
        } else {
            // SAFETY: as above, writable and not read by Python during the call (the GIL is
            // released, but the tensor's owner waits for this call or the stream).
            unsafe { api.get(lp, remote, nbytes, pe, nbi, st) }
        }
    })
    .map_err(to_py)
}

/// put-with-signal: the data, then the signal word `sig` on `pe` updated by `sig_op`
/// (`SIGNAL_SET`, `SIGNAL_ADD`) with `value`, visible only after the data.
#[pyfunction]
#[pyo3(signature = (dest, src, nbytes, sig, value, sig_op, pe, nbi=false, stream=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn put_signal(
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
    let sop = sig_arg(&s, "put_signal", sig_op)?;
    let st = stream_of(stream);
    py.detach(|| {
        let src = src as usize as *const u8;
        // SAFETY: a live tensor on the symmetric tensor's device (device memory for the GPU
        // heap), kept referenced until the call returned (or quiet, or the stream ran it).
        unsafe {
            s.by_addr()
                .put_signal(dest, src, nbytes, sig, value, sop, pe, nbi, st)
        }
    })
    .map_err(to_py)
}

/// Updates the signal word `sig` on `pe` (`sig_op`: `SIGNAL_SET` or `SIGNAL_ADD`).
#[pyfunction]
#[pyo3(signature = (sig, value, sig_op, pe, stream=None))]
pub(super) fn signal_op(
    py: Python<'_>,
    sig: u64,
    value: u64,
    sig_op: u8,
    pe: usize,
    stream: Option<u64>,
) -> PyResult<()> {
    let s = state()?;
    let sop = sig_arg(&s, "signal_op", sig_op)?;
    let st = stream_of(stream);
    py.detach(|| s.by_addr().signal_op(sig, value, sop, pe, st))
        .map_err(to_py)
}

/// This PE's signal word at `sig` now.
#[pyfunction]
pub(super) fn signal_fetch(py: Python<'_>, sig: u64) -> PyResult<u64> {
    let s = state()?;
    py.detach(|| s.by_addr().read_word(sig, true))
        .map_err(to_py)
}

/// Waits until this PE's signal word at `sig` satisfies `cmp value` (a `CMP_*` code), then
/// sets the word to `reset` when given. With a stream (GPU heap): the stream waits, the call
/// returns None at once. Otherwise the host waits (GIL released, Ctrl-C interrupts it,
/// `PSHMEM_OP_TIMEOUT` bounds it) and returns the word it saw.
#[pyfunction]
#[pyo3(signature = (sig, cmp, value, stream=None, reset=None))]
pub(super) fn signal_wait_until(
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
    if let Some(st) = stream_of(stream) {
        py.detach(|| s.by_addr().wait_on_stream(sig, (c, value), reset, st))
            .map_err(to_py)?;
        return Ok(None);
    }
    let seen = wait_on_host(py, &s, sig, c, value)?;
    if let Some(to) = reset {
        // The word is this PE's own: an atomic swap ends the wait's use of it without losing
        // a peer's update that lands meanwhile.
        py.detach(|| s.by_addr().reset_word(sig, to))
            .map_err(to_py)?;
    }
    Ok(Some(seen))
}

/// The host side of `signal_wait_until`: slices of [`WAIT_SLICE`], Python signals checked
/// between them, `PSHMEM_OP_TIMEOUT` overall.
fn wait_on_host(py: Python<'_>, s: &Pshmem, sig: u64, c: Cmp, value: u64) -> PyResult<u64> {
    let op = "signal_wait_until";
    let limit = s.config().op_timeout;
    let start = Instant::now();
    let api = s.by_addr();
    loop {
        let seen = py
            .detach(|| api.wait_within(sig, true, (c, value), WAIT_SLICE))
            .map_err(to_py)?;
        if let Some(v) = seen {
            return Ok(v);
        }
        py.check_signals()?;
        if start.elapsed() > limit {
            let v = py.detach(|| api.read_word(sig, true)).map_err(to_py)?;
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
pub(super) fn atomic(
    py: Python<'_>,
    op: u8,
    dest: u64,
    wide: bool,
    operand: u64,
    compare: u64,
    pe: usize,
) -> PyResult<u64> {
    let s = state()?;
    let amo = AmoOp::from_code(op)
        .ok_or_else(|| invalid(s.my_pe(), "atomic", format!("{op} is not an AMO operation")))?;
    py.detach(|| s.by_addr().atomic(amo, dest, wide, (operand, compare), pe))
        .map_err(to_py)
}
