//! `pshmrun -n 2 -- pshmem-perf [TEST...] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
//! [--window W] [--json PATH]`: NVSHMEM-perftest-style measurements of the runtime between PE 0
//! and PE 1 (other PEs only join the barriers). Tests: put_bw, get_bw, put_latency, p_latency,
//! put_signal_pingpong, counted_signal_rate, atomic_latency, msg_rate, barrier_latency, the
//! collectives
//! sync_latency, bcast_latency, fcollect_latency, alltoall_latency, reduce_latency (float sum)
//! and reducescatter_latency over the world team (sizes in bytes per member), or `all`.
//!
//! Where every PE has a GPU (or with `--device on`) the tests are device-initiated: kernels
//! issue them through the device API (see `pshmem_benches::gpu_perf`); `--device off` keeps
//! them host-initiated.
//!
//! Each figure is the median over `-n` measured iterations (after `-w` warm-up iterations) of
//! a per-iteration time. Whether PE 1 is reached directly or through the proxy is printed with
//! the transport.

use std::time::Instant;

use clap::Parser;
use pshmem::{Cmp, DType, Pshmem, RedOp, SignalOp, SymPtr, team::TEAM_WORLD};
use pshmem_benches::{machine, median, size_label};

const TESTS: &[&str] = &[
    "put_bw",
    "get_bw",
    "put_latency",
    "p_latency",
    "put_signal_pingpong",
    "counted_signal_rate",
    "atomic_latency",
    "msg_rate",
    "barrier_latency",
    "sync_latency",
    "bcast_latency",
    "fcollect_latency",
    "alltoall_latency",
    "reduce_latency",
    "reducescatter_latency",
];

#[derive(Parser)]
#[command(about = "NVSHMEM-perftest-style tests of proxyshmem (run under pshmrun)")]
struct Args {
    /// Tests to run (default: all).
    tests: Vec<String>,
    /// Smallest message size in bytes.
    #[arg(short = 'b', long, default_value_t = 8)]
    min: usize,
    /// Largest message size in bytes.
    #[arg(short = 'e', long, default_value_t = 1 << 20)]
    max: usize,
    /// Size step factor.
    #[arg(short = 'f', long, default_value_t = 2)]
    factor: usize,
    /// Measured iterations per size.
    #[arg(short = 'n', long, default_value_t = 50)]
    iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long, default_value_t = 5)]
    warmup: usize,
    /// Operations per bandwidth iteration (then one quiet).
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Write the results here as JSON (PE 0).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Device-initiated tests (kernels through the device API): `auto` when every PE has a
    /// GPU, `on`, or `off` (host-initiated).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Device bandwidth grid shapes: auto (size / 64 KiB blocks of 512 threads, up to 32),
    /// nvshmem (1 block below 1 MiB, 32 from 1 MiB: the NVSHMEM comparison's), best (fastest
    /// of 1 … 132 blocks).
    #[arg(long, default_value = "auto")]
    shape: String,
    /// Device collectives: `block` (a kernel of one block calling the device API's block form)
    /// or `stream` (the host's on-stream form: large messages among mapped PEs on a grid).
    #[arg(long, default_value = "block")]
    coll: String,
}

/// One measured figure.
struct Row {
    test: &'static str,
    size: usize,
    unit: &'static str,
    median: f64,
    samples: Vec<f64>,
}

struct Ctx<'a> {
    s: &'a Pshmem,
    a: &'a Args,
    me: usize,
    src: SymPtr,
    dst: SymPtr,
    flags: SymPtr,
    rows: Vec<Row>,
}

fn sizes(a: &Args) -> Vec<usize> {
    std::iter::successors(Some(a.min.max(1)), |s| s.checked_mul(a.factor.max(2)))
        .take_while(|s| *s <= a.max)
        .collect()
}

