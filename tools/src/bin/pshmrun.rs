//! `pshmrun -n N [--timeout S] -- PROGRAM [ARGS...]`: starts N local processes of one
//! proxyshmem job, prefixes each output line with the rank, and propagates failure.
//!
//! - Arguments are checked before anything starts (a bad `--timeout` never leaves ranks behind).
//! - Each rank runs in its own process group, so that stopping a rank stops what it started, and
//!   with a parent-death signal: if pshmrun itself dies (even by SIGKILL), its ranks are killed;
//!   the ranks' runtime sets its own too (`PSHMEM_LAUNCHER_PID`), for programs a rank started.
//! - Every rank has a waiter that reports its exit, death or stop the moment it happens. When a
//!   rank fails, the others are terminated (SIGTERM, then SIGKILL after a grace period) and
//!   pshmrun names the rank that failed *first* — a rank killed or stopped by a signal before the
//!   others reported its death — with its status or signal, and exits with that status.
//! - A rank left stopped (SIGSTOP) for `PSHMEM_BOOTSTRAP_PEER_TIMEOUT_MS` fails the job too,
//!   named as such: its peers would declare it dead after that long, and before it has joined
//!   nobody else would notice. A rank stopped and continued within it is no failure.
//! - Ctrl-C (SIGINT), SIGTERM and SIGHUP stop every rank.
//!
//! Multi-host jobs use torchrun, srun or mpirun with the same environment variables instead.

use std::{
    io::{BufRead, BufReader, Read, Write},
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use clap::Parser;
use nix::{
    sys::{
        signal::{Signal, killpg},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};
use pshmem_env as env;

#[derive(Parser, Debug)]
#[command(
    name = "pshmrun",
    about = "Launch N local processes of a proxyshmem job",
    after_help = "Each rank gets PSHMEM_RANK, PSHMEM_WORLD_SIZE, PSHMEM_LOCAL_RANK, PSHMEM_LOCAL_SIZE, \
                  PSHMEM_BOOTSTRAP_ADDR and a random job secret through an inherited memfd \
                  (PSHMEM_JOB_SECRET_FD)."
)]
struct Args {
    /// Number of processes (PEs).
    #[arg(short = 'n', long = "np", value_parser = clap::value_parser!(u32).range(1..=4096))]
    n: u32,
    /// Stop every rank and fail after this many seconds (positive, finite).
    #[arg(long, value_parser = seconds)]
    timeout: Option<Duration>,
    /// Emulate this many hosts (ranks split into contiguous blocks with distinct host ids), so
    /// that same-host shortcuts are not taken between blocks. For testing the network path.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    hosts: u32,
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    no_prefix: bool,
    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, default_value = "3", value_parser = seconds)]
    grace: Duration,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Parses a positive, finite number of seconds (at most a week).
fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 604_800.0) {
        return Err(format!("{s:?}: expected seconds in (0, 604800]"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Signal number received (0 = none).
static SIGNALLED: AtomicUsize = AtomicUsize::new(0);

fn main() {
    let args = Args::parse();
    std::process::exit(run(args));
}

/// What happened to a rank, as its waiter saw it.
#[derive(Debug, Clone, Copy)]
enum What {
    Exited(i32),
    Killed(Signal),
    Stopped(Signal),
    Continued,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    rank: usize,
    at: Instant,
    what: What,
}

impl What {
    fn describe(self) -> String {
        match self {
            What::Exited(c) => format!("exited with status {c}"),
            What::Killed(s) => format!("was killed by signal {} ({})", s as i32, s.as_str()),
            What::Stopped(s) => format!("was stopped by signal {} ({})", s as i32, s.as_str()),
            What::Continued => "was continued".into(),
        }
    }

    fn exit_code(self) -> i32 {
        match self {
            What::Exited(c) => c,
            What::Killed(s) | What::Stopped(s) => 128 + s as i32,
            What::Continued => 1,
        }
    }

    /// A rank's end by an outside hand (a signal), rather than its own exit.
    fn by_signal(self) -> bool {
        matches!(self, What::Killed(_) | What::Stopped(_))
    }
}

/// Waits for `pid` (rank `rank`): reports stops and continues, and its end.
fn waiter(rank: usize, pid: Pid, tx: mpsc::Sender<Event>) {
    let flags = WaitPidFlag::WUNTRACED | WaitPidFlag::WCONTINUED;
    loop {
        let what = match waitpid(pid, Some(flags)) {
            Ok(WaitStatus::Exited(_, c)) => What::Exited(c),
            Ok(WaitStatus::Signaled(_, s, _)) => What::Killed(s),
            Ok(WaitStatus::Stopped(_, s)) => What::Stopped(s),
            Ok(WaitStatus::Continued(_)) => What::Continued,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => What::Exited(1),
        };
        let end = matches!(what, What::Exited(_) | What::Killed(_));
        let _ = tx.send(Event {
            rank,
            at: Instant::now(),
            what,
        });
        if end {
            return;
        }
    }
}

fn pump(
    rank: usize,
    prefix: bool,
    src: impl Read,
    mut dst: impl Write + Send,
    lock: Arc<Mutex<()>>,
) {
    let mut r = BufReader::new(src);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
                if prefix {
                    let _ = write!(dst, "[{rank}] ");
                }
                let _ = dst.write_all(&line);
                let _ = dst.flush();
            }
        }
    }
}

/// Whether `program` names something this process could execute (as `execvp` would look it up).
fn executable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return runnable(Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| runnable(&d.join(program))))
}

/// The ranks started, their output pumps, and the events of their waiters.
struct Ranks {
    pids: Vec<Pid>,
    running: Vec<bool>,
    pumps: Vec<thread::JoinHandle<()>>,
    events: mpsc::Receiver<Event>,
}

