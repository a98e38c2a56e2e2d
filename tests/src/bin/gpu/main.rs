//! `pshmem-gpu-tests`: tests and measurements that need a GPU. Without a CUDA driver or device,
//! every command prints a `SKIP` line saying why and exits 0, so CI (no GPU) runs them loudly;
//! `scripts/gpu-test.sh` runs them on a GPU machine.
//!
//! - `ring-stress`: every warp of many blocks publishes descriptors into a ring in pinned host
//!   memory; a CPU consumer proves none is lost, duplicated or torn, and advances the completion
//!   counter the GPU's quiet waits on;
//! - `ring-rate`: GPU warps publish `p` descriptors to a real proxy thread on the instant
//!   transport: descriptors per second through one proxy thread;
//! - `ring-latency`: one GPU thread publishes a descriptor and waits until the proxy has completed
//!   it, repeatedly: the GPU → proxy → GPU round trip;
//! - `gpu-ops`: launches N PEs (one process each) that run every device API operation on their
//!   neighbour (NVLink/IPC, or the ring and host-staged proxy under `PSHMEM_DISABLE_P2P=1`, or
//!   N PEs on one GPU with `--same-gpu`) and verify the results;
//! - `gpu-kill`: a PE dies while its neighbour waits in a kernel for its signal: the wait must
//!   end with an error naming the dead PE within 5 s.

mod api;
mod by_addr;
mod kargs;

use kargs::{MailboxArgs, RingRateArgs, RingRoundtripArgs, RingStressArgs};

use std::{
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use cudarc::driver::DevicePtr;
use pshmem::cuda::{self, Kernel, RingDeviceHandle};
use pshmem_abi::error as code;
use pshmem_proxy::{ProxyConfig, standalone::InstantProxy};
use pshmem_ring::{Completions, Consumer, Ring};

#[derive(Parser)]
struct Cli {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0, global = true)]
    device: usize,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
#[allow(clippy::enum_variant_names)] // the commands are all about the ring, and named so
enum Cmd {
    /// Ring protocol on the GPU, checked descriptor by descriptor.
    RingStress {
        #[arg(long, default_value_t = 132)]
        blocks: u32,
        #[arg(long, default_value_t = 256)]
        threads: u32,
        #[arg(long, default_value_t = 3000)]
        per_warp: u64,
        #[arg(long, default_value_t = 1024)]
        slots: usize,
    },
    /// Descriptors per second from GPU warps through one proxy thread.
    RingRate {
        #[arg(long, default_value_t = 132)]
        blocks: u32,
        #[arg(long, default_value_t = 128)]
        threads: u32,
        #[arg(long, default_value_t = 2000)]
        per_warp: u64,
        #[arg(long, default_value_t = 4096)]
        slots: usize,
        /// Proxy threads (the blocks are split between their rings).
        #[arg(long, default_value_t = 1)]
        proxies: usize,
        /// Rings per proxy thread (one thread drains several rings).
        #[arg(long, default_value_t = 1)]
        rings_per_proxy: usize,
    },
    /// GPU -> CPU -> GPU round trip through pinned host memory (a CPU thread echoes): the
    /// physical floor under the ring's round trip.
    Mailbox {
        #[arg(long, default_value_t = 20000)]
        iters: u64,
    },
    /// GPU → proxy → GPU round trip of one descriptor.
    RingLatency {
        #[arg(long, default_value_t = 20000)]
        iters: u64,
    },
    /// Launches `pes` PEs running every device operation.
    GpuOps {
        #[arg(long, default_value_t = 2)]
        pes: usize,
        /// Every PE on GPU 0.
        #[arg(long)]
        same_gpu: bool,
    },
    /// One PE of `gpu-ops` (launched by it).
    GpuOpsRank,
    /// Launches 2 PEs; PE 1 dies while PE 0 waits in a kernel.
    GpuKill,
    /// One PE of `gpu-kill` (launched by it).
    GpuKillRank {
        #[arg(long, default_value_t = 1)]
        victim: usize,
    },
    /// Launches 2 PEs on GPU 0 that start the GPU path and stop; checks that they warn about
    /// sharing a GPU without CUDA MPS exactly when `expect_warning` (run it with no MPS, and
    /// with MPS serving the CUDA_MPS_PIPE_DIRECTORY in force).
    MpsCheck {
        #[arg(long)]
        expect_warning: bool,
    },
    /// One PE of `mps-check` (launched by it).
    GpuInitRank,
}

