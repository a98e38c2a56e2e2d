//! `pshmem-chaos [TRIALS]`: random faults on running jobs, and what they leave behind.
//!
//! Each trial launches `pshmrun -n N pshmem-testbin rt-ops` (N from 2 to `--max-pes`) on one
//! path (the direct path, tcp through the proxy, the simulated fabric, or shm through the
//! proxy) and, at a random moment of the job (its start included), does one of: nothing;
//! SIGKILL, SIGTERM or SIGSTOP (left stopped) to a random rank; SIGSTOP then SIGCONT within
//! 1.5 s; garbage or slow connections to the bootstrap port and the heap sockets; SIGKILL to
//! the launcher. Then it counts:
//!
//! - **hangs**: a job not ended within 10 s of its fault (then killed, to go on);
//! - **orphans**: a rank still alive 10 s after its launcher ended;
//! - **leaks**: a file that appeared in /dev/shm during a trial and is still there once a
//!   later job has run (through its init: one that succeeded);
//! - **wrong blames**: a job failed by a signalled or stopped rank whose launcher named
//!   another rank or another cause;
//! - **digest mismatches**: a job that succeeded but whose ranks verified other data than a
//!   fault-free job of the same size (or printed no digest);
//! - **disturbed**: a job that failed although its fault should be harmless (a short stop,
//!   hostile connections, or no fault at all).
//!
//! It exits non-zero if any counter is not zero, and prints how long the launcher took to
//! end a job after a rank was killed or stopped.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::{Read, Write},
    net::TcpStream,
    os::{linux::net::SocketAddrExt, unix::net::SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, ExitStatus, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use std::fmt::Write as _;

use clap::Parser;
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use rand::{Rng, SeedableRng, rngs::StdRng, seq::IndexedRandom};

#[derive(Parser)]
struct Args {
    /// Trials to run.
    #[arg(default_value_t = 50)]
    trials: usize,
    /// Seed of the random choices (printed, so that a run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Largest job.
    #[arg(long, default_value_t = 8)]
    max_pes: usize,
    /// Seconds after its fault by which a job must have ended, and its ranks be gone.
    #[arg(long, default_value_t = 10.0)]
    hang_secs: f64,
    /// Writes the counters and timings here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only this fault (none, sigkill, sigterm, stop-cont, stop, garbage, slow,
    /// kill-launcher), to chase one problem.
    #[arg(long)]
    fault: Option<String>,
    /// Only this path (direct, tcp, sim, shm).
    #[arg(long)]
    way: Option<String>,
    /// Only jobs of this many PEs.
    #[arg(long)]
    pes: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Direct,
    Tcp,
    Sim,
    Shm,
}

impl Way {
    const ALL: [Way; 4] = [Way::Direct, Way::Tcp, Way::Sim, Way::Shm];

    fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Tcp => "tcp",
            Way::Sim => "sim",
            Way::Shm => "shm",
        }
    }

    fn env(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Way::Direct => vec![("PSHMEM_PROVIDER", "tcp")],
            Way::Tcp => vec![("PSHMEM_PROVIDER", "tcp"), ("PSHMEM_DISABLE_P2P", "1")],
            Way::Sim => vec![("PSHMEM_PROVIDER", "sim"), ("PSHMEM_DISABLE_P2P", "1")],
            Way::Shm => vec![("PSHMEM_PROVIDER", "shm"), ("PSHMEM_DISABLE_P2P", "1")],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    None,
    Kill,
    Term,
    StopCont,
    StopForever,
    Garbage,
    Slow,
    KillLauncher,
}

