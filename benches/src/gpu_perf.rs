//! pshmem-perf's device-initiated tests: the same measurements as the host tests, issued by
//! kernels through the device API (NVLink/IPC to same-host peers, or the ring and the
//! host-staged proxy under `PSHMEM_DISABLE_P2P=1`). PE 0 drives PE 1; others join barriers.
//! Kernel times come from CUDA events or the GPU's global timer, never from host wall clocks.

// Kernel launches go through the CUDA ABI (each with its SAFETY note).
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaModule, CudaStream, DevicePtr};
use pshmem::{
    Coll, DType, Pshmem, RedOp, Stream,
    cuda::{Kernel, KernelArgs},
    gpu::Gpu,
    team::TEAM_WORLD,
};

use crate::kargs::{AmoArgs, BarrierArgs, BwArgs, CollArgs, MsgRateArgs, PPingpongArgs, SpinArgs};

/// One measured figure (as the host tests' rows).
#[derive(Debug)]
pub struct GpuRow {
    /// Test name.
    pub test: &'static str,
    /// Bytes (0: none).
    pub size: usize,
    /// Unit of the samples.
    pub unit: &'static str,
    /// Samples.
    pub samples: Vec<f64>,
    /// Blocks of 512 threads of the bandwidth kernel (0: not a bandwidth test).
    pub blocks: u32,
}

/// Grid shapes of the bandwidth tests (blocks of 512 threads, each block one slice of the
/// message, as NVSHMEM's perftests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// size / 64 KiB blocks, 1 to 32.
    Auto,
    /// The NVSHMEM comparison's shapes: 1 block below 1 MiB, 32 from 1 MiB.
    Nvshmem,
    /// The fastest of 1, 4, 8, 16, 32, 64 and 132 blocks.
    Best,
}

impl Shape {
    /// The grids to try for `size` bytes.
    pub fn grids(self, size: usize) -> Vec<u32> {
        match self {
            Shape::Auto => vec![(size / 65536).clamp(1, 32) as u32],
            Shape::Nvshmem => vec![if size < 1 << 20 { 1 } else { 32 }],
            Shape::Best => vec![1, 4, 8, 16, 32, 64, 132],
        }
    }
}

/// What to run.
#[derive(Debug)]
pub struct GpuPlan<'a> {
    /// Tests (names as the host tests).
    pub tests: &'a [String],
    /// Message sizes of the bandwidth tests.
    pub sizes: &'a [usize],
    /// Samples per figure.
    pub samples: usize,
    /// Operations per sample (bandwidth: messages, fewer for large ones; latency: round trips).
    pub reps: usize,
    /// Grid shapes of the bandwidth tests.
    pub shape: Shape,
    /// Collectives through the host's on-stream form (`ByAddr::collective` with a stream) instead of
    /// a one-block kernel of the device API.
    pub coll_stream: bool,
}

type R<T> = Result<T, String>;

