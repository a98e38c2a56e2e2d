//! Ordering and synchronization, and their on-stream forms.

use super::*;

/// `int pshmem_quiet(void)`: completes this PE's host-initiated operations (both heaps).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_quiet() -> c_int {
    status("pshmem_quiet", || Ok(global()?.api().quiet(false, None)?))
}

/// `int pshmem_fence(void)`: orders this PE's host-initiated operations to each PE.
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_fence() -> c_int {
    status("pshmem_fence", || Ok(global()?.api().quiet(true, None)?))
}

/// `int pshmem_barrier_all(void)`: quiet, then every PE arrives (on the GPU, as a kernel on
/// the runtime's internal stream, where the GPU part is up).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_barrier_all() -> c_int {
    status("pshmem_barrier_all", || {
        let g = global()?;
        if g.on_demand() {
            ensure_gpu(&g)?;
        }
        Ok(g.api().barrier_all(None)?)
    })
}

/// `int pshmem_sync_all(void)`: every PE arrives (nothing is completed).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_sync_all() -> c_int {
    status("pshmem_sync_all", || {
        init::team_sync(pshmem::team::TEAM_WORLD, false, None)
    })
}

// ---- on-stream (GPU) ----------------------------------------------------------------------------

/// `int pshmemx_quiet_on_stream(cudaStream_t)`: the host's operations completed now, the GPU
/// heap's on the stream.
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_quiet_on_stream(stream: CStream) -> c_int {
    status("pshmemx_quiet_on_stream", || {
        let g = global()?;
        gpu_or_fail(&g)?;
        Ok(g.api().quiet(false, Some(stream_arg(stream)))?)
    })
}

/// `int pshmemx_barrier_all_on_stream(cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_barrier_all_on_stream(stream: CStream) -> c_int {
    status("pshmemx_barrier_all_on_stream", || {
        let g = global()?;
        gpu_or_fail(&g)?;
        Ok(g.api().barrier_all(Some(stream_arg(stream)))?)
    })
}

/// `int pshmemx_sync_all_on_stream(cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_sync_all_on_stream(stream: CStream) -> c_int {
    status("pshmemx_sync_all_on_stream", || {
        init::team_sync(pshmem::team::TEAM_WORLD, false, Some(stream))
    })
}

/// `int pshmemx_team_sync_on_stream(pshmem_team_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_team_sync_on_stream(team: Team, stream: CStream) -> c_int {
    status("pshmemx_team_sync_on_stream", || {
        init::team_sync(team, false, Some(stream))
    })
}

/// `int pshmemx_barrier_on_stream(pshmem_team_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_barrier_on_stream(team: Team, stream: CStream) -> c_int {
    status("pshmemx_barrier_on_stream", || {
        init::team_sync(team, true, Some(stream))
    })
}

/// `int pshmemx_putmem_on_stream(void *dest, const void *src, size_t n, int pe, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_putmem_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_putmem_on_stream", || {
        rma::rma(true, (dest.cast_const(), src), n, pe, false, Some(stream))
    })
}

/// `int pshmemx_getmem_on_stream(void *dest, const void *src, size_t n, int pe, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_getmem_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_getmem_on_stream", || {
        rma::rma(false, (src, dest.cast_const()), n, pe, false, Some(stream))
    })
}

/// `int pshmemx_putmem_nbi_on_stream(...)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_putmem_nbi_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_putmem_nbi_on_stream", || {
        rma::rma(true, (dest.cast_const(), src), n, pe, true, Some(stream))
    })
}

/// `int pshmemx_getmem_nbi_on_stream(...)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_getmem_nbi_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_getmem_nbi_on_stream", || {
        rma::rma(false, (src, dest.cast_const()), n, pe, true, Some(stream))
    })
}

/// `int pshmemx_putmem_signal_on_stream(void *dest, const void *src, size_t n, uint64_t *sig,
/// uint64_t value, int sig_op, int pe, cudaStream_t)`
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn pshmemx_putmem_signal_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    sig: *mut u64,
    value: u64,
    sig_op: c_int,
    pe: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_putmem_signal_on_stream", || {
        rma::put_signal(dest, src, n, sig, value, sig_op, pe, (true, Some(stream)))
    })
}

/// `int pshmemx_signal_op_on_stream(uint64_t *sig, uint64_t value, int sig_op, int pe,
/// cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_signal_op_on_stream(
    sig: *mut u64,
    value: u64,
    sig_op: c_int,
    pe: c_int,
    stream: CStream,
) -> c_int {
    status("pshmemx_signal_op_on_stream", || {
        rma::signal_op(sig, value, sig_op, pe, Some(stream))
    })
}