/// Runs `args` as a job of `n` PEs of this program; prints every rank's output.
fn launch(n: usize, args: &[&str], env: &[(&str, &str)]) -> R<Vec<pshmem_tests::RankResult>> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut j = pshmem_tests::JobSpec::new(exe, n, args)
        .timeout(Duration::from_secs(240))
        .env("PSHMEM_SYMMETRIC_SIZE", "64M")
        .env("PSHMEM_GPU_SYMMETRIC_SIZE", "256M");
    for (k, v) in env {
        j = j.env(k, v);
    }
    let res = j.launch().wait();
    for r in &res {
        for l in r.stdout.lines() {
            println!("  [pe {}] {l}", r.rank);
        }
        if !r.ok() {
            for l in r
                .stderr
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                println!("  [pe {} stderr] {l}", r.rank);
            }
        }
    }
    Ok(res)
}

fn gpu_ops(pes: usize, same_gpu: bool) -> R<String> {
    let env: &[(&str, &str)] = if same_gpu {
        &[("PSHMEM_CUDA_DEVICE", "0")]
    } else {
        &[]
    };
    let t0 = Instant::now();
    let res = launch(pes, &["gpu-ops-rank"], env)?;
    if let Some(bad) = res.iter().find(|r| !r.ok()) {
        return Err(format!("PE {} failed (status {:?})", bad.rank, bad.status));
    }
    let p2p = std::env::var("PSHMEM_DISABLE_P2P").unwrap_or_default() == "1";
    Ok(format!(
        "OK gpu-ops pes={pes} same_gpu={same_gpu} disable_p2p={p2p} secs={:.1}",
        t0.elapsed().as_secs_f64()
    ))
}

fn mps_check(expect_warning: bool) -> R<String> {
    let res = launch(2, &["gpu-init-rank"], &[("PSHMEM_CUDA_DEVICE", "0")])?;
    if let Some(bad) = res.iter().find(|r| !r.ok()) {
        return Err(format!("PE {} failed (status {:?})", bad.rank, bad.status));
    }
    for r in &res {
        let warned = r.stderr.contains("without CUDA MPS") || r.stderr.contains("CUDA MPS is");
        if warned != expect_warning {
            return Err(format!(
                "PE {}: warned={warned}, expected {expect_warning}; stderr:\n{}",
                r.rank, r.stderr
            ));
        }
        if let Some(line) = r.stderr.lines().find(|l| l.contains("CUDA MPS")) {
            println!("  [pe {}] {line}", r.rank);
        }
    }
    Ok(format!("OK mps-check warned={expect_warning}"))
}

fn gpu_kill() -> R<String> {
    let res = launch(2, &["gpu-kill-rank", "--victim", "1"], &[])?;
    let dying: u128 = res[1]
        .fields("DYING")
        .first()
        .and_then(|f| f.get("epoch_ms")?.parse().ok())
        .ok_or("PE 1 did not reach its death")?;
    let f = res[0]
        .fields("ERR")
        .into_iter()
        .next()
        .ok_or("PE 0 reported no error")?;
    let at: u128 = f
        .get("epoch_ms")
        .and_then(|v| v.parse().ok())
        .ok_or("no time")?;
    if f.get("pe").map(String::as_str) != Some("1") {
        return Err(format!("the error does not name PE 1: {f:?}"));
    }
    let ms = at.saturating_sub(dying);
    if ms > 5000 {
        return Err(format!("PE 0 noticed after {ms} ms"));
    }
    Ok(format!(
        "OK gpu-kill kind={} pe=1 noticed_after_ms={ms}",
        f.get("kind").map_or("?", String::as_str)
    ))
}

