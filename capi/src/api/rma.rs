//! Host-initiated RMA, signals, waits and atomics on either heap.

use super::*;

/// A put (`put`: `local` to the symmetric `remote`) or get (the other way) of either heap,
/// blocking or `nbi`, or on `stream`.
pub(super) fn rma(
    put: bool,
    (remote, local): (*const c_void, *const c_void),
    n: usize,
    pe: c_int,
    nbi: bool,
    stream: Option<CStream>,
) -> R<()> {
    local_arg(local, n, if put { "source" } else { "destination" })?;
    let g = global_for(&stream)?;
    let (api, pe, st) = (g.api(), pe_arg(pe)?, stream.map(stream_arg));
    let r = if put {
        // SAFETY: pshmem.h: `local..local + n` is readable and unchanged until the call returns
        // (or quiet, for nbi; or until the stream ran it): host memory for the host heap,
        // device-addressable for an on-stream call.
        unsafe { api.put(remote as u64, local.cast(), n, pe, nbi, st) }
    } else {
        // SAFETY: pshmem.h: `local..local + n` is writable and untouched by others until the
        // call returns (or as for put).
        unsafe { api.get(local.cast_mut().cast(), remote as u64, n, pe, nbi, st) }
    };
    Ok(r?)
}

/// `int pshmem_putmem(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_putmem(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_putmem", || {
        rma(true, (dest.cast_const(), src), n, pe, false, None)
    })
}

/// `int pshmem_getmem(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_getmem(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_getmem", || {
        rma(false, (src, dest.cast_const()), n, pe, false, None)
    })
}

/// `int pshmem_putmem_nbi(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_putmem_nbi(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_putmem_nbi", || {
        rma(true, (dest.cast_const(), src), n, pe, true, None)
    })
}

/// `int pshmem_getmem_nbi(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_getmem_nbi(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_getmem_nbi", || {
        rma(false, (src, dest.cast_const()), n, pe, true, None)
    })
}

/// A put-with-signal of either heap (`dest` and `sig` on one), blocking or `nbi`, or on
/// `stream`.
#[allow(clippy::too_many_arguments)]
pub(super) fn put_signal(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    sig: *mut u64,
    value: u64,
    op: c_int,
    pe: c_int,
    (nbi, stream): (bool, Option<CStream>),
) -> R<()> {
    local_arg(src, n, "source")?;
    let g = global_for(&stream)?;
    let (pe, sop) = (pe_arg(pe)?, signal_op_arg(op)?);
    let (d, s) = (dest as u64, sig as u64);
    // SAFETY: pshmem.h: as for putmem (on the GPU heap the source is device-addressable).
    let r = unsafe {
        g.api().put_signal(
            d,
            src.cast(),
            n,
            s,
            value,
            sop,
            pe,
            nbi,
            stream.map(stream_arg),
        )
    };
    Ok(r?)
}

/// `int pshmem_putmem_signal(void *dest, const void *src, size_t n, uint64_t *sig, uint64_t
/// value, int sig_op, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_putmem_signal(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    sig: *mut u64,
    value: u64,
    sig_op: c_int,
    pe: c_int,
) -> c_int {
    status("pshmem_putmem_signal", || {
        put_signal(dest, src, n, sig, value, sig_op, pe, (false, None))
    })
}

/// `int pshmem_putmem_signal_nbi(...)` (as pshmem_putmem_signal; complete at quiet)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_putmem_signal_nbi(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    sig: *mut u64,
    value: u64,
    sig_op: c_int,
    pe: c_int,
) -> c_int {
    status("pshmem_putmem_signal_nbi", || {
        put_signal(dest, src, n, sig, value, sig_op, pe, (true, None))
    })
}

/// `int pshmem_signal_op(uint64_t *sig, uint64_t value, int sig_op, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_signal_op(sig: *mut u64, value: u64, sig_op: c_int, pe: c_int) -> c_int {
    status("pshmem_signal_op", || {
        signal_op(sig, value, sig_op, pe, None)
    })
}