/// The job secret in a sealed memfd named [`SECRET_MEMFD`] (`PSHMEM_JOB_SECRET_FD`): its
/// descriptor, close-on-exec here (each rank's start clears that). Not the environment: every
/// process of the user can read `/proc/<pid>/environ`, while a rank closes the descriptor once
/// it has read it. A memfd, not a pipe: every process the rank's command starts in turn (a
/// script running two programs) reads it whole again.
fn secret_memfd(secret: u64) -> Result<std::os::fd::OwnedFd, String> {
    use nix::{
        fcntl::{FcntlArg, SealFlag, fcntl},
        sys::memfd::{MFdFlags, memfd_create},
    };
    let why = |e: nix::Error| format!("cannot make the job secret's memfd: {e}");
    let fd = memfd_create(
        SECRET_MEMFD,
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(why)?;
    let mut f = std::fs::File::from(fd);
    f.write_all(format!("{secret:016x}").as_bytes())
        .map_err(|e| format!("cannot write the job secret's memfd: {e}"))?;
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    fcntl(&f, FcntlArg::F_ADD_SEALS(seals)).map_err(why)?;
    Ok(f.into())
}

/// The memfd's name (`/memfd:pshmem-job-secret` in `/proc/<pid>/fd`), which a rank checks.
const SECRET_MEMFD: &std::ffi::CStr = c"pshmem-job-secret";

/// What a rank's process does between fork and exec: keep the secret's memfd `secret_fd`
/// (close-on-exec in pshmrun, the one descriptor the rank inherits) and die with pshmrun
/// (`me`), even if pshmrun is killed by SIGKILL; if pshmrun died before, exit at once.
fn child_hook(cmd: &mut Command, me: u32, secret_fd: std::os::fd::RawFd) {
    // SAFETY: the hook runs in the child between fork and exec and calls only fcntl, prctl and
    // getppid, all async-signal-safe; it allocates nothing and takes no lock. `secret_fd` is
    // open until every rank is spawned (`start` drops it then).
    unsafe {
        cmd.pre_exec(move || {
            nix::fcntl::fcntl(
                std::os::fd::BorrowedFd::borrow_raw(secret_fd),
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )?;
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid().as_raw() as u32 != me {
                return Err(std::io::Error::other("pshmrun is gone"));
            }
            Ok(())
        });
    }
}

fn start(args: &Args, port: u16, secret: u64) -> Result<Ranks, String> {
    let n = args.n as usize;
    let hosts = (args.hosts as usize).min(n);
    let per_host = n.div_ceil(hosts);
    // Every rank runs on this machine, emulated hosts included: the GPUs' hardware queues are
    // shared by all `n` (sized per emulated host, 8 PEs on one GPU in 2 "hosts" asked for 128
    // and the later contexts failed to start: CUDA "out of memory").
    let queues = std::env::var(env::CUDA_DEVICE_MAX_CONNECTIONS)
        .unwrap_or_else(|_| env::cuda_queues(n, env::local_gpus()).to_string());
    // The GPU proxy serves GPU traffic only where some peer's heap is not mapped: across
    // (emulated) hosts, or with P2P disabled. Only such jobs need eager module loading and more
    // hardware queues (see below); elsewhere CUDA's defaults stand, because every queue costs
    // context creation time (under MPS on the H100: 2 PEs create their contexts in 0.59 s with
    // 16 queues, 0.34 s with 8; 4 PEs in 1.35 s and 0.65 s).
    let proxied = hosts > 1 || env::DISABLE_P2P.bool().unwrap_or(false);
    let lock = Arc::new(Mutex::new(()));
    let (tx, events) = mpsc::channel();
    let me = std::process::id();
    let mut ranks = Ranks {
        pids: Vec::new(),
        running: Vec::new(),
        pumps: Vec::new(),
        events,
    };
    let secret_fd = secret_memfd(secret)?;
    for rank in 0..n {
        let host = rank / per_host;
        let mut cmd = Command::new(&args.command[0]);
        cmd.args(&args.command[1..])
            .env(env::RANK.name, rank.to_string())
            .env(env::WORLD_SIZE.name, n.to_string())
            .env(env::LOCAL_RANK.name, (rank % per_host).to_string())
            .env(
                env::LOCAL_SIZE.name,
                per_host.min(n - host * per_host).to_string(),
            )
            .env(env::BOOTSTRAP_ADDR.name, format!("127.0.0.1:{port}"))
            .env(env::JOB_SECRET_FD.name, secret_fd.as_raw_fd().to_string())
            .env(env::LAUNCHER_PID.name, me.to_string())
            // EFA: let the NIC reach GPU memory (libfabric's efa provider; others ignore it).
            .env(
                env::EFA_DEVICE_RDMA,
                std::env::var(env::EFA_DEVICE_RDMA).unwrap_or_else(|_| "1".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if hosts > 1 {
            cmd.env(env::HOST_ID.name, format!("pshmrun-emulated-host-{host}"));
        }
        if proxied {
            // CUDA: load every kernel at module load, not at its first launch (a first launch
            // waits for the context's running kernels, one of which may wait on a peer that
            // only this process's proxy can serve: a deadlock until PSHMEM_OP_TIMEOUT).
            // CUDA: more hardware queues, so that the proxy's stream does not share one with an
            // application stream whose kernel waits for the proxy (false serialization).
            cmd.env(env::CUDA_DEVICE_MAX_CONNECTIONS, &queues).env(
                env::CUDA_MODULE_LOADING,
                std::env::var(env::CUDA_MODULE_LOADING).unwrap_or_else(|_| "EAGER".into()),
            );
        }
        child_hook(&mut cmd, me, secret_fd.as_raw_fd());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?} for rank {rank}: {e}", args.command[0]))?;
        let pid = Pid::from_raw(child.id() as i32);
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let p = !args.no_prefix;
        for (src, to_err) in [(out.map(box_read), false), (err.map(box_read), true)] {
            let (Some(src), l) = (src, lock.clone()) else {
                continue;
            };
            ranks.pumps.push(thread::spawn(move || {
                if to_err {
                    pump(rank, p, src, std::io::stderr(), l)
                } else {
                    pump(rank, p, src, std::io::stdout(), l)
                }
            }));
        }
        // Reaped by the waiter (waitpid), not by `Child`.
        drop(child);
        let tx = tx.clone();
        thread::spawn(move || waiter(rank, pid, tx));
        ranks.pids.push(pid);
        ranks.running.push(true);
    }
    Ok(ranks)
}

fn box_read(r: impl Read + Send + 'static) -> Box<dyn Read + Send> {
    Box::new(r)
}

fn run(args: Args) -> i32 {
    if !executable(&args.command[0]) {
        eprintln!(
            "pshmrun: cannot start {:?}: no such executable program",
            args.command[0]
        );
        return 127;
    }
    let signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pshmrun: cannot install signal handlers: {e}");
            return 1;
        }
    };
    let handle = signals.handle();
    thread::spawn(move || {
        let mut signals = signals;
        if let Some(s) = signals.forever().next() {
            SIGNALLED.store(s as usize, Ordering::SeqCst);
        }
    });
    // A free port on loopback for rank 0, chosen below the ephemeral range so that no outgoing
    // connection can take it first. Another program binding it in the meantime makes rank 0 fail
    // with a clear "address in use" error rather than hang.
    let port = match pshmem_bootstrap::free_loopback_port() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pshmrun: cannot find a free port on 127.0.0.1: {e}");
            return 1;
        }
    };
    let mut ranks = match start(&args, port, rand::random()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pshmrun: {e}");
            return 127;
        }
    };
    let code = supervise(&args, &mut ranks);
    handle.close();
    // Output of the stopped ranks drains now; a grandchild that escaped its process group
    // could hold a pipe open, so do not wait forever.
    let deadline = Instant::now() + Duration::from_secs(2);
    for p in ranks.pumps.drain(..) {
        while !p.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if p.is_finished() {
            let _ = p.join();
        }
    }
    code
}

