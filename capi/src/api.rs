//! The exported functions of pshmem.h, in its order. Each is `extern "C"`, runs behind the
//! panic guard and returns an error code unless pshmem.h says otherwise.

use std::{
    ffi::{c_char, c_int, c_void},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use pshmem::{
    AmoOp, Cmp, Config, DType, Pshmem, RedOp, SignalOp, SymPtr, gpu::host_ops::Coll, team::Team,
};
use pshmem_bootstrap::{Bootstrap, UniqueId};

use crate::{Fail, Global, R, STATE, code, global, guard, registry, set_last_error, status};

/// `PSHMEMX_INIT_GPU_ON_DEMAND`.
const GPU_ON_DEMAND: u32 = 1;
/// `PSHMEM_THREAD_MULTIPLE`.
const THREAD_MULTIPLE: c_int = 3;

/// Whether an init asked for the GPU part on demand (NVSHMEM's two-stage init).
static ON_DEMAND: AtomicBool = AtomicBool::new(false);
/// Init calls not yet matched by finalize.
static REFS: AtomicUsize = AtomicUsize::new(0);

impl Global {
    fn on_demand(&self) -> bool {
        ON_DEMAND.load(Ordering::Acquire)
    }
}

/// Starts the PE (or counts one more init of the running one).
fn start(flags: u32, make: impl FnOnce() -> Result<Pshmem, pshmem::Error>) -> R<()> {
    // The runtime logs through `tracing`; a C program has no subscriber unless one is
    // installed here, from PSHMEM_LOG (warnings by default).
    pshmem_env::init_logging();
    if flags & GPU_ON_DEMAND != 0 {
        ON_DEMAND.store(true, Ordering::Release);
    }
    let mut st = STATE.write().unwrap_or_else(|p| p.into_inner());
    if let Some(g) = st.as_ref() {
        REFS.fetch_add(1, Ordering::AcqRel);
        // A library loaded after init calls init itself: fill what it registered.
        return registry::fill_pending(g);
    }
    let s = make()?;
    REFS.store(1, Ordering::Release);
    *st = Some(Arc::new(Global { s }));
    Ok(())
}

/// The GPU part, completed now where the init asked for it on demand; then the registered
/// device states filled.
fn ensure_gpu(g: &Global) -> R<()> {
    if g.s.gpu().is_err() && g.on_demand() {
        g.s.gpu_init_on(pshmem::cuda::current_device())?;
    }
    registry::fill_pending(g)
}

fn gpu_or_fail(g: &Global) -> R<&pshmem::gpu::Gpu> {
    ensure_gpu(g)?;
    g.s.gpu().map_err(|_| {
        Fail::new(
            code::CUDA,
            "the GPU part is not initialized (call pshmemx_gpu_init first)",
        )
    })
}

/// Where a symmetric address lives.
enum Heap {
    /// The host heap, at this offset.
    Host(SymPtr),
    /// The GPU heap, at this device address.
    Gpu(u64),
}

fn classify(g: &Global, p: *const c_void, len: usize, what: &str) -> R<Heap> {
    let base = g.s.ptr(SymPtr::from_offset(0)) as usize;
    let size = g.s.config().heap_size;
    let a = p as usize;
    if a >= base && a - base < size && len <= size - (a - base) {
        return Ok(Heap::Host(SymPtr::from_offset((a - base) as u64)));
    }
    if let Ok(gpu) = g.s.gpu()
        && gpu.offset_of(a as u64, len).is_some()
    {
        return Ok(Heap::Gpu(a as u64));
    }
    Err(Fail::new(
        code::INVALID_ARG,
        format!(
            "{what} {p:p} (+{len} bytes) is in neither symmetric heap of PE {}",
            g.s.my_pe()
        ),
    ))
}

fn pe_arg(pe: c_int) -> R<usize> {
    usize::try_from(pe).map_err(|_| Fail::new(code::INVALID_ARG, format!("PE {pe} is negative")))
}

fn signal_op_arg(op: c_int) -> R<SignalOp> {
    u8::try_from(op)
        .ok()
        .and_then(SignalOp::from_code)
        .ok_or_else(|| Fail::new(code::INVALID_ARG, format!("{op} is not a signal operation")))
}

fn cmp_arg(cmp: c_int) -> R<Cmp> {
    u8::try_from(cmp)
        .ok()
        .and_then(Cmp::from_code)
        .ok_or_else(|| Fail::new(code::INVALID_ARG, format!("{cmp} is not a comparison")))
}

fn out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller passed a writable T or NULL (checked).
        unsafe { p.write(v) };
    }
}

// ---- init ---------------------------------------------------------------------------------

/// `int pshmem_init(void)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_init() -> c_int {
    pshmemx_init_flags(0)
}