impl Ctx<'_> {
    fn row(&mut self, test: &'static str, size: usize, unit: &'static str, samples: Vec<f64>) {
        if self.me == 0 {
            let m = median(&samples);
            let label = if size == 0 {
                "-".to_string()
            } else {
                size_label(size)
            };
            println!("| {test} | {label} | {m:.3} {unit} |");
            self.rows.push(Row {
                test,
                size,
                unit,
                median: m,
                samples,
            });
        }
    }

    /// Runs `body` `warmup + iters` times on PE 0 (others wait), timing each run.
    fn time_on_pe0(&self, mut body: impl FnMut(&Pshmem) -> pshmem::Result<()>) -> Vec<f64> {
        let mut out = Vec::new();
        if self.me == 0 {
            for i in 0..self.a.warmup + self.a.iters {
                let t = Instant::now();
                body(self.s).expect("operation");
                if i >= self.a.warmup {
                    out.push(t.elapsed().as_secs_f64());
                }
            }
        }
        self.s.barrier_all().expect("barrier");
        out
    }

    fn bw(&mut self, test: &'static str) {
        let w = self.a.window;
        for size in sizes(self.a) {
            let (src, dst) = (self.src, self.dst);
            let t = self.time_on_pe0(|s| {
                for _ in 0..w {
                    if test == "put_bw" {
                        s.put_nbi_sym(dst, src, size, 1)?;
                    } else {
                        s.get_nbi_sym(dst, src, size, 1)?;
                    }
                }
                s.quiet()
            });
            let gbps = t.iter().map(|x| (w * size) as f64 / x / 1e9).collect();
            self.row(test, size, "GB/s", gbps);
        }
    }

    fn put_latency(&mut self) {
        for size in sizes(self.a) {
            let (src, dst) = (self.src, self.dst);
            let t = self.time_on_pe0(|s| {
                s.put_nbi_sym(dst, src, size, 1)?;
                s.quiet()
            });
            self.row(
                "put_latency",
                size,
                "us",
                t.iter().map(|x| x * 1e6).collect(),
            );
        }
    }

    /// Ping-pong between PE 0 and PE 1; `send(i)` must make PE `peer`'s flag word reach `i`.
    /// Returns half round trips in microseconds (PE 0).
    fn pingpong(
        &self,
        flag: SymPtr,
        mut send: impl FnMut(&Pshmem, u64, usize) -> pshmem::Result<()>,
    ) -> Vec<f64> {
        let s = self.s;
        let mut out = Vec::new();
        // Read the start value before the barrier: after it, the peer may already have
        // written the first value of this ping-pong.
        let base = s.local_read::<u64>(flag).expect("read");
        s.barrier_all().expect("barrier");
        for i in 1..=(self.a.warmup + self.a.iters) as u64 {
            let v = base + i;
            if self.me == 0 {
                let t = Instant::now();
                send(s, v, 1).expect("send");
                s.signal_wait_until(flag, Cmp::Ge, v).expect("wait");
                if i as usize > self.a.warmup {
                    out.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
                }
            } else if self.me == 1 {
                s.signal_wait_until(flag, Cmp::Ge, v).expect("wait");
                send(s, v, 0).expect("send");
            }
        }
        s.quiet().expect("quiet");
        s.barrier_all().expect("barrier");
        out
    }

    fn p_latency(&mut self) {
        let flag = self.flags;
        let t = self.pingpong(flag, |s, v, pe| s.p(flag, v, pe));
        self.row("p_latency", 8, "us", t);
    }

    fn put_signal_pingpong(&mut self) {
        let sig = self.flags + 8;
        for size in sizes(self.a) {
            let (src, dst) = (self.src, self.dst);
            let t = self.pingpong(sig, |s, v, pe| {
                s.put_signal_nbi_sym(dst, src, size, sig, v, SignalOp::Set, pe)
            });
            self.row("put_signal_pingpong", size, "us", t);
        }
    }

    /// Counted signals, PE 0 to PE 1: a round is `COUNTED_PUTS` counted puts of the size and
    /// one counted signal (add 1), as the MoE kernels send a destination its rows and then
    /// its flag; an iteration is `--window` rounds, closed when PE 1, having seen the signal
    /// reach the window's count, answers with a signal. Counted signals per second (PE 0), in
    /// thousands. Host-initiated only.
    fn counted_signal_rate(&mut self) {
        const COUNTED_PUTS: usize = 4;
        let (sig, ack) = (self.flags + 24, self.flags + 32);
        let w = self.a.window.max(1) as u64;
        for size in sizes(self.a) {
            let (s, src, dst) = (self.s, self.src, self.dst);
            // Read the start values before the barrier: after it, the peer may move them.
            let sig0 = s.local_read::<u64>(sig).expect("read");
            let ack0 = s.local_read::<u64>(ack).expect("read");
            s.barrier_all().expect("barrier");
            let mut t = Vec::new();
            for i in 1..=(self.a.warmup + self.a.iters) as u64 {
                if self.me == 0 {
                    let t0 = Instant::now();
                    for _ in 0..w {
                        for _ in 0..COUNTED_PUTS {
                            s.put_counted_nbi_sym(dst, src, size, sig, 1).expect("put");
                        }
                        s.signal_counted(sig, 1, SignalOp::Add, 1).expect("signal");
                    }
                    s.signal_wait_until(ack, Cmp::Ge, ack0 + i).expect("wait");
                    if i as usize > self.a.warmup {
                        t.push(w as f64 / t0.elapsed().as_secs_f64() / 1e3);
                    }
                } else if self.me == 1 {
                    s.signal_wait_until(sig, Cmp::Ge, sig0 + i * w)
                        .expect("wait");
                    // An add: PE 1 does not know PE 0's count (its own `ack` word is idle).
                    s.signal_op(ack, 1, SignalOp::Add, 0).expect("ack");
                }
            }
            s.quiet().expect("quiet");
            s.barrier_all().expect("barrier");
            self.row("counted_signal_rate (4 puts + 1 signal)", size, "k/s", t);
        }
    }

    fn atomic_latency(&mut self) {
        let w = self.flags + 16;
        let t = self.time_on_pe0(|s| s.atomic_fetch_add::<u64>(w, 1, 1).map(|_| ()));
        self.row("atomic_latency (fetch_add)", 8, "us", us(&t));
        // Only PE 0 changes the word, so each compare-swap knows the value it will find.
        let mut cur: u64 = if self.me == 0 {
            self.s.atomic_fetch(w, 1).expect("fetch")
        } else {
            0
        };
        let t = self.time_on_pe0(|s| {
            let old = s.atomic_compare_swap::<u64>(w, cur, cur + 1, 1)?;
            assert_eq!(old, cur, "compare_swap found another value");
            cur += 1;
            Ok(())
        });
        self.row("atomic_latency (compare_swap)", 8, "us", us(&t));
        let t = self.time_on_pe0(|s| s.atomic_swap::<u64>(w, 3, 1).map(|_| ()));
        self.row("atomic_latency (swap)", 8, "us", us(&t));
    }

    fn msg_rate(&mut self) {
        let n = 1000;
        let dst = self.dst;
        let t = self.time_on_pe0(|s| {
            for i in 0..n {
                s.p(dst + 8 * (i % 512), i as u64, 1)?;
            }
            s.quiet()
        });
        let rate = t.iter().map(|x| n as f64 / x / 1e6).collect();
        self.row("msg_rate (8 B p)", 8, "Mops/s", rate);
    }

    fn barrier_latency(&mut self) {
        let mut t = Vec::new();
        for i in 0..self.a.warmup + self.a.iters {
            let t0 = Instant::now();
            self.s.barrier_all().expect("barrier");
            if i >= self.a.warmup {
                t.push(t0.elapsed().as_secs_f64());
            }
        }
        self.row("barrier_latency", 0, "us", us(&t));
    }

    /// A host collective over the world team on the host heap, per size (bytes per member).
    fn collective(&mut self, name: &'static str) {
        let n = self.s.n_pes();
        let sizes = if name == "sync_latency" {
            vec![0]
        } else {
            sizes(self.a)
        };
        for size in sizes {
            let size = if name.starts_with("reduce") {
                size.max(4) / 4 * 4
            } else {
                size
            };
            let src = self
                .s
                .malloc((size * n).max(64))
                .expect("collective source");
            let dst = self
                .s
                .malloc((size * n).max(64))
                .expect("collective destination");
            let mut t = Vec::new();
            for i in 0..self.a.warmup + self.a.iters {
                let t0 = Instant::now();
                let r = match name {
                    "sync_latency" => self.s.team_sync(TEAM_WORLD),
                    "bcast_latency" => self.s.broadcast(TEAM_WORLD, dst, src, size, 0),
                    "fcollect_latency" => self.s.fcollect(TEAM_WORLD, dst, src, size),
                    "alltoall_latency" => self.s.alltoall(TEAM_WORLD, dst, src, size),
                    "reduce_latency" => {
                        self.s
                            .reduce(TEAM_WORLD, DType::F32, RedOp::Sum, dst, src, size / 4)
                    }
                    _ => {
                        self.s
                            .reducescatter(TEAM_WORLD, DType::F32, RedOp::Sum, dst, src, size / 4)
                    }
                };
                r.expect(name);
                if i >= self.a.warmup {
                    t.push(t0.elapsed().as_secs_f64());
                }
            }
            self.row(name, size, "us", us(&t));
            self.s.free(dst).expect("free");
            self.s.free(src).expect("free");
        }
    }
}