impl Fault {
    const ALL: [Fault; 8] = [
        Fault::None,
        Fault::Kill,
        Fault::Term,
        Fault::StopCont,
        Fault::StopForever,
        Fault::Garbage,
        Fault::Slow,
        Fault::KillLauncher,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Kill => "sigkill",
            Fault::Term => "sigterm",
            Fault::StopCont => "stop-cont",
            Fault::StopForever => "stop",
            Fault::Garbage => "garbage",
            Fault::Slow => "slow",
            Fault::KillLauncher => "kill-launcher",
        }
    }

    /// Whether the job must still succeed.
    fn harmless(self) -> bool {
        matches!(
            self,
            Fault::None | Fault::StopCont | Fault::Garbage | Fault::Slow
        )
    }

    /// Whether it targets one rank.
    fn has_victim(self) -> bool {
        matches!(
            self,
            Fault::Kill | Fault::Term | Fault::StopCont | Fault::StopForever
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    trials: usize,
    hangs: usize,
    orphans: usize,
    leaks: usize,
    wrong_blames: usize,
    digest_mismatches: usize,
    disturbed: usize,
}

impl Counters {
    fn bad(&self) -> usize {
        self.hangs
            + self.orphans
            + self.leaks
            + self.wrong_blames
            + self.digest_mismatches
            + self.disturbed
    }

    fn fields(&self) -> [(&'static str, usize); 7] {
        [
            ("trials", self.trials),
            ("hangs", self.hangs),
            ("orphans", self.orphans),
            ("leaks", self.leaks),
            ("wrong_blames", self.wrong_blames),
            ("digest_mismatches", self.digest_mismatches),
            ("disturbed", self.disturbed),
        ]
    }
}

/// The programs.
struct Bins {
    pshmrun: PathBuf,
    testbin: PathBuf,
}

const WORKLOAD: &[&str] = &["rt-ops", "--sizes", "1,4096,65537", "--rounds", "2"];

/// A running job and what is known of it.
struct Job {
    launcher: Child,
    start: Instant,
    out: thread::JoinHandle<String>,
    err: thread::JoinHandle<String>,
    /// pid -> rank, as found.
    ranks: HashMap<u32, usize>,
    status: Option<ExitStatus>,
    ended: Option<Instant>,
}

impl Job {
    fn launch(b: &Bins, n: usize, way: Way) -> Job {
        let mut cmd = Command::new(&b.pshmrun);
        cmd.args([
            "-n",
            &n.to_string(),
            "--timeout",
            "90",
            "--grace",
            "1",
            "--",
        ])
        .arg(&b.testbin)
        .args(WORKLOAD)
        .env("PSHMEM_SYMMETRIC_SIZE", "64M")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (k, v) in way.env() {
            cmd.env(k, v);
        }
        let mut launcher = cmd.spawn().expect("start pshmrun");
        let read = |mut r: Box<dyn Read + Send>| {
            thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                s
            })
        };
        let out = read(Box::new(launcher.stdout.take().expect("piped")));
        let err = read(Box::new(launcher.stderr.take().expect("piped")));
        Job {
            launcher,
            start: Instant::now(),
            out,
            err,
            ranks: HashMap::new(),
            status: None,
            ended: None,
        }
    }

    /// Notes new ranks and the launcher's end; true once it has ended.
    fn poll(&mut self) -> bool {
        if self.status.is_none() {
            for pid in children(self.launcher.id()) {
                if let std::collections::hash_map::Entry::Vacant(e) = self.ranks.entry(pid)
                    && let Some(r) = rank_of(pid)
                {
                    e.insert(r);
                }
            }
            if let Ok(Some(s)) = self.launcher.try_wait() {
                self.status = Some(s);
                self.ended = Some(Instant::now());
            }
        }
        self.status.is_some()
    }

    fn pid_of(&self, rank: usize) -> Option<u32> {
        self.ranks
            .iter()
            .find(|(_, r)| **r == rank)
            .map(|(p, _)| *p)
    }

    /// The bootstrap address the ranks were given.
    fn bootstrap_addr(&self) -> Option<String> {
        self.ranks
            .keys()
            .find_map(|p| env_of(*p, "PSHMEM_BOOTSTRAP_ADDR"))
    }

    fn kill_all(&mut self) {
        let _ = self.launcher.kill();
        for p in self.ranks.keys() {
            if alive(*p) {
                let _ = kill(Pid::from_raw(*p as i32), Signal::SIGKILL);
            }
        }
    }

    fn finish(mut self) -> (Option<ExitStatus>, String, String, HashMap<u32, usize>) {
        if self.status.is_none() {
            self.status = self.launcher.wait().ok();
        }
        let out = self.out.join().unwrap_or_default();
        let err = self.err.join().unwrap_or_default();
        (self.status, out, err, self.ranks)
    }
}