/// `int pshmemx_init_flags(unsigned flags)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_init_flags(flags: u32) -> c_int {
    status("pshmem_init", || start(flags, Pshmem::init))
}

/// `int pshmem_init_thread(int requested, int *provided)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_init_thread(_requested: c_int, provided: *mut c_int) -> c_int {
    let rc = pshmem_init();
    if rc == code::SUCCESS {
        out(provided, THREAD_MULTIPLE);
    }
    rc
}

/// `int pshmem_uniqueid_get(pshmem_uniqueid_t *id)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_uniqueid_get(id: *mut u8) -> c_int {
    status("pshmem_uniqueid_get", || {
        if id.is_null() {
            return Err(Fail::new(code::INVALID_ARG, "id is NULL"));
        }
        let bytes = UniqueId::new().map_err(pshmem::Error::from)?.to_bytes();
        // SAFETY: pshmem_uniqueid_t is 128 bytes (checked by the C test); `id` is writable.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), id, bytes.len()) };
        Ok(())
    })
}

/// `int pshmemx_init_uniqueid(const pshmem_uniqueid_t *id, int rank, int nranks, unsigned flags)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_init_uniqueid(
    id: *const u8,
    rank: c_int,
    nranks: c_int,
    flags: u32,
) -> c_int {
    status("pshmem_init_uniqueid", || {
        if id.is_null() {
            return Err(Fail::new(code::INVALID_ARG, "id is NULL"));
        }
        let (r, n) = match (usize::try_from(rank), usize::try_from(nranks)) {
            (Ok(r), Ok(n)) if r < n => (r, n),
            _ => {
                return Err(Fail::new(
                    code::INVALID_ARG,
                    format!("rank {rank} of {nranks} ranks"),
                ));
            }
        };
        // SAFETY: pshmem_uniqueid_t is 128 bytes, readable.
        let bytes = unsafe { std::slice::from_raw_parts(id, pshmem_bootstrap::UNIQUE_ID_LEN) };
        let uid = UniqueId::from_bytes(bytes).map_err(pshmem::Error::from)?;
        start(flags, || {
            pshmem_env::validate_all()?;
            let bs = Bootstrap::init_unique_id(&uid, r, n)?;
            Pshmem::init_with(bs, Config::from_env()?)
        })
    })
}

/// `int pshmem_init_uniqueid(const pshmem_uniqueid_t *id, int rank, int nranks)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_init_uniqueid(id: *const u8, rank: c_int, nranks: c_int) -> c_int {
    pshmemx_init_uniqueid(id, rank, nranks, 0)
}

/// `int pshmem_finalize(void)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_finalize() -> c_int {
    status("pshmem_finalize", || {
        let mut st = STATE.write().unwrap_or_else(|p| p.into_inner());
        if st.is_none() {
            return Err(Fail::new(code::NOT_INITIALIZED, "not initialized"));
        }
        if REFS.fetch_sub(1, Ordering::AcqRel) > 1 {
            return Ok(());
        }
        let g = st.take().expect("checked");
        drop(st);
        g.s.finalize()?;
        Ok(())
    })
}

/// `int pshmem_init_status(void)`: 0 not initialized, 1 host part, 2 GPU part too.
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_init_status() -> c_int {
    guard(
        "pshmem_init_status",
        |_| 0,
        || {
            Ok(match global() {
                Err(_) => 0,
                Ok(g) if g.s.gpu().is_ok() => 2,
                Ok(_) => 1,
            })
        },
    )
}

/// `void pshmem_global_exit(int status)`: ends this process with `status`; its peers see it die
/// and fail their pending and later calls naming it.
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_global_exit(status: c_int) {
    std::process::exit(status);
}

/// `const char *pshmem_last_error(void)`: this thread's last error message ("" when none); valid
/// until the thread's next failing call.
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_last_error() -> *const c_char {
    crate::LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// `void pshmem_version(int *major, int *minor)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_version(major: *mut c_int, minor: *mut c_int) {
    let v = |s: &str| s.parse().unwrap_or(0);
    out(major, v(env!("CARGO_PKG_VERSION_MAJOR")));
    out(minor, v(env!("CARGO_PKG_VERSION_MINOR")));
}

// ---- queries and teams ----------------------------------------------------------------------

/// `int pshmem_my_pe(void)` (-1 before init)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_my_pe() -> c_int {
    guard("pshmem_my_pe", |_| -1, || Ok(global()?.s.my_pe() as c_int))
}

/// `int pshmem_n_pes(void)` (-1 before init)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_n_pes() -> c_int {
    guard("pshmem_n_pes", |_| -1, || Ok(global()?.s.n_pes() as c_int))
}

/// `int pshmem_team_my_pe(pshmem_team_t)` (-1: not a member, no such team, not initialized)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_my_pe(team: Team) -> c_int {
    guard(
        "pshmem_team_my_pe",
        |_| -1,
        || Ok(global()?.s.team_my_pe(team)),
    )
}

