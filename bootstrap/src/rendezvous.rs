//! How the ranks of a launcher's job find rank 0 when nobody named its address: a job that
//! mpirun, mpiexec or srun started as N ranks is one job of N PEs, never N jobs of one.
//!
//! In order:
//! 1. **The program's MPI**, when it has initialised one ([`pshmem_mpi_sys`]): rank 0 makes a
//!    [`UniqueId`] and broadcasts it over `MPI_COMM_WORLD` (or over the communicator
//!    `nvshmemx_init_attr` names: [`Bootstrap::init_mpi`]). Its world must be the launcher's:
//!    an MPI that makes every rank a singleton (a program built against another MPI than the
//!    launcher's) is refused, not run as one-PE jobs.
//! 2. **A file on this host**, when the launcher says every rank runs here (or does not say
//!    how many hosts): rank 0 writes its unique id into `rdv-<job>` in a directory only this
//!    user can enter (`PSHMEM_RENDEZVOUS_DIR`, else `$XDG_RUNTIME_DIR`, else the temporary
//!    directory, in a `pshmem-<uid>` folder), and the others read it. `<job>` is the
//!    launcher's name for the job, else the launcher process's id and start time. A file older
//!    than the join timeout is a dead job's and is ignored; rank 0 removes it once the job
//!    formed.
//! 3. **Slurm's host list** across hosts: rank 0 listens on the step's first host (where srun
//!    starts rank 0) at a port derived from the job and step ids.
//!
//! Anything else fails at once, naming the variable to set (`PSHMEM_BOOTSTRAP_ADDR`) and the
//! alternative (initialise MPI first).

use std::{
    io::Write as _,
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use pshmem_env as env;
use pshmem_mpi_sys::{Comm, Mpi};

use crate::{
    Bootstrap,
    config::{self, Ranks},
    error::{BootstrapError, Result},
    launcher::{self, Launch, Launcher},
    uid::UniqueId,
};

/// Ports a Slurm job's rank 0 may listen on (derived from its job and step ids).
const SLURM_PORTS: std::ops::Range<u32> = 20000..40000;
/// How often a rank looks for rank 0's file.
const POLL: Duration = Duration::from_millis(20);

/// Joins the job the environment describes (see the module's documentation).
pub(crate) fn from_env() -> Result<Bootstrap> {
    let ranks = Ranks::from_env()?;
    if let Some(root) = config::root_from_env(ranks.world)? {
        return Bootstrap::init(ranks.config(root)?);
    }
    let Some(launch) = ranks.launch.clone() else {
        return Err(ranks.no_address());
    };
    if let Some(mpi) = active_mpi(&launch)? {
        let (rank, world) = mpi.rank_size(mpi.world()).map_err(mpi_error(&launch))?;
        if (rank, world) != (ranks.rank, ranks.world) {
            return Err(launch.error(format!(
                "MPI_COMM_WORLD of this process's MPI ({}) has rank {rank} of {world}: the \
                 program's MPI is not the one that launched it (a program built against \
                 another MPI than the launcher's?)",
                mpi.version()
            )));
        }
        tracing::debug!(
            "rank {rank} of {world}: {}: meeting over MPI_COMM_WORLD",
            launch.by
        );
        return join_over_mpi(&mpi, mpi.world(), &ranks, launch.one_host());
    }
    // Several hosts for sure (the launcher says so), or possibly (it does not say).
    let spans = launch.spans_hosts();
    let how = match (launch.by, spans) {
        (Launcher::Slurm, Some(true)) => "on the step's first host",
        (_, Some(true)) => "nowhere",
        _ => "through a file on this host",
    };
    tracing::debug!(
        "rank {} of {}: {}: meeting {how}",
        ranks.rank,
        ranks.world,
        launch.by
    );
    match (launch.by, spans) {
        (Launcher::Slurm, Some(true)) => slurm(&ranks, &launch),
        (_, Some(false) | None) => by_file(&ranks, &launch),
        _ => Err(launch.error(
            "the ranks span hosts and no rendezvous was named: set PSHMEM_BOOTSTRAP_ADDR=host:port \
             (rank 0's host, the same on every rank), or initialise MPI before initialising \
             pshmem (the job then meets over MPI)",
        )),
    }
}

/// The program's MPI if it is initialised (`None`: no MPI, or not initialised).
fn active_mpi(launch: &Launch) -> Result<Option<Mpi>> {
    match Mpi::find() {
        Ok(Some(m)) if m.active().map_err(mpi_error(launch))? => Ok(Some(m)),
        Ok(_) => Ok(None),
        Err(e) => Err(launch.error(format!("the program's MPI cannot be used: {e}"))),
    }
}

fn mpi_error(launch: &Launch) -> impl Fn(pshmem_mpi_sys::MpiError) -> BootstrapError + '_ {
    move |e| launch.error(e.to_string())
}

