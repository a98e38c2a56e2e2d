//! The worker that multi-process tests launch N times. Each subcommand is one scenario; it
//! prints `OK ...` lines on success and `ERR ...` lines (with `key=value` fields the tests parse)
//! on failure, and exits non-zero on any failure.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};

mod alone;
mod attack;
mod by_addr;
mod coll;
mod flood;
mod guess;
mod runtime;
mod snoop;
mod traffic;
mod transport;
use pshmem_bootstrap::{Bootstrap, BootstrapError, UniqueId};
use pshmem_tests::{epoch_ms, pattern};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Transport: writes and reads at every size, byte-exact.
    TpRma {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
    },
    /// Transport: remote CQ data values.
    TpData {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, default_value_t = 200)]
        count: usize,
    },
    /// Transport: messages.
    TpSend {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, default_value_t = 100)]
        count: usize,
    },
    /// Transport: out-of-bounds accesses.
    TpOob {
        #[command(flatten)]
        which: transport::Which,
    },
    /// Transport: guessed registration keys reach nothing.
    TpGuess {
        #[command(flatten)]
        which: transport::Which,
    },
    /// Transport: a peer killed mid-transfer.
    TpKill {
        #[command(flatten)]
        which: transport::Which,
    },
    /// Transport: visible reordering on the simulated fabric.
    TpReorder {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, default_value_t = 2000)]
        count: usize,
    },
    /// Every collective at every size, verified byte-exact.
    BsCollectives {
        /// Per-rank contribution sizes in bytes.
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
    },
    /// Median time of a collective.
    BsBench {
        #[arg(long, default_value_t = 4096)]
        size: usize,
        #[arg(long, default_value_t = 1000)]
        iters: usize,
        #[arg(long, default_value_t = 100)]
        warmup: usize,
    },
    /// Allgathers in a loop; `victim` kills itself with SIGKILL at iteration `die_at`; at that
    /// iteration `reporter` reports rank `lost` dead (as its data path does when it loses the
    /// connection) and leaves at once, without finalize.
    BsLoop {
        #[arg(long, default_value_t = 1000000)]
        iters: usize,
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long)]
        victim: Option<usize>,
        #[arg(long, default_value_t = 10)]
        die_at: usize,
        #[arg(long, default_value_t = 0)]
        sleep_ms: u64,
        #[arg(long)]
        reporter: Option<usize>,
        #[arg(long, default_value_t = 0)]
        lost: usize,
        /// Create `<dir>/<rank>` once the first collective is done (every rank has joined).
        #[arg(long)]
        ready_dir: Option<std::path::PathBuf>,
    },
    /// Join, a few small collectives, stay `hold_ms`, finalize; report the error if any.
    BsInit {
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Join from a thread that then ends (as a Python thread may), print `PID=`, stay `hold_ms`.
    BsThreadInit {
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Join, barrier, finalize, then all again at once in the same process.
    BsReinit,
    /// A hostile local program against every job it finds (no bootstrap of its own).
    Attack {
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// Stops when this file exists.
        #[arg(long)]
        stop_file: std::path::PathBuf,
    },
    /// Join and barrier; rank `rank` then sleeps `ms` before the next barrier.
    BsStraggler {
        #[arg(long)]
        rank: usize,
        #[arg(long)]
        ms: u64,
    },
    /// Rank 0 calls allgather while the others call barrier.
    BsMismatch,
    /// Join through a unique id passed in a file.
    BsUid {
        #[arg(long)]
        file: std::path::PathBuf,
    },
    /// A hostile local process: tries to take heap descriptors from running jobs.
    HeapSnoop {
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// Stops when this file exists.
        #[arg(long)]
        stop_file: std::path::PathBuf,
    },
    /// A connection flood of a bootstrap port (no bootstrap of its own).
    BsFlood {
        #[arg(long)]
        addr: String,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Connections kept open at most (the oldest closed past it).
        #[arg(long, default_value_t = 6000)]
        keep: usize,
        /// The first connections wait to see whether rank 0 closes them at once.
        #[arg(long, default_value_t = 0)]
        probes: usize,
    },
    /// Runtime: every host operation verified; prints a digest.
    RtOps {
        #[arg(long, value_delimiter = ',', default_value = "1,7,4096,65537,1048579")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 30)]
        rounds: usize,
    },
    /// Runtime: typed errors for bad arguments and use after finalize.
    RtErrors,
    /// Runtime: the host API by address on the host heap.
    RtByAddr,
    /// Runtime: prints the sockets this PE listens on once the runtime is up.
    RtSockets,
    /// Runtime: every collective on every team shape, checked against references.
    RtColl {
        /// Also the sizes over 1 MiB.
        #[arg(long)]
        big: bool,
    },
    /// Runtime: a collective allocation that differs across PEs (`size` or `order`).
    RtMismatch {
        #[arg(long, default_value = "size")]
        how: String,
    },
    /// Runtime: `victim` dies while the others are in `phase` (barrier, quiet, wait).
    RtKill {
        #[arg(long, default_value_t = 1)]
        victim: usize,
        #[arg(long, default_value = "barrier")]
        phase: String,
    },
    /// Runtime: the `late` PEs do not come to a barrier (they sleep, or stop themselves with
    /// SIGSTOP when `how` is "stop"); the others report who held them up.
    RtLate {
        #[arg(long, value_delimiter = ',')]
        late: Vec<usize>,
        #[arg(long, default_value = "sleep")]
        how: String,
    },
    /// Runtime: PE 0 makes `count` blocking puts of `size` bytes and `count` 8-byte `p`s to PE
    /// 1, then quiet (traffic of known shape for the proxy trace's test); with `--signal`,
    /// `count` puts with signal instead, which PE 1 waits for.
    RtTrace {
        #[arg(long, default_value_t = 50)]
        count: usize,
        #[arg(long, default_value_t = 100000)]
        size: usize,
        #[arg(long)]
        signal: bool,
    },
    /// Runtime: put then signal without a fence, counting signals seen before their data.
    RtUnordered {
        #[arg(long, default_value_t = 200)]
        rounds: usize,
        #[arg(long, default_value_t = 65536)]
        size: usize,
    },
}

fn kind(e: &BootstrapError) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}