/// The host-initiated run's figures as JSON (PE 0).
fn write_json(s: &Pshmem, a: &Args, rows: &[Row], path: &std::path::Path) {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({"test": r.test, "size": r.size, "unit": r.unit,
            "median": r.median, "samples": r.samples})
        })
        .collect();
    let doc = serde_json::json!({
        "benchmark": "pshmem-perf", "machine": machine(), "n_pes": s.n_pes(),
        "path": if s.is_direct(1) { "direct" } else { "proxy" },
        "transport": s.transport_name(), "iters": a.iters, "warmup": a.warmup,
        "window": a.window, "results": rows,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json")).expect("write");
}

fn us(t: &[f64]) -> Vec<f64> {
    t.iter().map(|x| x * 1e6).collect()
}

pshmem_transport::hold_signals_through_load!();

fn main() {
    pshmem_env::init_logging();
    let a = Args::parse();
    let wanted: Vec<String> = if a.tests.is_empty() || a.tests.iter().any(|t| t == "all") {
        TESTS.iter().map(|t| t.to_string()).collect()
    } else {
        a.tests.clone()
    };
    for t in &wanted {
        assert!(
            TESTS.contains(&t.as_str()),
            "unknown test {t}; tests: {}",
            TESTS.join(", ")
        );
    }
    let s = match Pshmem::init() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pshmem-perf: {e}");
            std::process::exit(2);
        }
    };
    assert!(
        s.n_pes() >= 2,
        "pshmem-perf needs at least 2 PEs (pshmrun -n 2)"
    );
    let device = match a.device.as_str() {
        "on" => true,
        "off" => false,
        _ => pshmem::gpu::probe().is_ok(),
    };
    if device {
        let me = s.my_pe();
        let plan = pshmem_benches::gpu_perf::GpuPlan {
            tests: &wanted,
            sizes: &sizes(&a),
            samples: a.iters.clamp(3, 20),
            reps: a.window.max(1) * 4,
            shape: match a.shape.as_str() {
                "nvshmem" => pshmem_benches::gpu_perf::Shape::Nvshmem,
                "best" => pshmem_benches::gpu_perf::Shape::Best,
                _ => pshmem_benches::gpu_perf::Shape::Auto,
            },
            coll_stream: a.coll == "stream",
        };
        let rows = match pshmem_benches::gpu_perf::run(&s, &plan) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("pshmem-perf (device): {e}");
                std::process::exit(4);
            }
        };
        if me == 0 {
            let g = s.gpu().expect("gpu");
            println!(
                "# pshmem-perf (device-initiated): {} PEs, GPU {} -> PE 1 {} ({}), median of {} samples of {} operations",
                s.n_pes(),
                g.ordinal(),
                if g.is_direct(1) {
                    "direct (NVLink/IPC)".to_string()
                } else {
                    format!("through the ring and the proxy ({})", g.remote_path())
                },
                s.transport_name(),
                plan.samples,
                plan.reps
            );
            println!("| test | size | median |\n| --- | --- | --- |");
            let mut out = Vec::new();
            for r in &rows {
                let m = median(&r.samples);
                let label = if r.size == 0 {
                    "-".into()
                } else {
                    size_label(r.size)
                };
                println!("| {} | {label} | {m:.3} {} |", r.test, r.unit);
                out.push(
                    serde_json::json!({"test": r.test, "size": r.size, "unit": r.unit,
                    "median": m, "samples": r.samples}),
                );
            }
            if let Some(path) = &a.json {
                let doc = serde_json::json!({
                    "benchmark": "pshmem-perf", "mode": "device", "machine": machine(),
                    "n_pes": s.n_pes(),
                    "path": if g.is_direct(1) { "nvlink" } else { g.remote_path() },
                    "transport": s.transport_name(), "samples": plan.samples,
                    "reps": plan.reps, "shape": a.shape, "results": out,
                });
                std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json"))
                    .expect("write");
            }
        }
        if let Err(e) = s.finalize() {
            eprintln!("pshmem-perf: {e}");
            std::process::exit(3);
        }
        return;
    }
    // msg_rate writes 512 distinct 8-byte words of `dst`, whatever the largest size asked for:
    // a smaller buffer would spill into the flags allocated after it.
    let bytes = a.max.max(4096);
    let src = s.malloc(bytes).expect("malloc");
    let dst = s.malloc(bytes).expect("malloc");
    // Touch both: untouched memory reads as the kernel's zero page, which flatters copies.
    let fill = vec![0x5au8; bytes];
    s.local_copy_in(src, &fill).expect("fill");
    s.local_copy_in(dst, &fill).expect("fill");
    drop(fill);
    let flags = s.calloc(8, 8).expect("calloc");
    let me = s.my_pe();
    if me == 0 {
        println!(
            "# pshmem-perf: {} PEs, PE 0 -> PE 1 {} ({}), median of {} iterations",
            s.n_pes(),
            if s.is_direct(1) {
                "direct (same-host mapping)"
            } else {
                "through the proxy"
            },
            s.transport_name(),
            a.iters
        );
        println!("| test | size | median |\n| --- | --- | --- |");
    }
    let mut c = Ctx {
        s: &s,
        a: &a,
        me,
        src,
        dst,
        flags,
        rows: Vec::new(),
    };
    for t in &wanted {
        match t.as_str() {
            "put_bw" => c.bw("put_bw"),
            "get_bw" => c.bw("get_bw"),
            "put_latency" => c.put_latency(),
            "p_latency" => c.p_latency(),
            "put_signal_pingpong" => c.put_signal_pingpong(),
            "counted_signal_rate" => c.counted_signal_rate(),
            "atomic_latency" => c.atomic_latency(),
            "msg_rate" => c.msg_rate(),
            "barrier_latency" => c.barrier_latency(),
            name => {
                let name = TESTS.iter().find(|&&t| t == name).expect("a known test");
                c.collective(name)
            }
        }
    }
    if me == 0
        && let Some(path) = &a.json
    {
        write_json(&s, &a, &c.rows, path);
    }
    drop(c);
    if let Err(e) = s.finalize() {
        eprintln!("pshmem-perf: {e}");
        std::process::exit(3);
    }
}
