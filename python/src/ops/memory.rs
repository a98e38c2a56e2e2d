//! The symmetric heaps: allocations, which heap holds an address, tensor views of peers' copies.

use super::*;

/// Allocates `nbytes` (at least 1) of the GPU or the host symmetric heap; returns the address.
/// Collective; zeroed (`zero`) before any peer can write there.
#[pyfunction]
pub(super) fn malloc(py: Python<'_>, nbytes: usize, gpu: bool, zero: bool) -> PyResult<u64> {
    let s = state()?;
    let (heap, align) = if gpu {
        gpu_of(&s, "malloc")?;
        (HeapKind::Gpu, 256)
    } else {
        (HeapKind::Host, 64)
    };
    py.detach(|| s.by_addr().malloc(heap, nbytes, align, zero))
        .map_err(to_py)
}

/// Frees the allocation at `addr` (its start). Collective.
#[pyfunction]
pub(super) fn free(py: Python<'_>, addr: u64) -> PyResult<()> {
    let s = state()?;
    py.detach(|| s.by_addr().free(addr)).map_err(to_py)
}

/// Which symmetric heap of this PE holds the `nbytes` at `addr`: "host", "gpu", or None.
#[pyfunction]
pub(super) fn heap_of(addr: u64, nbytes: usize) -> PyResult<Option<&'static str>> {
    Ok(state()?.by_addr().heap_of(addr, nbytes).map(HeapKind::name))
}

/// A `dltensor` capsule of `pe`'s copy of the `extent` bytes at `addr` (a symmetric address of
/// this PE), with the given shape, strides (in elements) and DLPack type; None where this PE
/// does not map `pe`'s heap.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(super) fn capsule<'py>(
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
    let api = s.by_addr();
    let heap = api.resolve(op, addr, extent).map_err(to_py)?.heap;
    let data = api.peer_addr(addr, pe).map_err(to_py)?;
    let (device_type, device_id) = match heap {
        HeapKind::Host => (dlpack::CPU, 0),
        HeapKind::Gpu => (dlpack::CUDA, gpu_of(&s, op)?.ordinal() as i32),
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
