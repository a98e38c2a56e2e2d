//! `pshmrun -n 2 -- fabric-bench [--provider tcp]`: write bandwidth (64 B … 64 MiB) and 8-byte
//! write latency through the safe transport layer, beside the same operations written against
//! libfabric's C API (c/fabric_raw.c), in one run. The ceiling the runtime will be compared to.
//! Within each repetition of a size the two sides alternate chunk by chunk (ABBA, about 16 MiB a
//! chunk), and the latency ping-pongs in alternating blocks, so that both sides see the same
//! moments of a noisy machine; ratios and differences are medians over repetitions of the pairs.
//!
//! By default (`--baseline shared`) the C code posts on the endpoint the safe layer opened: the
//! same connection, completion queue and registered buffer, so the two differ only in the code
//! that posts and polls — the layer's cost. With `--baseline separate` the C program opens its
//! own endpoint, fabric to registration; over loopback TCP two connections then differ by
//! themselves (in one run on the device machine every one of 9 pairs at 128 KiB favoured one
//! connection by 16 %), which that comparison cannot tell from the layer's cost.

use std::ffi::{CStr, CString, c_char, c_int, c_void};

use clap::Parser;
use pshmem_benches::{
    machine, median, paired_ratio, pow2_sizes,
    raw::{FLAG_AREA, RawPair},
    size_label,
};
use pshmem_bootstrap::Bootstrap;
use pshmem_libfabric_sys as sys;

#[repr(C)]
struct Craw {
    _private: [u8; 0],
}

type AllgatherFn = extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void) -> c_int;

unsafe extern "C" {
    fn craw_open(
        prov: *const c_char,
        node: *const c_char,
        rank: c_int,
        nranks: c_int,
        len: usize,
        gpu_buf: *mut c_void,
        dev: c_int,
        allgather: AllgatherFn,
        ctx: *mut c_void,
        err: *mut c_char,
        errlen: usize,
    ) -> *mut Craw;
    #[allow(clippy::too_many_arguments)]
    fn craw_attach(
        ep: *mut sys::fid_ep,
        cq: *mut sys::fid_cq,
        peer: sys::fi_addr_t,
        local: *mut u8,
        len: usize,
        desc: *mut c_void,
        remote_addr: u64,
        remote_key: u64,
        inject: usize,
        flags: u64,
        rank: c_int,
        off: usize,
    ) -> *mut Craw;
    fn craw_progress(c: *mut Craw) -> c_int;
    fn craw_bw(c: *mut Craw, size: usize, count: usize, window: usize) -> f64;
    fn craw_lat(c: *mut Craw, iters: usize) -> f64;
    fn craw_wlat(c: *mut Craw, iters: usize) -> f64;
    fn craw_error(c: *mut Craw) -> *const c_char;
    fn craw_close(c: *mut Craw);
}

/// Allgather through the bootstrap for the C side. Never unwinds into C.
extern "C" fn allgather(
    ctx: *mut c_void,
    mine: *const c_void,
    len: usize,
    all: *mut c_void,
) -> c_int {
    std::panic::catch_unwind(|| {
        // SAFETY: ctx is the &Bootstrap passed to craw_open; mine has len bytes; all has room
        // for world_size * len bytes (the C side sizes it for 2 ranks).
        let (bs, mine) = unsafe {
            (
                &*(ctx as *const Bootstrap),
                std::slice::from_raw_parts(mine.cast::<u8>(), len),
            )
        };
        match bs.allgather(mine) {
            Ok(blocks) => {
                let flat = blocks.concat();
                // SAFETY: as above.
                unsafe {
                    std::ptr::copy_nonoverlapping(flat.as_ptr(), all.cast::<u8>(), flat.len())
                };
                0
            }
            Err(_) => -1,
        }
    })
    .unwrap_or(-1)
}