/// `int pshmem_team_n_pes(pshmem_team_t)` (-1: no such team)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_n_pes(team: Team) -> c_int {
    guard(
        "pshmem_team_n_pes",
        |_| -1,
        || Ok(global()?.s.team_n_pes(team)),
    )
}

/// `int pshmem_team_translate_pe(pshmem_team_t src, int pe, pshmem_team_t dest)` (-1: none)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_translate_pe(src: Team, pe: c_int, dest: Team) -> c_int {
    guard(
        "pshmem_team_translate_pe",
        |_| -1,
        || Ok(global()?.s.team_translate_pe(src, pe, dest)),
    )
}

/// `int pshmem_team_split_strided(pshmem_team_t parent, int start, int stride, int size,
/// pshmem_team_t *new_team)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_split_strided(
    parent: Team,
    start: c_int,
    stride: c_int,
    size: c_int,
    new_team: *mut Team,
) -> c_int {
    out(new_team, pshmem::team::TEAM_INVALID);
    status("pshmem_team_split_strided", || {
        let g = global()?;
        if g.on_demand() {
            ensure_gpu(&g)?;
        }
        let t = g.s.team_split_strided(parent, start, stride, size)?;
        out(new_team, t);
        Ok(())
    })
}

/// `int pshmem_team_split_2d(pshmem_team_t parent, int xrange, pshmem_team_t *xaxis,
/// pshmem_team_t *yaxis)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_split_2d(
    parent: Team,
    xrange: c_int,
    xaxis: *mut Team,
    yaxis: *mut Team,
) -> c_int {
    out(xaxis, pshmem::team::TEAM_INVALID);
    out(yaxis, pshmem::team::TEAM_INVALID);
    status("pshmem_team_split_2d", || {
        let g = global()?;
        if g.on_demand() {
            ensure_gpu(&g)?;
        }
        let (x, y) = g.s.team_split_2d(parent, xrange)?;
        out(xaxis, x);
        out(yaxis, y);
        Ok(())
    })
}

/// `int pshmem_team_destroy(pshmem_team_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_destroy(team: Team) -> c_int {
    status("pshmem_team_destroy", || {
        Ok(global()?.s.team_destroy(team)?)
    })
}

/// Sync (or barrier) over a team: on the GPU where its part is up, else on the host.
fn team_sync(team: Team, barrier: bool) -> R<()> {
    let g = global()?;
    if g.on_demand() {
        ensure_gpu(&g)?;
    }
    match g.s.gpu() {
        Ok(gpu) => {
            if barrier {
                g.s.quiet()?;
            }
            // SAFETY: no stream: the runtime's own.
            Ok(unsafe { gpu.team_sync_on(team, barrier, None) }?)
        }
        Err(_) if barrier => Ok(g.s.team_barrier(team)?),
        Err(_) => Ok(g.s.team_sync(team)?),
    }
}

/// `int pshmem_team_sync(pshmem_team_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_sync(team: Team) -> c_int {
    status("pshmem_team_sync", || team_sync(team, false))
}

/// `int pshmem_team_barrier(pshmem_team_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_barrier(team: Team) -> c_int {
    status("pshmem_team_barrier", || team_sync(team, true))
}

// ---- memory -------------------------------------------------------------------------------

fn alloc_host(op: &str, f: impl FnOnce(&Pshmem) -> Result<SymPtr, pshmem::Error>) -> *mut c_void {
    guard(
        op,
        |_| std::ptr::null_mut(),
        || {
            let g = global()?;
            let p = f(&g.s)?;
            Ok(g.s.ptr(p).cast())
        },
    )
}

/// `void *pshmem_malloc(size_t)`: host symmetric memory (collective; NULL for 0 bytes or on
/// error).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_malloc(size: usize) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    alloc_host("pshmem_malloc", |s| s.malloc(size))
}

/// `void *pshmem_calloc(size_t count, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_calloc(count: usize, size: usize) -> *mut c_void {
    if count == 0 || size == 0 {
        return std::ptr::null_mut();
    }
    alloc_host("pshmem_calloc", |s| s.calloc(count, size))
}

/// `void *pshmem_align(size_t alignment, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_align(alignment: usize, size: usize) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    alloc_host("pshmem_align", |s| s.align(alignment, size))
}

/// `int pshmem_free(void *)`: either heap (collective; NULL is a no-op).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_free(p: *mut c_void) -> c_int {
    if p.is_null() {
        return code::SUCCESS;
    }
    status("pshmem_free", || {
        let g = global()?;
        match classify(&g, p, 0, "the address")? {
            Heap::Host(at) => Ok(g.s.free(at)?),
            Heap::Gpu(addr) => {
                let gpu = g.s.gpu()?;
                let off = gpu.offset_of(addr, 0).expect("classified");
                Ok(g.s.gpu_free(SymPtr::from_offset(off))?)
            }
        }
    })
}

