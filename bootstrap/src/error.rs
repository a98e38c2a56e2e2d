//! Typed bootstrap errors. Each names the rank that reports it, the operation and, where one is
//! involved, the peer, and says what to check.

use std::{net::SocketAddr, time::Duration};

use crate::frame::FrameError;

/// Everything that can go wrong while joining or using the bootstrap network.
#[derive(Debug, thiserror::Error, Clone)]
#[non_exhaustive]
pub enum BootstrapError {
    /// An environment variable holds a value that cannot be used.
    #[error("bootstrap configuration: {0}")]
    Config(#[from] pshmem_env::EnvError),
    /// The launcher's environment names a job this rank cannot join as described.
    #[error("rank {rank} of {world} (started by {launcher}): {reason}")]
    Launch {
        /// The rank reporting.
        rank: usize,
        /// The job's size, as the launcher gave it.
        world: usize,
        /// Which launcher's variables were read.
        launcher: String,
        /// What went wrong, and what to set.
        reason: String,
    },
    /// Rank 0 could not listen because another process holds the port.
    #[error(
        "rank 0: bootstrap address {addr} is already in use (another job on this port?); \
         choose another with PSHMEM_BOOTSTRAP_ADDR or MASTER_PORT"
    )]
    AddrInUse {
        /// The address.
        addr: SocketAddr,
    },
    /// Rank 0 could not listen for another reason.
    #[error("rank 0: cannot listen on {addr}: {message}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        message: String,
    },
    /// A non-root rank never reached rank 0.
    #[error(
        "rank {rank}: cannot reach rank 0 at {addr} after {waited:.1?} ({last_error}); \
         is rank 0 running, and is the address reachable from this host?"
    )]
    RootUnreachable {
        /// The rank reporting.
        rank: usize,
        /// The root's address.
        addr: String,
        /// How long it tried.
        waited: Duration,
        /// The last connection error.
        last_error: String,
    },
    /// Some ranks never joined within the join timeout.
    #[error(
        "rank {rank}: ranks {missing:?} did not join within {timeout:.1?} \
         (did they start? same PSHMEM_BOOTSTRAP_ADDR and job secret? raise PSHMEM_BOOTSTRAP_TIMEOUT)"
    )]
    JoinTimeout {
        /// The rank reporting.
        rank: usize,
        /// Ranks that never arrived.
        missing: Vec<usize>,
        /// The join timeout.
        timeout: Duration,
    },
    /// Two processes claimed the same rank.
    #[error(
        "rank {rank} joined twice (from {first} and {second}): check the launcher's rank assignment"
    )]
    DuplicateRank {
        /// The duplicated rank.
        rank: usize,
        /// Where the first came from.
        first: String,
        /// Where the second came from.
        second: String,
    },
    /// A rank believes the job has another size.
    #[error(
        "rank {rank} says the world size is {got}, rank 0 says {expected}: all ranks must agree"
    )]
    WorldSizeMismatch {
        /// The disagreeing rank.
        rank: usize,
        /// Rank 0's world size.
        expected: usize,
        /// The rank's world size.
        got: usize,
    },
    /// A rank number not below the world size.
    #[error("rank {rank} is out of range for world size {world}")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// The world size.
        world: usize,
    },
    /// The peer speaks another protocol version.
    #[error(
        "{peer} speaks bootstrap protocol version {theirs}, this build speaks {ours}: run the same proxyshmem build on every rank"
    )]
    VersionMismatch {
        /// Who.
        peer: String,
        /// Our version.
        ours: u16,
        /// Theirs.
        theirs: u16,
    },
    /// Rank 0 refused our connection.
    #[error("rank {rank}: rank 0 rejected this rank: {reason}")]
    Rejected {
        /// The rank reporting.
        rank: usize,
        /// Rank 0's reason.
        reason: String,
    },
    /// A peer sent bytes that are not a valid frame.
    #[error("rank {rank}: bad frame from {peer}: {source}")]
    Protocol {
        /// The rank reporting.
        rank: usize,
        /// The peer.
        peer: String,
        /// What was wrong.
        #[source]
        source: FrameError,
    },
    /// A peer died (its connection closed or went silent) while the job was running.
    #[error("rank {rank}: rank {dead} died or disconnected ({detail}) [during {op}]")]
    PeerDied {
        /// The rank reporting.
        rank: usize,
        /// The dead rank.
        dead: usize,
        /// What was happening.
        op: String,
        /// How it was noticed.
        detail: String,
    },
    /// The job was aborted for another reason relayed by rank 0.
    #[error("rank {rank}: job aborted: {reason} [during {op}]")]
    Aborted {
        /// The rank reporting.
        rank: usize,
        /// The reason.
        reason: String,
        /// What was happening.
        op: String,
    },
    /// A collective waited too long for live ranks.
    #[error(
        "rank {rank}: {op} timed out after {waited:.1?} waiting for ranks {waiting_for:?} (raise PSHMEM_BOOTSTRAP_OP_TIMEOUT if they are just slow)"
    )]
    Timeout {
        /// The rank reporting.
        rank: usize,
        /// The operation.
        op: String,
        /// How long.
        waited: Duration,
        /// Ranks not heard from.
        waiting_for: Vec<usize>,
    },
    /// Ranks called different collectives (or the same one with different roots) at the same step.
    #[error(
        "rank {rank}: collective mismatch at step {seq}: rank 0 expected {expected}, rank {other} called {got}"
    )]
    CollectiveMismatch {
        /// The rank reporting.
        rank: usize,
        /// The sequence number.
        seq: u64,
        /// The other rank.
        other: usize,
        /// Rank 0's collective.
        expected: String,
        /// The other rank's collective.
        got: String,
    },
    /// Bad arguments to a collective.
    #[error("rank {rank}: {op}: {reason}")]
    InvalidArgument {
        /// The rank reporting.
        rank: usize,
        /// The operation.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// A socket operation failed.
    #[error("rank {rank}: {op}: {message}")]
    Io {
        /// The rank reporting.
        rank: usize,
        /// The operation.
        op: String,
        /// The OS error.
        message: String,
    },
    /// The handle was used after finalize.
    #[error("rank {rank}: {op} called after the bootstrap was finalized")]
    Finalized {
        /// The rank reporting.
        rank: usize,
        /// The operation.
        op: String,
    },
}

impl BootstrapError {
    /// The rank this error says died, if it is a peer death.
    pub fn dead_rank(&self) -> Option<usize> {
        match self {
            Self::PeerDied { dead, .. } => Some(*dead),
            _ => None,
        }
    }

    /// Whether this is a peer that left the job alone (`Bootstrap::leave`): a death for what
    /// needs it, but no fault to report by itself.
    pub fn is_leave(&self) -> bool {
        matches!(self, Self::PeerDied { detail, .. } if detail.ends_with(crate::net::LEFT))
    }
}

/// Shorthand.
pub type Result<T, E = BootstrapError> = std::result::Result<T, E>;