/// Waits for the ranks; stops them all on a failure, a signal or the timeout. Returns the exit
/// code.
fn supervise(args: &Args, ranks: &mut Ranks) -> i32 {
    let start = Instant::now();
    let mut log: Vec<Event> = Vec::new();
    // A rank stopped this long holds the job up: its peers would declare it dead after the
    // same time (no heartbeat), and before it has joined nobody else would notice.
    let stop_limit = env::PEER_TIMEOUT_MS
        .millis()
        .unwrap_or(Duration::from_secs(4));
    let mut stopped_since: Vec<Option<Instant>> = vec![None; ranks.pids.len()];
    while ranks.running.iter().any(|&r| r) {
        if let Some((rank, since)) = stopped_since
            .iter()
            .enumerate()
            .find_map(|(r, s)| s.filter(|t| t.elapsed() >= stop_limit).map(|t| (r, t)))
        {
            let first = log
                .iter()
                .rev()
                .find(|e| e.rank == rank && matches!(e.what, What::Stopped(_)))
                .copied()
                .expect("a stop was logged");
            eprintln!(
                "pshmrun: rank {rank} {} at +{:.3} s and was not continued within {:.1} s \
                 (PSHMEM_BOOTSTRAP_PEER_TIMEOUT_MS); stopping the job",
                first.what.describe(),
                since.duration_since(start).as_secs_f64(),
                stop_limit.as_secs_f64()
            );
            stop_all(ranks, args.grace);
            return first.what.exit_code();
        }
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            eprintln!("pshmrun: received signal {sig}; stopping all ranks");
            stop_all(ranks, args.grace);
            return 128 + sig as i32;
        }
        if args.timeout.is_some_and(|t| start.elapsed() >= t) {
            let still: Vec<usize> = (0..ranks.pids.len())
                .filter(|&r| ranks.running[r])
                .collect();
            eprintln!(
                "pshmrun: timeout after {:.1} s; ranks {still:?} still running, stopping them",
                start.elapsed().as_secs_f64()
            );
            stop_all(ranks, args.grace);
            return 124;
        }
        let Ok(e) = ranks.events.recv_timeout(Duration::from_millis(5)) else {
            continue;
        };
        log.push(e);
        match e.what {
            What::Exited(0) => ranks.running[e.rank] = false,
            What::Exited(_) | What::Killed(_) => {
                ranks.running[e.rank] = false;
                // The ranks that notice a death exit moments after it: collect them, then name
                // the one that went first.
                settle(ranks, &mut log, Duration::from_millis(100));
                let first = first_failure(&log);
                report(first, &log, start);
                stop_all(ranks, args.grace);
                return first.what.exit_code();
            }
            What::Stopped(_) => stopped_since[e.rank] = Some(e.at),
            What::Continued => stopped_since[e.rank] = None,
        }
    }
    0
}

