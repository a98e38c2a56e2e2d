//! The one logging set-up of the project: a `tracing` subscriber that honours `PSHMEM_LOG`,
//! installed by the programs and the two foreign-language front ends (`libpshmem.so`, the
//! Python extension), never by the libraries themselves. Behind the `subscriber` feature, so
//! that only those crates carry `tracing-subscriber`.

/// Installs a tracing subscriber on standard error that honours `PSHMEM_LOG` (an `EnvFilter`
/// directive; warnings when unset or unreadable), with colours only on a terminal. Once per
/// process: later calls (and a subscriber the embedding program installed first) win nothing
/// and cost nothing.
pub fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_new(crate::LOG.value())
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .try_init();
    });
}