fn report(e: &BootstrapError) -> ExitCode {
    let dead = e
        .dead_rank()
        .map(|d| d.to_string())
        .unwrap_or_else(|| "none".into());
    println!(
        "ERR kind={} dead={dead} epoch_ms={} msg={}",
        kind(e),
        epoch_ms(),
        e.to_string().replace(' ', "_")
    );
    eprintln!("error: {e}");
    ExitCode::from(3)
}

fn seed(a: usize, b: usize, c: usize) -> u64 {
    ((a as u64) << 40) ^ ((b as u64) << 20) ^ (c as u64) ^ 0x5eed
}

/// Why a collectives run failed: the bootstrap reported an error, or the data was wrong.
enum CollFailure {
    Bootstrap(BootstrapError),
    Verify(String),
}

impl From<BootstrapError> for CollFailure {
    fn from(e: BootstrapError) -> Self {
        Self::Bootstrap(e)
    }
}

impl CollFailure {
    /// Prints the ERR line and gives the exit code.
    fn report(&self) -> ExitCode {
        match self {
            Self::Bootstrap(e) => report(e),
            Self::Verify(m) => {
                println!("ERR kind=Verify msg={}", m.replace(' ', "_"));
                ExitCode::from(4)
            }
        }
    }
}

fn collectives(bs: &Bootstrap, sizes: &[usize]) -> Result<(), CollFailure> {
    let (me, n) = (bs.rank(), bs.world_size());
    let e = CollFailure::Bootstrap;
    for &s in sizes {
        let got = bs.allgather(&pattern(seed(me, 0, s), s)).map_err(e)?;
        for (r, g) in got.iter().enumerate() {
            if *g != pattern(seed(r, 0, s), s) {
                return Err(CollFailure::Verify(format!(
                    "allgather size {s}: block from rank {r} differs"
                )));
            }
        }
        let per = s / n;
        let blocks: Vec<Vec<u8>> = (0..n)
            .map(|j| pattern(seed(me, j + 1, s), per + j % 3))
            .collect();
        let got = bs.alltoall(&blocks).map_err(e)?;
        for (r, g) in got.iter().enumerate() {
            if *g != pattern(seed(r, me + 1, s), per + me % 3) {
                return Err(CollFailure::Verify(format!(
                    "alltoall size {s}: block from rank {r} differs"
                )));
            }
        }
        let roots: Vec<usize> = if s <= 65536 {
            (0..n).collect()
        } else {
            vec![s % n]
        };
        for root in roots {
            let mine = if me == root {
                pattern(seed(root, 99, s), s)
            } else {
                vec![0xAB; 3]
            };
            let got = bs.broadcast(root, &mine).map_err(e)?;
            if got != pattern(seed(root, 99, s), s) {
                return Err(CollFailure::Verify(format!(
                    "broadcast size {s} root {root}: data differs"
                )));
            }
        }
        bs.barrier().map_err(e)?;
        println!("OK size={s}");
    }
    Ok(())
}