/// `void *pshmem_ptr(const void *dest, int pe)`: `dest` itself for this PE; the address of
/// `pe`'s copy where this PE maps it (same host, direct path on); NULL otherwise.
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
            if pe == g.s.my_pe() {
                return Ok(dest.cast_mut());
            }
            Ok(match classify(&g, dest, 0, "dest")? {
                Heap::Host(at) => g.s.peer_ptr(at, pe).unwrap_or(std::ptr::null_mut()).cast(),
                Heap::Gpu(addr) => {
                    let gpu = g.s.gpu()?;
                    let off = gpu.offset_of(addr, 0).expect("classified");
                    gpu.peer_addr(off, pe)
                        .map_or(std::ptr::null_mut(), |a| a as *mut c_void)
                }
            })
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

fn alloc_gpu(op: &str, size: usize, zero: bool, align: usize) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    guard(
        op,
        |_| std::ptr::null_mut(),
        || {
            let g = global()?;
            let gpu = gpu_or_fail(&g)?;
            if align > 256 && !align.is_power_of_two() {
                return Err(Fail::new(
                    code::INVALID_ARG,
                    format!("alignment {align} is not a power of two"),
                ));
            }
            // The GPU allocator aligns to 256 bytes; larger alignments over-allocate.
            let padded = if align > 256 { size + align } else { size };
            let p = if zero {
                g.s.gpu_calloc(padded)?
            } else {
                g.s.gpu_malloc(padded)?
            };
            let addr = gpu.ptr(p);
            let aligned = if align > 256 {
                addr.next_multiple_of(align as u64)
            } else {
                addr
            };
            if aligned != addr {
                // Keep the start for free: only 256-aligned requests are exact; remember the base.
                ALIGNED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((aligned, addr));
            }
            Ok(aligned as *mut c_void)
        },
    )
}

/// Aligned GPU allocations whose start differs from the allocation's: (returned, allocated).
static ALIGNED: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// `void *pshmemx_gpu_malloc(size_t)`: GPU symmetric memory (collective).
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_malloc(size: usize) -> *mut c_void {
    alloc_gpu("pshmemx_gpu_malloc", size, false, 256)
}

/// `void *pshmemx_gpu_calloc(size_t count, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_calloc(count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        Some(n) => alloc_gpu("pshmemx_gpu_calloc", n, true, 256),
        None => {
            set_last_error(&format!(
                "pshmemx_gpu_calloc: {count} x {size} bytes overflows"
            ));
            std::ptr::null_mut()
        }
    }
}

/// `void *pshmemx_gpu_align(size_t alignment, size_t size)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_align(alignment: usize, size: usize) -> *mut c_void {
    alloc_gpu("pshmemx_gpu_align", size, false, alignment.max(1))
}

/// `int pshmemx_gpu_free(void *)` (collective; NULL is a no-op)
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_gpu_free(p: *mut c_void) -> c_int {
    if p.is_null() {
        return code::SUCCESS;
    }
    status("pshmemx_gpu_free", || {
        let g = global()?;
        let gpu = g.s.gpu()?;
        let mut addr = p as u64;
        {
            let mut a = ALIGNED.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = a.iter().position(|(r, _)| *r == addr) {
                addr = a.swap_remove(i).1;
            }
        }
        let off = gpu.offset_of(addr, 0).ok_or_else(|| {
            Fail::new(
                code::INVALID_ARG,
                format!("{p:p} is not in the GPU symmetric heap"),
            )
        })?;
        Ok(g.s.gpu_free(SymPtr::from_offset(off))?)
    })
}

// ---- RMA, signals, atomics (host-initiated) ---------------------------------------------------

fn put(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int, nbi: bool) -> R<()> {
    let g = global()?;
    let pe = pe_arg(pe)?;
    match classify(&g, dest, n, "dest")? {
        Heap::Host(at) => {
            if n == 0 {
                return Ok(g.s.put(at, &[], pe)?);
            }
            if nbi {
                // SAFETY: `src..src + n` is readable host memory (pshmem.h: host-heap calls
                // take host memory), unchanged until the next quiet.
                Ok(unsafe { g.s.put_nbi(at, src.cast(), n, pe) }?)
            } else {
                // SAFETY: as above, until the call returns.
                let s = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) };
                Ok(g.s.put(at, s, pe)?)
            }
        }
        // SAFETY: pshmem.h: `src..src + n` is readable, unchanged until the call returns (or
        // quiet, for nbi).
        Heap::Gpu(addr) => Ok(unsafe { g.s.gpu()?.host_put(addr, src.cast(), n, pe, nbi) }?),
    }
}

