//! Init, finalize, queries and teams.

use super::*;

// ---- init ---------------------------------------------------------------------------------

/// `int pshmem_init(void)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_init() -> c_int {
    pshmemx_init_flags(0)
}

/// `int pshmemx_init_flags(unsigned flags)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_init_flags(flags: u32) -> c_int {
    status("pshmem_init", || {
        known_flags(flags)?;
        start(flags, Pshmem::init)
    })
}

/// `int pshmem_init_thread(int requested, int *provided)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    if !(0..=THREAD_MULTIPLE).contains(&requested) {
        return status("pshmem_init_thread", || {
            Err(Fail::new(
                code::INVALID_ARG,
                format!(
                    "requested thread level {requested} is not one of PSHMEM_THREAD_SINGLE (0) \
                     to PSHMEM_THREAD_MULTIPLE (3)"
                ),
            ))
        });
    }
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
        known_flags(flags)?;
        if id.is_null() {
            return Err(Fail::new(code::INVALID_ARG, "id is NULL"));
        }
        let (r, n) = match (usize::try_from(rank), usize::try_from(nranks)) {
            (Ok(r), Ok(n)) if r < n => (r, n),
            _ => {
                return Err(Fail::new(
                    code::INVALID_ARG,
                    format!("rank {rank} of nranks {nranks}: need 0 <= rank < nranks"),
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

/// `int pshmemx_init_mpi_comm(const void *comm, unsigned flags)`: `comm` points to an
/// `MPI_Comm` of the program's MPI (NULL: `MPI_COMM_WORLD`).
#[unsafe(no_mangle)]
pub extern "C" fn pshmemx_init_mpi_comm(comm: *const c_void, flags: u32) -> c_int {
    use pshmem_bootstrap::mpi::Mpi;
    status("pshmemx_init_mpi_comm", || {
        known_flags(flags)?;
        let mpi = Mpi::find()
            .map_err(|e| Fail::new(code::UNSUPPORTED, e.to_string()))?
            .ok_or_else(|| {
                Fail::new(
                    code::UNSUPPORTED,
                    "no MPI library is loaded in this process (link the program with MPI and \
                     call MPI_Init before initialising with an MPI communicator)",
                )
            })?;
        let comm = if comm.is_null() {
            mpi.world()
        } else {
            // SAFETY: the caller passes a pointer to an MPI_Comm of its MPI (the C API's
            // contract, as for nvshmemx_init_attr_t::mpi_comm).
            unsafe { mpi.comm_at(comm) }
        };
        start(flags, || {
            pshmem_env::validate_all()?;
            let bs = Bootstrap::init_mpi(&mpi, comm)?;
            Pshmem::init_with(bs, Config::from_env()?)
        })
    })
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
        || {
            let g = global()?;
            let v = g.s.team_my_pe(team);
            if v < 0 {
                set_last_error(&format!(
                    "pshmem_team_my_pe: {}",
                    team_why(&g, team, "this PE is not a member of it")
                ));
            }
            Ok(v)
        },
    )
}

/// `int pshmem_team_n_pes(pshmem_team_t)` (-1: no such team)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_n_pes(team: Team) -> c_int {
    guard(
        "pshmem_team_n_pes",
        |_| -1,
        || {
            let g = global()?;
            let v = g.s.team_n_pes(team);
            if v < 0 {
                set_last_error(&format!("pshmem_team_n_pes: {}", team_why(&g, team, "")));
            }
            Ok(v)
        },
    )
}

/// `int pshmem_team_translate_pe(pshmem_team_t src, int pe, pshmem_team_t dest)` (-1: none)
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_translate_pe(src: Team, pe: c_int, dest: Team) -> c_int {
    guard(
        "pshmem_team_translate_pe",
        |_| -1,
        || {
            let g = global()?;
            let v = g.s.team_translate_pe(src, pe, dest);
            if v < 0 {
                let n = g.s.team_n_pes(src);
                let why = if n < 0 {
                    format!("source {}", team_why(&g, src, ""))
                } else if g.s.team_n_pes(dest) < 0 {
                    format!("destination {}", team_why(&g, dest, ""))
                } else if !(0..n).contains(&pe) {
                    format!("PE {pe} is not in source team {src} of {n} PEs")
                } else {
                    format!("PE {pe} of team {src} is not a member of team {dest}")
                };
                set_last_error(&format!("pshmem_team_translate_pe: {why}"));
            }
            Ok(v)
        },
    )
}

/// Why a team query answered -1: no such team, or (`member`, when given) this PE is not in it.
fn team_why(g: &crate::Global, team: Team, member: &str) -> String {
    if g.s.team_n_pes(team) < 0 {
        format!("team {team}: no such team (not created, or destroyed)")
    } else {
        format!("team {team}: {member}")
    }
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
        if new_team.is_null() {
            return Err(Fail::new(code::INVALID_ARG, "new_team is NULL"));
        }
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
        if xaxis.is_null() || yaxis.is_null() {
            return Err(Fail::new(code::INVALID_ARG, "xaxis or yaxis is NULL"));
        }
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
pub(super) fn team_sync(team: Team, barrier: bool, stream: Option<CStream>) -> R<()> {
    let g = global_for(&stream)?;
    if stream.is_none() && g.on_demand() {
        ensure_gpu(&g)?;
    }
    Ok(g.api().sync(team, barrier, stream.map(stream_arg))?)
}

/// `int pshmem_team_sync(pshmem_team_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_sync(team: Team) -> c_int {
    status("pshmem_team_sync", || team_sync(team, false, None))
}

/// `int pshmem_team_barrier(pshmem_team_t)`
#[unsafe(no_mangle)]
pub extern "C" fn pshmem_team_barrier(team: Team) -> c_int {
    status("pshmem_team_barrier", || team_sync(team, true, None))
}
