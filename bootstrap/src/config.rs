//! Bootstrap configuration: from our variables, torchrun's, or a unique id.

use std::time::Duration;

use pshmem_env::{self as env, EnvError, fallback};

use crate::error::{BootstrapError, Result};

/// Everything a rank needs to join a job.
#[derive(Debug, Clone)]
pub struct BootstrapConfig {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Local rank from the launcher, if it gave one (else computed from host ids).
    pub local_rank: Option<usize>,
    /// Local size from the launcher, if it gave one.
    pub local_size: Option<usize>,
    /// `host:port` where rank 0 listens.
    pub root_addr: String,
    /// Job secret carried in every frame.
    pub secret: u64,
    /// How long rank 0 waits for everyone (and others for rank 0).
    pub join_timeout: Duration,
    /// How long one collective may wait for live ranks.
    pub op_timeout: Duration,
    /// Heartbeat interval on idle connections.
    pub heartbeat: Duration,
    /// Silence after which a peer is declared dead.
    pub peer_timeout: Duration,
    /// This host's identity (same value ⇔ same host).
    pub host_id: String,
}

impl BootstrapConfig {
    /// A one-rank job that needs no network.
    pub fn singleton() -> Result<Self> {
        Self::with_rank(0, 1, String::new(), 0)
    }

    /// A configuration for `rank` of `world_size` joining at `root_addr`, with every other
    /// setting (timeouts, host id) from the environment table.
    pub fn with_rank(
        rank: usize,
        world_size: usize,
        root_addr: String,
        secret: u64,
    ) -> Result<Self> {
        if world_size == 0 {
            return Err(BootstrapError::Config(EnvError {
                var: env::WORLD_SIZE.name.into(),
                value: "0".into(),
                reason: "the world size must be at least 1".into(),
            }));
        }
        if rank >= world_size {
            return Err(BootstrapError::RankOutOfRange {
                rank,
                world: world_size,
            });
        }
        if world_size > 1 {
            check_addr(&root_addr)?;
            if secret == 0 {
                warn_unauthenticated(&root_addr);
            }
        }
        let heartbeat = env::HEARTBEAT_MS.millis()?;
        let peer_timeout = env::PEER_TIMEOUT_MS.millis()?;
        if heartbeat * 2 > peer_timeout {
            // A peer that heartbeats less than twice per timeout would be declared dead while
            // healthy.
            return Err(BootstrapError::Config(env::HEARTBEAT_MS.bad(
                &env::HEARTBEAT_MS.value(),
                &format!(
                    "at most half of {} ({} ms), or healthy peers are declared dead",
                    env::PEER_TIMEOUT_MS.name,
                    peer_timeout.as_millis()
                ),
            )));
        }
        Ok(Self {
            rank,
            world_size,
            local_rank: None,
            local_size: None,
            root_addr,
            secret,
            join_timeout: env::BOOTSTRAP_TIMEOUT.secs()?,
            op_timeout: env::BOOTSTRAP_OP_TIMEOUT.secs()?,
            heartbeat,
            peer_timeout,
            host_id: host_id(),
        })
    }

    /// Reads the configuration from the environment: `PSHMEM_*` first, then torchrun's
    /// `RANK`/`WORLD_SIZE`/`LOCAL_RANK`/`LOCAL_WORLD_SIZE`/`MASTER_ADDR`/`MASTER_PORT`, then
    /// the ranks a launcher (mpirun, mpiexec, srun: [`crate::launcher`]) gives. With none of
    /// them set the job has one PE. A job of several ranks needs rank 0's address here;
    /// [`crate::Bootstrap::from_env`] finds one itself when a launcher started the job.
    pub fn from_env() -> Result<Self> {
        let ranks = Ranks::from_env()?;
        match root_from_env(ranks.world)? {
            Some(root) => ranks.config(root),
            None => Err(ranks.no_address()),
        }
    }
}