fn get(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int, nbi: bool) -> R<()> {
    let g = global()?;
    let pe = pe_arg(pe)?;
    match classify(&g, src, n, "src")? {
        Heap::Host(at) => {
            if n == 0 {
                return Ok(g.s.get(&mut [], at, pe)?);
            }
            if nbi {
                // SAFETY: `dest..dest + n` is writable host memory, untouched by others until
                // the next quiet.
                Ok(unsafe { g.s.get_nbi(dest.cast(), at, n, pe) }?)
            } else {
                // SAFETY: as above, until the call returns.
                let d = unsafe { std::slice::from_raw_parts_mut(dest.cast::<u8>(), n) };
                Ok(g.s.get(d, at, pe)?)
            }
        }
        // SAFETY: pshmem.h: `dest..dest + n` is writable, untouched until the call returns (or
        // quiet, for nbi).
        Heap::Gpu(addr) => Ok(unsafe { g.s.gpu()?.host_get(dest.cast(), addr, n, pe, nbi) }?),
    }
}

/// `int pshmem_putmem(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_putmem(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_putmem", || put(dest, src, n, pe, false))
}

/// `int pshmem_getmem(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_getmem(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_getmem", || get(dest, src, n, pe, false))
}

/// `int pshmem_putmem_nbi(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_putmem_nbi(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_putmem_nbi", || put(dest, src, n, pe, true))
}

/// `int pshmem_getmem_nbi(void *dest, const void *src, size_t n, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_getmem_nbi(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
) -> c_int {
    status("pshmem_getmem_nbi", || get(dest, src, n, pe, true))
}

#[allow(clippy::too_many_arguments)]
fn put_signal(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    sig: *mut u64,
    value: u64,
    op: c_int,
    pe: c_int,
    nbi: bool,
) -> R<()> {
    let g = global()?;
    let (pe, sop) = (pe_arg(pe)?, signal_op_arg(op)?);
    match (
        classify(&g, dest, n, "dest")?,
        classify(&g, sig.cast(), 8, "sig")?,
    ) {
        (Heap::Host(at), Heap::Host(s)) => {
            let data = if n == 0 {
                &[][..]
            } else {
                // SAFETY: as for putmem.
                unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) }
            };
            Ok(g.s.put_signal(at, data, s, value, sop, pe)?)
        }
        (Heap::Gpu(d), Heap::Gpu(s)) => {
            let gpu = g.s.gpu()?;
            // SAFETY: pshmem.h: the source is readable until the call returns (or quiet).
            Ok(unsafe {
                gpu.host_put_signal(d, src.cast(), n, s, value, sop.code(), pe, nbi, None)
            }?)
        }
        _ => Err(Fail::new(
            code::INVALID_ARG,
            "dest and sig are in different symmetric heaps",
        )),
    }
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
        put_signal(dest, src, n, sig, value, sig_op, pe, false)
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
        put_signal(dest, src, n, sig, value, sig_op, pe, true)
    })
}

/// `int pshmem_signal_op(uint64_t *sig, uint64_t value, int sig_op, int pe)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_signal_op(sig: *mut u64, value: u64, sig_op: c_int, pe: c_int) -> c_int {
    status("pshmem_signal_op", || {
        let g = global()?;
        let (pe, sop) = (pe_arg(pe)?, signal_op_arg(sig_op)?);
        match classify(&g, sig.cast(), 8, "sig")? {
            Heap::Host(s) => Ok(g.s.signal_op(s, value, sop, pe)?),
            Heap::Gpu(a) => {
                // SAFETY: no stream: the runtime's own.
                Ok(unsafe { g.s.gpu()?.host_signal_op(a, value, sop.code(), pe, None) }?)
            }
        }
    })
}

/// Reads a local 8- or 4-byte word of either heap.
fn local_word(g: &Global, p: *const c_void, wide: bool) -> R<u64> {
    let w = if wide { 8 } else { 4 };
    match classify(g, p, w, "the word")? {
        Heap::Host(at) => Ok(if wide {
            g.s.local_read::<u64>(at)?
        } else {
            u64::from(g.s.local_read::<u32>(at)?)
        }),
        Heap::Gpu(a) => {
            let gpu = g.s.gpu()?;
            let off = gpu.offset_of(a, w).expect("classified");
            let mut b = [0u8; 8];
            gpu.copy_out(SymPtr::from_offset(off), &mut b[..w])?;
            Ok(u64::from_le_bytes(b))
        }
    }
}

/// `int pshmem_signal_fetch(const uint64_t *sig, uint64_t *value)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_signal_fetch(sig: *const u64, value: *mut u64) -> c_int {
    status("pshmem_signal_fetch", || {
        let g = global()?;
        out(value, local_word(&g, sig.cast(), true)?);
        Ok(())
    })
}

