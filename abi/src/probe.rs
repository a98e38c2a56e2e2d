//! The C compiler's view of the shared headers (`abi.h`, `ring.h`, `state.h`), compiled from
//! `src/probe.c` by the build script: each size, offset and constant by name, for the tests
//! that compare the Rust mirrors with it.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char};

#[repr(C)]
struct Entry {
    name: *const c_char,
    value: u64,
}

unsafe extern "C" {
    fn pshmem_abi_probe(n: *mut usize) -> *const Entry;
}

/// Every (name, value) the probe reports: `sizeof T`, `T.field` (offsets) and constants under
/// their C names.
pub fn values() -> Vec<(&'static str, u64)> {
    let mut n = 0usize;
    // SAFETY: the probe returns a pointer to a static array and writes its length to `n`.
    let p = unsafe { pshmem_abi_probe(&mut n) };
    // SAFETY: `p` points to `n` entries of static storage.
    let entries = unsafe { std::slice::from_raw_parts(p, n) };
    entries
        .iter()
        .map(|e| {
            // SAFETY: every name is a string literal of the probe (static, NUL-terminated).
            let name = unsafe { CStr::from_ptr(e.name) };
            (name.to_str().expect("ASCII names"), e.value)
        })
        .collect()
}

/// The value the probe reports under `name`; panics (naming it) when the probe has none.
pub fn value(name: &str) -> u64 {
    values()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("the C probe reports nothing named {name:?}"))
}

/// Asserts that a Rust mirror of C type `t` has the C compiler's size and field offsets
/// (`fields`: the C field names with the mirror's offsets).
pub fn assert_mirror(t: &str, fields: &[(&str, usize)], size: usize) {
    for (f, off) in fields {
        assert_eq!(value(&format!("{t}.{f}")), *off as u64, "{t}.{f}");
    }
    assert_eq!(value(&format!("sizeof {t}")), size as u64, "sizeof {t}");
}

/// Asserts that every (C name, Rust value) pair equals the C compiler's value.
pub fn assert_constants(pairs: &[(&str, u64)]) {
    for (name, v) in pairs {
        assert_eq!(value(name), *v, "{name}");
    }
}
