//! One Python exception class per kind of runtime error, all under `PshmemError`. The message
//! is the runtime's own (`PE 1: put to PE 5, but the job has 2 PEs (0..2)`).

use pshmem::{Error, error::ErrorKind};
use pyo3::{create_exception, exceptions::PyRuntimeError, prelude::*};

create_exception!(pshmem, PshmemError, PyRuntimeError, "Any error of pshmem.");
create_exception!(
    pshmem,
    NotInitialized,
    PshmemError,
    "pshmem is not initialized, or was finalized."
);
create_exception!(
    pshmem,
    InvalidArgument,
    PshmemError,
    "A bad argument: a PE, an address not on the symmetric heap, a size, a team, a dtype."
);
create_exception!(
    pshmem,
    OutOfMemory,
    PshmemError,
    "The symmetric heap (or the team table) has no room."
);
create_exception!(
    pshmem,
    PeerFailed,
    PshmemError,
    "A peer died, or the data path to it failed."
);
create_exception!(
    pshmem,
    Timeout,
    PshmemError,
    "A wait ran past PSHMEM_OP_TIMEOUT."
);
create_exception!(
    pshmem,
    ConfigError,
    PshmemError,
    "A bad setting (an environment variable or a configuration value)."
);
create_exception!(
    pshmem,
    CudaError,
    PshmemError,
    "CUDA failed, or there is no GPU."
);
create_exception!(
    pshmem,
    BootstrapError,
    PshmemError,
    "The bootstrap failed: joining the job, a bootstrap collective, a lost peer there."
);
create_exception!(
    pshmem,
    TransportError,
    PshmemError,
    "The transport (libfabric) failed to open or connect."
);
create_exception!(
    pshmem,
    CollectiveMismatch,
    PshmemError,
    "PEs called a collective operation differently."
);
create_exception!(
    pshmem,
    InternalError,
    PshmemError,
    "An internal error of pshmem (a bug): the message says where."
);

/// The exception of a runtime error (by the runtime's own classification of it).
pub(crate) fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::InvalidArgument => InvalidArgument::new_err(msg),
        ErrorKind::OutOfMemory => OutOfMemory::new_err(msg),
        ErrorKind::PeerFailed => PeerFailed::new_err(msg),
        ErrorKind::Timeout => Timeout::new_err(msg),
        ErrorKind::Config => ConfigError::new_err(msg),
        ErrorKind::Cuda => CudaError::new_err(msg),
        ErrorKind::Bootstrap => BootstrapError::new_err(msg),
        ErrorKind::Transport => TransportError::new_err(msg),
        ErrorKind::Mismatch => CollectiveMismatch::new_err(msg),
        ErrorKind::Finalized => NotInitialized::new_err(msg),
        ErrorKind::Internal => InternalError::new_err(msg),
    }
}

/// `InvalidArgument` naming this PE and the operation.
pub(crate) fn invalid(me: usize, op: &str, detail: impl std::fmt::Display) -> PyErr {
    InvalidArgument::new_err(format!("PE {me}: {op}: {detail}"))
}

/// An invalid argument found before anything ran (no PE to name yet).
pub(crate) fn invalid_arg(op: &str, detail: impl std::fmt::Display) -> PyErr {
    InvalidArgument::new_err(format!("{op}: {detail}"))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PshmemError", py.get_type::<PshmemError>())?;
    m.add("NotInitialized", py.get_type::<NotInitialized>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("OutOfMemory", py.get_type::<OutOfMemory>())?;
    m.add("PeerFailed", py.get_type::<PeerFailed>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add("BootstrapError", py.get_type::<BootstrapError>())?;
    m.add("TransportError", py.get_type::<TransportError>())?;
    m.add("CollectiveMismatch", py.get_type::<CollectiveMismatch>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