fn rank<F: FnOnce(&pshmem::Pshmem) -> R<()>>(f: F) -> R<String> {
    let s = pshmem::Pshmem::init().map_err(|e| e.to_string())?;
    f(&s)?;
    s.finalize().map_err(|e| e.to_string())?;
    Ok("OK done".into())
}

/// Starts and stops the GPU path, timing each stage (scripts/startup-profile.sh reads the
/// line; `PSHMEM_LOG=info` adds each stage's phases).
fn gpu_init_rank() -> R<String> {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let s = pshmem::Pshmem::init().map_err(|e| e.to_string())?;
    let init = ms(t);
    let t = Instant::now();
    s.gpu_init().map_err(|e| e.to_string())?;
    let gpu = ms(t);
    let t = Instant::now();
    s.finalize().map_err(|e| e.to_string())?;
    let fin = ms(t);
    drop(s);
    Ok(format!(
        "OK done init_ms={init:.1} gpu_init_ms={gpu:.1} finalize_ms={fin:.1} drop_ms={:.1}",
        ms(t) - fin
    ))
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

type R<T> = Result<T, String>;

/// Verifies descriptors as the GPU publishes them and advances `completed`; returns how many
/// operations it saw. Raises the ring's error word if nothing arrives for 30 s, so the GPU's
/// spins end.
fn verify(ring: Arc<Ring>, warps: u64, per_warp: u64, done: Arc<AtomicBool>) -> R<u64> {
    let mut cons = Consumer::new(ring.clone());
    let mut next = vec![0u64; warps as usize];
    let mut comp = Completions::new();
    let total = warps * per_warp;
    let mut seen = 0u64;
    let mut last = Instant::now();
    let mut bad: Option<String> = None;
    while seen < total {
        let n = cons
            .poll(256, |idx, s| {
                let key = s[0].a;
                let (w, seq) = (key >> 40, key & ((1 << 40) - 1));
                let two = mix(key) % 8 == 0;
                let ok = w < warps
                    && seq == next[w as usize]
                    && s.len() == if two { 2 } else { 1 }
                    && s[0].b == mix(key)
                    && s[0].c == !key
                    && s[0].pe as u64 == w
                    && (!two || (s[1].a == mix(key ^ 1) && s[1].b == mix(key ^ 2)));
                if !ok && bad.is_none() {
                    bad = Some(format!(
                        "ring index {idx}: warp {w} seq {seq} (expected {:?}): {s:?}",
                        next.get(w as usize)
                    ));
                }
                if let Some(x) = next.get_mut(w as usize) {
                    *x = seq + 1;
                }
                let id = comp.push(idx + s.len() as u64);
                comp.finish(id);
            })
            .map_err(|e| e.to_string())?;
        if let Some(b) = bad {
            ring.raise(code::PROXY, None);
            return Err(b);
        }
        if let Some(c) = comp.advance() {
            cons.set_completed(c);
        }
        seen += n as u64;
        if n > 0 {
            last = Instant::now();
        } else if last.elapsed() > Duration::from_secs(30) || done.load(Ordering::Acquire) {
            ring.raise(code::PROXY, None);
            return Err(format!("stalled after {seen} of {total} operations"));
        } else {
            std::hint::spin_loop();
        }
    }
    if next.iter().any(|&x| x != per_warp) {
        return Err("a warp's sequence is incomplete".into());
    }
    Ok(seen)
}

fn ring_stress(dev: usize, blocks: u32, threads: u32, per_warp: u64, slots: usize) -> R<String> {
    let ctx = cuda::open(dev).map_err(|e| e.to_string())?;
    let module = cuda::load(&ctx, pshmem_tests::RING_TEST_KERNELS).map_err(|e| e.to_string())?;
    let f: Kernel<RingStressArgs> =
        Kernel::load(&ctx, &module, "pshmem_ring_stress").map_err(|e| e.to_string())?;
    let (ring, handle): (Arc<Ring>, RingDeviceHandle) =
        cuda::gpu_ring(&ctx, slots).map_err(|e| e.to_string())?;
    let warps = u64::from(blocks * threads / 32);
    let stream = ctx.default_stream();
    let status = stream
        .alloc_zeros::<u64>(warps as usize)
        .map_err(|e| e.to_string())?;
    let done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (ring, done) = (ring.clone(), done.clone());
        std::thread::spawn(move || verify(ring, warps, per_warp, done))
    };
    let t0 = Instant::now();
    let args = RingStressArgs {
        r: handle,
        per_warp,
        status: status.device_ptr(&stream).0,
    };
    // SAFETY: `status` holds one word per warp of the grid; the ring lives until the end.
    let launched = unsafe { f.launch((blocks, 1), threads, stream.cu_stream(), args) }
        .map_err(|e| format!("launch: {e}"));
    let synced = launched.and_then(|()| stream.synchronize().map_err(|e| e.to_string()));
    let secs = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Release);
    let seen = consumer
        .join()
        .map_err(|_| "consumer panicked".to_string())??;
    synced?;
    let st = stream.clone_dtoh(&status).map_err(|e| e.to_string())?;
    if let Some((w, e)) = st.iter().enumerate().find(|(_, e)| **e != 0) {
        return Err(format!("warp {w} saw ring error word {e:#x}"));
    }
    Ok(format!(
        "OK ring-stress operations={seen} warps={warps} slots={slots} secs={secs:.3} mops={:.2}",
        seen as f64 / secs / 1e6
    ))
}

