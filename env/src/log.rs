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
        let wanted = crate::LOG.value();
        let (filter, refused) = match tracing_subscriber::EnvFilter::try_new(&wanted) {
            Ok(f) => (f, None),
            Err(e) => (tracing_subscriber::EnvFilter::new("warn"), Some(e)),
        };
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .try_init();
        if let Some(e) = refused {
            // Logging cannot stop the program: say so, once, on standard error.
            eprintln!(
                "pshmem: warning: {}={wanted:?} is not a log filter ({e}); logging warnings only",
                crate::LOG.name
            );
        }
    });
}
