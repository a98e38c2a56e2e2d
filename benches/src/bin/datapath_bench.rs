//! The host data path against its baselines, each comparison side by side in one run:
//!
//! - `pshmrun -n 2 -- datapath-bench vs-raw`: the runtime forced through the proxy
//!   (`put_nbi` + `quiet`, and an 8-byte `p` ping-pong) beside the raw transport through our
//!   safe layer (windowed writes, and an 8-byte write ping-pong) run on the proxy thread with
//!   the runtime's own endpoint to itself (`Pshmem::exclusive`): the same connection, heap
//!   registration and core, so the two differ only by the ring and the proxy. Alternating size
//!   by size. (A second endpoint would not do over loopback TCP: two connections differ by
//!   themselves, by up to 16 % at one size for a whole run.)
//! - `datapath-bench rate` (one process): the ring and one proxy thread alone, against the
//!   instant transport (every operation completes at once, no data moves): descriptors per
//!   second through the proxy with 1, 2 and 4 CPU producer threads publishing 8-byte `p`
//!   descriptors for a peer PE, each producer ending with a quiet.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use pshmem::{Cmp, Config, Pshmem, SymPtr};
use pshmem_benches::{machine, median, paired_ratio, pow2_sizes, size_label};
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{Exclusive, standalone::InstantProxy};
use pshmem_ring::{Desc, Pe, Producer, Ring, WaitLimit};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
    /// Write results here as JSON (PE 0).
    #[arg(long, global = true)]
    json: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// The runtime over tcp beside the raw transport.
    VsRaw {
        #[arg(long, default_value_t = 64 << 10)]
        min: usize,
        #[arg(long, default_value_t = 64 << 20)]
        max: usize,
        /// Alternating repetitions per size.
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Raw writes in flight.
        #[arg(long, default_value_t = 64)]
        window: usize,
        /// Ping-pong iterations per repetition.
        #[arg(long, default_value_t = 5000)]
        lat_iters: usize,
    },
    /// Descriptors per second through one proxy thread (one process, instant transport).
    Rate {
        /// Descriptors per measurement.
        #[arg(long, default_value_t = 2_000_000)]
        count: usize,
        #[arg(long, default_value_t = 5)]
        reps: usize,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        producers: Vec<usize>,
    },
    /// The engine alone on this thread (no proxy thread): full rings of 8-byte `p`s drained by
    /// its turns, a fixed amount of work per descriptor, for `valgrind --tool=callgrind` to
    /// count (the engine's cost compared across versions without timing noise).
    Turns {
        #[arg(long, default_value_t = 8)]
        rings: usize,
        #[arg(long, default_value_t = 65536)]
        slots: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
}

pshmem_transport::hold_signals_through_load!();

fn main() {
    pshmem_env::init_logging();
    let a = Args::parse();
    let doc = match a.cmd {
        Cmd::VsRaw {
            min,
            max,
            reps,
            window,
            lat_iters,
        } => {
            let bs = Bootstrap::from_env().expect("bootstrap");
            assert_eq!(bs.world_size(), 2, "vs-raw runs on 2 PEs (pshmrun -n 2)");
            vs_raw(bs, min, max, reps, window, lat_iters)
        }
        Cmd::Rate {
            count,
            reps,
            ref producers,
        } => Some(rate(count, reps, producers)),
        Cmd::Turns {
            rings,
            slots,
            rounds,
        } => {
            let t0 = Instant::now();
            let n = pshmem_proxy::standalone::drain_turns(rings, slots, rounds).expect("turns");
            let ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
            println!("turns: {n} descriptors drained, {ns:.1} ns each");
            None
        }
    };
    if let (Some(doc), Some(path)) = (doc, &a.json) {
        std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json")).expect("write");
    }
}

/// Tells PE 1 (waiting on its flag) that phase `epoch` is over, through the runtime.
fn release_peer(s: &Pshmem, flag: SymPtr, epoch: u64) {
    s.p(flag, epoch, 1).expect("p");
    s.quiet().expect("quiet");
}

/// How long a raw measurement on the proxy thread may take.
const JOB_LIMIT: Duration = Duration::from_secs(300);

/// Polls a job's transport; any failed write of the job is an error.
fn poll_job(x: &mut Exclusive<'_>) -> Result<usize, String> {
    let mut failed = None;
    let n = x
        .poll(&mut |_, e| {
            if let Some(e) = e {
                failed.get_or_insert(e);
            }
        })
        .map_err(|e| e.to_string())?;
    match failed {
        Some(e) => Err(format!("write failed: {e}")),
        None => Ok(n),
    }
}

