//! # pshmem-tests
//!
//! Owns the multi-process test harness (the mscclpp `mp_unit` idea): a test spawns the worker
//! binary `pshmem-testbin` N times with rank variables and a timeout, collects each rank's exit
//! status and output, and asserts on them. The worker binary holds the scenarios; the tests in
//! `tests/` choose sizes, faults and expectations.
//!
//! It also embeds the test kernels (`cuda/`, compiled by the build script) that
//! `pshmem-gpu-tests` runs on a GPU.

#![forbid(unsafe_code)]

use std::{
    collections::HashMap,
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

/// Ring tests and measurements (`cuda/ring_test.cu`): `pshmem_ring_stress`,
/// `pshmem_ring_roundtrip`, `pshmem_ring_rate`, the mailbox floor.
pub static RING_TEST_KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ring_test.fatbin"));

/// Device API tests (`cuda/device_test.cu`).
pub static DEVICE_TEST_KERNELS: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/device_test.fatbin"));

/// What one rank did.
#[derive(Debug)]
pub struct RankResult {
    /// The rank.
    pub rank: usize,
    /// Exit status (`None` if it had to be killed at the job timeout).
    pub status: Option<ExitStatus>,
    /// Everything it printed to stdout.
    pub stdout: String,
    /// Everything it printed to stderr.
    pub stderr: String,
}

impl RankResult {
    /// Whether it exited with status 0.
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The values of `key=value` tokens on stdout lines that start with `tag`.
    pub fn fields(&self, tag: &str) -> Vec<HashMap<String, String>> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(tag))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|t| t.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    }
}

impl std::fmt::Display for RankResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "--- rank {} status {:?}", self.rank, self.status)?;
        writeln!(f, "stdout:\n{}", self.stdout)?;
        write!(f, "stderr:\n{}", self.stderr)
    }
}

/// A job of N ranks to launch.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The program.
    pub program: PathBuf,
    /// Its arguments (the same for every rank).
    pub args: Vec<String>,
    /// Ranks to launch (a subset lets a test leave some out).
    pub ranks: Vec<usize>,
    /// World size told to the ranks.
    pub world_size: usize,
    /// Variables for every rank.
    pub env: Vec<(String, String)>,
    /// Extra variables per rank (overriding `env`).
    pub rank_env: HashMap<usize, Vec<(String, String)>>,
    /// Rank 0's address.
    pub addr: String,
    /// Kill everything and fail after this long.
    pub timeout: Duration,
    /// Set the PSHMEM_* rank variables (off to test other launch styles).
    pub rank_vars: bool,
}

impl JobSpec {
    /// A job of `n` ranks of `program args...` on a fresh loopback port.
    pub fn new(program: impl AsRef<Path>, n: usize, args: &[&str]) -> Self {
        Self {
            program: program.as_ref().to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ranks: (0..n).collect(),
            world_size: n,
            env: vec![(
                "PSHMEM_JOB_SECRET".into(),
                format!("{:x}", rand::random::<u64>()),
            )],
            rank_env: HashMap::new(),
            // Below the ephemeral range, so that the outgoing connections of tests running
            // alongside cannot take it first.
            addr: format!(
                "127.0.0.1:{}",
                pshmem_bootstrap::free_loopback_port().expect("a free port on 127.0.0.1")
            ),
            timeout: Duration::from_secs(120),
            rank_vars: true,
        }
    }

    /// Adds a variable for every rank.
    pub fn env(mut self, k: &str, v: impl ToString) -> Self {
        self.env.push((k.into(), v.to_string()));
        self
    }

    /// Adds a variable for one rank.
    pub fn rank_env(mut self, rank: usize, k: &str, v: impl ToString) -> Self {
        self.rank_env
            .entry(rank)
            .or_default()
            .push((k.into(), v.to_string()));
        self
    }

    /// Sets the job timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Starts the ranks.
    pub fn launch(&self) -> Job {
        let children = self.ranks.iter().map(|r| self.spawn(*r)).collect();
        Job {
            children,
            timeout: self.timeout,
            start: Instant::now(),
        }
    }

    /// A job made of ranks started one by one with [`JobSpec::spawn`].
    pub fn job(&self, children: Vec<(usize, Child)>) -> Job {
        Job {
            children,
            timeout: self.timeout,
            start: Instant::now(),
        }
    }

    /// Starts one rank (for tests that start ranks at different times).
    pub fn spawn(&self, rank: usize) -> (usize, Child) {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.rank_vars {
            cmd.env("PSHMEM_RANK", rank.to_string())
                .env("PSHMEM_WORLD_SIZE", self.world_size.to_string())
                .env("PSHMEM_BOOTSTRAP_ADDR", &self.addr);
        }
        for (k, v) in self
            .env
            .iter()
            .chain(self.rank_env.get(&rank).into_iter().flatten())
        {
            cmd.env(k, v);
        }
        (
            rank,
            cmd.spawn()
                .unwrap_or_else(|e| panic!("spawn {:?}: {e}", self.program)),
        )
    }
}

