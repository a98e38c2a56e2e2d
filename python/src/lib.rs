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
mod ep;
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

#[pymodule]
fn _pshmem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    ops::register(m)?;
    ep::register(m)?;
    Ok(())
}