/// Collects the events of the next `window`.
fn settle(ranks: &mut Ranks, log: &mut Vec<Event>, window: Duration) {
    let end = Instant::now() + window;
    while let Ok(e) = ranks
        .events
        .recv_timeout(end.saturating_duration_since(Instant::now()))
    {
        if matches!(e.what, What::Exited(_) | What::Killed(_)) {
            ranks.running[e.rank] = false;
        }
        log.push(e);
    }
}

/// The failure to blame: the earliest rank ended or left stopped by a signal (the others
/// typically fail because of it), else the earliest failure.
fn first_failure(log: &[Event]) -> Event {
    let still_stopped = |e: &Event| {
        !log.iter()
            .any(|l| l.rank == e.rank && l.at > e.at && !matches!(l.what, What::Stopped(_)))
    };
    let by_signal = log
        .iter()
        .find(|e| e.what.by_signal() && (!matches!(e.what, What::Stopped(_)) || still_stopped(e)));
    by_signal
        .or_else(|| {
            log.iter()
                .find(|e| matches!(e.what, What::Exited(c) if c != 0))
        })
        .copied()
        .expect("a failure was logged")
}

fn report(first: Event, log: &[Event], start: Instant) {
    let then: Vec<usize> = log
        .iter()
        .filter(|e| e.rank != first.rank && matches!(e.what, What::Exited(c) if c != 0))
        .map(|e| e.rank)
        .collect();
    let also = if then.is_empty() {
        String::new()
    } else {
        format!(" (then ranks {then:?} failed)")
    };
    eprintln!(
        "pshmrun: rank {} {} at +{:.3} s{also}; stopping the other ranks",
        first.rank,
        first.what.describe(),
        first.at.duration_since(start).as_secs_f64()
    );
}

/// SIGTERM (and SIGCONT, so that stopped ranks take it) to every running rank's process group,
/// SIGKILL after `grace`; then SIGKILL to every group, for grandchildren left behind.
fn stop_all(ranks: &mut Ranks, grace: Duration) {
    let groups: Vec<Pid> = ranks.pids.clone();
    for (r, g) in groups.iter().enumerate() {
        if ranks.running[r] {
            let _ = killpg(*g, Signal::SIGTERM);
            let _ = killpg(*g, Signal::SIGCONT);
        }
    }
    let deadline = Instant::now() + grace;
    while ranks.running.iter().any(|&r| r) && Instant::now() < deadline {
        if let Ok(e) = ranks.events.recv_timeout(Duration::from_millis(10))
            && matches!(e.what, What::Exited(_) | What::Killed(_))
        {
            ranks.running[e.rank] = false;
        }
    }
    for g in &groups {
        let _ = killpg(*g, Signal::SIGKILL);
    }
    // Reaped by their waiters: wait (bounded) until every rank is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while ranks.running.iter().any(|&r| r) && Instant::now() < deadline {
        if let Ok(e) = ranks.events.recv_timeout(Duration::from_millis(10))
            && matches!(e.what, What::Exited(_) | What::Killed(_))
        {
            ranks.running[e.rank] = false;
        }
    }
}
