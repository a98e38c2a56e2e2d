//! # pshmem-capi: `libpshmem.so`
//!
//! The C ABI of proxyshmem (`include/pshmem/pshmem.h`): one process-wide PE behind plain C
//! functions, which the NVSHMEM compatibility layer (`compat/nvshmem/`) maps NVSHMEM's names
//! onto. Every export runs behind a panic guard (a panic becomes `PSHMEM_ERR_INTERNAL`, never
//! an unwind into C), returns an error code (0 on success) or a documented sentinel (NULL, -1),
//! and leaves the typed error's message for `pshmem_last_error()` (per thread).
//!
//! Addresses are plain pointers: a symmetric address lies either in the host symmetric heap
//! (`pshmem_malloc`) or in the GPU symmetric heap (`pshmemx_gpu_malloc`). The exports convert
//! C's arguments and call the runtime's host API by address (`pshmem::ByAddr`), which takes
//! each call to the heap its address belongs to (host heap: the host data path; GPU heap: the
//! runtime's kernels), exactly as the Python package does.
//!
//! Init is reference-counted (each init needs a finalize; the last one tears down). With
//! `PSHMEMX_INIT_GPU_ON_DEMAND` (what the NVSHMEM layer asks for) the GPU part of init
//! completes at the first allocation, barrier, sync or collective launch, on the CUDA device
//! current then — NVSHMEM's two-stage init.

#![allow(unsafe_code)]

mod api;
mod registry;

use std::{
    cell::RefCell,
    ffi::{CString, c_int},
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Arc, RwLock},
};

use pshmem::{Error, Pshmem, error::ErrorKind};

/// Error codes (`PSHMEM_ERR_*` of pshmem.h; checked by the C test).
pub mod code {
    /// Success.
    pub const SUCCESS: i32 = 0;
    /// The runtime is not initialized (or already finalized).
    pub const NOT_INITIALIZED: i32 = 1;
    /// A bad argument: PE, address, range, alignment, size, team.
    pub const INVALID_ARG: i32 = 2;
    /// The symmetric heap has no room.
    pub const OUT_OF_MEMORY: i32 = 3;
    /// A peer died or the data path failed.
    pub const PEER_FAILED: i32 = 4;
    /// A wait ran past `PSHMEM_OP_TIMEOUT`.
    pub const TIMEOUT: i32 = 5;
    /// A bad setting (environment variable or configuration).
    pub const CONFIG: i32 = 6;
    /// CUDA failed (or there is no GPU).
    pub const CUDA: i32 = 7;
    /// The bootstrap failed (join, collective, peer lost there).
    pub const BOOTSTRAP: i32 = 8;
    /// The transport failed to open or connect.
    pub const TRANSPORT: i32 = 9;
    /// A collective call differed across PEs.
    pub const MISMATCH: i32 = 10;
    /// An internal error (a bug): the message says where.
    pub const INTERNAL: i32 = 11;
    /// Not supported here.
    pub const UNSUPPORTED: i32 = 12;
}

/// The PE of this process, while initialized.
pub(crate) struct Global {
    pub s: Pshmem,
}

pub(crate) static STATE: RwLock<Option<Arc<Global>>> = RwLock::new(None);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `msg` as this thread's last error.
pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// The code of a runtime error.
pub(crate) fn code_of(e: &Error) -> i32 {
    match e.kind() {
        ErrorKind::InvalidArgument => code::INVALID_ARG,
        ErrorKind::OutOfMemory => code::OUT_OF_MEMORY,
        ErrorKind::PeerFailed => code::PEER_FAILED,
        ErrorKind::Timeout => code::TIMEOUT,
        ErrorKind::Config => code::CONFIG,
        ErrorKind::Cuda => code::CUDA,
        ErrorKind::Bootstrap => code::BOOTSTRAP,
        ErrorKind::Transport => code::TRANSPORT,
        ErrorKind::Mismatch => code::MISMATCH,
        ErrorKind::Finalized => code::NOT_INITIALIZED,
        ErrorKind::Internal => code::INTERNAL,
    }
}

/// A failure of a C call: its code and message.
pub(crate) struct Fail {
    pub code: i32,
    pub msg: String,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail {
            code: code_of(&e),
            msg: e.to_string(),
        }
    }
}

impl Fail {
    pub fn new(code: i32, msg: impl Into<String>) -> Self {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

pub(crate) type R<T> = Result<T, Fail>;

/// Runs `f` behind the panic guard: `Ok` is returned, a failure or a panic becomes `err` with
/// the message recorded for `pshmem_last_error`.
pub(crate) fn guard<T>(op: &str, err: impl FnOnce(i32) -> T, f: impl FnOnce() -> R<T>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(fail)) => {
            set_last_error(&format!("{op}: {}", fail.msg));
            err(fail.code)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last_error(&format!("{op}: internal error: {what}"));
            err(code::INTERNAL)
        }
    }
}

/// A call returning an error code.
pub(crate) fn status(op: &str, f: impl FnOnce() -> R<()>) -> c_int {
    guard(op, |c| c, || f().map(|()| code::SUCCESS))
}

/// The initialized PE, or `NOT_INITIALIZED`. Device states registered since the last call (a
/// library loaded after init) are filled first, so the library's kernels can run after any
/// call of ours.
pub(crate) fn global() -> R<Arc<Global>> {
    let g = STATE
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or_else(|| {
            Fail::new(
                code::NOT_INITIALIZED,
                "the runtime is not initialized (call pshmem_init first)",
            )
        })?;
    if registry::pending() {
        registry::fill_pending(&g)?;
    }
    Ok(g)
}