/// This process's place in the job, as the environment gives it.
#[derive(Debug, Clone)]
pub(crate) struct Ranks {
    pub rank: usize,
    pub world: usize,
    pub local_rank: Option<usize>,
    pub local_size: Option<usize>,
    /// The launcher's account, when one started this process.
    pub launch: Option<crate::launcher::Launch>,
}

impl Ranks {
    /// Ours or torchrun's variables, else the launcher's (ours win: a torchrun started by
    /// srun numbers its workers itself).
    pub(crate) fn from_env() -> Result<Self> {
        // Every variable of the table, checked against its kind and bounds before anything
        // starts: a bad setting fails here, naming itself, not later as a strange fault.
        env::validate_all()?;
        die_with_launcher()?;
        let explicit = explicit_ranks()?;
        let launch = match crate::launcher::detect(fallback)? {
            None if explicit.is_none() => crate::launcher::pmix_only(fallback)?,
            l => l,
        };
        let (rank, world) = match (explicit, &launch) {
            (Some((r, w)), Some(l)) => {
                tracing::debug!(
                    "rank {r} of {w} from {}/torchrun's variables ({} says rank {} of {})",
                    env::RANK.name,
                    l.by,
                    l.rank,
                    l.size
                );
                (r, w)
            }
            (Some(rw), None) => rw,
            (None, Some(l)) => (l.rank, l.size),
            (None, None) => (0, 1),
        };
        let from_launch = |f: fn(&crate::launcher::Launch) -> Option<usize>| {
            launch.as_ref().filter(|l| l.rank == rank).and_then(f)
        };
        Ok(Self {
            rank,
            world,
            local_rank: int_var(env::LOCAL_RANK.name, "LOCAL_RANK")?
                .or_else(|| from_launch(|l| l.local_rank)),
            local_size: int_var(env::LOCAL_SIZE.name, "LOCAL_WORLD_SIZE")?
                .or_else(|| from_launch(|l| l.local_size)),
            launch,
        })
    }

    /// The configuration joining at `root_addr`.
    pub(crate) fn config(&self, root_addr: String) -> Result<BootstrapConfig> {
        let secret = job_secret()?;
        let mut cfg = BootstrapConfig::with_rank(self.rank, self.world, root_addr, secret)?;
        cfg.local_rank = self.local_rank;
        cfg.local_size = self.local_size;
        Ok(cfg)
    }

    /// The error of a job of several ranks that nobody told where rank 0 is.
    pub(crate) fn no_address(&self) -> BootstrapError {
        BootstrapError::Config(EnvError {
            var: env::BOOTSTRAP_ADDR.name.into(),
            value: "unset".into(),
            reason: format!(
                "rank {} of {}: a multi-rank job needs PSHMEM_BOOTSTRAP_ADDR (or MASTER_ADDR \
                 and MASTER_PORT)",
                self.rank, self.world
            ),
        })
    }
}

/// `PSHMEM_RANK`/`PSHMEM_WORLD_SIZE` (or torchrun's), set together or not at all.
fn explicit_ranks() -> Result<Option<(usize, usize)>> {
    let rank = int_var(env::RANK.name, "RANK")?;
    let world = int_var(env::WORLD_SIZE.name, "WORLD_SIZE")?;
    match (rank, world) {
        (None, None) => Ok(None),
        (Some(r), Some(w)) => Ok(Some((r, w))),
        (r, w) => {
            let (var, val) = if r.is_none() {
                (
                    env::RANK.name,
                    format!("unset (world size {})", w.unwrap_or(0)),
                )
            } else {
                (
                    env::WORLD_SIZE.name,
                    format!("unset (rank {})", r.unwrap_or(0)),
                )
            };
            Err(BootstrapError::Config(EnvError {
                var: var.into(),
                value: val,
                reason: "rank and world size must be set together".into(),
            }))
        }
    }
}

