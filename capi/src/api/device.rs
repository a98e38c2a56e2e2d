//! The device state of registered CUDA modules and libraries.

use super::*;

// ---- device state -------------------------------------------------------------------------------

/// `int pshmemx_cumodule_init(CUmodule)`: fills the module's `pshmem_dstate`; an error (not an
/// abort) when it has none.
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_cumodule_init(module: *mut c_void) -> c_int {
    status("pshmemx_cumodule_init", || {
        let g = global()?;
        let gpu = gpu_or_fail(&g)?;
        // SAFETY: pshmem.h: a CUmodule the caller loaded in this PE's context.
        Ok(unsafe { gpu.init_cumodule(module, false) }?)
    })
}

/// `int pshmemx_cumodule_finalize(CUmodule)` (nothing to release)
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_cumodule_finalize(module: *mut c_void) -> c_int {
    status("pshmemx_cumodule_finalize", || {
        nothing_to_release(module, "module")
    })
}

/// A module or library's finalize: nothing is held for it, but the call is checked as its init
/// would be (a running GPU part, a handle).
fn nothing_to_release(handle: *mut c_void, what: &str) -> R<()> {
    let g = global()?;
    gpu_or_fail(&g)?;
    if handle.is_null() {
        return Err(Fail::new(code::INVALID_ARG, format!("the {what} is NULL")));
    }
    Ok(())
}

/// `int pshmemx_culibrary_init(CUlibrary)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_culibrary_init(library: *mut c_void) -> c_int {
    status("pshmemx_culibrary_init", || {
        let g = global()?;
        let gpu = gpu_or_fail(&g)?;
        // SAFETY: pshmem.h: a CUlibrary the caller loaded.
        Ok(unsafe { gpu.init_cumodule(library, true) }?)
    })
}

/// `int pshmemx_culibrary_finalize(CUlibrary)` (nothing to release)
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_culibrary_finalize(library: *mut c_void) -> c_int {
    status("pshmemx_culibrary_finalize", || {
        nothing_to_release(library, "library")
    })
}

/// `int pshmemx_buffer_register_symmetric(void *addr, size_t len, int flags)`: not provided.
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_buffer_register_symmetric(
    _a: *mut c_void,
    _l: usize,
    _f: c_int,
) -> c_int {
    set_last_error("pshmemx_buffer_register_symmetric: user buffers cannot be registered yet");
    code::UNSUPPORTED
}

/// `int pshmemx_buffer_unregister_symmetric(void *addr, size_t len)`: not provided.
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_buffer_unregister_symmetric(_a: *mut c_void, _l: usize) -> c_int {
    set_last_error("pshmemx_buffer_unregister_symmetric: user buffers cannot be registered yet");
    code::UNSUPPORTED
}

/// `int pshmemi_register_state(void *(*addr)(void), unsigned size, unsigned version)`: see
/// `registry`; returns an id, or -1 when the table is full.
#[unsafe(no_mangle)]
pub extern "C" fn pshmemi_register_state(
    addr: Option<unsafe extern "C" fn() -> *mut c_void>,
    size: u32,
    version: u32,
) -> c_int {
    registry::register(addr, size, version)
}

/// `void pshmemi_unregister_state(int id)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemi_unregister_state(id: c_int) {
    registry::unregister(id);
}

/// `int pshmemi_sync_states(void)`: completes an on-demand GPU init and fills pending
/// registrations (called before a collective launch).
#[unsafe(no_mangle)]
pub extern "C" fn pshmemi_sync_states() -> c_int {
    status("pshmemi_sync_states", || ensure_gpu(&*global()?))
}