fn ring_rate(
    dev: usize,
    blocks: u32,
    threads: u32,
    per_warp: u64,
    slots: usize,
    proxies: usize,
    rings_per_proxy: usize,
) -> R<String> {
    let ctx = cuda::open(dev).map_err(|e| e.to_string())?;
    let module = cuda::load(&ctx, pshmem_tests::RING_TEST_KERNELS).map_err(|e| e.to_string())?;
    let f: Kernel<RingRateArgs> =
        Kernel::load(&ctx, &module, "pshmem_ring_rate").map_err(|e| e.to_string())?;
    let n = proxies.max(1);
    let k = rings_per_proxy.max(1);
    let per_blocks = (blocks / (n * k) as u32).max(1);
    let warps = u64::from(per_blocks * threads / 32);
    let mut proxies_run = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..n {
        let mut rings = Vec::new();
        for _ in 0..k {
            let (ring, handle) = cuda::gpu_ring(&ctx, slots).map_err(|e| e.to_string())?;
            rings.push(ring);
            let stream = ctx.new_stream().map_err(|e| e.to_string())?;
            let status = stream
                .alloc_zeros::<u64>(warps as usize)
                .map_err(|e| e.to_string())?;
            runs.push((handle, stream, status));
        }
        proxies_run
            .push(InstantProxy::spawn(rings, ProxyConfig::default()).map_err(|e| e.to_string())?);
    }
    let t0 = Instant::now();
    for (handle, stream, status) in &runs {
        let args = RingRateArgs {
            r: *handle,
            per_warp,
            status: status.device_ptr(stream).0,
            pe: 1,
            _pad: 0,
        };
        // SAFETY: one status word per warp of the grid; each launch has its own ring, proxy
        // and stream.
        unsafe { f.launch((per_blocks, 1), threads, stream.cu_stream(), args) }
            .map_err(|e| format!("launch: {e}"))?;
    }
    for (_, stream, _) in &runs {
        stream.synchronize().map_err(|e| e.to_string())?;
    }
    let secs = t0.elapsed().as_secs_f64();
    for p in proxies_run {
        p.proxy.stop().map_err(|e| e.to_string())?;
    }
    for (_, stream, status) in runs {
        let st = stream.clone_dtoh(&status).map_err(|e| e.to_string())?;
        if let Some(e) = st.iter().find(|e| **e != 0) {
            return Err(format!("a warp saw ring error word {e:#x}"));
        }
    }
    let total = warps * per_warp * (n * k) as u64;
    let rate = total as f64 / secs / 1e6;
    Ok(format!(
        "OK ring-rate proxies={n} rings_per_proxy={k} descriptors={total} warps={} slots={slots} secs={secs:.3} mdesc_per_s={rate:.2} mdesc_per_s_per_proxy={:.2}",
        warps * (n * k) as u64,
        rate / n as f64
    ))
}