#[derive(Parser)]
struct Args {
    /// tcp, shm or any libfabric provider name.
    #[arg(long, default_value = "tcp")]
    provider: String,
    #[arg(long, default_value_t = 64)]
    min: usize,
    #[arg(long, default_value_t = 64 << 20)]
    max: usize,
    /// Writes in flight.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Repetitions per size (each interleaves both sides chunk by chunk).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Ping-pong iterations per side and repetition.
    #[arg(long, default_value_t = 20000)]
    lat_iters: usize,
    /// Blocks the ping-pongs of one repetition are split into, alternating between the sides.
    #[arg(long, default_value_t = 10)]
    lat_blocks: usize,
    /// Bytes of one bandwidth chunk; chunks alternate between the sides within a repetition.
    #[arg(long, default_value_t = 16 << 20)]
    chunk: usize,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// `shared`: the C code posts on the safe layer's endpoint; `separate`: it opens its own.
    #[arg(long, value_enum, default_value_t = Baseline::Shared)]
    baseline: Baseline,
    /// The provider's own ceiling: the C program alone (its own endpoint, no safe layer in the
    /// process): write bandwidth and the time of one 8-byte write to its completion.
    #[arg(long)]
    c_only: bool,
    /// As --c-only on GPU memory: the buffer is CUDA memory (rank r on device r mod the
    /// devices) registered as FI_HMEM_CUDA (the CPU cannot poll it for a ping-pong, hence the
    /// write-to-completion time).
    #[arg(long)]
    gpu: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Baseline {
    Shared,
    Separate,
}

/// A barrier during which this rank keeps its endpoints progressing (a shared one through the
/// safe layer only: nothing of the C side's is outstanding between runs).
fn barrier(bs: &Bootstrap, r: &mut RawPair, c: *mut Craw, shared: bool) {
    std::thread::scope(|s| {
        let h = s.spawn(|| bs.barrier());
        while !h.is_finished() {
            r.poll();
            if !shared {
                // SAFETY: c is the open C endpoint.
                unsafe { craw_progress(c) };
            }
        }
        h.join().expect("barrier thread").expect("barrier");
    });
}

/// Device memory for the C program's registration (`--gpu`), freed on drop.
struct GpuBuf {
    _ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    _mem: cudarc::driver::CudaSlice<u8>,
    ptr: u64,
}

impl GpuBuf {
    fn new(dev: usize, len: usize) -> Self {
        use cudarc::driver::DevicePtr;
        let ctx = cudarc::driver::CudaContext::new(dev).expect("CUDA device");
        let stream = ctx.default_stream();
        let mem = stream.alloc_zeros::<u8>(len).expect("device buffer");
        let ptr = mem.device_ptr(&stream).0;
        Self {
            _ctx: ctx,
            _mem: mem,
            ptr,
        }
    }
}

/// A barrier during which this rank progresses the C endpoint alone.
fn c_barrier(bs: &Bootstrap, c: *mut Craw) {
    std::thread::scope(|s| {
        let h = s.spawn(|| bs.barrier());
        while !h.is_finished() {
            // SAFETY: c is the open C endpoint.
            unsafe { craw_progress(c) };
        }
        h.join().expect("barrier thread").expect("barrier");
    });
}

/// Opens the C program's own endpoint on host memory, or on the CUDA memory `(address,
/// device)` given; panics with the provider's reason.
fn open_own(
    bs: &Bootstrap,
    (prov, node): (&str, Option<&str>),
    len: usize,
    gpu: Option<(u64, usize)>,
) -> *mut Craw {
    let cprov = CString::new(prov).expect("name");
    let cnode = node.map(|n| CString::new(n).expect("node"));
    let mut err = [0 as c_char; 256];
    let (buf, dev) = gpu.map_or((std::ptr::null_mut(), 0), |(p, d)| (p as *mut c_void, d));
    // SAFETY: all pointers are valid for the call; the bootstrap outlives the endpoint; a GPU
    // buffer outlives it (the caller closes the endpoint first).
    let c = unsafe {
        craw_open(
            cprov.as_ptr(),
            cnode.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
            bs.rank() as c_int,
            2,
            len,
            buf,
            dev as c_int,
            allgather,
            (bs as *const Bootstrap).cast_mut().cast(),
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if c.is_null() {
        // SAFETY: err is NUL-terminated by craw_open.
        let why = unsafe { CStr::from_ptr(err.as_ptr()) };
        panic!("C baseline: {}", why.to_string_lossy());
    }
    c
}

/// Panics with the C endpoint's last error.
fn c_failed(c: *mut Craw) -> ! {
    // SAFETY: c is open; the error text is NUL-terminated.
    let why = unsafe { CStr::from_ptr(craw_error(c)) };
    panic!("C baseline: {}", why.to_string_lossy())
}

/// `--c-only`: write bandwidth of the C program alone, size by size (rank 0 writes).
fn c_bandwidth(a: &Args, bs: &Bootstrap, c: *mut Craw) -> Vec<serde_json::Value> {
    let rank = bs.rank();
    let mut rows = Vec::new();
    for size in pow2_sizes(a.min, a.max) {
        let count = (256usize << 20).div_ceil(size).clamp(8, 20_000);
        let mut cs = Vec::new();
        for _ in 0..a.reps {
            c_barrier(bs, c);
            if rank == 0 {
                // SAFETY: c is open.
                let t = unsafe { craw_bw(c, size, count, a.window) };
                if t <= 0.0 {
                    c_failed(c);
                }
                cs.push((size * count) as f64 / t / 1e9);
            }
        }
        if rank == 0 {
            let cm = median(&cs);
            println!("| {} | {cm:.3} |", size_label(size));
            rows.push(
                serde_json::json!({"size": size, "c_gbps": cm, "c_runs": cs, "writes": count}),
            );
        }
    }
    rows
}

/// `--c-only`, `--gpu`: the C program alone, on host or GPU memory: write bandwidth (rank 0
/// writes) and the time of one 8-byte write to its completion (rank 1 progresses its endpoint
/// in the barriers).
fn c_alone(a: &Args, bs: &Bootstrap, (prov, node): (&str, Option<&str>), len: usize) {
    let rank = bs.rank();
    // (cudarc loads the driver library on first use: only with --gpu.)
    let dev = if a.gpu {
        rank % cudarc::driver::CudaContext::device_count().map_or(1, |n| n.max(1) as usize)
    } else {
        0
    };
    let gpu = a.gpu.then(|| GpuBuf::new(dev, len));
    let c = open_own(bs, (prov, node), len, gpu.as_ref().map(|g| (g.ptr, dev)));
    let memory = if a.gpu {
        format!("GPU buffers (FI_HMEM_CUDA, rank 0 on device {dev})")
    } else {
        "host buffers".into()
    };
    if rank == 0 {
        println!(
            "# {prov}, C API alone, {memory} — write bandwidth, window {}, median of {}\n\
             | size | C API GB/s |\n| --- | --- |",
            a.window, a.reps
        );
    }
    let rows = c_bandwidth(a, bs, c);
    let mut lat = Vec::new();
    for _ in 0..a.reps {
        c_barrier(bs, c);
        if rank == 0 {
            // SAFETY: c is open.
            let t = unsafe { craw_wlat(c, a.lat_iters) };
            if t <= 0.0 {
                c_failed(c);
            }
            lat.push(t * 1e6);
        }
    }
    c_barrier(bs, c);
    if rank == 0 {
        let m = median(&lat);
        println!("\n8-byte write to its completion ({memory}): {m:.2} µs");
        if let Some(path) = &a.json {
            let doc = serde_json::json!({
                "benchmark": "fabric-bench --c-only", "machine": machine(), "provider": prov,
                "memory": memory, "window": a.window, "reps": a.reps, "bandwidth": rows,
                "write_completion_us": m, "write_completion_runs": lat, "iters": a.lat_iters,
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json"))
                .expect("write json");
        }
    }
    // SAFETY: closed once, before the GPU buffer it registered is freed.
    unsafe { craw_close(c) };
    drop(gpu);
}

pshmem_transport::hold_signals_through_load!();

fn main() {
    pshmem_env::init_logging();
    let a = Args::parse();
    let bs = Bootstrap::from_env().expect("bootstrap");
    assert_eq!(
        bs.world_size(),
        2,
        "fabric-bench runs on exactly 2 ranks (pshmrun -n 2)"
    );
    let rank = bs.rank();
    let prov = if a.provider == "tcp" {
        "tcp;ofi_rxm".to_string()
    } else {
        a.provider.clone()
    };
    let node = if prov == "shm" {
        None
    } else {
        Some("127.0.0.1".to_string())
    };

    let len = a.max.max(4096);
    if a.c_only || a.gpu {
        c_alone(&a, &bs, (&prov, node.as_deref()), len);
        bs.finalize().expect("finalize");
        return;
    }
    // Our safe layer.
    let mut r = RawPair::open(&bs, &prov, node.as_deref(), len).expect("raw transport");
    let caps = r.caps().clone();

    // The C baseline.
    let shared = a.baseline == Baseline::Shared;
    let h = r.handles().expect("raw handles");
    // SAFETY: a shared endpoint's handles stay valid while `r` lives, which outlives `c`.
    let c = unsafe {
        if shared {
            craw_attach(
                h.ep,
                h.cq,
                h.peer,
                h.local,
                h.local_len,
                h.local_desc,
                h.remote_addr,
                h.remote_key,
                h.inject,
                h.flags,
                rank as c_int,
                FLAG_AREA,
            )
        } else {
            open_own(&bs, (&prov, node.as_deref()), len, None)
        }
    };

    let mut rows = Vec::new();
    if rank == 0 {
        println!(
            "# {} — write bandwidth, window {}, median of {} alternating runs (ratio: median of the pairs); C baseline on {}",
            caps.name,
            a.window,
            a.reps,
            if shared {
                "the safe layer's endpoint"
            } else {
                "its own endpoint"
            }
        );
        println!(
            "| size | safe layer GB/s | C API GB/s | paired ratio |\n| --- | --- | --- | --- |"
        );
    }
    for size in pow2_sizes(a.min, a.max) {
        // 256 MiB per side and repetition, between 8 and 20 000 writes (small sizes would
        // otherwise take minutes), in chunks of about `--chunk` bytes that alternate between the
        // two sides (ABBA) through the repetition: both see the same moments of the machine.
        let count = (256usize << 20).div_ceil(size).clamp(8, 20_000);
        let chunk = (a.chunk / size).clamp(1, count);
        let (mut rs, mut cs) = (Vec::new(), Vec::new());
        for rep in 0..a.reps {
            barrier(&bs, &mut r, c, shared);
            if rank == 0 {
                let (mut ts, mut tc, mut left, mut k) = (0.0, 0.0, count, rep);
                while left > 0 {
                    let n = chunk.min(left);
                    for which in [k % 2, 1 - k % 2] {
                        if which == 0 {
                            ts += r.bw(size, n, a.window);
                        } else {
                            // SAFETY: c is open.
                            let s = unsafe { craw_bw(c, size, n, a.window) };
                            if s <= 0.0 {
                                // SAFETY: c is open; the error text is NUL-terminated.
                                let why = unsafe { CStr::from_ptr(craw_error(c)) };
                                panic!("C baseline: {}", why.to_string_lossy());
                            }
                            tc += s;
                        }
                    }
                    left -= n;
                    k += 1;
                }
                let bytes = (size * count) as f64;
                rs.push(bytes / ts / 1e9);
                cs.push(bytes / tc / 1e9);
            }
            barrier(&bs, &mut r, c, shared);
        }
        if rank == 0 {
            let (rm, cm, pr) = (median(&rs), median(&cs), paired_ratio(&rs, &cs));
            println!("| {} | {rm:.3} | {cm:.3} | {:.3} |", size_label(size), pr);
            rows.push(
                serde_json::json!({"size": size, "safe_gbps": rm, "c_gbps": cm, "ratio": pr,
                "safe_runs": rs, "c_runs": cs, "chunk_writes": chunk, "writes": count}),
            );
        }
    }
    // Latency: each repetition alternates blocks of ping-pongs between the two sides (ABBA);
    // the cost is the median over repetitions of the paired difference.
    let blocks = a.lat_blocks.max(1);
    let per_block = a.lat_iters.div_ceil(blocks);
    let (mut rl, mut cl) = (Vec::new(), Vec::new());
    for rep in 0..a.reps {
        barrier(&bs, &mut r, c, shared);
        let (mut ts, mut tc) = (0.0, 0.0);
        for k in 0..blocks {
            for which in [(rep + k) % 2, 1 - (rep + k) % 2] {
                if which == 0 {
                    ts += r.lat(rank, per_block);
                } else {
                    // SAFETY: c is open.
                    let s = unsafe { craw_lat(c, per_block) };
                    assert!(s > 0.0, "C latency failed");
                    tc += s;
                }
            }
        }
        rl.push(ts / blocks as f64 * 1e6);
        cl.push(tc / blocks as f64 * 1e6);
    }
    barrier(&bs, &mut r, c, shared);
    if rank == 0 {
        let (rm, cm) = (median(&rl), median(&cl));
        let diffs: Vec<f64> = rl.iter().zip(&cl).map(|(x, y)| x - y).collect();
        let diff = median(&diffs);
        println!(
            "\n8-byte write ping-pong, half round trip: safe layer {rm:.2} µs, C API {cm:.2} µs, \
             paired difference {diff:+.2} µs"
        );
        if let Some(path) = &a.json {
            let doc = serde_json::json!({
                "benchmark": "fabric-bench", "machine": machine(), "transport": caps.name,
                "baseline": if shared { "shared endpoint" } else { "separate endpoint" },
                "window": a.window, "reps": a.reps, "bandwidth": rows,
                "interleave_bytes": a.chunk,
                "latency": {"safe_us": rm, "c_us": cm, "diff_us": diff, "diff_of_medians_us": rm - cm,
                    "safe_runs": rl, "c_runs": cl, "iters": a.lat_iters, "blocks": blocks},
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).expect("json"))
                .expect("write json");
        }
    }
    // SAFETY: closed once; nothing uses c afterwards.
    unsafe { craw_close(c) };
    drop(r);
    bs.finalize().expect("finalize");
}