/// A running job.
#[derive(Debug)]
pub struct Job {
    /// (rank, process).
    pub children: Vec<(usize, Child)>,
    timeout: Duration,
    start: Instant,
}

impl Job {
    /// The pid of a rank's process.
    pub fn pid(&self, rank: usize) -> u32 {
        self.children
            .iter()
            .find(|(r, _)| *r == rank)
            .expect("rank")
            .1
            .id()
    }

    /// Waits for every rank (killing all at the timeout) and returns the results in rank order.
    pub fn wait(self) -> Vec<RankResult> {
        let deadline = self.start + self.timeout;
        let mut out = Vec::new();
        let mut readers = Vec::new();
        for (rank, mut child) in self.children {
            let mut so = child.stdout.take().expect("piped");
            let mut se = child.stderr.take().expect("piped");
            let ho = thread::spawn(move || {
                let mut s = String::new();
                let _ = so.read_to_string(&mut s);
                s
            });
            let he = thread::spawn(move || {
                let mut s = String::new();
                let _ = se.read_to_string(&mut s);
                s
            });
            readers.push((rank, child, ho, he));
        }
        for (rank, mut child, ho, he) in readers {
            let status = loop {
                match child.try_wait() {
                    Ok(Some(s)) => break Some(s),
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                    Ok(None) => thread::sleep(Duration::from_millis(5)),
                    Err(_) => break None,
                }
            };
            out.push(RankResult {
                rank,
                status,
                stdout: ho.join().unwrap_or_default(),
                stderr: he.join().unwrap_or_default(),
            });
        }
        out.sort_by_key(|r| r.rank);
        out
    }
}

/// Panics with every rank's output unless all ranks exited 0.
/// Says that `test` skipped what it could not do here, and why (no GPU, not root). cargo shows
/// nothing a passing test printed, so the line also goes to the file `PSHMEM_TEST_SKIPS` names
/// when set: `scripts/test.sh` prints that file's lines at the end of every run, so CI's log
/// shows each skip.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("SKIP {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("PSHMEM_TEST_SKIPS") {
        // One write of one line with O_APPEND: lines of tests running in parallel stay whole.
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        match f.and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())) {
            Ok(()) => {}
            Err(e) => eprintln!("cannot record the skip in {}: {e}", path.to_string_lossy()),
        }
    }
}

/// Every PE adds `rounds` signals of 1 to the next PE's 64-bit word at `sig` (either heap),
/// then consumes what lands on its own: it waits for the word to be at least 1 and takes
/// exactly what it saw by an atomic fetch-add of its negation, leaving later adds for the next
/// look. Fails unless every one of the `rounds` is taken (none lost) within `within` per look.
/// Collective (every PE sends and consumes).
pub fn consume_signals(
    s: &pshmem::Pshmem,
    sig: u64,
    rounds: u64,
    within: Duration,
) -> Result<(), String> {
    use pshmem::{AmoOp, Cmp, SignalOp};
    let api = s.by_addr();
    let (me, n) = (s.my_pe(), s.n_pes());
    let e = |x: pshmem::Error| x.to_string();
    for _ in 0..rounds {
        api.signal_op(sig, 1, SignalOp::Add, (me + 1) % n, None)
            .map_err(e)?;
    }
    api.quiet(false, None).map_err(e)?;
    let mut taken = 0;
    while taken < rounds {
        let v = api
            .wait_within(sig, true, (Cmp::Ge, 1), within)
            .map_err(e)?
            .ok_or_else(|| format!("no signal within {within:?} ({taken} of {rounds} taken)"))?;
        let old = api
            .atomic(AmoOp::FetchAdd, sig, true, (v.wrapping_neg(), 0), me)
            .map_err(e)?;
        if old < v {
            return Err(format!("the word fell from {v} to {old} under this PE"));
        }
        taken += v;
    }
    if taken == rounds {
        Ok(())
    } else {
        Err(format!("took {taken} signals of {rounds}"))
    }
}

pub fn assert_all_ok(results: &[RankResult]) {
    if !results.iter().all(RankResult::ok) {
        let all: Vec<String> = results.iter().map(|r| r.to_string()).collect();
        panic!("not every rank succeeded:\n{}", all.join("\n"));
    }
}

/// Milliseconds since the Unix epoch (to compare event times across processes).
pub fn epoch_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// A deterministic byte pattern that differs by rank, peer, size and position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (len as u64);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
