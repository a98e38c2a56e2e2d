//! Bootstrap scenarios: every collective verified byte-exact, a timing loop, a rank that dies
//! or is reported dead mid-job, a mismatched collective, and a join through a unique id.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use pshmem_bootstrap::{Bootstrap, BootstrapError, UniqueId};
use pshmem_tests::{epoch_ms, pattern};

use crate::{BsCmd, report};

/// `bs-loop`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct LoopArgs {
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

/// Runs a bootstrap scenario on a bootstrap it joins (from a unique id for `bs-uid`).
pub fn run(cmd: &BsCmd) -> ExitCode {
    let bs = match cmd {
        BsCmd::Uid { file } => uid_init(file),
        _ => Bootstrap::from_env(),
    };
    let bs = match bs {
        Ok(b) => b,
        Err(e) => return report(&e),
    };
    let me = bs.rank();
    match cmd.clone() {
        BsCmd::Collectives { sizes } => {
            if let Err(f) = collectives(&bs, &sizes) {
                return f.report();
            }
        }
        BsCmd::Bench {
            size,
            iters,
            warmup,
        } => {
            if let Err(e) = bench(&bs, size, iters, warmup) {
                return report(&e);
            }
        }
        BsCmd::Loop(a) => match looped(&bs, &a) {
            Ok(Looped::Done) => {}
            Ok(Looped::Reported) => {
                // Leave at once, as a runtime whose data path failed does.
                drop(bs);
                return ExitCode::from(4);
            }
            Err(e) => return report(&e),
        },
        BsCmd::Mismatch => {
            let res = if me == 0 {
                bs.allgather(b"x").map(|_| ())
            } else {
                bs.barrier()
            };
            if let Err(e) = res {
                return report(&e);
            }
        }
        BsCmd::Init { hold_ms } => {
            if let Err(f) = collectives(&bs, &[0, 100]) {
                return f.report();
            }
            std::thread::sleep(Duration::from_millis(hold_ms));
        }
        BsCmd::Uid { .. } => {
            if let Err(f) = collectives(&bs, &[0, 100]) {
                return f.report();
            }
        }
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

/// `bs-bench`: the median, 10th and 90th percentile of `iters` allgathers of `size` bytes.
fn bench(bs: &Bootstrap, size: usize, iters: usize, warmup: usize) -> Result<(), BootstrapError> {
    let data = pattern(seed(bs.rank(), 0, size), size);
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t = Instant::now();
        bs.allgather(&data)?;
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
    Ok(())
}

/// How `bs-loop` ended on this rank.
enum Looped {
    /// Every iteration ran.
    Done,
    /// This rank reported a peer dead and must leave at once.
    Reported,
}

/// `bs-loop`: allgathers until the victim kills itself or the reporter reports.
fn looped(bs: &Bootstrap, a: &LoopArgs) -> Result<Looped, BootstrapError> {
    let me = bs.rank();
    let data = vec![me as u8; a.size];
    for i in 0..a.iters {
        if a.victim == Some(me) && i == a.die_at {
            println!("DYING epoch_ms={}", epoch_ms());
            // SIGKILL ourselves in the middle of the job: no goodbye, no cleanup.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        if a.reporter == Some(me) && i == a.die_at {
            bs.death_reporter()
                .peer_lost(a.lost, "the test lost its connection");
            println!("REPORTED epoch_ms={}", epoch_ms());
            return Ok(Looped::Reported);
        }
        bs.allgather(&data)?;
        if i == 0
            && let Some(dir) = &a.ready_dir
        {
            std::fs::write(dir.join(me.to_string()), b"").expect("ready file");
        }
        if a.sleep_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.sleep_ms));
        }
    }
    Ok(Looped::Done)
}
