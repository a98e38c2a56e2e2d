//! # pshmem-tools
//!
//! Owns proxyshmem's command-line tools, so that the libraries carry no CLI dependencies:
//!
//! - `pshmrun`: the local launcher (N processes of one job, rank-prefixed output, failure
//!   propagation);
//! - `pshmem-info`: the topology, devices, providers, placement and environment as proxyshmem
//!   sees them;
//! - [`init_logging`]: the `PSHMEM_LOG` subscriber that every binary of the project installs.

#![forbid(unsafe_code)]

/// Installs a tracing subscriber that honours `PSHMEM_LOG` (once per process; later calls are
/// no-ops). Binaries and tests call it; the libraries never install one by themselves.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_new(pshmem_env::LOG.value())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}