/// Waits on a local word of either heap until `cmp` holds (GPU words are polled).
fn wait_word(p: *const c_void, wide: bool, cmp: c_int, value: u64, seen: *mut u64) -> R<()> {
    let g = global()?;
    let c = cmp_arg(cmp)?;
    let w = if wide { 8 } else { 4 };
    if let Heap::Host(at) = classify(&g, p, w, "the word")? {
        let v = if wide {
            g.s.wait_until::<u64>(at, c, value)?
        } else {
            u64::from(g.s.wait_until::<u32>(at, c, value as u32)?)
        };
        out(seen, v);
        return Ok(());
    }
    let limit = g.s.config().op_timeout;
    let start = Instant::now();
    loop {
        let v = local_word(&g, p, wide)?;
        if c.holds(v, value) {
            out(seen, v);
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(Fail::new(
                code::TIMEOUT,
                format!("waited {limit:.1?} (PSHMEM_OP_TIMEOUT); the word is {v}"),
            ));
        }
        std::thread::sleep(Duration::from_micros(20));
    }
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
    let w = if wide { 8 } else { 4 };
    match classify(&g, dest, w, "dest")? {
        Heap::Host(at) => Ok(if wide {
            g.s.atomic::<u64>(amo, at, operand, compare, pe)?
        } else {
            u64::from(g.s.atomic::<u32>(amo, at, operand as u32, compare as u32, pe)?)
        }),
        Heap::Gpu(a) => Ok(g
            .s
            .gpu()?
            .host_atomic(amo.code(), wide, a, operand, compare, pe)?),
    }
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

// ---- ordering and synchronization ---------------------------------------------------------------

/// `int pshmem_quiet(void)`: completes this PE's host-initiated operations (both heaps).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_quiet() -> c_int {
    status("pshmem_quiet", || {
        let g = global()?;
        g.s.quiet()?;
        if let Ok(gpu) = g.s.gpu() {
            gpu.host_quiet()?;
        }
        Ok(())
    })
}

/// `int pshmem_fence(void)`: orders this PE's host-initiated operations to each PE.
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_fence() -> c_int {
    status("pshmem_fence", || {
        let g = global()?;
        g.s.fence()?;
        // GPU-heap operations of the host run one after another on one stream, each blocking
        // or ordered by the ring; a quiet of them is the simplest correct fence.
        if let Ok(gpu) = g.s.gpu() {
            gpu.host_quiet()?;
        }
        Ok(())
    })
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
        match g.s.gpu() {
            Ok(gpu) => {
                g.s.quiet()?;
                Ok(gpu.host_barrier_all()?)
            }
            Err(_) => Ok(g.s.barrier_all()?),
        }
    })
}

/// `int pshmem_sync_all(void)`: every PE arrives (nothing is completed).
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_sync_all() -> c_int {
    status("pshmem_sync_all", || {
        team_sync(pshmem::team::TEAM_WORLD, false)
    })
}

// ---- on-stream (GPU) ----------------------------------------------------------------------------

type Stream = *mut c_void;

/// `int pshmemx_quiet_on_stream(cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_quiet_on_stream(stream: Stream) -> c_int {
    status("pshmemx_quiet_on_stream", || {
        let g = global()?;
        // SAFETY: pshmem.h: a live stream of the PE's device.
        Ok(unsafe { gpu_or_fail(&g)?.on_raw_stream(false, stream.cast()) }?)
    })
}

/// `int pshmemx_barrier_all_on_stream(cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_barrier_all_on_stream(stream: Stream) -> c_int {
    status("pshmemx_barrier_all_on_stream", || {
        let g = global()?;
        // SAFETY: pshmem.h: a live stream of the PE's device.
        Ok(unsafe { gpu_or_fail(&g)?.on_raw_stream(true, stream.cast()) }?)
    })
}

fn team_on_stream(team: Team, barrier: bool, stream: Stream) -> R<()> {
    let g = global()?;
    // SAFETY: pshmem.h: a live stream of the PE's device.
    Ok(unsafe { gpu_or_fail(&g)?.team_sync_on(team, barrier, Some(stream.cast())) }?)
}

/// `int pshmemx_sync_all_on_stream(cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_sync_all_on_stream(stream: Stream) -> c_int {
    status("pshmemx_sync_all_on_stream", || {
        team_on_stream(pshmem::team::TEAM_WORLD, false, stream)
    })
}

/// `int pshmemx_team_sync_on_stream(pshmem_team_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_team_sync_on_stream(team: Team, stream: Stream) -> c_int {
    status("pshmemx_team_sync_on_stream", || {
        team_on_stream(team, false, stream)
    })
}

/// `int pshmemx_barrier_on_stream(pshmem_team_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_barrier_on_stream(team: Team, stream: Stream) -> c_int {
    status("pshmemx_barrier_on_stream", || {
        team_on_stream(team, true, stream)
    })
}

