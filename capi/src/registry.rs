//! Registered device states: every translation unit of the application that includes the
//! device API registers, from a static initializer, a function that returns the device address
//! of its own `pshmem_dstate` (kernels/include/pshmem/state.cuh). The runtime fills each once
//! its GPU part is up, and fills later registrations (a library loaded after init) at the next
//! call of the C API from any translation unit (a counter comparison when there are none).
//!
//! Registrations may arrive before anything of this library has run (static initializers of
//! the application run before `main`, in any order): the table is made of constant-initialized
//! atomics, with no allocation and no lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use crate::{Fail, Global, R, code};

/// Most registrations a process can make.
const MAX: usize = 4096;

static ADDR_FN: [AtomicUsize; MAX] = [const { AtomicUsize::new(0) }; MAX];
static SIZE: [AtomicU32; MAX] = [const { AtomicU32::new(0) }; MAX];
static VERSION: [AtomicU32; MAX] = [const { AtomicU32::new(0) }; MAX];
static FILLED: [AtomicBool; MAX] = [const { AtomicBool::new(false) }; MAX];
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Registrations below this index are filled (or unregistered).
static FILLED_UPTO: AtomicUsize = AtomicUsize::new(0);

/// Whether a registration waits to be filled: the check every call makes.
pub(crate) fn pending() -> bool {
    COUNT.load(Ordering::Acquire).min(MAX) > FILLED_UPTO.load(Ordering::Acquire)
}

/// `addr() -> device address of the registrant's state` (the application's CUDA runtime).
type AddrFn = unsafe extern "C" fn() -> *mut std::ffi::c_void;

/// Records a registration; returns its id, or -1 when the table is full.
pub(crate) fn register(addr: Option<AddrFn>, size: u32, version: u32) -> i32 {
    let Some(f) = addr else { return -1 };
    let id = COUNT.fetch_add(1, Ordering::AcqRel);
    if id >= MAX {
        return -1;
    }
    SIZE[id].store(size, Ordering::Relaxed);
    VERSION[id].store(version, Ordering::Relaxed);
    FILLED[id].store(false, Ordering::Relaxed);
    // Release: a filler that sees the function also sees its size and version.
    ADDR_FN[id].store(f as usize, Ordering::Release);
    id as i32
}

/// Forgets a registration (its translation unit is being unloaded).
pub(crate) fn unregister(id: i32) {
    if let Some(slot) = usize::try_from(id).ok().filter(|&i| i < MAX) {
        ADDR_FN[slot].store(0, Ordering::Release);
    }
}

/// Fills every registered state not filled yet; a no-op until the GPU part is up.
pub(crate) fn fill_pending(g: &Global) -> R<()> {
    let Ok(gpu) = g.s.gpu() else { return Ok(()) };
    let n = COUNT.load(Ordering::Acquire).min(MAX);
    for i in 0..n {
        let f = ADDR_FN[i].load(Ordering::Acquire);
        if f == 0 || FILLED[i].load(Ordering::Acquire) {
            continue;
        }
        // The application's CUDA runtime adopts the context current on this thread: make it
        // this PE's (the device's primary context).
        gpu.context()
            .bind_to_thread()
            .map_err(|e| Fail::new(code::CUDA, format!("binding the CUDA context: {e}")))?;
        // SAFETY: `f` was registered as an `AddrFn` by the device API's static initializer
        // (state.cuh), in a translation unit still loaded (unloading unregisters it).
        let addr = unsafe { std::mem::transmute::<usize, AddrFn>(f)() } as u64;
        if addr == 0 {
            return Err(Fail::new(
                code::CUDA,
                "a translation unit's pshmem_dstate has no device address \
                 (cudaGetSymbolAddress failed): is its CUDA runtime on this device?",
            ));
        }
        gpu.fill_state_at(
            addr,
            SIZE[i].load(Ordering::Relaxed) as usize,
            VERSION[i].load(Ordering::Relaxed),
        )?;
        FILLED[i].store(true, Ordering::Release);
    }
    // Release: a caller that sees the new bound sees the states' fills before it.
    FILLED_UPTO.fetch_max(n, Ordering::AcqRel);
    Ok(())
}
