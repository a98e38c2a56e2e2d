//! The functions of `pshmem._pshmem`. They take addresses (`tensor.data_ptr()`), byte or
//! element counts and, for the GPU heap, a raw CUDA stream (`torch.cuda.Stream.cuda_stream`);
//! the Python half checks tensors (device, dtype, contiguity, sizes) before calling them.
//!
//! Each call goes to the heap its symmetric address lies in: the host heap (blocking host
//! calls), or the GPU heap (the runtime's kernels: launched on the given stream, so ordered
//! with the torch work on it; with no stream, blocking on the runtime's internal stream).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use pshmem::{
    AmoOp, Cmp, Coll, Config, DType, HeapKind, Pshmem, RedOp, SignalOp, Stream, gpu::Gpu,
    team::Team,
};
use pshmem_bootstrap::{Bootstrap, UniqueId};
use pyo3::{prelude::*, types::PyBytes};

mod init;
mod memory;
mod rma;
mod sync;

use crate::{
    STATE, dlpack,
    errors::{self, invalid, to_py},
    state,
};

/// How long a host-side wait runs before it checks for Python signals (Ctrl-C).
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// A raw CUDA stream of the Python half (`torch.cuda.Stream.cuda_stream`), for the MoE
/// kernels' launches.
pub(crate) fn raw(stream: u64) -> pshmem::gpu::host_ops::RawStream {
    (stream as usize as *mut std::ffi::c_void).cast()
}

/// A raw CUDA stream of the Python half, for the host API.
fn stream_of(stream: Option<u64>) -> Option<Stream> {
    // SAFETY: the Python half passes a live stream of this PE's device (torch's), for the call.
    stream.map(|st| unsafe { Stream::from_raw(st) })
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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:path),* $(,)?) => { $( m.add_function(wrap_pyfunction!($f, m)?)?; )* };
    }
    add!(
        init::init,
        init::unique_id,
        init::init_unique_id,
        init::finalize,
        init::leave,
        init::initialized,
        init::my_pe,
        init::n_pes,
        init::transport,
        init::op_timeout,
        init::gpu_init,
        init::gpu_device,
        init::is_direct,
        memory::malloc,
        memory::free,
        memory::heap_of,
        memory::capsule,
        rma::put,
        rma::get,
        rma::put_signal,
        rma::signal_op,
        rma::signal_fetch,
        rma::signal_wait_until,
        rma::atomic,
        sync::quiet,
        sync::fence,
        sync::team_sync,
        sync::collective,
        init::team_my_pe,
        init::team_n_pes,
        init::team_translate_pe,
        init::team_split_strided,
        init::team_split_2d,
        init::team_destroy,
    );
    constants(m)
}

/// The codes and names the Python half passes, from the one table that owns them
/// (pshmem-abi), and the predefined teams.
fn constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TEAM_WORLD", pshmem::team::TEAM_WORLD)?;
    m.add("TEAM_SHARED", pshmem::team::TEAM_SHARED)?;
    m.add("TEAM_NODE", pshmem::team::TEAM_NODE)?;
    m.add("TEAM_INVALID", pshmem::team::TEAM_INVALID)?;
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
