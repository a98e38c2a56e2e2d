//! `pshmrun -n N [--timeout S] -- PROGRAM [ARGS...]`: starts N local processes of one
//! proxyshmem job, prefixes each output line with the rank, and propagates failure.
//!
//! Each rank runs in its own process group, so that stopping a rank stops what it started.
//! If a rank exits non-zero or is killed, the others are terminated (SIGTERM, then SIGKILL after
//! a grace period) and pshmrun exits with that rank's status, naming it. Ctrl-C (SIGINT),
//! SIGTERM and SIGHUP stop every rank. Multi-host jobs use torchrun, srun or mpirun with the
//! same environment variables instead.

use std::{
    io::{BufRead, BufReader, Read, Write},
    os::unix::process::{CommandExt, ExitStatusExt},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use clap::Parser;
use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use pshmem_env as env;

#[derive(Parser, Debug)]
#[command(
    name = "pshmrun",
    about = "Launch N local processes of a proxyshmem job",
    after_help = "Each rank gets PSHMEM_RANK, PSHMEM_WORLD_SIZE, PSHMEM_LOCAL_RANK, PSHMEM_LOCAL_SIZE, \
                  PSHMEM_BOOTSTRAP_ADDR and a random PSHMEM_JOB_SECRET."
)]
struct Args {
    /// Number of processes (PEs).
    #[arg(short = 'n', long = "np", value_parser = clap::value_parser!(u32).range(1..=4096))]
    n: u32,
    /// Stop every rank and fail after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// Emulate this many hosts (ranks split into contiguous blocks with distinct host ids), so
    /// that same-host shortcuts are not taken between blocks. For testing the network path.
    #[arg(long, default_value_t = 1)]
    hosts: u32,
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    no_prefix: bool,
    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, default_value_t = 3.0)]
    grace: f64,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Signal number received (0 = none).
static SIGNALLED: AtomicUsize = AtomicUsize::new(0);

fn main() {
    let args = Args::parse();
    std::process::exit(run(args));
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => {
            let name = Signal::try_from(s)
                .map(|s| s.as_str().to_string())
                .unwrap_or_default();
            format!("was killed by signal {s} ({name})")
        }
        _ => format!("ended with {status}"),
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
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

fn run(args: Args) -> i32 {
    let n = args.n as usize;
    let hosts = (args.hosts as usize).clamp(1, n);
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
    let secret: u64 = rand::random();
    let lock = Arc::new(Mutex::new(()));
    let mut children: Vec<Option<Child>> = Vec::with_capacity(n);
    let mut pumps = Vec::new();
    let per_host = n.div_ceil(hosts);
    for rank in 0..n {
        let host = rank / per_host;
        let local_rank = rank % per_host;
        let local_size = per_host.min(n - host * per_host);
        let mut cmd = Command::new(&args.command[0]);
        cmd.args(&args.command[1..])
            .env(env::RANK.name, rank.to_string())
            .env(env::WORLD_SIZE.name, n.to_string())
            .env(env::LOCAL_RANK.name, local_rank.to_string())
            .env(env::LOCAL_SIZE.name, local_size.to_string())
            .env(env::BOOTSTRAP_ADDR.name, format!("127.0.0.1:{port}"))
            .env(env::JOB_SECRET.name, format!("{secret:016x}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if hosts > 1 {
            cmd.env(env::HOST_ID.name, format!("pshmrun-emulated-host-{host}"));
        }
        match cmd.spawn() {
            Ok(mut child) => {
                let out = child.stdout.take().expect("piped");
                let err = child.stderr.take().expect("piped");
                let (l1, l2) = (lock.clone(), lock.clone());
                let p = !args.no_prefix;
                pumps.push(thread::spawn(move || {
                    pump(rank, p, out, std::io::stdout(), l1)
                }));
                pumps.push(thread::spawn(move || {
                    pump(rank, p, err, std::io::stderr(), l2)
                }));
                children.push(Some(child));
            }
            Err(e) => {
                eprintln!(
                    "pshmrun: cannot start {:?} for rank {rank}: {e}",
                    args.command[0]
                );
                stop_all(&mut children, args.grace);
                return 127;
            }
        }
    }

    let start = Instant::now();
    let timeout = args.timeout.map(Duration::from_secs_f64);
    let mut code = 0;
    let mut running = n;
    while running > 0 {
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            eprintln!("pshmrun: received signal {sig}; stopping all ranks");
            stop_all(&mut children, args.grace);
            code = 128 + sig as i32;
            break;
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            let still: Vec<usize> = children
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_some())
                .map(|(r, _)| r)
                .collect();
            eprintln!(
                "pshmrun: timeout after {:.1} s; ranks {still:?} still running, stopping them",
                start.elapsed().as_secs_f64()
            );
            stop_all(&mut children, args.grace);
            code = 124;
            break;
        }
        let mut failed = None;
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    *slot = None;
                    running -= 1;
                    if !status.success() && failed.is_none() {
                        failed = Some((rank, status));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("pshmrun: cannot wait for rank {rank}: {e}");
                    *slot = None;
                    running -= 1;
                    failed.get_or_insert((rank, ExitStatus::from_raw(1 << 8)));
                }
            }
        }
        if let Some((rank, status)) = failed {
            eprintln!(
                "pshmrun: rank {rank} {}; stopping the other ranks",
                describe(status)
            );
            stop_all(&mut children, args.grace);
            code = exit_code(status);
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    handle.close();
    // Output of the stopped ranks drains now; a grandchild that escaped its process group
    // could hold a pipe open, so do not wait forever.
    let deadline = Instant::now() + Duration::from_secs(2);
    for p in pumps {
        while !p.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if p.is_finished() {
            let _ = p.join();
        }
    }
    code
}

/// SIGTERM to every running rank's process group, SIGKILL after `grace` seconds, then reap.
fn stop_all(children: &mut [Option<Child>], grace: f64) {
    let groups: Vec<Pid> = children
        .iter()
        .flatten()
        .map(|c| Pid::from_raw(c.id() as i32))
        .collect();
    for g in &groups {
        let _ = killpg(*g, Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(grace.max(0.0));
    loop {
        let mut alive = false;
        for slot in children.iter_mut() {
            if let Some(c) = slot {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => *slot = None,
                    Ok(None) => alive = true,
                }
            }
        }
        if !alive {
            break;
        }
        if Instant::now() >= deadline {
            for slot in children.iter_mut() {
                if let Some(c) = slot.take() {
                    let _ = killpg(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
                    let mut c = c;
                    let _ = c.wait();
                }
            }
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    // Grandchildren left in the groups after the rank itself exited.
    for g in groups {
        let _ = killpg(g, Signal::SIGKILL);
    }
}
