//! Transport errors: each names the operation and, where one is involved, the peer.

/// Everything a transport can report.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A libfabric call failed.
    #[error("{op} failed: {text} (libfabric error {code})")]
    Ofi {
        /// The call.
        op: &'static str,
        /// Its negated return code.
        code: i32,
        /// `fi_strerror` text.
        text: String,
    },
    /// An operation completed with an error (read from the completion queue).
    #[error(
        "{op} to PE {pe} failed on rail {rail}: {text} (error {code}, provider error {prov_errno})"
    )]
    Completion {
        /// The peer.
        pe: crate::Pe,
        /// The rail (endpoint, NIC) that reported it (0 where the transport has one).
        rail: usize,
        /// The operation.
        op: &'static str,
        /// libfabric error code.
        code: i32,
        /// Provider-specific error code.
        prov_errno: i32,
        /// `fi_strerror`/`fi_cq_strerror` text.
        text: String,
    },
    /// No provider matched.
    #[error(
        "no libfabric provider {wanted} (PSHMEM_PROVIDER; pshmem-info lists those here): {reason}"
    )]
    NoProvider {
        /// What was asked for.
        wanted: String,
        /// Why nothing matched.
        reason: String,
    },
    /// An access outside a registered region.
    #[error(
        "{op} to PE {pe}: bytes {offset}..{end} are outside the {side} region of {region_len} bytes"
    )]
    OutOfBounds {
        /// The peer.
        pe: crate::Pe,
        /// The operation.
        op: &'static str,
        /// "local" or "remote".
        side: &'static str,
        /// Start offset.
        offset: u64,
        /// End offset.
        end: u64,
        /// Region length.
        region_len: u64,
    },
    /// The peer is gone; pending and later operations to it fail.
    #[error("{op} to PE {pe}: peer lost ({reason})")]
    PeerLost {
        /// The peer.
        pe: crate::Pe,
        /// The operation.
        op: &'static str,
        /// How it was noticed.
        reason: String,
    },
    /// Bad arguments.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Not offered by this transport.
    #[error("{op} is not supported by {transport}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The transport/provider.
        transport: String,
    },
    /// An exchange through the layer above (the runtime's bootstrap) failed while connecting
    /// the transport.
    #[error("exchanging {what} between the PEs failed: {source}")]
    Exchange {
        /// What was being exchanged.
        what: &'static str,
        /// The exchange's own error.
        #[source]
        source: crate::ExchangeError,
    },
    /// An environment variable this transport reads holds a value it does not take.
    #[error("transport configuration: {0}")]
    Config(#[from] pshmem_env::EnvError),
    /// PEs opened different fabrics (or rail counts).
    #[error(
        "PE {pe} uses {theirs}, this PE {ours}: give every PE the same provider \
         (PSHMEM_PROVIDER or FI_PROVIDER) and PSHMEM_RAILS"
    )]
    Mismatch {
        /// The other PE.
        pe: crate::Pe,
        /// What it uses.
        theirs: String,
        /// What this PE uses.
        ours: String,
    },
    /// An OS-level failure (simulated fabric sockets).
    #[error("{op}: {message}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The OS error.
        message: String,
    },
}

impl TransportError {
    /// The peer the error concerns, when it names one.
    pub fn pe(&self) -> Option<crate::Pe> {
        match self {
            Self::Completion { pe, .. }
            | Self::OutOfBounds { pe, .. }
            | Self::PeerLost { pe, .. }
            | Self::Mismatch { pe, .. } => Some(*pe),
            _ => None,
        }
    }
}

/// Why a post did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PostError {
    /// Back-pressure (`-FI_EAGAIN`, a full queue): poll completions and post again.
    #[error("transport queue full, retry after polling")]
    Retry,
    /// A real failure (boxed: posting is the hot path, and a small `Result` is cheap to return).
    #[error(transparent)]
    Failed(Box<TransportError>),
}

impl From<TransportError> for PostError {
    fn from(e: TransportError) -> Self {
        PostError::Failed(Box::new(e))
    }
}

/// Shorthand.
pub type Result<T, E = TransportError> = std::result::Result<T, E>;
