//! # pshmem-python: the `pshmem._pshmem` extension module
//!
//! The Python package's native half, over the Rust runtime (`pshmem`), not over the C ABI. It
//! works on raw addresses and byte counts: the package's Python half (`python/pshmem/`) turns
//! torch tensors into those and back (tensors cross by DLPack, see [`dlpack`]), so this crate
//! never links torch and one wheel serves every torch version.
//!
//! One PE per process, held in [`STATE`] between `init` and `finalize`. Every call that can
//! wait releases the GIL; host-side waits run in short slices and check for Python signals
//! between them, so Ctrl-C interrupts them. Runtime errors become one exception class per kind
//! ([`errors`]), with the runtime's message (which names the PE and the operation).

#![allow(unsafe_code)]

mod dlpack;
mod errors;
mod ops;

use std::sync::{Arc, RwLock};

use pshmem::Pshmem;
use pyo3::prelude::*;

/// The PE of this process, while initialized.
static STATE: RwLock<Option<Arc<Pshmem>>> = RwLock::new(None);

/// The initialized PE, or `NotInitialized`.
fn state() -> PyResult<Arc<Pshmem>> {
    STATE
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or_else(|| {
            errors::NotInitialized::new_err("pshmem is not initialized (call pshmem.init() first)")
        })
}

fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The runtime logs through `tracing`: install a subscriber from PSHMEM_LOG (warnings by
        // default), to stderr, as the launcher and the C library do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_new(pshmem_env::LOG.value())
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .try_init();
    });
}

#[pymodule]
fn _pshmem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    ops::register(m)?;
    Ok(())
}