/// A signal update of either heap, or on `stream`.
pub(super) fn signal_op(
    sig: *mut u64,
    value: u64,
    sig_op: c_int,
    pe: c_int,
    stream: Option<CStream>,
) -> R<()> {
    let g = global_for(&stream)?;
    let (pe, sop) = (pe_arg(pe)?, signal_op_arg(sig_op)?);
    let st = stream.map(stream_arg);
    Ok(g.api().signal_op(sig as u64, value, sop, pe, st)?)
}

/// `int pshmem_signal_fetch(const uint64_t *sig, uint64_t *value)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_signal_fetch(sig: *const u64, value: *mut u64) -> c_int {
    status("pshmem_signal_fetch", || {
        let g = global()?;
        if value.is_null() {
            return Err(Fail::new(code::INVALID_ARG, "value is NULL"));
        }
        out(value, g.api().read_word(sig as u64, true)?);
        Ok(())
    })
}

/// Waits on a local word of either heap until `cmp` holds (GPU words are polled), to
/// `PSHMEM_OP_TIMEOUT`.
fn wait_word(p: *const c_void, wide: bool, cmp: c_int, value: u64, seen: *mut u64) -> R<()> {
    let g = global()?;
    let c = cmp_arg(cmp)?;
    out(seen, g.api().wait_until(p as u64, wide, (c, value))?);
    Ok(())
}

/// `int pshmem_signal_wait_until(uint64_t *sig, int cmp, uint64_t value, uint64_t *seen)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_signal_wait_until(
    sig: *mut u64,
    cmp: c_int,
    value: u64,
    seen: *mut u64,
) -> c_int {
    status("pshmem_signal_wait_until", || {
        wait_word(sig.cast(), true, cmp, value, seen)
    })
}

/// `int pshmem_uint64_wait_until(uint64_t *ivar, int cmp, uint64_t value, uint64_t *seen)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_uint64_wait_until(
    ivar: *mut u64,
    cmp: c_int,
    value: u64,
    seen: *mut u64,
) -> c_int {
    status("pshmem_uint64_wait_until", || {
        wait_word(ivar.cast(), true, cmp, value, seen)
    })
}

/// `int pshmem_uint32_wait_until(uint32_t *ivar, int cmp, uint32_t value, uint32_t *seen)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_uint32_wait_until(
    ivar: *mut u32,
    cmp: c_int,
    value: u32,
    seen: *mut u32,
) -> c_int {
    status("pshmem_uint32_wait_until", || {
        let mut v = 0u64;
        wait_word(ivar.cast(), false, cmp, u64::from(value), &mut v)?;
        out(seen, v as u32);
        Ok(())
    })
}

fn atomic(
    op: c_int,
    dest: *mut c_void,
    wide: bool,
    operand: u64,
    compare: u64,
    pe: c_int,
) -> R<u64> {
    let g = global()?;
    let pe = pe_arg(pe)?;
    let amo = u8::try_from(op)
        .ok()
        .and_then(AmoOp::from_code)
        .ok_or_else(|| Fail::new(code::INVALID_ARG, format!("{op} is not an AMO operation")))?;
    Ok(g.api()
        .atomic(amo, dest as u64, wide, (operand, compare), pe)?)
}

/// `int pshmem_atomic64(int op, uint64_t *dest, uint64_t operand, uint64_t compare, int pe,
/// uint64_t *old)`: `op` a PSHMEM_AMO_* code.
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_atomic64(
    op: c_int,
    dest: *mut u64,
    operand: u64,
    compare: u64,
    pe: c_int,
    old: *mut u64,
) -> c_int {
    status("pshmem_atomic64", || {
        out(old, atomic(op, dest.cast(), true, operand, compare, pe)?);
        Ok(())
    })
}

/// `int pshmem_atomic32(int op, uint32_t *dest, uint32_t operand, uint32_t compare, int pe,
/// uint32_t *old)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_atomic32(
    op: c_int,
    dest: *mut u32,
    operand: u32,
    compare: u32,
    pe: c_int,
    old: *mut u32,
) -> c_int {
    status("pshmem_atomic32", || {
        let v = atomic(
            op,
            dest.cast(),
            false,
            u64::from(operand),
            u64::from(compare),
            pe,
        )?;
        out(old, v as u32);
        Ok(())
    })
}
