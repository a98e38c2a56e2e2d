//! The runtime's errors: one variant per kind of failure, each naming this PE (`me`), the
//! operation, and the peer where one is concerned.

use std::time::Duration;

use pshmem_abi::describe_pe;
use pshmem_bootstrap::BootstrapError;
use pshmem_proxy::{FaultCause, ProxyError};
use pshmem_transport::TransportError;

use crate::cuda::CudaError;

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bootstrap failed (join, collective, or a peer's death noticed there).
    #[error(transparent)]
    Bootstrap(Box<BootstrapError>),
    /// Opening or connecting the transport failed.
    #[error("PE {me}: {what}: {source}")]
    Transport {
        /// This PE.
        me: usize,
        /// What was being done.
        what: &'static str,
        /// The transport's error.
        #[source]
        source: Box<TransportError>,
    },
    /// A proxy thread could not start or stopped badly.
    #[error(transparent)]
    Proxy(Box<ProxyError>),
    /// Setting up the symmetric heap failed.
    #[error("PE {me}: symmetric heap: {what}: {detail}")]
    Heap {
        /// This PE.
        me: usize,
        /// What was being done.
        what: &'static str,
        /// Details.
        detail: String,
    },
    /// An environment variable with a value it does not take.
    #[error("configuration: {0}")]
    Env(#[from] pshmem_env::EnvError),
    /// A bad configuration value.
    #[error("PE {me}: configuration: {detail}")]
    Config {
        /// This PE.
        me: usize,
        /// Details.
        detail: String,
    },
    /// A PE number outside the job.
    #[error("PE {me}: {op} to PE {pe}, but the job has {n_pes} PEs (0..{n_pes})")]
    InvalidPe {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The PE given.
        pe: usize,
        /// PEs in the job.
        n_pes: usize,
    },
    /// An access outside the user part of the symmetric heap.
    #[error(
        "PE {me}: {op}: bytes {offset}..{end} are outside the symmetric heap's user range \
         {start}..{heap} (was the address allocated with malloc?)"
    )]
    OutOfHeap {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// Start offset.
        offset: u64,
        /// End offset (saturated).
        end: u64,
        /// First user byte.
        start: u64,
        /// Heap size.
        heap: u64,
    },
    /// A size that overflows.
    #[error("PE {me}: {op}: size {count} x {size} overflows")]
    SizeOverflow {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// Count.
        count: usize,
        /// Element size.
        size: usize,
    },
    /// An atomic or wait on an address not aligned to its width.
    #[error("PE {me}: {op}: offset {offset} is not aligned to {align} bytes")]
    Misaligned {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The offset.
        offset: u64,
        /// Required alignment.
        align: u64,
    },
    /// An alignment that is not a power of two.
    #[error("PE {me}: {op}: alignment {align} is not a power of two")]
    BadAlignment {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The alignment given.
        align: usize,
    },
    /// The runtime was finalized.
    #[error("PE {me}: {op} after finalize")]
    Finalized {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
    },
    /// The symmetric heap has no room.
    #[error(
        "PE {me}: {op} of {requested} bytes: the symmetric heap is exhausted (largest free \
         block {largest_free} bytes; raise {raise})"
    )]
    HeapExhausted {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The variable that sizes this heap.
        raise: &'static str,
        /// Bytes asked for.
        requested: u64,
        /// Largest free block.
        largest_free: u64,
    },
    /// A collective call that differs across PEs (size, order, kind).
    #[error("PE {me}: {op}: PEs called it differently: {detail}")]
    CollectiveMismatch {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// What differs, per PE.
        detail: String,
    },
    /// Freeing an address that is not an allocation.
    #[error("PE {me}: free of offset {offset}, which is not the start of an allocation")]
    BadFree {
        /// This PE.
        me: usize,
        /// The offset.
        offset: u64,
    },
    /// CUDA (the driver, a device, a kernel) failed, or the GPU path is unavailable.
    #[error("PE {me}: GPU: {what}: {source}")]
    Cuda {
        /// This PE.
        me: usize,
        /// What was being done.
        what: &'static str,
        /// The driver's error, or why CUDA cannot be used.
        #[source]
        source: CudaError,
    },
    /// A peer died while this PE waited on it.
    #[error("PE {me}: {op}: {} died: {detail}", describe_pe(*pe))]
    PeerDied {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The dead PE.
        pe: Option<usize>,
        /// Details.
        detail: String,
        /// The error that revealed it, when there is one.
        #[source]
        cause: Option<Box<FaultCause>>,
    },
    /// An operation failed in the data path.
    #[error("PE {me}: {op}: the data path failed ({}): {detail}", describe_pe(*pe))]
    OpFailed {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The PE concerned.
        pe: Option<usize>,
        /// Details.
        detail: String,
        /// The transport's or the device's error behind it, when there is one.
        #[source]
        cause: Option<Box<FaultCause>>,
    },
    /// A wait ran past `PSHMEM_OP_TIMEOUT`.
    #[error(
        "PE {me}: {op} waited {waited:.1?} without completing (PSHMEM_OP_TIMEOUT): a peer may be \
         stuck or the condition never met"
    )]
    Timeout {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// How long.
        waited: Duration,
    },
    /// An address in neither symmetric heap of this PE (the host API by address).
    #[error(
        "PE {me}: {op}: {addr:#x} (+{len} bytes) is not on a symmetric heap of this PE: \
         allocate it with the symmetric allocator"
    )]
    NotSymmetric {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The address given.
        addr: u64,
        /// The bytes from it.
        len: usize,
    },
    /// An argument that the operation cannot take (a bitwise reduction of a floating type, a
    /// root outside the team, …).
    #[error("PE {me}: {op}: {detail}")]
    InvalidArgument {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A team handle that names no team this PE knows (or one that cannot be used so).
    #[error("PE {me}: {op}: team {team} does not exist here (or cannot be used for this)")]
    InvalidTeam {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// The handle given.
        team: i32,
    },
    /// No team slot is free on every member of a new team.
    #[error(
        "PE {me}: {op}: no team slot free on every member ({max} slots: raise PSHMEM_MAX_TEAMS \
         or destroy teams no longer used)"
    )]
    TeamsExhausted {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// Slots per PE.
        max: usize,
    },
    /// A barrier ran past `PSHMEM_OP_TIMEOUT`: the PEs that have not arrived.
    #[error(
        "PE {me}: {op} waited {waited:.1?} (PSHMEM_OP_TIMEOUT) for PE {waiting_for}: {}",
        stragglers(missing, silent)
    )]
    NotArrived {
        /// This PE.
        me: usize,
        /// The operation.
        op: &'static str,
        /// How long.
        waited: Duration,
        /// The PE whose signal this PE was waiting for.
        waiting_for: usize,
        /// PEs that have not entered the barrier.
        missing: Vec<usize>,
        /// PEs whose arrival could not be read.
        silent: Vec<usize>,
    },
}