/// The raw transport, on PE 0's proxy thread with the runtime's own endpoint to itself:
/// seconds for `count` writes of `size` bytes from `src` to PE 1's `dst`, at most `window` in
/// flight.
fn raw_bw(s: &Pshmem, src: u64, dst: u64, size: usize, count: usize, window: usize) -> f64 {
    s.exclusive(0, JOB_LIMIT, move |x| -> Result<f64, String> {
        let (mut posted, mut done) = (0, 0);
        let t0 = Instant::now();
        while done < count {
            while posted < count && posted - done < window {
                match x.write(Pe::new(1), src, dst, size, posted as u64) {
                    Ok(true) => posted += 1,
                    Ok(false) => break,
                    Err(e) => return Err(format!("write: {e}")),
                }
            }
            done += poll_job(x)?;
        }
        Ok(t0.elapsed().as_secs_f64())
    })
    .expect("raw job")
    .expect("raw bandwidth")
}

/// The raw transport's 8-byte write ping-pong between the two proxy threads, each with its
/// endpoint to itself: `iters` round trips of values `base + i` through the heap word `word`
/// (sent from `from`); returns the half round trip in µs. Both PEs call it together.
fn raw_lat(s: &Pshmem, word: u64, from: u64, base: u64, iters: usize) -> f64 {
    let (me, peer) = (s.my_pe(), 1 - s.my_pe());
    s.exclusive(0, JOB_LIMIT, move |x| -> Result<f64, String> {
        let e = |e: pshmem_proxy::ExclusiveError| e.to_string();
        let mut t0 = Instant::now();
        let deadline = Instant::now() + JOB_LIMIT / 2;
        let wait = |x: &mut Exclusive<'_>, v: u64| -> Result<(), String> {
            while x.load(word).map_err(e)? < v {
                poll_job(x)?;
                if Instant::now() > deadline {
                    return Err(format!("PE {me}: no ping-pong value {v} from PE {peer}"));
                }
            }
            Ok(())
        };
        for i in 1..=(iters + 10) as u64 {
            if i == 11 {
                t0 = Instant::now();
            }
            let v = base + i;
            if me == 1 {
                wait(x, v)?;
            }
            x.store(from, v).map_err(e)?;
            while !x.write(Pe::from_idx(peer), from, word, 8, i).map_err(e)? {
                poll_job(x)?;
            }
            if me == 0 {
                wait(x, v)?;
            }
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
        while x.outstanding() > 0 {
            poll_job(x)?;
        }
        Ok(us)
    })
    .expect("raw job")
    .expect("raw latency")
}