fn mailbox(dev: usize, iters: u64) -> R<String> {
    use cudarc::driver::sys;
    let ctx = cuda::open(dev).map_err(|e| e.to_string())?;
    let module = cuda::load(&ctx, pshmem_tests::RING_TEST_KERNELS).map_err(|e| e.to_string())?;
    let f: Kernel<MailboxArgs> =
        Kernel::load(&ctx, &module, "pshmem_mailbox").map_err(|e| e.to_string())?;
    // Two 8-byte words on separate lines of pinned, device-mapped host memory (the same kind of
    // memory as the ring).
    let (ring, _) = cuda::gpu_ring(&ctx, 2).map_err(|e| e.to_string())?;
    let (_, ctrl) = ring.raw_parts();
    let host = ctrl.as_ptr().cast::<u64>();
    // SAFETY: the control block is 256 bytes; words 16 and 24 (the `completed` and `error` lines,
    // unused without a consumer) are in it.
    let (to_cpu, to_gpu) = unsafe { (host.add(16), host.add(24)) };
    let mut dev_base = 0u64;
    // SAFETY: the control block lies in a DEVICEMAP allocation; out-pointer for its device
    // address.
    let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev_base, host.cast(), 0) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuMemHostGetDevicePointer: {r:?}"));
    }
    let (d_cpu, d_gpu) = (dev_base + 128, dev_base + 192);
    let (cpu_addr, gpu_addr) = (to_cpu as usize, to_gpu as usize);
    let echo = std::thread::spawn(move || {
        let (a, b) = (cpu_addr as *const u64, gpu_addr as *mut u64);
        let mut last = 0u64;
        let t0 = Instant::now();
        loop {
            // SAFETY: pinned words that live until the ring is dropped, after this thread is
            // joined; volatile: the GPU writes `a`.
            let v = unsafe { std::ptr::read_volatile(a) };
            if v == u64::MAX || t0.elapsed() > Duration::from_secs(60) {
                break;
            }
            if v != last {
                last = v;
                std::sync::atomic::fence(Ordering::Release);
                // SAFETY: as above; the GPU reads `b`.
                unsafe { std::ptr::write_volatile(b, v) };
            }
            std::hint::spin_loop();
        }
    });
    let stream = ctx.default_stream();
    let cycles = stream
        .alloc_zeros::<u64>(iters as usize)
        .map_err(|e| e.to_string())?;
    let args = MailboxArgs {
        to_cpu: d_cpu,
        to_gpu: d_gpu,
        iters,
        cycles: cycles.device_ptr(&stream).0,
    };
    // SAFETY: two mapped host words, `iters` results.
    unsafe { f.launch((1, 1), 1, stream.cu_stream(), args) }.map_err(|e| format!("launch: {e}"))?;
    stream.synchronize().map_err(|e| e.to_string())?;
    echo.join()
        .map_err(|_| "echo thread panicked".to_string())?;
    let mut c = stream.clone_dtoh(&cycles).map_err(|e| e.to_string())?;
    drop(ring);
    c.sort_unstable();
    let khz = clock_khz(dev)?;
    let us = |cyc: u64| cyc as f64 / f64::from(khz) * 1e3;
    Ok(format!(
        "OK mailbox iters={iters} median_us={:.2} p10_us={:.2} p90_us={:.2}",
        us(c[c.len() / 2]),
        us(c[c.len() / 10]),
        us(c[c.len() * 9 / 10])
    ))
}

fn clock_khz(dev: usize) -> R<i32> {
    use cudarc::driver::{result, sys::CUdevice_attribute as A};
    let d = result::device::get(dev as i32).map_err(|e| e.to_string())?;
    // SAFETY: `d` came from cuDeviceGet.
    unsafe { result::device::get_attribute(d, A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE) }
        .map_err(|e| e.to_string())
}