/// Runs a runtime scenario on the joined bootstrap.
fn run_runtime(cmd: &Cmd, bs: Bootstrap) -> ExitCode {
    let s = match runtime::init(bs) {
        Ok(s) => s,
        Err(e) => return runtime::report(&e),
    };
    println!(
        "INFO rank={} transport={}",
        s.my_pe(),
        s.transport_name().replace(' ', "_")
    );
    let verify = |r: Result<(), String>| match r {
        Ok(()) => None,
        Err(m) => {
            println!("ERR kind=Verify msg={}", m.replace(' ', "_"));
            eprintln!("error: {m}");
            Some(ExitCode::from(4))
        }
    };
    let failed = match cmd {
        Cmd::RtOps { sizes, rounds } => verify(runtime::ops(&s, sizes, *rounds)),
        Cmd::RtErrors => {
            if let Some(c) = verify(runtime::errors(&s)) {
                return c;
            }
            println!("OK done rank={}", s.my_pe());
            return ExitCode::SUCCESS;
        }
        Cmd::RtUnordered { rounds, size } => verify(runtime::unordered(&s, *rounds, *size)),
        Cmd::RtByAddr => verify(by_addr::run(&s)),
        Cmd::RtSockets => verify(runtime::sockets(&s)),
        Cmd::RtTrace {
            count,
            size,
            signal,
        } => traffic::traffic(&s, *count, *size, *signal)
            .err()
            .map(|e| runtime::report(&e)),
        Cmd::RtColl { big } => verify(coll::run(&s, *big)),
        Cmd::RtMismatch { how } => runtime::mismatch(&s, how)
            .err()
            .map(|e| runtime::report(&e)),
        Cmd::RtKill { victim, phase } => runtime::kill(&s, *victim, phase)
            .err()
            .map(|e| runtime::report(&e)),
        Cmd::RtLate { late, how } => runtime::late(&s, late, how)
            .err()
            .map(|e| runtime::report(&e)),
        _ => unreachable!("not a runtime scenario"),
    };
    if let Some(code) = failed {
        return code;
    }
    if let Err(e) = s.finalize() {
        return runtime::report(&e);
    }
    println!("OK done rank={}", s.my_pe());
    ExitCode::SUCCESS
}

pshmem_transport::hold_signals_through_load!();