/// Where each rank's threads are (state and kernel wait channel), for a hung job.
fn dump(job: &Job) -> String {
    let mut out = String::new();
    let mut ranks: Vec<(&u32, &usize)> = job.ranks.iter().collect();
    ranks.sort_by_key(|(_, r)| **r);
    for (pid, rank) in ranks {
        let _ = write!(out, "  rank {rank} (pid {pid}):");
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default();
        for t in tasks {
            let read = |f: &str| std::fs::read_to_string(t.join(f)).unwrap_or_default();
            let stat = read("stat");
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            let _ = write!(
                out,
                " [{} {state} {}]",
                read("comm").trim(),
                read("wchan").trim()
            );
        }
        out.push('\n');
    }
    out
}

/// The children of `pid` (its main thread's, which starts the ranks).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A variable of a process's environment.
fn env_of(pid: u32, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(key)?.strip_prefix('=').map(str::to_string)
    })
}

/// The rank of a rank process (once it has exec'd the worker).
fn rank_of(pid: u32) -> Option<usize> {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if !cmd.windows(14).any(|w| w == b"pshmem-testbin") {
        return None;
    }
    env_of(pid, "PSHMEM_RANK")?.parse().ok()
}

/// Whether a worker process with this pid is alive (not a zombie, not a reused pid).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    state != Some("Z") && rank_of(pid).is_some()
}

/// Each rank's digest (`[r] DIGEST rank=r value=v`).
fn digests(stdout: &str) -> BTreeMap<usize, String> {
    stdout
        .lines()
        .filter_map(|l| {
            let l = l.split_once("] ").map_or(l, |(_, rest)| rest);
            let rest = l.strip_prefix("DIGEST ")?;
            let mut rank = None;
            let mut value = None;
            for f in rest.split_whitespace() {
                if let Some(v) = f.strip_prefix("rank=") {
                    rank = v.parse().ok();
                } else if let Some(v) = f.strip_prefix("value=") {
                    value = Some(v.to_string());
                }
            }
            Some((rank?, value?))
        })
        .collect()
}

/// The names in /dev/shm.
fn shm_names() -> HashSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The abstract heap sockets of running jobs.
fn heap_sockets() -> Vec<String> {
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter_map(|p| p.strip_prefix('@'))
        .filter(|p| p.starts_with("pshmem-heap-"))
        .map(str::to_string)
        .collect()
}

/// Hostile connections until `stop`: garbage (random bytes, then close) or slow (a byte every
/// 250 ms, held open), to the bootstrap port and to every heap socket.
fn hostile(addr: String, slow: bool, stop: Arc<AtomicBool>, seed: u64) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut held: Vec<Box<dyn Write + Send>> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let mut targets: Vec<Box<dyn Write + Send>> = Vec::new();
            if let Ok(s) = TcpStream::connect(&addr) {
                targets.push(Box::new(s));
            }
            for name in heap_sockets() {
                if let Ok(a) = SocketAddr::from_abstract_name(name.as_bytes())
                    && let Ok(s) = std::os::unix::net::UnixStream::connect_addr(&a)
                {
                    targets.push(Box::new(s));
                }
            }
            for mut t in targets {
                if slow {
                    let _ = t.write_all(&[rng.random()]);
                    if held.len() < 32 {
                        held.push(t);
                    }
                } else {
                    let len = rng.random_range(1..4096);
                    let junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                    let _ = t.write_all(&junk);
                }
            }
            for h in held.iter_mut() {
                let _ = h.write_all(&[rng.random()]);
            }
            thread::sleep(Duration::from_millis(if slow { 250 } else { 20 }));
        }
    })
}

/// One trial's plan.
#[derive(Debug, Clone, Copy)]
struct Plan {
    n: usize,
    way: Way,
    fault: Fault,
    victim: usize,
    at: Duration,
    stop_for: Duration,
}

/// What a trial found.
struct Found {
    ended_after_fault: Option<Duration>,
    hang: bool,
    orphans: usize,
    wrong_blame: bool,
    digest_mismatch: bool,
    disturbed: bool,
    new_shm: HashSet<String>,
    succeeded: bool,
    note: String,
}

