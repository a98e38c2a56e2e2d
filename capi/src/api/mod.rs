//! The exported functions of pshmem.h, by its sections. Each is `extern "C"`, runs behind the
//! panic guard and returns an error code unless pshmem.h says otherwise. They convert C
//! arguments and hand the call to the runtime's host API by address (`pshmem::ByAddr`), which
//! finds the heap and the path; what stays here is C's: codes, NULL conventions, the
//! reference-counted init and the on-demand GPU part.

mod coll;
mod device;
mod init;
mod memory;
mod rma;
mod sync;

use std::{
    ffi::{c_char, c_int, c_void},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use pshmem::{
    AmoOp, ByAddr, Cmp, Coll, Config, DType, HeapKind, Pshmem, RedOp, SignalOp, Stream, team::Team,
};
use pshmem_bootstrap::{Bootstrap, UniqueId};

use crate::{Fail, Global, R, STATE, code, global, guard, registry, set_last_error, status};

/// `PSHMEMX_INIT_GPU_ON_DEMAND`.
const GPU_ON_DEMAND: u32 = 1;
/// `PSHMEM_THREAD_MULTIPLE`.
const THREAD_MULTIPLE: c_int = 3;

/// Whether an init asked for the GPU part on demand (NVSHMEM's two-stage init).
static ON_DEMAND: AtomicBool = AtomicBool::new(false);
/// Init calls not yet matched by finalize.
static REFS: AtomicUsize = AtomicUsize::new(0);

impl Global {
    fn on_demand(&self) -> bool {
        ON_DEMAND.load(Ordering::Acquire)
    }
}

/// Refuses flag bits pshmem.h does not define (before anything starts).
fn known_flags(flags: u32) -> R<()> {
    if flags & !GPU_ON_DEMAND != 0 {
        return Err(Fail::new(
            code::INVALID_ARG,
            format!("unknown flags {flags:#x} (the only flag is PSHMEMX_INIT_GPU_ON_DEMAND, 1)"),
        ));
    }
    Ok(())
}

/// Starts the PE (or counts one more init of the running one).
fn start(flags: u32, make: impl FnOnce() -> Result<Pshmem, pshmem::Error>) -> R<()> {
    // The runtime logs through `tracing`; a C program has no subscriber unless one is
    // installed here, from PSHMEM_LOG (warnings by default).
    pshmem_env::init_logging();
    if flags & GPU_ON_DEMAND != 0 {
        ON_DEMAND.store(true, Ordering::Release);
    }
    let mut st = STATE.write().unwrap_or_else(|p| p.into_inner());
    if let Some(g) = st.as_ref() {
        REFS.fetch_add(1, Ordering::AcqRel);
        // A library loaded after init calls init itself: fill what it registered.
        return registry::fill_pending(g);
    }
    let s = make()?;
    REFS.store(1, Ordering::Release);
    *st = Some(Arc::new(Global { s }));
    Ok(())
}

/// The GPU part, completed now where the init asked for it on demand; then the registered
/// device states filled.
fn ensure_gpu(g: &Global) -> R<()> {
    if g.s.gpu().is_err() && g.on_demand() {
        g.s.gpu_init_on(pshmem::cuda::current_device())?;
    }
    registry::fill_pending(g)
}

/// The PE of a call that may take a `stream`: with one, the GPU part must be up (completed on
/// demand first).
fn global_for<T>(stream: &Option<T>) -> R<Arc<Global>> {
    let g = global()?;
    if stream.is_some() {
        gpu_or_fail(&g)?;
    }
    Ok(g)
}

fn gpu_or_fail(g: &Global) -> R<&pshmem::gpu::Gpu> {
    ensure_gpu(g)?;
    g.s.gpu().map_err(|_| {
        Fail::new(
            code::CUDA,
            "the GPU part is not initialized (call pshmemx_gpu_init first)",
        )
    })
}

fn pe_arg(pe: c_int) -> R<usize> {
    usize::try_from(pe).map_err(|_| Fail::new(code::INVALID_ARG, format!("PE {pe} is negative")))
}

/// A local buffer of `n` bytes: NULL only when empty (a NULL source or destination was a
/// SIGSEGV in the library).
fn local_arg(local: *const c_void, n: usize, what: &str) -> R<()> {
    if local.is_null() && n > 0 {
        return Err(Fail::new(
            code::INVALID_ARG,
            format!("the {what} buffer is NULL for {n} bytes"),
        ));
    }
    Ok(())
}

fn signal_op_arg(op: c_int) -> R<SignalOp> {
    u8::try_from(op)
        .ok()
        .and_then(SignalOp::from_code)
        .ok_or_else(|| Fail::new(code::INVALID_ARG, format!("{op} is not a signal operation")))
}

fn cmp_arg(cmp: c_int) -> R<Cmp> {
    u8::try_from(cmp)
        .ok()
        .and_then(Cmp::from_code)
        .ok_or_else(|| Fail::new(code::INVALID_ARG, format!("{cmp} is not a comparison")))
}

fn out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller passed a writable T or NULL (checked).
        unsafe { p.write(v) };
    }
}

/// A `cudaStream_t` as C passes it.
type CStream = *mut c_void;

/// The stream of an on-stream call.
fn stream_arg(st: CStream) -> Stream {
    // SAFETY: pshmem.h: a live stream of the PE's device, for the call.
    unsafe { Stream::from_raw(st as u64) }
}

impl Global {
    /// The host API by address.
    fn api(&self) -> ByAddr<'_> {
        self.s.by_addr()
    }
}