/// Rank 0's address from `PSHMEM_BOOTSTRAP_ADDR`, or torchrun's `MASTER_ADDR` and
/// `MASTER_PORT` (plus the port offset); `""` for a one-rank job; `None` when a job of several
/// ranks names none.
pub(crate) fn root_from_env(world: usize) -> Result<Option<String>> {
    if let Some(a) = env::BOOTSTRAP_ADDR.raw() {
        return Ok(Some(a));
    }
    match (fallback("MASTER_ADDR"), fallback("MASTER_PORT")) {
        (Some(host), Some(port)) => {
            let port: u16 = port.trim().parse().map_err(|_| {
                BootstrapError::Config(EnvError {
                    var: "MASTER_PORT".into(),
                    value: port.clone(),
                    reason: "expected a port number".into(),
                })
            })?;
            let off = env::BOOTSTRAP_PORT_OFFSET.usize()?;
            let p = usize::from(port) + off;
            let p = u16::try_from(p).map_err(|_| {
                BootstrapError::Config(EnvError {
                    var: env::BOOTSTRAP_PORT_OFFSET.name.into(),
                    value: off.to_string(),
                    reason: format!("MASTER_PORT {port} + offset exceeds 65535"),
                })
            })?;
            Ok(Some(format!("{host}:{p}")))
        }
        _ if world == 1 => Ok(Some(String::new())),
        _ => Ok(None),
    }
}

/// Under pshmrun (`PSHMEM_LAUNCHER_PID`), makes this process die with its parent, so that no
/// rank outlives the launcher, even one that a script started (pshmrun gives its direct children
/// the same signal); fails if the launcher is already gone.
///
/// The kernel keeps the parent-death signal per thread, and forgets it when the thread that
/// set it ends: set from the caller's thread (a Python thread that initialises, then ends) it
/// would be lost. So a thread of its own sets it, once per process, and lives as long as the
/// process does.
fn die_with_launcher() -> Result<()> {
    /// The process (pid) whose thread holds the signal: a forked child has no such thread.
    static WATCH: std::sync::Mutex<Option<(u32, std::result::Result<(), String>)>> =
        std::sync::Mutex::new(None);
    let Some(pid) = env::LAUNCHER_PID.opt_usize()? else {
        return Ok(());
    };
    let gone = |why: &str| BootstrapError::Config(env::LAUNCHER_PID.bad(&pid.to_string(), why));
    {
        let mut w = WATCH.lock().unwrap_or_else(|p| p.into_inner());
        let me = std::process::id();
        if w.as_ref().is_none_or(|(p, _)| *p != me) {
            *w = Some((me, parent_death_thread()));
        }
        if let Some((_, Err(e))) = w.as_ref() {
            return Err(gone(e));
        }
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) {
        Err(nix::errno::Errno::ESRCH) => Err(gone(
            "the launcher (pshmrun) is gone: this rank would outlive it",
        )),
        _ => Ok(()),
    }
}

/// Starts the thread that holds this process's parent-death signal (SIGKILL) and parks for
/// the rest of the process's life.
fn parent_death_thread() -> std::result::Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("pshmem-pdeathsig".into())
        .spawn(move || {
            let set = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            let _ = tx.send(set.map_err(|e| format!("PR_SET_PDEATHSIG failed: {e}")));
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| format!("cannot start the thread that ties this rank to it: {e}"))?;
    rx.recv()
        .map_err(|_| "the parent-death thread ended at once".to_string())?
}

/// Fails at once on a bootstrap address that is not `host:port` (rather than retrying it until
/// the join timeout).
fn check_addr(addr: &str) -> Result<()> {
    env::Kind::Address
        .check(addr)
        .map_err(|why| BootstrapError::Config(env::BOOTSTRAP_ADDR.bad(addr, why)))
}