fn main() -> ExitCode {
    pshmem_env::init_logging();
    // Tests of descriptor exhaustion give a rank few descriptors.
    if let Some(n) = std::env::var("PSHMEM_TEST_NOFILE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let r = nix::sys::resource::Resource::RLIMIT_NOFILE;
        nix::sys::resource::setrlimit(r, n, n).expect("setrlimit");
    }
    // A test of pid reuse plants the region file that a killed process with this pid would
    // have left (an shm endpoint's `/dev/shm/<pid>:<uid>:<n>`, here the first endpoint's).
    if std::env::var("PSHMEM_TEST_PLANT_SHM_REGION").as_deref() == Ok("1") {
        let name = format!(
            "/dev/shm/{}:{}:0",
            std::process::id(),
            nix::unistd::getuid().as_raw()
        );
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&name)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &[0u8; 4096]))
            .expect("planting a region file");
    }
    let cli = Cli::parse();
    if let Some(code) = alone::run(&cli.cmd) {
        return code;
    }
    let bs = match &cli.cmd {
        Cmd::BsUid { file } => uid_init(file),
        _ => Bootstrap::from_env(),
    };
    let bs = match bs {
        Ok(b) => b,
        Err(e) => return report(&e),
    };
    if matches!(
        cli.cmd,
        Cmd::RtOps { .. }
            | Cmd::RtErrors
            | Cmd::RtByAddr
            | Cmd::RtSockets
            | Cmd::RtColl { .. }
            | Cmd::RtMismatch { .. }
            | Cmd::RtKill { .. }
            | Cmd::RtLate { .. }
            | Cmd::RtUnordered { .. }
            | Cmd::RtTrace { .. }
    ) {
        return run_runtime(&cli.cmd, bs);
    }
    let me = bs.rank();
    let tp = match &cli.cmd {
        Cmd::TpRma { which, sizes } => Some(transport::rma(&bs, which, sizes)),
        Cmd::TpData { which, count } => Some(transport::data(&bs, which, *count)),
        Cmd::TpSend { which, count } => Some(transport::send(&bs, which, *count)),
        Cmd::TpOob { which } => Some(transport::oob(&bs, which)),
        Cmd::TpGuess { which } => Some(guess::guess(&bs, which)),
        Cmd::TpKill { which } => Some(transport::kill(&bs, which)),
        Cmd::TpReorder { which, count } => Some(transport::reorder(&bs, which, *count)),
        _ => None,
    };
    if let Some(Err(m)) = tp {
        println!("ERR kind=Transport msg={}", m.replace(' ', "_"));
        eprintln!("error: {m}");
        return ExitCode::from(5);
    }
    match cli.cmd {
        Cmd::BsCollectives { sizes } => {
            if let Err(f) = collectives(&bs, &sizes) {
                return f.report();
            }
        }
        Cmd::BsBench {
            size,
            iters,
            warmup,
        } => {
            let data = pattern(seed(me, 0, size), size);
            let mut times = Vec::with_capacity(iters);
            for i in 0..warmup + iters {
                let t = Instant::now();
                if let Err(e) = bs.allgather(&data) {
                    return report(&e);
                }
                if i >= warmup {
                    times.push(t.elapsed());
                }
            }
            times.sort();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "BENCH op=allgather ranks={} size={size} iters={iters} median_us={:.1} p10_us={:.1} p90_us={:.1}",
                bs.world_size(),
                us(times[iters / 2]),
                us(times[iters / 10]),
                us(times[iters * 9 / 10])
            );
        }
        Cmd::BsLoop {
            iters,
            size,
            victim,
            die_at,
            sleep_ms,
            reporter,
            lost,
            ready_dir,
        } => {
            let data = vec![me as u8; size];
            for i in 0..iters {
                if victim == Some(me) && i == die_at {
                    println!("DYING epoch_ms={}", epoch_ms());
                    // SIGKILL ourselves in the middle of the job: no goodbye, no cleanup.
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                }
                if reporter == Some(me) && i == die_at {
                    bs.death_reporter()
                        .peer_lost(lost, "the test lost its connection");
                    println!("REPORTED epoch_ms={}", epoch_ms());
                    // Leave at once, as a runtime whose data path failed does.
                    drop(bs);
                    return ExitCode::from(4);
                }
                if let Err(e) = bs.allgather(&data) {
                    return report(&e);
                }
                if i == 0
                    && let Some(dir) = &ready_dir
                {
                    std::fs::write(dir.join(me.to_string()), b"").expect("ready file");
                }
                if sleep_ms > 0 {
                    std::thread::sleep(Duration::from_millis(sleep_ms));
                }
            }
        }
        Cmd::BsMismatch => {
            let res = if me == 0 {
                bs.allgather(b"x").map(|_| ())
            } else {
                bs.barrier()
            };
            if let Err(e) = res {
                return report(&e);
            }
        }
        Cmd::BsInit { hold_ms } => {
            if let Err(f) = collectives(&bs, &[0, 100]) {
                return f.report();
            }
            std::thread::sleep(Duration::from_millis(hold_ms));
        }
        Cmd::BsUid { .. } => {
            if let Err(f) = collectives(&bs, &[0, 100]) {
                return f.report();
            }
        }
        // The transport scenarios ran above (`tp`).
        Cmd::TpRma { .. }
        | Cmd::TpData { .. }
        | Cmd::TpSend { .. }
        | Cmd::TpOob { .. }
        | Cmd::TpGuess { .. }
        | Cmd::TpKill { .. }
        | Cmd::TpReorder { .. } => {}
        // The runtime's and the commands without this bootstrap were dispatched before.
        _ => unreachable!("dispatched above"),
    }
    if let Err(e) = bs.finalize() {
        return report(&e);
    }
    println!("OK done rank={me}");
    ExitCode::SUCCESS
}

/// Rank 0 creates the id and writes it to `file`; the others poll for the file (the
/// application's "own means" of distributing it).
fn uid_init(file: &std::path::Path) -> Result<Bootstrap, BootstrapError> {
    let rank: usize = std::env::var("TEST_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let world: usize = std::env::var("TEST_WORLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let id = if rank == 0 {
        let id = UniqueId::new()?;
        let hex: String = id.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, hex).expect("write id");
        std::fs::rename(&tmp, file).expect("publish id");
        id
    } else {
        let deadline = Instant::now() + Duration::from_secs(30);
        let hex = loop {
            if let Ok(s) = std::fs::read_to_string(file) {
                break s;
            }
            assert!(Instant::now() < deadline, "no unique id file");
            std::thread::sleep(Duration::from_millis(10));
        };
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        UniqueId::from_bytes(&bytes)?
    };
    Bootstrap::init_unique_id(&id, rank, world)
}