fn rma_on_stream(
    put: bool,
    remote: *const c_void,
    local: *const c_void,
    n: usize,
    pe: c_int,
    nbi: bool,
    stream: Stream,
) -> R<()> {
    let g = global()?;
    let gpu = gpu_or_fail(&g)?;
    let pe = pe_arg(pe)?;
    // SAFETY: pshmem.h: a live stream; the local buffer valid until the stream ran the call.
    Ok(unsafe { gpu.rma_on_stream(put, remote as u64, local.cast(), n, pe, nbi, stream.cast()) }?)
}

/// `int pshmemx_putmem_on_stream(void *dest, const void *src, size_t n, int pe, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_putmem_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: Stream,
) -> c_int {
    status("pshmemx_putmem_on_stream", || {
        rma_on_stream(true, dest, src, n, pe, false, stream)
    })
}

/// `int pshmemx_getmem_on_stream(void *dest, const void *src, size_t n, int pe, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_getmem_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: Stream,
) -> c_int {
    status("pshmemx_getmem_on_stream", || {
        rma_on_stream(false, src, dest, n, pe, false, stream)
    })
}

/// `int pshmemx_putmem_nbi_on_stream(...)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_putmem_nbi_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: Stream,
) -> c_int {
    status("pshmemx_putmem_nbi_on_stream", || {
        rma_on_stream(true, dest, src, n, pe, true, stream)
    })
}

/// `int pshmemx_getmem_nbi_on_stream(...)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_getmem_nbi_on_stream(
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    pe: c_int,
    stream: Stream,
) -> c_int {
    status("pshmemx_getmem_nbi_on_stream", || {
        rma_on_stream(false, src, dest, n, pe, true, stream)
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
    stream: Stream,
) -> c_int {
    status("pshmemx_putmem_signal_on_stream", || {
        let g = global()?;
        let gpu = gpu_or_fail(&g)?;
        let (pe, sop) = (pe_arg(pe)?, signal_op_arg(sig_op)?);
        // SAFETY: pshmem.h: a live stream; the source valid until the stream ran the call.
        Ok(unsafe {
            gpu.host_put_signal(
                dest as u64,
                src.cast(),
                n,
                sig as u64,
                value,
                sop.code(),
                pe,
                true,
                Some(stream.cast()),
            )
        }?)
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
    stream: Stream,
) -> c_int {
    status("pshmemx_signal_op_on_stream", || {
        let g = global()?;
        let gpu = gpu_or_fail(&g)?;
        let (pe, sop) = (pe_arg(pe)?, signal_op_arg(sig_op)?);
        // SAFETY: pshmem.h: a live stream of the PE's device.
        Ok(unsafe { gpu.host_signal_op(sig as u64, value, sop.code(), pe, Some(stream.cast())) }?)
    })
}

/// A collective of the C API: `Coll` on the GPU heap, the host algorithms on the host heap.
/// `n` counts bytes, or elements for the reductions.
fn collective(
    coll: Coll,
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    stream: Option<Stream>,
) -> R<()> {
    let g = global()?;
    if g.on_demand() || stream.is_some() {
        ensure_gpu(&g)?;
    }
    let team_members = g.s.team_members(team)?;
    let members = team_members.len();
    let (dest_len, src_len) = coll
        .lens(n, members)
        .ok_or_else(|| Fail::new(code::INVALID_ARG, format!("{n} elements overflow the heap")))?;
    match (
        classify(&g, dest, dest_len, "dest")?,
        classify(&g, src, src_len, "src")?,
    ) {
        (Heap::Gpu(d), Heap::Gpu(s)) => {
            let gpu = g.s.gpu()?;
            match stream {
                Some(st) => {
                    // SAFETY: pshmem.h: a live stream of the PE's device.
                    unsafe {
                        gpu.collective_on_stream(coll, team, &team_members, d, s, n, st.cast())
                    }?
                }
                None => gpu.collective(coll, team, &team_members, d, s, n)?,
            }
            Ok(())
        }
        (Heap::Host(d), Heap::Host(s)) if stream.is_none() => {
            match coll {
                Coll::Broadcast { root } => g.s.broadcast(team, d, s, n, root)?,
                Coll::Fcollect => g.s.fcollect(team, d, s, n)?,
                Coll::Alltoall => g.s.alltoall(team, d, s, n)?,
                Coll::Reduce(dt, op) => g.s.reduce(team, dt, op, d, s, n)?,
                Coll::ReduceScatter(dt, op) => g.s.reducescatter(team, dt, op, d, s, n)?,
            }
            Ok(())
        }
        (Heap::Host(_), Heap::Host(_)) => Err(Fail::new(
            code::INVALID_ARG,
            "an on-stream collective takes GPU symmetric memory",
        )),
        _ => Err(Fail::new(
            code::INVALID_ARG,
            "dest and src are in different symmetric heaps",
        )),
    }
}

fn red_args(dtype: c_int, op: c_int) -> R<(DType, RedOp)> {
    let dt = u8::try_from(dtype).ok().and_then(DType::from_code);
    let red = u8::try_from(op).ok().and_then(RedOp::from_code);
    match (dt, red) {
        (Some(d), Some(o)) => Ok((d, o)),
        _ => Err(Fail::new(
            code::INVALID_ARG,
            format!("no reduction type {dtype} or operator {op} (PSHMEM_DT_*, PSHMEM_RED_*)"),
        )),
    }
}

fn root_arg(root: c_int) -> R<usize> {
    usize::try_from(root).map_err(|_| Fail::new(code::INVALID_ARG, format!("root {root}")))
}

/// `int pshmem_broadcastmem(pshmem_team_t, void *dest, const void *src, size_t, int root)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_broadcastmem(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    root: c_int,
) -> c_int {
    status("pshmem_broadcastmem", || {
        let root = root_arg(root)?;
        collective(Coll::Broadcast { root }, team, dest, src, nbytes, None)
    })
}

/// `int pshmem_fcollectmem(pshmem_team_t, void *dest, const void *src, size_t nbytes)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_fcollectmem(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    status("pshmem_fcollectmem", || {
        collective(Coll::Fcollect, team, dest, src, nbytes, None)
    })
}