impl Bootstrap {
    /// Joins a job whose PEs are the ranks of `comm` (rank order kept), as
    /// `nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM)` does: rank 0 of the communicator makes
    /// a unique id and broadcasts it over `comm` (collective over it). MPI must be initialised.
    pub fn init_mpi(mpi: &Mpi, comm: Comm) -> Result<Self> {
        let bad = |e: pshmem_mpi_sys::MpiError| BootstrapError::Launch {
            rank: 0,
            world: 0,
            launcher: format!("MPI ({})", mpi.version()),
            reason: e.to_string(),
        };
        let (rank, world) = mpi.rank_size(comm).map_err(bad)?;
        let mut ranks = Ranks::from_env()?;
        let launch = ranks.launch.take();
        let one_host = launch.as_ref().is_some_and(Launch::one_host);
        // The communicator numbers the PEs; the launcher's local numbers hold only for its
        // world (else they come from the host ids).
        if launch.as_ref().is_none_or(|l| l.size != world) {
            (ranks.local_rank, ranks.local_size) = (None, None);
        }
        (ranks.rank, ranks.world) = (rank, world);
        join_over_mpi(mpi, comm, &ranks, one_host)
    }
}

/// Rank 0 of `comm` makes a unique id (on loopback when every rank is on this host) and
/// broadcasts it; everyone joins with it.
fn join_over_mpi(mpi: &Mpi, comm: Comm, ranks: &Ranks, one_host: bool) -> Result<Bootstrap> {
    let fail = |e: pshmem_mpi_sys::MpiError| BootstrapError::Launch {
        rank: ranks.rank,
        world: ranks.world,
        launcher: format!("MPI ({})", mpi.version()),
        reason: e.to_string(),
    };
    let mut bytes = [0u8; crate::UNIQUE_ID_LEN];
    if ranks.rank == 0 {
        bytes = new_id(one_host)?.to_bytes();
    }
    mpi.bcast(comm, &mut bytes, 0).map_err(fail)?;
    let id = UniqueId::from_bytes(&bytes)?;
    Bootstrap::init_unique_id_at(&id, ranks)
}

/// A unique id listening on loopback (every rank on this host: no traffic leaves it) or on
/// the outward address ([`UniqueId::new`]).
fn new_id(one_host: bool) -> Result<UniqueId> {
    if one_host && env::BOOTSTRAP_ADDR.raw().is_none() {
        UniqueId::bind("127.0.0.1:0")
    } else {
        UniqueId::new()
    }
}

/// Rank 0 writes its unique id into the job's file; the others wait for it.
fn by_file(ranks: &Ranks, launch: &Launch) -> Result<Bootstrap> {
    let timeout = env::BOOTSTRAP_TIMEOUT.secs()?;
    let dir = private_dir().map_err(|why| launch.error(why))?;
    let job = launch.job.clone().or_else(parent_key).ok_or_else(|| {
        launch.error("no name for this job (launcher variables or parent process) to meet under")
    })?;
    let file = dir.join(format!("rdv-{}-n{}", sanitize(&job), ranks.world));
    if ranks.rank == 0 {
        let id = new_id(true)?;
        publish(&file, &id).map_err(|e| {
            launch.error(format!(
                "cannot write the rendezvous {}: {e}",
                file.display()
            ))
        })?;
        let joined = Bootstrap::init_unique_id_at(&id, ranks);
        // Formed or failed, the file has served: a later job must not read it.
        let _ = std::fs::remove_file(&file);
        return joined;
    }
    let id = wait_for(&file, timeout).ok_or_else(|| {
        launch.error(format!(
            "no rendezvous from rank 0 in {} after {timeout:.0?}: rank 0 did not start, or the \
             ranks span hosts (then set PSHMEM_BOOTSTRAP_ADDR=host:port of rank 0's host on \
             every rank, or initialise MPI first)",
            file.display()
        ))
    })?;
    Bootstrap::init_unique_id_at(&id, ranks)
}