/// "PE 2" or "PEs 2, 3".
fn pes(list: &[usize]) -> String {
    let names: Vec<String> = list.iter().map(ToString::to_string).collect();
    match list.len() {
        1 => format!("PE {}", names[0]),
        _ => format!("PEs {}", names.join(", ")),
    }
}

/// Who held a barrier up, in words.
fn stragglers(missing: &[usize], silent: &[usize]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        let verb = if missing.len() == 1 { "has" } else { "have" };
        parts.push(format!("{} {verb} not arrived", pes(missing)));
    }
    if !silent.is_empty() {
        let whose = if silent.len() == 1 { "its" } else { "their" };
        parts.push(format!(
            "{} did not answer (stopped, or {whose} path is stuck)",
            pes(silent)
        ));
    }
    if parts.is_empty() {
        parts.push("every PE has arrived, but the signal did not come in time".into());
    }
    parts.join("; ")
}

impl From<BootstrapError> for Error {
    fn from(e: BootstrapError) -> Self {
        Error::Bootstrap(Box::new(e))
    }
}

impl From<ProxyError> for Error {
    fn from(e: ProxyError) -> Self {
        Error::Proxy(Box::new(e))
    }
}

/// The kinds the bindings report errors by (a C error code, a Python exception class): one
/// classification of the variants, kept here beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A bad argument: PE, address, range, alignment, size, team.
    InvalidArgument,
    /// The symmetric heap (or the team table) has no room.
    OutOfMemory,
    /// A peer died or the data path failed.
    PeerFailed,
    /// A wait ran past `PSHMEM_OP_TIMEOUT`.
    Timeout,
    /// A bad setting.
    Config,
    /// CUDA failed, or there is no GPU.
    Cuda,
    /// The bootstrap failed.
    Bootstrap,
    /// The transport failed to open or connect.
    Transport,
    /// A collective call differed across PEs.
    Mismatch,
    /// The PE is finalized.
    Finalized,
    /// Anything else (a bug).
    Internal,
}

impl Error {
    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidPe { .. }
            | Error::OutOfHeap { .. }
            | Error::Misaligned { .. }
            | Error::BadAlignment { .. }
            | Error::SizeOverflow { .. }
            | Error::BadFree { .. }
            | Error::InvalidTeam { .. }
            | Error::NotSymmetric { .. }
            | Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::HeapExhausted { .. } | Error::TeamsExhausted { .. } => ErrorKind::OutOfMemory,
            Error::PeerDied { .. } | Error::OpFailed { .. } | Error::Proxy(_) => {
                ErrorKind::PeerFailed
            }
            Error::Timeout { .. } | Error::NotArrived { .. } => ErrorKind::Timeout,
            Error::Env(_) | Error::Config { .. } => ErrorKind::Config,
            Error::Cuda { .. } => ErrorKind::Cuda,
            Error::Bootstrap(_) => ErrorKind::Bootstrap,
            Error::Transport { .. } => ErrorKind::Transport,
            Error::CollectiveMismatch { .. } => ErrorKind::Mismatch,
            Error::Finalized { .. } => ErrorKind::Finalized,
            Error::Heap { .. } => ErrorKind::Internal,
        }
    }

    /// The dead or failing PE this error names, if any.
    pub fn pe(&self) -> Option<usize> {
        match self {
            Error::PeerDied { pe, .. } | Error::OpFailed { pe, .. } => *pe,
            Error::InvalidPe { pe, .. } => Some(*pe),
            Error::NotArrived {
                missing, silent, ..
            } => missing.first().or(silent.first()).copied(),
            Error::Bootstrap(b) => b.dead_rank(),
            _ => None,
        }
    }
}