fn vs_raw(
    bs: Bootstrap,
    min: usize,
    max: usize,
    reps: usize,
    window: usize,
    lat_iters: usize,
) -> Option<serde_json::Value> {
    let me = bs.rank();
    let mut cfg = Config::from_env().expect("config");
    cfg.disable_p2p = true;
    let s = Pshmem::init_with(bs, cfg).expect("init");
    let src = s.malloc(max).expect("malloc");
    let dst = s.malloc(max).expect("malloc");
    // Touch both: untouched memory reads as the zero page.
    let fill = vec![0x5au8; max];
    s.local_copy_in(src, &fill).expect("fill");
    s.local_copy_in(dst, &fill).expect("fill");
    drop(fill);
    let w = s.calloc(4, 8).expect("calloc");
    let (flag, ping, raw_word, raw_from) = (w, w + 8, w + 16, w + 24);
    let mut epoch = 0u64;
    if me == 0 {
        println!(
            "# put bandwidth: runtime through the proxy vs raw writes on the proxy thread's own \
             endpoint ({}), window {window}, median of {reps}",
            s.transport_name(),
        );
        println!("| size | runtime GB/s | raw GB/s | paired ratio |\n| --- | --- | --- | --- |");
    }
    let mut rows = Vec::new();
    for size in pow2_sizes(min, max) {
        let count = (256usize << 20).div_ceil(size).clamp(8, 20_000);
        let (mut rt, mut rw) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            // ABBA order: a drift over the run favours neither side.
            for raw_turn in [rep % 2 == 0, rep % 2 == 1] {
                s.barrier_all().expect("barrier");
                if raw_turn {
                    epoch += 1;
                    if me == 0 {
                        let secs = raw_bw(&s, src.offset(), dst.offset(), size, count, window);
                        rw.push((size * count) as f64 / secs / 1e9);
                        release_peer(&s, flag, epoch);
                    } else {
                        s.wait_until(flag, Cmp::Ge, epoch).expect("wait");
                    }
                } else if me == 0 {
                    let t = Instant::now();
                    for _ in 0..count {
                        s.put_nbi_sym(dst, src, size, 1).expect("put");
                    }
                    s.quiet().expect("quiet");
                    rt.push((size * count) as f64 / t.elapsed().as_secs_f64() / 1e9);
                }
            }
        }
        if me == 0 {
            let (a, b, pr) = (median(&rt), median(&rw), paired_ratio(&rt, &rw));
            println!("| {} | {a:.3} | {b:.3} | {pr:.3} |", size_label(size));
            rows.push(
                serde_json::json!({"size": size, "runtime_gbps": a, "raw_gbps": b,
                "ratio": pr, "runtime_runs": rt, "raw_runs": rw}),
            );
        }
    }
    // Latency: 8-byte ping-pongs, raw write vs runtime p + wait_until, alternating.
    let (mut rl, mut pl, mut ql) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        for raw_turn in [rep % 2 == 0, rep % 2 == 1] {
            if raw_turn {
                s.barrier_all().expect("barrier");
                let base = (rep as u64 + 1) << 32;
                rl.push(raw_lat(
                    &s,
                    raw_word.offset(),
                    raw_from.offset(),
                    base,
                    lat_iters,
                ));
                continue;
            }
            // Read the start value before the barrier: after it, the peer may already have
            // written the first value of this round.
            let base: u64 = s.local_read(ping).expect("read");
            s.barrier_all().expect("barrier");
            let t = Instant::now();
            for i in 1..=lat_iters as u64 {
                let v = base + i;
                if me == 0 {
                    s.p(ping, v, 1).expect("p");
                    s.wait_until(ping, Cmp::Ge, v).expect("wait");
                } else {
                    s.wait_until(ping, Cmp::Ge, v).expect("wait");
                    s.p(ping, v, 0).expect("p");
                }
            }
            pl.push(t.elapsed().as_secs_f64() * 1e6 / (2.0 * lat_iters as f64));
            s.quiet().expect("quiet");
        }
        s.barrier_all().expect("barrier");
        if me == 0 {
            let t = Instant::now();
            for _ in 0..lat_iters {
                s.put_nbi_sym(dst, src, 8, 1).expect("put");
                s.quiet().expect("quiet");
            }
            ql.push(t.elapsed().as_secs_f64() * 1e6 / lat_iters as f64);
        }
    }
    s.barrier_all().expect("barrier");
    let out = (me == 0).then(|| {
        let (r, p, q) = (median(&rl), median(&pl), median(&ql));
        println!(
            "\n8-byte ping-pong, half round trip: runtime p + wait_until {p:.2} µs, raw write {r:.2} µs, \
             added {:+.2} µs\n8-byte put + quiet (a full round trip through the proxy): {q:.2} µs",
            p - r
        );
        serde_json::json!({
            "benchmark": "datapath-bench vs-raw", "machine": machine(),
            "runtime_transport": s.transport_name(),
            "raw_transport": format!("{} (the proxy thread's own endpoint)", s.transport_name()),
            "window": window, "reps": reps, "bandwidth": rows,
            "latency": {"runtime_pingpong_us": p, "raw_pingpong_us": r, "added_us": p - r,
                "put_quiet_us": q, "runtime_runs": pl, "raw_runs": rl, "put_quiet_runs": ql,
                "iters": lat_iters},
        })
    });
    s.finalize().expect("finalize");
    out
}

/// The proxy configuration from the environment, pinned to the first configured core.
fn proxy_config(cfg: &Config) -> pshmem_proxy::ProxyConfig {
    let mut pc = cfg.proxy.clone();
    pc.cpu = cfg.proxy_cpus.as_ref().and_then(|c| c.first().copied());
    pc
}

fn start_proxy(ring: &Arc<Ring>, cfg: &Config) -> InstantProxy {
    InstantProxy::spawn(vec![ring.clone()], proxy_config(cfg)).expect("proxy")
}

/// The `i`-th 8-byte `p` descriptor for PE 1.
fn p_desc(i: u64) -> Desc {
    Desc::P {
        pe: Pe::new(1),
        remote: 8 * (i % 512),
        value: i,
        width: 8,
    }
}

/// Publishes `count` 8-byte `p` descriptors for PE 1.
fn publish(prod: &Producer, count: usize) {
    let limit = WaitLimit::new(Some(std::time::Duration::from_secs(60)));
    for i in 0..count {
        let (slots, n) = p_desc(i as u64).encode();
        prod.push(&slots[..n], &limit).expect("push");
    }
}