/// `dir/pshmem-<uid>`, made (0700) if missing and checked to be this user's alone.
fn private_dir() -> std::result::Result<PathBuf, String> {
    let base = env::RENDEZVOUS_DIR
        .raw()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from))
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let me = nix::unistd::geteuid().as_raw();
    let dir = base.join(format!("pshmem-{me}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a directory private to uid {me} (owner {}, mode {:o}): another user \
             could forge the rendezvous; remove it or set {}",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777,
            env::RENDEZVOUS_DIR.name
        ));
    }
    Ok(dir)
}

/// Writes `id` into `file` at once (a private temporary file renamed over it).
fn publish(file: &Path, id: &UniqueId) -> std::io::Result<()> {
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let hex: String = id.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    f.write_all(hex.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, file).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Reads rank 0's id from `file`, polling until `timeout`; a file older than the timeout is
/// a dead job's (rank 0 of this one wrote no earlier than that before this rank looked).
fn wait_for(file: &Path, timeout: Duration) -> Option<UniqueId> {
    let since = SystemTime::now().checked_sub(timeout)?;
    let end = Instant::now() + timeout;
    loop {
        if let Some(id) = read_fresh(file, since) {
            return Some(id);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

fn read_fresh(file: &Path, since: SystemTime) -> Option<UniqueId> {
    let m = std::fs::metadata(file).ok()?;
    if m.modified().ok()? < since {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let bytes: Option<Vec<u8>> = (0..text.len() / 2)
        .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    UniqueId::from_bytes(&bytes?).ok()
}

/// The launching process's id and start time (the same for every rank it started on this
/// host, never for a later process).
fn parent_key() -> Option<String> {
    let ppid = nix::unistd::getppid().as_raw();
    let stat = std::fs::read_to_string(format!("/proc/{ppid}/stat")).ok()?;
    // Field 22 (start time), counted after the command name's closing parenthesis.
    let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
    Some(format!("ppid{ppid}-{start}"))
}

/// A job name as a file name.
fn sanitize(job: &str) -> String {
    let s: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(96)
        .collect();
    format!("{s}-{:08x}", fnv(job) as u32)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Across Slurm hosts: rank 0 listens on the step's first host.
fn slurm(ranks: &Ranks, launch: &Launch) -> Result<Bootstrap> {
    let host = launch
        .nodelist
        .as_deref()
        .and_then(launcher::first_host)
        .ok_or_else(|| launch.error("SLURM_STEP_NODELIST is unset or unreadable"))?;
    let job = launch
        .job
        .as_deref()
        .ok_or_else(|| launch.error("SLURM_JOB_ID or SLURM_STEP_ID is unset"))?;
    let port = SLURM_PORTS.start + (fnv(job) % u64::from(SLURM_PORTS.len() as u32)) as u32;
    let root = format!("{host}:{port}");
    match Bootstrap::init(ranks.config(root.clone())?) {
        Err(BootstrapError::AddrInUse { .. } | BootstrapError::Bind { .. }) if ranks.rank == 0 => {
            Err(launch.error(format!(
                "rank 0 cannot listen on {root} (the first host of SLURM_STEP_NODELIST, a port \
                 derived from the job): is rank 0 on another host, or the port taken? Set \
                 PSHMEM_BOOTSTRAP_ADDR=host:port on every rank"
            )))
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_id_is_read_back_and_a_stale_one_is_not() {
        let dir = std::env::temp_dir().join(format!("pshmem-rdv-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rdv-x");
        let id = UniqueId {
            addr: "127.0.0.1:4242".parse().unwrap(),
            secret: 99,
        };
        publish(&file, &id).unwrap();
        assert_eq!(read_fresh(&file, SystemTime::UNIX_EPOCH), Some(id));
        let future = SystemTime::now() + Duration::from_secs(5);
        assert_eq!(read_fresh(&file, future), None, "older than the window");
        assert_eq!(wait_for(&dir.join("none"), Duration::from_millis(50)), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn job_names_are_file_names_and_distinct() {
        let a = sanitize("prterun-host-1@1");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
            "{a}"
        );
        assert_ne!(sanitize("a/b"), sanitize("a_b"));
        assert!(parent_key().is_some_and(|k| k.starts_with("ppid")));
    }
}