fn ring_latency(dev: usize, iters: u64) -> R<String> {
    let ctx = cuda::open(dev).map_err(|e| e.to_string())?;
    let module = cuda::load(&ctx, pshmem_tests::RING_TEST_KERNELS).map_err(|e| e.to_string())?;
    let f: Kernel<RingRoundtripArgs> =
        Kernel::load(&ctx, &module, "pshmem_ring_roundtrip").map_err(|e| e.to_string())?;
    let (ring, handle) = cuda::gpu_ring(&ctx, 1024).map_err(|e| e.to_string())?;
    // Spin: measure the path, not the back-off.
    let pc = ProxyConfig {
        idle_after: Duration::ZERO,
        ..ProxyConfig::default()
    };
    let proxy = InstantProxy::spawn(vec![ring], pc).map_err(|e| e.to_string())?;
    let stream = ctx.default_stream();
    let cycles = stream
        .alloc_zeros::<u64>(iters as usize)
        .map_err(|e| e.to_string())?;
    let status = stream.alloc_zeros::<u64>(1).map_err(|e| e.to_string())?;
    let args = RingRoundtripArgs {
        r: handle,
        iters,
        cycles: cycles.device_ptr(&stream).0,
        status: status.device_ptr(&stream).0,
        pe: 1,
        _pad: 0,
    };
    let t0 = Instant::now();
    // SAFETY: `cycles` holds `iters` words, `status` one; the ring lives until the end.
    unsafe { f.launch((1, 1), 1, stream.cu_stream(), args) }.map_err(|e| format!("launch: {e}"))?;
    stream.synchronize().map_err(|e| e.to_string())?;
    let wall_us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    proxy.proxy.stop().map_err(|e| e.to_string())?;
    let st = stream.clone_dtoh(&status).map_err(|e| e.to_string())?;
    if st[0] != 0 {
        return Err(format!("ring error word {:#x}", st[0]));
    }
    let mut c = stream.clone_dtoh(&cycles).map_err(|e| e.to_string())?;
    c.sort_unstable();
    let khz = clock_khz(dev)?;
    let us = |cyc: u64| cyc as f64 / f64::from(khz) * 1e3;
    Ok(format!(
        "OK ring-latency iters={iters} median_us={:.2} p10_us={:.2} p90_us={:.2} wall_us_per_iter={wall_us:.2} clock_khz={khz}",
        us(c[c.len() / 2]),
        us(c[c.len() / 10]),
        us(c[c.len() * 9 / 10])
    ))
}

pshmem_transport::hold_signals_through_load!();

fn main() -> ExitCode {
    pshmem_env::init_logging();
    let cli = Cli::parse();
    let dev = cli.device;
    if let Err(why) = cuda::devices().map_err(|e| e.to_string()).and_then(|d| {
        if d.len() > dev {
            Ok(())
        } else {
            Err(format!("no CUDA device {dev} ({} found)", d.len()))
        }
    }) {
        println!("SKIP pshmem-gpu-tests: {why}");
        return ExitCode::SUCCESS;
    }
    let res = match cli.cmd {
        Cmd::RingStress {
            blocks,
            threads,
            per_warp,
            slots,
        } => ring_stress(dev, blocks, threads, per_warp, slots),
        Cmd::RingRate {
            blocks,
            threads,
            per_warp,
            slots,
            proxies,
            rings_per_proxy,
        } => ring_rate(
            dev,
            blocks,
            threads,
            per_warp,
            slots,
            proxies,
            rings_per_proxy,
        ),
        Cmd::Mailbox { iters } => mailbox(dev, iters),
        Cmd::RingLatency { iters } => ring_latency(dev, iters),
        Cmd::GpuOps { pes, same_gpu } => gpu_ops(pes, same_gpu),
        Cmd::GpuOpsRank => rank(api::ops_rank),
        Cmd::GpuKill => gpu_kill(),
        Cmd::GpuKillRank { victim } => rank(|s| api::kill_rank(s, victim)),
        Cmd::MpsCheck { expect_warning } => mps_check(expect_warning),
        Cmd::GpuInitRank => gpu_init_rank(),
    };
    match res {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("ERR {e}");
            ExitCode::FAILURE
        }
    }
}