/// Says once per process that this job's bootstrap has no secret, and how to give it one.
fn warn_unauthenticated(addr: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let msg = format!(
            "{} is not set: this job's bootstrap is unauthenticated, and any process that can \
             reach {addr} can join it, learn its ranks or abort it. Give every rank the same \
             random secret, e.g. `export {}=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')` before \
             torchrun or srun (pshmrun and unique ids make one themselves).",
            env::JOB_SECRET.name,
            env::JOB_SECRET.name
        );
        // Seen also where no log subscriber is installed: a security warning must be.
        if tracing::dispatcher::has_been_set() {
            tracing::warn!("{msg}");
        } else {
            eprintln!("pshmem: warning: {msg}");
        }
    });
}

/// The job secret: from the memfd `PSHMEM_JOB_SECRET_FD` names (pshmrun's; read once per
/// process, then closed: a later init of the same process reuses it), else
/// `PSHMEM_JOB_SECRET`, else 0. A descriptor that is not open here (a child that closed what
/// it inherited) yields to `PSHMEM_JOB_SECRET` when that is set.
fn job_secret() -> Result<u64> {
    static FROM_FD: std::sync::OnceLock<std::result::Result<u64, EnvError>> =
        std::sync::OnceLock::new();
    let from_env = || match env::JOB_SECRET.raw() {
        Some(v) => parse_secret(&v),
        None => Ok(0),
    };
    let Some(fd) = env::JOB_SECRET_FD.opt_usize()? else {
        return from_env();
    };
    match FROM_FD.get_or_init(|| secret_from_fd(fd)) {
        Ok(s) => Ok(*s),
        Err(_) if env::JOB_SECRET.raw().is_some() => from_env(),
        Err(e) => Err(BootstrapError::Config(e.clone())),
    }
}

/// Reads the secret from pshmrun's memfd at descriptor `fd` (through `/proc/self/fd`, which
/// opens it anew at offset 0) and closes the descriptor. Anything else at that number (a
/// descriptor the program reused) is refused, not read.
fn secret_from_fd(fd: usize) -> std::result::Result<u64, EnvError> {
    let bad = |why: String| env::JOB_SECRET_FD.bad(&fd.to_string(), &why);
    let path = format!("/proc/self/fd/{fd}");
    let target = std::fs::read_link(&path).map_err(|e| {
        bad(format!(
            "not an open descriptor ({e}); a process started by a rank that closed it can \
             take the secret from PSHMEM_JOB_SECRET instead"
        ))
    })?;
    if !target
        .to_string_lossy()
        .starts_with("/memfd:pshmem-job-secret")
    {
        return Err(bad(format!(
            "{} is not pshmrun's secret (a memfd named pshmem-job-secret)",
            target.display()
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let _ = nix::unistd::close(fd as std::os::fd::RawFd);
    parse_secret(&text).map_err(|_| bad("expected up to 16 hex digits".into()))
}

/// Parses a hex job secret (with or without `0x`).
pub fn parse_secret(text: &str) -> Result<u64> {
    let t = text.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    u64::from_str_radix(t, 16).map_err(|_| {
        BootstrapError::Config(EnvError {
            var: env::JOB_SECRET.name.into(),
            value: text.into(),
            reason: "expected up to 16 hex digits".into(),
        })
    })
}

fn int_var(ours: &str, theirs: &str) -> Result<Option<usize>> {
    let (name, val) = match fallback(ours) {
        Some(v) => (ours, v),
        None => match fallback(theirs) {
            Some(v) => (theirs, v),
            None => return Ok(None),
        },
    };
    val.trim().parse().map(Some).map_err(|_| {
        BootstrapError::Config(EnvError {
            var: name.into(),
            value: val,
            reason: "expected a non-negative integer".into(),
        })
    })
}

/// This host's identity: `PSHMEM_HOST_ID`, else hostname + kernel boot id (so that two
/// containers with one hostname on different machines still differ).
pub fn host_id() -> String {
    if let Some(id) = env::HOST_ID.raw() {
        return id;
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{}:{}", hostname(), boot.trim())
}

/// The host name, or "unknown-host".
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}
