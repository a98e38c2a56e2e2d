//! The symmetric heaps' allocations and `pshmem_ptr`.

use super::*;

/// A collective allocation of `size` bytes of `heap` (NULL for 0 bytes, without the
/// collective, or on error). The GPU heap is completed on demand first.
fn alloc(op: &str, heap: HeapKind, size: usize, align: usize, zero: bool) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    guard(
        op,
        |_| std::ptr::null_mut(),
        || {
            let g = global()?;
            if heap == HeapKind::Gpu {
                gpu_or_fail(&g)?;
            }
            Ok(g.api().malloc(heap, size, align, zero)? as *mut c_void)
        },
    )
}

/// `count * size`, or NULL with the overflow recorded.
fn total(op: &str, count: usize, size: usize) -> Option<usize> {
    let t = count.checked_mul(size);
    if t.is_none() {
        set_last_error(&format!("{op}: {count} x {size} bytes overflows"));
    }
    t
}

/// `void *pshmem_malloc(size_t)`: host symmetric memory (collective; NULL for 0 bytes or on
/// error).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_malloc(size: usize) -> *mut c_void {
    alloc("pshmem_malloc", HeapKind::Host, size, 64, false)
}

/// `void *pshmem_calloc(size_t count, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_calloc(count: usize, size: usize) -> *mut c_void {
    match total("pshmem_calloc", count, size) {
        Some(n) => alloc("pshmem_calloc", HeapKind::Host, n, 64, true),
        None => std::ptr::null_mut(),
    }
}

/// `void *pshmem_align(size_t alignment, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_align(alignment: usize, size: usize) -> *mut c_void {
    alloc("pshmem_align", HeapKind::Host, size, alignment, false)
}

/// `int pshmem_free(void *)`: either heap (collective; NULL is a no-op).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_free(p: *mut c_void) -> c_int {
    if p.is_null() {
        return code::SUCCESS;
    }
    status("pshmem_free", || Ok(global()?.api().free(p as u64)?))
}

/// `void *pshmem_ptr(const void *dest, int pe)`: `dest` itself for this PE; the address of
/// `pe`'s copy where this PE maps it (same host, direct path on); NULL otherwise (a PE outside
/// the job included).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    guard(
        "pshmem_ptr",
        |_| std::ptr::null_mut(),
        || {
            let g = global()?;
            let pe = pe_arg(pe)?;
            if pe >= g.s.n_pes() {
                return Ok(std::ptr::null_mut());
            }
            let peer = g.api().peer_addr(dest as u64, pe)?;
            Ok(peer.map_or(std::ptr::null_mut(), |a| a as *mut c_void))
        },
    )
}

/// `int pshmemx_gpu_init(int device)`: the GPU part (collective) on `device`, or with -1 the
/// device current on this thread (else PSHMEM_CUDA_DEVICE, else local rank modulo devices).
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_init(device: c_int) -> c_int {
    status("pshmemx_gpu_init", || {
        let g = global()?;
        let dev = usize::try_from(device)
            .ok()
            .or_else(pshmem::cuda::current_device);
        g.s.gpu_init_on(dev)?;
        registry::fill_pending(&g)
    })
}

/// `void *pshmemx_gpu_malloc(size_t)`: GPU symmetric memory (collective).
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_malloc(size: usize) -> *mut c_void {
    alloc("pshmemx_gpu_malloc", HeapKind::Gpu, size, 256, false)
}

/// `void *pshmemx_gpu_calloc(size_t count, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_calloc(count: usize, size: usize) -> *mut c_void {
    match total("pshmemx_gpu_calloc", count, size) {
        Some(n) => alloc("pshmemx_gpu_calloc", HeapKind::Gpu, n, 256, true),
        None => std::ptr::null_mut(),
    }
}

/// `void *pshmemx_gpu_align(size_t alignment, size_t size)`: `alignment` a power of two (the
/// block is at least 256-byte aligned).
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_align(alignment: usize, size: usize) -> *mut c_void {
    alloc(
        "pshmemx_gpu_align",
        HeapKind::Gpu,
        size,
        alignment.max(1),
        false,
    )
}

/// `int pshmemx_gpu_free(void *)` (collective; NULL is a no-op): as `pshmem_free`.
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_free(p: *mut c_void) -> c_int {
    if p.is_null() {
        return code::SUCCESS;
    }
    status("pshmemx_gpu_free", || {
        let g = global()?;
        gpu_or_fail(&g)?;
        // pshmem_free takes either heap; this one only the GPU heap's (a host block freed
        // here by mistake would leave the PEs' host heaps differing).
        if g.api().heap_of(p as u64, 1) != Some(HeapKind::Gpu) {
            return Err(Fail::new(
                code::INVALID_ARG,
                format!("{p:p} is not an allocation of the GPU symmetric heap"),
            ));
        }
        Ok(g.api().free(p as u64)?)
    })
}
