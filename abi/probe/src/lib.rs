//! # pshmem-abi-probe
//!
//! Test-only. Reads probe tables: the C compiler's view of a shared header (each size, field
//! offset and constant under its C name), compiled by a build script from a probe source that
//! lists them with the macros of `include/pshmem_probe.h` (`pshmem_cuda_build::c_probe`).
//! [`abi()`] is the table of the shared headers under `abi/include` (`abi.h`, `ring.h`,
//! `state.h`, `types.h`, the runtime kernels' arguments); a crate with headers of its own
//! (`ep`, `tests`, `benches`) compiles its own table and reads it with [`Probe::read`] from its
//! tests.
//!
//! Every user takes this crate as a dev-dependency, so no shipped library (`libpshmem.so`, the
//! Python extension) links a probe: the tables exist only in test binaries.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char};

/// One entry of a probe table (`struct pshmem_probe_entry`).
#[repr(C)]
#[derive(Debug)]
pub struct Entry {
    name: *const c_char,
    value: u64,
}

/// A probe table's function: writes the number of entries and returns the static array.
pub type Table = unsafe extern "C" fn(n: *mut usize) -> *const Entry;

/// The (name, value) pairs of one probe table.
#[derive(Debug, Clone)]
pub struct Probe {
    what: &'static str,
    values: Vec<(&'static str, u64)>,
}

impl Probe {
    /// Reads the table `table` (`what` names it in failures).
    ///
    /// # Safety
    /// `table` must be a function defined by `PSHMEM_PROBE_TABLE`: it returns a pointer to a
    /// static array of entries whose names are string literals, and writes its length.
    pub unsafe fn read(what: &'static str, table: Table) -> Self {
        let mut n = 0usize;
        // SAFETY: the table returns a pointer to a static array and writes its length (caller).
        let p = unsafe { table(&mut n) };
        // SAFETY: `p` points to `n` entries of static storage.
        let entries = unsafe { std::slice::from_raw_parts(p, n) };
        let values = entries
            .iter()
            .map(|e| {
                // SAFETY: every name is a string literal of the table (static, NUL-terminated).
                let name = unsafe { CStr::from_ptr(e.name) };
                (name.to_str().expect("ASCII names"), e.value)
            })
            .collect();
        Self { what, values }
    }

    /// Every (name, value): `sizeof T`, `T.field` (offsets) and constants under their C names.
    pub fn values(&self) -> &[(&'static str, u64)] {
        &self.values
    }

    /// The value reported under `name`; panics (naming it and the table) when there is none.
    pub fn value(&self, name: &str) -> u64 {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("the {} probe reports nothing named {name:?}", self.what))
    }

    /// Asserts that a Rust mirror of C type `t` has the C compiler's size and field offsets
    /// (`fields`: the C field names with the mirror's offsets).
    pub fn assert_mirror(&self, t: &str, fields: &[(&str, usize)], size: usize) {
        for (f, off) in fields {
            assert_eq!(self.value(&format!("{t}.{f}")), *off as u64, "{t}.{f}");
        }
        assert_eq!(
            self.value(&format!("sizeof {t}")),
            size as u64,
            "sizeof {t}"
        );
    }

    /// Asserts that every (C name, Rust value) pair equals the C compiler's value.
    pub fn assert_constants(&self, pairs: &[(&str, u64)]) {
        for (name, v) in pairs {
            assert_eq!(self.value(name), *v, "{name}");
        }
    }
}

/// Asserts that Rust struct `$t` mirrors C type `$c` field for field, by the same names:
/// `assert_mirror!(probe, "pshmem_k_rma_args_t", RmaArgs { dest, src, n, pe })`. List every
/// field: the size check alone would miss two fields swapped.
#[macro_export]
macro_rules! assert_mirror {
    ($probe:expr, $c:literal, $t:ty { $($f:ident),+ $(,)? }) => {
        $probe.assert_mirror(
            $c,
            &[$((stringify!($f), ::std::mem::offset_of!($t, $f))),+],
            ::std::mem::size_of::<$t>(),
        )
    };
}

unsafe extern "C" {
    fn pshmem_abi_probe(n: *mut usize) -> *const Entry;
}

/// The table of the shared headers under `abi/include`.
pub fn abi() -> Probe {
    // SAFETY: `pshmem_abi_probe` is defined by PSHMEM_PROBE_TABLE in src/abi.c.
    unsafe { Probe::read("abi", pshmem_abi_probe) }
}

/// [`Probe::value`] of the [`abi()`] table.
pub fn value(name: &str) -> u64 {
    abi().value(name)
}

/// [`Probe::assert_mirror`] against the [`abi()`] table.
pub fn assert_mirror(t: &str, fields: &[(&str, usize)], size: usize) {
    abi().assert_mirror(t, fields, size)
}

/// [`Probe::assert_constants`] against the [`abi()`] table.
pub fn assert_constants(pairs: &[(&str, u64)]) {
    abi().assert_constants(pairs)
}