/// `int pshmem_reduce(pshmem_team_t, int dtype, int op, void *dest, const void *src, size_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_reduce(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
) -> c_int {
    status("pshmem_reduce", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(Coll::Reduce(dt, red), team, dest, src, nelems, None)
    })
}

/// `int pshmem_reducescatter(pshmem_team_t, int dtype, int op, void *dest, const void *src,
/// size_t nelems)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_reducescatter(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
) -> c_int {
    status("pshmem_reducescatter", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(Coll::ReduceScatter(dt, red), team, dest, src, nelems, None)
    })
}

/// `int pshmemx_broadcastmem_on_stream(pshmem_team_t, void *, const void *, size_t, int root,
/// cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_broadcastmem_on_stream(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    root: c_int,
    stream: Stream,
) -> c_int {
    status("pshmemx_broadcastmem_on_stream", || {
        let root = root_arg(root)?;
        collective(
            Coll::Broadcast { root },
            team,
            dest,
            src,
            nbytes,
            Some(stream),
        )
    })
}

/// `int pshmemx_fcollectmem_on_stream(pshmem_team_t, void *, const void *, size_t,
/// cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_fcollectmem_on_stream(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    stream: Stream,
) -> c_int {
    status("pshmemx_fcollectmem_on_stream", || {
        collective(Coll::Fcollect, team, dest, src, nbytes, Some(stream))
    })
}

/// `int pshmemx_reduce_on_stream(pshmem_team_t, int dtype, int op, void *, const void *,
/// size_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_reduce_on_stream(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
    stream: Stream,
) -> c_int {
    status("pshmemx_reduce_on_stream", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(Coll::Reduce(dt, red), team, dest, src, nelems, Some(stream))
    })
}

/// `int pshmemx_reducescatter_on_stream(pshmem_team_t, int dtype, int op, void *, const void
/// *, size_t, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_reducescatter_on_stream(
    team: Team,
    dtype: c_int,
    op: c_int,
    dest: *mut c_void,
    src: *const c_void,
    nelems: usize,
    stream: Stream,
) -> c_int {
    status("pshmemx_reducescatter_on_stream", || {
        let (dt, red) = red_args(dtype, op)?;
        collective(
            Coll::ReduceScatter(dt, red),
            team,
            dest,
            src,
            nelems,
            Some(stream),
        )
    })
}

/// `int pshmem_alltoallmem(pshmem_team_t, void *dest, const void *src, size_t nbytes)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_alltoallmem(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    status("pshmem_alltoallmem", || {
        collective(Coll::Alltoall, team, dest, src, nbytes, None)
    })
}

/// `int pshmemx_alltoallmem_on_stream(pshmem_team_t, void *dest, const void *src, size_t
/// nbytes, cudaStream_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_alltoallmem_on_stream(
    team: Team,
    dest: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    stream: Stream,
) -> c_int {
    status("pshmemx_alltoallmem_on_stream", || {
        collective(Coll::Alltoall, team, dest, src, nbytes, Some(stream))
    })
}

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
pub extern "C" fn pshmemx_cumodule_finalize(_module: *mut c_void) -> c_int {
    code::SUCCESS
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
pub extern "C" fn pshmemx_culibrary_finalize(_library: *mut c_void) -> c_int {
    code::SUCCESS
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