/// Kernel `name` of pshmem-perf's module.
fn kernel<A: KernelArgs>(g: &Gpu, m: &Arc<CudaModule>, name: &'static str) -> R<Kernel<A>> {
    Kernel::load(g.context(), m, name).map_err(err)
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Milliseconds between two events recorded around `launch` on `st`. A 50 µs spinner runs
/// first, so that the start event is processed after the host has enqueued the kernel: the
/// host's launch cost stays out of the figure (nvshmem_bench.cu does the same).
fn timed(st: &Arc<CudaStream>, spin: &Kernel<SpinArgs>, launch: impl FnOnce() -> R<()>) -> R<f64> {
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    // SAFETY: no memory.
    unsafe { spin.launch((1, 1), 1, st.cu_stream(), SpinArgs { ns: 50_000 }) }.map_err(err)?;
    let a = st.record_event(flags).map_err(err)?;
    launch()?;
    let b = st.record_event(flags).map_err(err)?;
    b.synchronize().map_err(err)?;
    Ok(f64::from(a.elapsed_ms(&b).map_err(err)?))
}

/// Runs the device-initiated tests; rows on PE 0 only.
pub fn run(s: &Pshmem, plan: &GpuPlan<'_>) -> R<Vec<GpuRow>> {
    let g = s.gpu_init().map_err(err)?;
    let me = s.my_pe();
    let m = g.load(crate::PERF_KERNELS).map_err(err)?;
    // Every kernel fetched before any runs (see Gpu::load).
    let k_bw: Kernel<BwArgs> = kernel(g, &m, "perf_bw")?;
    let k_pp: Kernel<PPingpongArgs> = kernel(g, &m, "perf_p_pingpong")?;
    let k_amo: Kernel<AmoArgs> = kernel(g, &m, "perf_amo")?;
    let k_rate: Kernel<MsgRateArgs> = kernel(g, &m, "perf_msg_rate")?;
    let k_bar: Kernel<BarrierArgs> = kernel(g, &m, "perf_barrier")?;
    let k_spin: Kernel<SpinArgs> = kernel(g, &m, "perf_spin")?;
    let k_coll: Kernel<CollArgs> = kernel(g, &m, "perf_coll")?;
    let max = plan.sizes.iter().copied().max().unwrap_or(8).max(64);
    let src = s.gpu_malloc(max).map_err(err)?;
    let dst = s.gpu_malloc(max).map_err(err)?;
    let flags = s.gpu_calloc(4096 * 8).map_err(err)?;
    g.copy_in(src, &vec![0x5a; max]).map_err(err)?;
    let st = g.stream().clone();
    let ns = st.alloc_zeros::<u64>(1).map_err(err)?;
    // The result word's device address (everything here runs on `st`, so the slice's own
    // stream tracking has nothing to order).
    let ns_at = ns.device_ptr(&st).0;
    let raw = st.cu_stream();
    let mut rows = Vec::new();
    let barrier = || s.barrier_all().map_err(err);
    let read_ns =
        |st: &Arc<CudaStream>| -> R<f64> { Ok(st.clone_dtoh(&ns).map_err(err)?[0] as f64) };
    for t in plan.tests {
        match t.as_str() {
            "put_bw" | "get_bw" => {
                let get = i32::from(t == "get_bw");
                let name = if get == 1 { "get_bw" } else { "put_bw" };
                for &size in plan.sizes {
                    // Fewer repetitions of large messages: about 1 GiB moved per sample.
                    let reps = plan.reps.min((1 << 30) / size.max(1)).max(1);
                    let mut best: (f64, Vec<f64>, u32) = (0.0, Vec::new(), 0);
                    if me == 0 {
                        for blocks in plan.shape.grids(size) {
                            let args = BwArgs {
                                dst: g.ptr(dst),
                                src: g.ptr(src),
                                size: size as u64,
                                reps: reps as i32,
                                pe: 1,
                                get,
                                _pad: 0,
                            };
                            let mut samples = Vec::new();
                            for i in 0..plan.samples + 1 {
                                let ms = timed(&st, &k_spin, || {
                                    // SAFETY: symmetric buffers of at least `size` bytes.
                                    unsafe { k_bw.launch((blocks, 1), 512, raw, args) }.map_err(err)
                                })?;
                                if i > 0 {
                                    samples.push((reps * size) as f64 / (ms * 1e-3) / 1e9);
                                }
                            }
                            let m = crate::median(&samples);
                            if m > best.0 {
                                best = (m, samples, blocks);
                            }
                        }
                        g.check(name).map_err(err)?;
                    }
                    barrier()?;
                    rows.push(GpuRow {
                        test: name,
                        size,
                        unit: "GB/s",
                        samples: best.1,
                        blocks: best.2,
                    });
                }
            }
            "p_latency" => {
                let mut samples = Vec::new();
                for _ in 0..plan.samples + 1 {
                    let mut cur = [0u8; 8];
                    g.copy_out(flags, &mut cur).map_err(err)?;
                    let base = u64::from_le_bytes(cur);
                    barrier()?;
                    if me < 2 {
                        let args = PPingpongArgs {
                            flag: g.ptr(flags),
                            base,
                            ns: ns_at,
                            iters: plan.reps as i32,
                            me: me as i32,
                        };
                        // SAFETY: one symmetric word, one result word.
                        unsafe { k_pp.launch((1, 1), 1, raw, args) }.map_err(err)?;
                        g.synchronize(&st, "p_latency").map_err(err)?;
                        if me == 0 {
                            samples.push(read_ns(&st)? / 1e3 / plan.reps as f64 / 2.0);
                        }
                    }
                    barrier()?;
                }
                // The first run warms up.
                if !samples.is_empty() {
                    samples.remove(0);
                }
                rows.push(GpuRow {
                    test: "p_latency",
                    size: 8,
                    unit: "us",
                    samples,
                    blocks: 0,
                });
            }
            "atomic_latency" => {
                let mut samples = Vec::new();
                if me == 0 {
                    let args = AmoArgs {
                        word: g.ptr(flags + 8 * 64),
                        ns: ns_at,
                        iters: plan.reps as i32,
                        pe: 1,
                    };
                    for i in 0..plan.samples + 1 {
                        // SAFETY: one symmetric word, one result word.
                        unsafe { k_amo.launch((1, 1), 1, raw, args) }.map_err(err)?;
                        g.synchronize(&st, "atomic_latency").map_err(err)?;
                        if i > 0 {
                            samples.push(read_ns(&st)? / 1e3 / plan.reps as f64);
                        }
                    }
                }
                barrier()?;
                rows.push(GpuRow {
                    test: "atomic_latency (fetch_add)",
                    size: 8,
                    unit: "us",
                    samples,
                    blocks: 0,
                });
            }
            "msg_rate" => {
                let mut samples = Vec::new();
                let (blocks, threads, per) = (8u32, 256u32, 64i32);
                if me == 0 {
                    let args = MsgRateArgs {
                        dst: g.ptr(flags),
                        per_thread: per,
                        pe: 1,
                    };
                    for i in 0..plan.samples + 1 {
                        let ms = timed(&st, &k_spin, || {
                            // SAFETY: 4096 symmetric words.
                            unsafe { k_rate.launch((blocks, 1), threads, raw, args) }.map_err(err)
                        })?;
                        if i > 0 {
                            let ops = f64::from(blocks * threads) * f64::from(per);
                            samples.push(ops / (ms * 1e-3) / 1e6);
                        }
                    }
                    g.check("msg_rate").map_err(err)?;
                }
                barrier()?;
                rows.push(GpuRow {
                    test: "msg_rate (8 B p)",
                    size: 8,
                    unit: "Mops/s",
                    samples,
                    blocks: 0,
                });
            }
            "barrier_latency" => {
                let mut samples = Vec::new();
                for i in 0..plan.samples + 1 {
                    barrier()?;
                    let args = BarrierArgs {
                        ns: ns_at,
                        iters: plan.reps as i32,
                        _pad: 0,
                    };
                    // SAFETY: one result word.
                    unsafe { k_bar.launch((1, 1), 1, raw, args) }.map_err(err)?;
                    g.synchronize(&st, "barrier_latency").map_err(err)?;
                    if i > 0 && me == 0 {
                        samples.push(read_ns(&st)? / 1e3 / plan.reps as f64);
                    }
                }
                barrier()?;
                rows.push(GpuRow {
                    test: "barrier_latency",
                    size: 0,
                    unit: "us",
                    samples,
                    blocks: 0,
                });
            }
            name @ ("sync_latency"
            | "bcast_latency"
            | "fcollect_latency"
            | "alltoall_latency"
            | "reduce_latency"
            | "reducescatter_latency") => {
                let kind = crate::COLLECTIVES
                    .iter()
                    .position(|&c| c == name)
                    .expect("a collective");
                let name: &'static str = crate::COLLECTIVES[kind];
                let kind = kind as i32;
                let sizes: &[usize] = if kind == 0 { &[0] } else { plan.sizes };
                let n = s.n_pes();
                for &size in sizes {
                    // Reductions move whole floats; every size is a multiple of 4 from 4 B.
                    let size = if kind >= 4 { size.max(4) / 4 * 4 } else { size };
                    let (cs, cd) = (
                        s.gpu_malloc((size * n).max(64)).map_err(err)?,
                        s.gpu_malloc((size * n).max(64)).map_err(err)?,
                    );
                    let reps = plan.reps.min((256 << 20) / size.max(1)).max(1);
                    let mut samples = Vec::new();
                    if plan.coll_stream && kind > 0 {
                        let coll = match kind {
                            1 => Coll::Broadcast { root: 0 },
                            2 => Coll::Fcollect,
                            3 => Coll::Alltoall,
                            4 => Coll::Reduce(DType::F32, RedOp::Sum),
                            _ => Coll::ReduceScatter(DType::F32, RedOp::Sum),
                        };
                        let count = if kind >= 4 { size / 4 } else { size };
                        for i in 0..plan.samples + 1 {
                            barrier()?;
                            let ms = timed(&st, &k_spin, || {
                                for _ in 0..reps {
                                    // SAFETY: the runtime's own stream, live while `g` is.
                                    let on = unsafe { Stream::from_raw(st.cu_stream() as u64) };
                                    s.by_addr()
                                        .collective(
                                            coll,
                                            TEAM_WORLD,
                                            (g.ptr(cd), g.ptr(cs)),
                                            count,
                                            Some(on),
                                        )
                                        .map_err(err)?;
                                }
                                Ok(())
                            })?;
                            if i > 0 && me == 0 {
                                samples.push(ms * 1e3 / reps as f64);
                            }
                        }
                        barrier()?;
                        s.gpu_free(cd).map_err(err)?;
                        s.gpu_free(cs).map_err(err)?;
                        rows.push(GpuRow {
                            test: name,
                            size,
                            unit: "us",
                            samples,
                            blocks: 0,
                        });
                        continue;
                    }
                    for i in 0..plan.samples + 1 {
                        barrier()?;
                        let args = CollArgs {
                            dest: g.ptr(cd),
                            src: g.ptr(cs),
                            n: size as u64,
                            ns: ns_at,
                            kind,
                            iters: reps as i32,
                        };
                        // SAFETY: symmetric buffers of n_pes × size bytes and one result word.
                        unsafe { k_coll.launch((1, 1), 512, raw, args) }.map_err(err)?;
                        g.synchronize(&st, name).map_err(err)?;
                        if i > 0 && me == 0 {
                            samples.push(read_ns(&st)? / 1e3 / reps as f64);
                        }
                    }
                    barrier()?;
                    s.gpu_free(cd).map_err(err)?;
                    s.gpu_free(cs).map_err(err)?;
                    rows.push(GpuRow {
                        test: name,
                        size,
                        unit: "us",
                        samples,
                        blocks: 1,
                    });
                }
            }
            other => {
                if me == 0 {
                    println!("# {other}: host-initiated only (skipped in device mode)");
                }
            }
        }
    }
    Ok(if me == 0 { rows } else { Vec::new() })
}