/// Slots of the ring in the proxy-capacity measurement: 2 MiB of descriptors, as a ring in
/// use lives in cache (the GPU's descriptors arrive in the last-level cache by DDIO; a CPU
/// producer's in its own).
const CAPACITY_RING: usize = 1 << 16;

/// Seconds one proxy thread takes to drain `count` descriptors, in rounds: each round is
/// written into an idle ring and published at once ([`Producer::push_many`]: one release store),
/// so the proxy drains a full ring without ever waiting for a producer; the clock runs from
/// the publication to the completion counter reaching the round's end.
fn proxy_capacity(cfg: &Config, count: usize) -> f64 {
    let ring = Ring::new_host(CAPACITY_RING);
    let mut pc = proxy_config(cfg);
    // A loaded proxy never sleeps; a sleeping one would add its wake-up to every round.
    pc.idle_after = std::time::Duration::ZERO;
    let p = InstantProxy::spawn(vec![ring.clone()], pc).expect("proxy");
    let prod = Producer::new(ring.clone());
    let limit = WaitLimit::new(Some(std::time::Duration::from_secs(60)));
    let mut batch = Vec::with_capacity(CAPACITY_RING);
    let (mut secs, mut left, mut i) = (0.0, count, 0u64);
    while left > 0 {
        batch.clear();
        while batch.len() < CAPACITY_RING && left > 0 {
            let (slots, n) = p_desc(i).encode();
            batch.extend_from_slice(&slots[..n]);
            i += 1;
            left -= 1;
        }
        let end = prod.push_many(&batch, &limit).expect("push_many");
        let t0 = Instant::now();
        let deadline = t0 + std::time::Duration::from_secs(60);
        let mut spins = 0u32;
        while ring.completed() < end {
            std::hint::spin_loop();
            // The clock and the error word only now and then: this thread should disturb the
            // proxy's core (a hyperthread sibling, perhaps) as little as it can.
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 {
                assert!(
                    Instant::now() < deadline && ring.error().is_none(),
                    "the proxy did not drain the ring: {:?}",
                    ring.error()
                );
            }
        }
        secs += t0.elapsed().as_secs_f64();
    }
    p.proxy.stop().expect("stop");
    secs
}

fn rate(count: usize, reps: usize, producers: &[usize]) -> serde_json::Value {
    let cfg = Config::from_env().expect("config");
    let pre: Vec<f64> = (0..reps)
        .map(|_| count as f64 / proxy_capacity(&cfg, count) / 1e6)
        .collect();
    let ring = Ring::new_host(cfg.ring_slots);
    let bp = start_proxy(&ring, &cfg);
    let prod = Producer::new(ring);
    println!(
        "# ring + 1 proxy thread against the instant transport, batch {}: 8-byte p descriptors",
        cfg.proxy.batch
    );
    let pre_m = median(&pre);
    println!(
        "proxy thread alone (full {CAPACITY_RING}-slot rings published at once): {pre_m:.2} M descriptors/s"
    );
    println!(
        "| producer threads ({} slots) | M descriptors/s |\n| --- | --- |",
        cfg.ring_slots
    );
    let mut rows = Vec::new();
    for &np in producers {
        let mut runs = Vec::new();
        for _ in 0..reps {
            let per = count / np;
            let t0 = Instant::now();
            std::thread::scope(|sc| {
                for _ in 0..np {
                    sc.spawn(|| {
                        publish(&prod, per);
                        let limit = WaitLimit::new(Some(std::time::Duration::from_secs(60)));
                        prod.quiet(&limit).expect("quiet");
                    });
                }
            });
            runs.push((per * np) as f64 / t0.elapsed().as_secs_f64() / 1e6);
        }
        let m = median(&runs);
        println!("| {np} | {m:.2} |");
        rows.push(serde_json::json!({"producers": np, "mdesc_per_s": m, "runs": runs}));
    }
    bp.proxy.stop().expect("stop");
    serde_json::json!({"benchmark": "datapath-bench rate", "machine": machine(),
        "transport": "instant", "proxy_threads": 1, "ring_slots": cfg.ring_slots,
        "batch": cfg.proxy.batch, "count": count, "rows": rows,
        "proxy_alone_mdesc_per_s": pre_m, "proxy_alone_runs": pre,
        "proxy_alone_ring_slots": CAPACITY_RING})
}
