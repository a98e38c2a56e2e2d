//! The worker that multi-process tests launch N times. Each subcommand is one scenario; it
//! prints `OK ...` lines on success and `ERR ...` lines (with `key=value` fields the tests parse)
//! on failure, and exits non-zero on any failure.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod alone;
mod attack;
mod bootstrap;
mod by_addr;
mod coll;
mod flood;
mod guess;
mod runtime;
mod snoop;
mod sockets;
mod traffic;
mod transport;
use pshmem_bootstrap::{Bootstrap, BootstrapError};
use pshmem_tests::epoch_ms;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Every scenario, by how it starts: its group's enum is matched exhaustively where it runs.
#[derive(Subcommand)]
enum Cmd {
    #[command(flatten)]
    Tp(TpCmd),
    #[command(flatten)]
    Bs(BsCmd),
    #[command(flatten)]
    Alone(AloneCmd),
    #[command(flatten)]
    Rt(RtCmd),
}

/// Transport scenarios on a joined bootstrap (`transport.rs`).
#[derive(Subcommand, Debug)]
pub enum TpCmd {
    /// Transport: writes and reads at every size, byte-exact.
    #[command(name = "tp-rma")]
    Rma {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
    },
    /// Transport: remote CQ data values.
    #[command(name = "tp-data")]
    Data {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, default_value_t = 200)]
        count: usize,
    },
    /// Transport: messages.
    #[command(name = "tp-send")]
    Send {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, default_value_t = 100)]
        count: usize,
    },
    /// Transport: out-of-bounds accesses.
    #[command(name = "tp-oob")]
    Oob {
        #[command(flatten)]
        which: transport::Which,
    },
    /// Transport: guessed registration keys reach nothing.
    #[command(name = "tp-guess")]
    Guess {
        #[command(flatten)]
        which: transport::Which,
    },
    /// Transport: a peer killed mid-transfer.
    #[command(name = "tp-kill")]
    Kill {
        #[command(flatten)]
        which: transport::Which,
    },
    /// Transport: visible reordering on the simulated fabric.
    #[command(name = "tp-reorder")]
    Reorder {
        #[command(flatten)]
        which: transport::Which,
        #[arg(long, default_value_t = 2000)]
        count: usize,
    },
}