fn run_trial(b: &Bins, p: Plan, reference: &BTreeMap<usize, String>, hang: Duration) -> Found {
    let before = shm_names();
    let mut job = Job::launch(b, p.n, p.way);
    let stop_hostile = Arc::new(AtomicBool::new(false));
    let mut hostiles = Vec::new();
    let mut fault_at: Option<Instant> = None;
    let mut fault_end: Option<Instant> = None;
    let mut cont_due: Option<Instant> = None;
    let mut victim_pid = None;
    let mut missed = false;
    let mut hung = false;
    let mut launcher_killed_at = None;
    let mut hang_dump = String::new();
    loop {
        let ended = job.poll();
        let now = Instant::now();
        if fault_at.is_none() && now >= job.start + p.at {
            if ended {
                missed = true;
            } else {
                match p.fault {
                    Fault::None => {
                        fault_at = Some(now);
                        fault_end = Some(now);
                    }
                    Fault::KillLauncher => {
                        let _ = kill(Pid::from_raw(job.launcher.id() as i32), Signal::SIGKILL);
                        fault_at = Some(now);
                        fault_end = Some(now);
                        launcher_killed_at = Some(now);
                    }
                    Fault::Garbage | Fault::Slow => {
                        if let Some(addr) = job.bootstrap_addr() {
                            hostiles.push(hostile(
                                addr,
                                p.fault == Fault::Slow,
                                stop_hostile.clone(),
                                p.at.as_nanos() as u64,
                            ));
                            fault_at = Some(now);
                            fault_end = Some(now);
                        }
                    }
                    _ => {
                        if let Some(pid) = job.pid_of(p.victim) {
                            let sig = match p.fault {
                                Fault::Kill => Signal::SIGKILL,
                                Fault::Term => Signal::SIGTERM,
                                _ => Signal::SIGSTOP,
                            };
                            let _ = kill(Pid::from_raw(pid as i32), sig);
                            victim_pid = Some(pid);
                            fault_at = Some(now);
                            if p.fault == Fault::StopCont {
                                cont_due = Some(now + p.stop_for);
                            } else {
                                fault_end = Some(now);
                            }
                        }
                    }
                }
            }
        }
        if let (Some(due), Some(pid)) = (cont_due, victim_pid)
            && now >= due
        {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
            cont_due = None;
            fault_end = Some(now);
        }
        if ended || missed {
            break;
        }
        let deadline = fault_end.unwrap_or(job.start + p.at) + hang;
        if now >= deadline.max(job.start + p.at + hang) {
            hung = true;
            hang_dump = dump(&job);
            job.kill_all();
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    // A missed fault (the job ended first) still waits for the job.
    while !job.poll() {
        if Instant::now() > job.start + p.at + hang * 3 {
            hung = true;
            job.kill_all();
        }
        thread::sleep(Duration::from_millis(5));
    }
    stop_hostile.store(true, Ordering::Relaxed);
    for h in hostiles {
        let _ = h.join();
    }
    let launcher_end = job.ended.unwrap_or_else(Instant::now);
    let (status, out, err, ranks) = job.finish();
    // Every rank must be gone within `hang` of its launcher's end.
    let gone_by = launcher_end + hang;
    let mut orphans = 0;
    for pid in ranks.keys() {
        while alive(*pid) && Instant::now() < gone_by {
            thread::sleep(Duration::from_millis(10));
        }
        if alive(*pid) {
            orphans += 1;
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
        }
    }
    // The killed launcher's job ends when its last rank is gone.
    let job_end = if launcher_killed_at.is_some() {
        Instant::now().min(gone_by)
    } else {
        launcher_end
    };
    let ended_after_fault = fault_end.map(|f| job_end.saturating_duration_since(f));
    let ok = status.is_some_and(|s| s.success());
    let mut found = Found {
        ended_after_fault: if missed { None } else { ended_after_fault },
        hang: hung,
        orphans,
        wrong_blame: false,
        digest_mismatch: false,
        disturbed: false,
        new_shm: shm_names().difference(&before).cloned().collect(),
        succeeded: ok,
        note: String::new(),
    };
    if hung {
        found.note = format!(
            "hung; ranks:\n{hang_dump}stdout tail:\n{}\nstderr tail:\n{}",
            tail(&out, 2 * p.n),
            tail(&err, 12)
        );
        return found;
    }
    if ok && p.fault != Fault::KillLauncher {
        let got = digests(&out);
        if &got != reference {
            found.digest_mismatch = true;
            found.note = format!("digests {got:?}, expected {reference:?}");
        }
    }
    if !ok && !missed {
        match p.fault {
            f if f.harmless() => {
                found.disturbed = true;
                found.note = format!("failed; stderr tail:\n{}", tail(&err, 12));
            }
            Fault::Kill | Fault::Term | Fault::StopForever => {
                let want = match p.fault {
                    Fault::Kill => format!("rank {} was killed by signal 9 ", p.victim),
                    Fault::Term => format!("rank {} was killed by signal 15 ", p.victim),
                    _ => format!("rank {} was stopped by signal 19 ", p.victim),
                };
                if !err.contains(&want) {
                    found.wrong_blame = true;
                    found.note = format!("wanted \"{want}\"; stderr tail:\n{}", tail(&err, 12));
                }
            }
            _ => {}
        }
    }
    found
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let a = Args::parse();
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let bins = Bins {
        pshmrun: here.join("pshmrun"),
        testbin: here.join("pshmem-testbin"),
    };
    for p in [&bins.pshmrun, &bins.testbin] {
        if !p.exists() {
            eprintln!(
                "pshmem-chaos: {} is missing (build the workspace in release)",
                p.display()
            );
            return ExitCode::from(2);
        }
    }
    let seed = a.seed.unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let hang = Duration::from_secs_f64(a.hang_secs);
    let max = a.max_pes.clamp(2, 64);
    println!("chaos: {} trials, 2..={max} PEs, seed {seed}", a.trials);

    // Fault-free references: each size's digests, and how long its job takes.
    let mut reference: HashMap<usize, BTreeMap<usize, String>> = HashMap::new();
    let mut duration: HashMap<usize, Duration> = HashMap::new();
    for n in 2..=max {
        let t = Instant::now();
        let (status, out, err, _) = {
            let mut j = Job::launch(&bins, n, Way::Direct);
            while !j.poll() {
                thread::sleep(Duration::from_millis(5));
            }
            j.finish()
        };
        if !status.is_some_and(|s| s.success()) || digests(&out).len() != n {
            eprintln!("chaos: the fault-free reference job of {n} PEs failed:\n{out}\n{err}");
            return ExitCode::from(2);
        }
        duration.insert(n, t.elapsed());
        reference.insert(n, digests(&out));
    }

    let mut c = Counters::default();
    let mut per_fault: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut reported: BTreeMap<Fault, Vec<f64>> = BTreeMap::new();
    let mut pending_shm: Vec<(usize, HashSet<String>)> = Vec::new();
    let mut missed = 0;
    let faults: Vec<Fault> = Fault::ALL
        .into_iter()
        .filter(|f| a.fault.as_ref().is_none_or(|x| x == f.name()))
        .collect();
    let ways: Vec<Way> = Way::ALL
        .into_iter()
        .filter(|w| a.way.as_ref().is_none_or(|x| x == w.name()))
        .collect();
    if faults.is_empty() || ways.is_empty() {
        eprintln!("chaos: unknown --fault or --way");
        return ExitCode::from(2);
    }
    for trial in 0..a.trials {
        let n = a
            .pes
            .map_or_else(|| rng.random_range(2..=max), |p| p.clamp(2, max));
        let plan = Plan {
            n,
            way: *ways.choose(&mut rng).expect("ways"),
            fault: *faults.choose(&mut rng).expect("faults"),
            victim: rng.random_range(0..n),
            at: duration[&n].mul_f64(rng.random_range(0.0..0.9)),
            stop_for: Duration::from_millis(rng.random_range(50..1500)),
        };
        let f = run_trial(&bins, plan, &reference[&n], hang);
        c.trials += 1;
        *per_fault.entry(plan.fault).or_default() += 1;
        // Files of earlier trials must be gone once another job has started its transport (a
        // job that succeeded certainly did; one killed before its init could not clean).
        let drained = if f.succeeded {
            std::mem::take(&mut pending_shm)
        } else {
            Vec::new()
        };
        for (t, names) in drained {
            let left: Vec<&String> = names
                .iter()
                .filter(|x| Path::new("/dev/shm").join(x).exists())
                .collect();
            if !left.is_empty() {
                c.leaks += left.len();
                println!("  LEAK from trial {t}: /dev/shm/{left:?}");
            }
        }
        pending_shm.push((trial, f.new_shm.clone()));
        let who = if plan.fault.has_victim() {
            format!(" rank {}", plan.victim)
        } else {
            String::new()
        };
        let when = match f.ended_after_fault {
            Some(d) => format!("ended {:.2} s after", d.as_secs_f64()),
            None => {
                missed += 1;
                "job ended before the fault".into()
            }
        };
        if let Some(d) = f.ended_after_fault
            && matches!(
                plan.fault,
                Fault::Kill | Fault::Term | Fault::StopForever | Fault::KillLauncher
            )
        {
            reported
                .entry(plan.fault)
                .or_default()
                .push(d.as_secs_f64());
        }
        let mut flags = Vec::new();
        if f.hang {
            c.hangs += 1;
            flags.push("HANG");
        }
        if f.orphans > 0 {
            c.orphans += f.orphans;
            flags.push("ORPHANS");
        }
        if f.wrong_blame {
            c.wrong_blames += 1;
            flags.push("WRONG-BLAME");
        }
        if f.digest_mismatch {
            c.digest_mismatches += 1;
            flags.push("DIGEST-MISMATCH");
        }
        if f.disturbed {
            c.disturbed += 1;
            flags.push("DISTURBED");
        }
        println!(
            "trial {trial}: {n} PEs {} {}{who} at {:.2} s: {when}{}{}",
            plan.way.name(),
            plan.fault.name(),
            plan.at.as_secs_f64(),
            if flags.is_empty() {
                String::new()
            } else {
                format!(" {}", flags.join(" "))
            },
            if f.note.is_empty() {
                String::new()
            } else {
                format!("\n  {}", f.note.replace('\n', "\n  "))
            }
        );
    }
    // One more job, so that the last trial's files had their chance to be cleaned.
    {
        let mut j = Job::launch(&bins, 2, Way::Shm);
        while !j.poll() {
            thread::sleep(Duration::from_millis(5));
        }
        j.finish();
    }
    for (t, names) in pending_shm.drain(..) {
        let left: Vec<&String> = names
            .iter()
            .filter(|x| Path::new("/dev/shm").join(x).exists())
            .collect();
        if !left.is_empty() {
            c.leaks += left.len();
            println!("  LEAK from trial {t}: /dev/shm/{left:?}");
        }
    }

    let counters: Vec<String> = c.fields().iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("chaos: {} (seed {seed})", counters.join(" "));
    let faults: Vec<String> = per_fault
        .iter()
        .map(|(f, k)| format!("{}={k}", f.name()))
        .collect();
    println!(
        "chaos: faults {} (missed: {missed}, the job ended first)",
        faults.join(" ")
    );
    for (f, v) in reported.iter_mut() {
        let mx = v.iter().copied().fold(0.0, f64::max);
        let line = format!(
            "{}: job ended a median {:.2} s (max {:.2} s) after the fault, {} trials",
            f.name(),
            median(v),
            mx,
            v.len()
        );
        println!("chaos: {line}");
    }
    if let Some(path) = &a.json {
        let mut j = String::from("{\n");
        let _ = writeln!(j, "  \"seed\": {seed},");
        for (k, v) in c.fields() {
            let _ = writeln!(j, "  \"{k}\": {v},");
        }
        let _ = writeln!(j, "  \"missed\": {missed},");
        let _ = writeln!(j, "  \"faults\": {{");
        let fl: Vec<String> = per_fault
            .iter()
            .map(|(f, k)| format!("    \"{}\": {k}", f.name()))
            .collect();
        let _ = writeln!(j, "{}\n  }},", fl.join(",\n"));
        let _ = writeln!(j, "  \"ended_after_fault_s\": {{");
        let tl: Vec<String> = reported
            .iter_mut()
            .map(|(f, v)| {
                let mx = v.iter().copied().fold(0.0, f64::max);
                format!(
                    "    \"{}\": {{\"median\": {:.3}, \"max\": {:.3}, \"trials\": {}}}",
                    f.name(),
                    median(v),
                    mx,
                    v.len()
                )
            })
            .collect();
        let _ = writeln!(j, "{}\n  }}\n}}", tl.join(",\n"));
        if let Err(e) = std::fs::write(path, j) {
            eprintln!("chaos: writing {}: {e}", path.display());
        }
    }
    if c.bad() == 0 {
        println!("chaos: passed");
        ExitCode::SUCCESS
    } else {
        println!("chaos: FAILED ({} problems)", c.bad());
        ExitCode::FAILURE
    }
}