/// Bootstrap scenarios.
#[derive(Subcommand, Clone, Debug)]
pub enum BsCmd {
    /// Every collective at every size, verified byte-exact.
    #[command(name = "bs-collectives")]
    Collectives {
        /// Per-rank contribution sizes in bytes.
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
    },
    /// Median time of a collective.
    #[command(name = "bs-bench")]
    Bench {
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
    #[command(name = "bs-loop")]
    Loop(bootstrap::LoopArgs),
    /// Join, a few small collectives, stay `hold_ms`, finalize; report the error if any.
    #[command(name = "bs-init")]
    Init {
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Rank 0 calls allgather while the others call barrier.
    #[command(name = "bs-mismatch")]
    Mismatch,
    /// Join through a unique id passed in a file.
    #[command(name = "bs-uid")]
    Uid {
        #[arg(long)]
        file: std::path::PathBuf,
    },
}

/// Scenarios that join no bootstrap here, or join their own (`alone.rs`).
#[derive(Subcommand, Debug)]
pub enum AloneCmd {
    /// A hostile local process: tries to take heap descriptors from running jobs.
    HeapSnoop {
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// Stops when this file exists.
        #[arg(long)]
        stop_file: std::path::PathBuf,
    },
    /// A hostile local program against every job it finds (no bootstrap of its own).
    Attack {
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
    /// Join from a thread that then ends (as a Python thread may), print `PID=`, stay `hold_ms`.
    BsThreadInit {
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Join, barrier, finalize, then all again at once in the same process.
    BsReinit,
    /// Join and barrier; rank `rank` then sleeps `ms` before the next barrier.
    BsStraggler {
        #[arg(long)]
        rank: usize,
        #[arg(long)]
        ms: u64,
    },
}

/// Runtime scenarios on a joined bootstrap (`runtime.rs`).
#[derive(Subcommand, Debug)]
pub enum RtCmd {
    /// Runtime: every host operation verified; prints a digest.
    #[command(name = "rt-ops")]
    Ops {
        #[arg(long, value_delimiter = ',', default_value = "1,7,4096,65537,1048579")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 30)]
        rounds: usize,
    },
    /// Runtime: typed errors for bad arguments and use after finalize.
    #[command(name = "rt-errors")]
    Errors,
    /// Runtime: the host API by address on the host heap.
    #[command(name = "rt-by-addr")]
    ByAddr,
    /// Runtime: prints the sockets this PE listens on once the runtime is up.
    #[command(name = "rt-sockets")]
    Sockets,
    /// Runtime: every collective on every team shape, checked against references.
    #[command(name = "rt-coll")]
    Coll {
        /// Also the sizes over 1 MiB.
        #[arg(long)]
        big: bool,
    },
    /// Runtime: a collective allocation that differs across PEs (`size` or `order`).
    #[command(name = "rt-mismatch")]
    Mismatch {
        #[arg(long, default_value = "size")]
        how: String,
    },
    /// Runtime: `victim` dies while the others are in `phase` (barrier, quiet, wait).
    #[command(name = "rt-kill")]
    Kill {
        #[arg(long, default_value_t = 1)]
        victim: usize,
        #[arg(long, default_value = "barrier")]
        phase: String,
    },
    /// Runtime: the `late` PEs do not come to a barrier (they sleep, or stop themselves with
    /// SIGSTOP when `how` is "stop"); the others report who held them up.
    #[command(name = "rt-late")]
    Late {
        #[arg(long, value_delimiter = ',')]
        late: Vec<usize>,
        #[arg(long, default_value = "sleep")]
        how: String,
    },
    /// Runtime: PE 0 makes `count` blocking puts of `size` bytes and `count` 8-byte `p`s to PE
    /// 1, then quiet (traffic of known shape for the proxy trace's test); with `--signal`,
    /// `count` puts with signal instead, which PE 1 waits for.
    #[command(name = "rt-trace")]
    Trace {
        #[arg(long, default_value_t = 50)]
        count: usize,
        #[arg(long, default_value_t = 100000)]
        size: usize,
        #[arg(long)]
        signal: bool,
    },
    /// Runtime: put then signal without a fence, counting signals seen before their data.
    #[command(name = "rt-unordered")]
    Unordered {
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

/// Runs a runtime scenario on the joined bootstrap.
fn run_runtime(cmd: &RtCmd, bs: Bootstrap) -> ExitCode {
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
        RtCmd::Ops { sizes, rounds } => verify(runtime::ops(&s, sizes, *rounds)),
        RtCmd::Errors => {
            if let Some(c) = verify(runtime::errors(&s)) {
                return c;
            }
            println!("OK done rank={}", s.my_pe());
            return ExitCode::SUCCESS;
        }
        RtCmd::Unordered { rounds, size } => verify(runtime::unordered(&s, *rounds, *size)),
        RtCmd::ByAddr => verify(by_addr::run(&s)),
        RtCmd::Sockets => verify(sockets::run(&s)),
        RtCmd::Trace {
            count,
            size,
            signal,
        } => traffic::traffic(&s, *count, *size, *signal)
            .err()
            .map(|e| runtime::report(&e)),
        RtCmd::Coll { big } => verify(coll::run(&s, *big)),
        RtCmd::Mismatch { how } => runtime::mismatch(&s, how)
            .err()
            .map(|e| runtime::report(&e)),
        RtCmd::Kill { victim, phase } => runtime::kill(&s, *victim, phase)
            .err()
            .map(|e| runtime::report(&e)),
        RtCmd::Late { late, how } => runtime::late(&s, late, how)
            .err()
            .map(|e| runtime::report(&e)),
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
    match &Cli::parse().cmd {
        Cmd::Alone(c) => alone::run(c),
        Cmd::Rt(c) => match Bootstrap::from_env() {
            Ok(bs) => run_runtime(c, bs),
            Err(e) => report(&e),
        },
        Cmd::Tp(c) => match Bootstrap::from_env() {
            Ok(bs) => run_transport(c, bs),
            Err(e) => report(&e),
        },
        Cmd::Bs(c) => bootstrap::run(c),
    }
}

/// Runs a transport scenario on the joined bootstrap.
fn run_transport(cmd: &TpCmd, bs: Bootstrap) -> ExitCode {
    let me = bs.rank();
    let res = match cmd {
        TpCmd::Rma { which, sizes } => transport::rma(&bs, which, sizes),
        TpCmd::Data { which, count } => transport::data(&bs, which, *count),
        TpCmd::Send { which, count } => transport::send(&bs, which, *count),
        TpCmd::Oob { which } => transport::oob(&bs, which),
        TpCmd::Guess { which } => guess::guess(&bs, which),
        TpCmd::Kill { which } => transport::kill(&bs, which),
        TpCmd::Reorder { which, count } => transport::reorder(&bs, which, *count),
    };
    if let Err(m) = res {
        println!("ERR kind=Transport msg={}", m.replace(' ', "_"));
        eprintln!("error: {m}");
        return ExitCode::from(5);
    }
    if let Err(e) = bs.finalize() {
        return report(&e);
    }
    println!("OK done rank={me}");
    ExitCode::SUCCESS
}
