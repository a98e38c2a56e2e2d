//! The published anchors, the fit of the fabric's two free parameters to them, the check of
//! our stream generator against proxy traces, and the projection of our kernels.

use serde::Serialize;

use crate::{
    fabric::Fabric,
    sim::simulate,
    stream::{Kernels, Op, Pattern, Rings, Routing, Shape, Signalling, System},
};

/// Routing seed of every table (one routing per (GPUs, experts), shared by all systems).
pub const SEED: u64 = 1;

/// UCCL-EP's LL mode on p5en: per-token writes with immediates counted at the receiver, 4 proxy
/// threads per GPU; its kernels' times are its hook-mode send/receive medians (UCCL PR #745:
/// dispatch 40/30 µs, combine 48/47 µs), not fitted.
pub fn uccl() -> System {
    System {
        name: "UCCL-EP (per-token)".into(),
        pattern: Pattern::PerToken,
        flags_per_peer: false,
        dispatch_header: false,
        signalling: Signalling::ReceiverCount,
        threads: 4,
        post_us: 0.3,
        dispatch: Kernels {
            pack_us: 40.0,
            unpack_us: 30.0,
        },
        combine: Kernels {
            pack_us: 48.0,
            unpack_us: 47.0,
        },
        count_msgs: true,
        private_rows: None,
    }
}

/// pplx-garden on p5en (`p2p-all-to-all/src/a2a_worker.rs`, its benchmark's defaults): one
/// bulk write per remote GPU of a row per (token, expert), counted at the receiver; one CPU
/// worker per GPU. Up to 256 rows per peer (`max_private_tokens`) go into private buffers
/// before the count exchange — at 128 tokens all of them, so the exchange gates nothing. The
/// dispatch's writes shard the peer list over the 2 NICs, NIC i to the receiver's NIC i
/// (`GroupTransferRouting::AllDomainsShardPeers`); at EP16 every receiver then takes all its
/// rows on one NIC. Its kernels' time is its EP8 result (NVLink only: 49.7 µs dispatch,
/// 64.2 µs combine) split evenly between send and receive — not fitted.
pub fn pplx() -> System {
    System {
        name: "pplx-garden (per-peer bulk)".into(),
        pattern: Pattern::PerPeer { shard_peers: true },
        flags_per_peer: false,
        dispatch_header: false,
        signalling: Signalling::ReceiverCount,
        threads: 1,
        post_us: 0.3,
        dispatch: Kernels {
            pack_us: 24.85,
            unpack_us: 24.85,
        },
        combine: Kernels {
            pack_us: 32.1,
            unpack_us: 32.1,
        },
        count_msgs: false,
        private_rows: Some(256),
    }
}

/// DeepEP V1 on NVSHMEM's libfabric transport: DeepEP's per-token writes, one proxy thread with
/// a slower post (1.5 µs: no batching), and fence = quiet before every count (EFA is unordered).
/// Kernels as UCCL's (the same DeepEP kernels). Not fitted: compared with its published range.
pub fn deepep_nvshmem() -> System {
    System {
        name: "DeepEP on NVSHMEM (fence = quiet)".into(),
        pattern: Pattern::PerToken,
        signalling: Signalling::FenceQuiet,
        threads: 1,
        post_us: 1.5,
        ..uccl()
    }
}

/// Our kernels' times, µs, each EP rank on an H100 of its own (4 H100s, EP 4, median of the
/// ranks; `scripts/bench-efa-path.sh`, benches/results/efa-path): the send kernels as they run
/// through the proxy (packing and posting descriptors; tcp, so the network is not in them),
/// the receive kernels over NVLink (through the proxy they include the network wait). The
/// earlier inputs (84.3 / 60.1 and 39.1 / 37.5, 2 PEs sharing one H100 under MPS) were
/// pessimistic for a GPU of one's own.
///
/// The dispatch since it sends one put and one flag per peer: those values moved by what the
/// new kernels cost against the old ones side by side on one machine (H200 x4, EP 4, medians
/// of 2 runs × 4 ranks, benches/results/efa-path): −0.5 µs sending through the proxy, +1.0 µs
/// receiving over NVLink (the headers' reads).
pub const OURS_DISPATCH: Kernels = Kernels {
    pack_us: 47.6,
    unpack_us: 20.4,
};
/// See [`OURS_DISPATCH`]. The combine since it sends one put and one flag per peer: the EP 4
/// values measured with the per-expert combine (35.1 + 32.5) moved by what the new kernels
/// cost against the old ones side by side on one machine (H200 x2, EP 2, medians of 2 runs ×
/// 2 ranks, benches/results/efa-path): −1.0 µs sending through the proxy, +3.3 µs receiving
/// over NVLink. Then the receive in channel slices (a warp per 256 channels of a token, its
/// own launch: the hook), side by side the same way (H200 x2, EP 2, 1 run × 2 ranks):
/// −20.4 µs receiving over NVLink (39.3 → 18.9).
pub const OURS_COMBINE: Kernels = Kernels {
    pack_us: 34.1,
    unpack_us: 15.4,
};

/// pshmem.ep's LL kernels: batched (one counted put of every row, the dispatch's led by its
/// header, and one flag per peer, on ring 0) or per-token (a row a write, then the dispatch's
/// header write and a flag per peer, on the receiver's ring), counted at the receiver's
/// proxy; 4 proxy threads
/// (`PSHMEM_GPU_PROXY_THREADS=4`) posting at UCCL's cost (0.3 µs; the registered path was not
/// measured on EFA).
pub fn ours(per_token: bool) -> System {
    System {
        name: if per_token {
            "pshmem.ep per-token".into()
        } else {
            "pshmem.ep batched".into()
        },
        // Both directions packed by sending rank at the receiver (ep/include/pshmem/ep/ll.h):
        // batched, one put and one flag per peer, the dispatch's put led by its header.
        pattern: if per_token {
            Pattern::PerToken
        } else {
            Pattern::PerPeer { shard_peers: false }
        },
        flags_per_peer: true,
        dispatch_header: true,
        signalling: Signalling::ReceiverCount,
        threads: 4,
        post_us: 0.3,
        dispatch: OURS_DISPATCH,
        combine: OURS_COMBINE,
        count_msgs: true,
        private_rows: None,
    }
}

/// pshmem.ep's normal-mode kernels (`ep/include/pshmem/ep/ht.cuh`): 10 channels, windows
/// of 32 tokens, RDMA rings of 128 slots (the defaults of `pshmem.ep.Buffer`), a counted put
/// and a counted tail signal per chunk, 4 proxy threads. Kernel time: measured at EP 2 on one
/// H100 shared by 2 PEs, no network ([`OURS_HT_DISPATCH_US`]); see [`normal`].
pub fn ours_normal() -> System {
    normal(
        "pshmem.ep normal",
        true,
        OURS_HT_DISPATCH_US,
        OURS_HT_COMBINE_US,
    )
}

/// UCCL-EP's normal mode: DeepEP's internode kernels (the same rings and chunks; the tail
/// rides in the chunk's last write as its immediate), 4 proxy threads. Kernel time: its
/// published EP8 result on p5en (NVLink only: 500 µs dispatch, 973 µs combine) — not fitted.
pub fn uccl_normal() -> System {
    normal("UCCL-EP normal (model)", false, 500.0, 973.0)
}

/// A normal-mode system whose kernels take `dispatch_us` and `combine_us` without the
/// network: chunks are ready in proportion as each channel's cursor advances over that time,
/// and after its last chunk lands a receiver needs one more chunk's step (forwarding inside
/// the node and the receiver's copy).
fn normal(name: &str, tail_msgs: bool, dispatch_us: f64, combine_us: f64) -> System {
    let rings = Rings {
        channels: 10,
        chunk: 32,
        slots: 128,
        tail_msgs,
    };
    let step = rings.chunk as f64 / Shape::prefill(256).tokens.div_ceil(rings.channels) as f64;
    System {
        name: name.into(),
        pattern: Pattern::NodeRing(rings),
        flags_per_peer: false,
        dispatch_header: false,
        signalling: Signalling::ReceiverCount,
        threads: 4,
        post_us: 0.3,
        dispatch: Kernels {
            pack_us: dispatch_us,
            unpack_us: dispatch_us * step,
        },
        combine: Kernels {
            pack_us: combine_us,
            unpack_us: combine_us * step,
        },
        count_msgs: false,
        private_rows: None,
    }
}

/// Our normal-mode kernel times, µs: the cached dispatch (FP8) and the combine at EP 2 on one
/// H100 shared by 2 PEs under MPS, direct (IPC) path — `scripts/bench-ep.sh` EP_MODES=ht,
/// `benches/results/ep-ht-h100` (commit a8eca65). Pessimistic for a GPU of one's own.
pub const OURS_HT_DISPATCH_US: f64 = 839.0;
/// See [`OURS_HT_DISPATCH_US`].
pub const OURS_HT_COMBINE_US: f64 = 3825.6;

/// The normal-mode benchmarks' routing (DeepEP's `test_internode.py`): experts rounded down
/// to a multiple of the GPUs, each token's experts among those of `min(nodes, 4)` nodes.
pub fn normal_routing(ep: usize, per_node: usize, fp8: bool) -> Routing {
    let experts = 256 / ep * ep;
    let shape = Shape {
        fp8,
        ..Shape::prefill(experts)
    };
    Routing::grouped(ep, shape, SEED, per_node, 4)
}

/// A published normal-mode figure the model is compared with (not fitted to).
#[derive(Debug, Clone, Serialize)]
pub struct NormalCheck {
    /// GPUs.
    pub ep: usize,
    /// Published dispatch / combine, µs.
    pub published_us: (f64, f64),
    /// The model's, µs.
    pub model_us: (f64, f64),
}

/// UCCL-EP's published normal mode on p5en (4096 tokens, FP8 dispatch, BF16 combine;
/// as published by uccl-project/uccl `ep/`) against the model with the fitted fabric. (Its µs ×
/// GB/s give DeepEP's count: FP8 rows once per (token, node) own node included — 60 MB per
/// GPU at EP16, 109 MB at EP32 — of which the model sends the remote ones.)
pub fn normal_check(f: &Fabric) -> Vec<NormalCheck> {
    [
        (16, 1196.0, 6379.0),
        (24, 1633.0, 6365.0),
        (32, 2022.0, 4899.0),
    ]
    .iter()
    .map(|&(ep, d, c)| {
        let r = normal_routing(ep, f.gpus_per_node, true);
        let s = uccl_normal();
        NormalCheck {
            ep,
            published_us: (d, c),
            model_us: (
                simulate(f, &s, &r, Op::Dispatch).us,
                simulate(f, &s, &r, Op::Combine).us,
            ),
        }
    })
    .collect()
}

/// A published figure the model is fitted to.
#[derive(Debug, Clone, Serialize)]
pub struct Anchor {
    /// The system.
    pub system: &'static str,
    /// GPUs.
    pub ep: usize,
    /// Experts in the benchmark.
    pub experts: usize,
    /// Dispatch or combine.
    pub op: Op,
    /// The published µs.
    pub us: f64,
}

/// The calibration points: UCCL-EP's and pplx-garden's published p5en LL results
/// (uccl-project/uccl `ep/`; perplexityai/pplx-garden, arXiv 2510.27656). Experts: 288 for
/// UCCL-EP (DeepEP's benchmark), 256 for pplx-garden (its benchmark's default).
pub fn anchors() -> Vec<Anchor> {
    anchor_rows(&[
        ("uccl", 288, 16, 226.0, 293.0),
        ("uccl", 288, 32, 465.0, 694.0),
        ("pplx", 256, 16, 214.8, 241.5),
        ("pplx", 256, 32, 229.1, 335.0),
    ])
}

/// Published p5en LL results the fit does not see (the same two projects' published tables):
/// UCCL-EP at EP24 and pplx-garden at EP64, to check the model out of sample.
pub fn holdout() -> Vec<Anchor> {
    anchor_rows(&[
        ("uccl", 288, 24, 386.0, 580.0),
        ("pplx", 256, 64, 266.7, 391.2),
    ])
}

fn anchor_rows(rows: &[(&'static str, usize, usize, f64, f64)]) -> Vec<Anchor> {
    rows.iter()
        .flat_map(|&(system, experts, ep, d, c)| {
            [(Op::Dispatch, d), (Op::Combine, c)].map(|(op, us)| Anchor {
                system,
                ep,
                experts,
                op,
                us,
            })
        })
        .collect()
}

/// pplx-garden's dispatch at `ep` GPUs as published (its writes shard the peers over the
/// NICs) and with each peer's bytes sharded over every NIC instead, µs: the cost of its peer
/// sharding, which leaves one of each receiver's two NICs idle at EP16.
pub fn pplx_sharding(f: &Fabric, ep: usize) -> (f64, f64) {
    let r = Routing::uniform(ep, Shape::decode(256), SEED);
    let bytes = System {
        pattern: Pattern::PerPeer { shard_peers: false },
        ..pplx()
    };
    (
        simulate(f, &pplx(), &r, Op::Dispatch).us,
        simulate(f, &bytes, &r, Op::Dispatch).us,
    )
}

fn system_of(name: &str) -> System {
    match name {
        "uccl" => uccl(),
        _ => pplx(),
    }
}

/// One calibration row.
#[derive(Debug, Clone, Serialize)]
pub struct CalRow {
    /// The anchor.
    pub anchor: Anchor,
    /// What the model gives, µs.
    pub model_us: f64,
    /// (model − anchor) / anchor, %.
    pub err_pct: f64,
}

/// The model against every anchor on `f`.
pub fn calibrate(f: &Fabric) -> Vec<CalRow> {
    evaluate(f, anchors())
}

/// The model against `anchors` on `f`.
pub fn evaluate(f: &Fabric, anchors: Vec<Anchor>) -> Vec<CalRow> {
    anchors
        .into_iter()
        .map(|a| {
            let r = Routing::uniform(a.ep, Shape::decode(a.experts), SEED);
            let model_us = simulate(f, &system_of(a.system), &r, a.op).us;
            CalRow {
                err_pct: (model_us - a.us) / a.us * 100.0,
                anchor: a,
                model_us,
            }
        })
        .collect()
}

/// The worst absolute error of `rows`, %.
pub fn worst(rows: &[CalRow]) -> f64 {
    rows.iter().map(|r| r.err_pct.abs()).fold(0.0, f64::max)
}

/// The root mean square of the errors of `rows`, %.
pub fn rms(rows: &[CalRow]) -> f64 {
    (rows.iter().map(|r| r.err_pct * r.err_pct).sum::<f64>() / rows.len().max(1) as f64).sqrt()
}

/// Fits the per-message time and its growth with remote nodes (the only free parameters) to
/// the anchors, minimizing the root mean square error: a grid, then a finer grid around its
/// best.
pub fn fit(base: &Fabric) -> (Fabric, Vec<CalRow>) {
    let eval = |x: f64, inc: f64| {
        let f = Fabric {
            x_msg_us: x,
            incast: inc,
            ..base.clone()
        };
        let rows = calibrate(&f);
        (rms(&rows), f, rows)
    };
    let mut best = eval(base.x_msg_us, base.incast);
    let search = |xs: Vec<f64>, incs: Vec<f64>, best: &mut (f64, Fabric, Vec<CalRow>)| {
        for &x in &xs {
            for &i in &incs {
                let c = eval(x, i);
                if c.0 < best.0 {
                    *best = c;
                }
            }
        }
    };
    let grid = |lo: f64, hi: f64, n: usize| -> Vec<f64> {
        (0..=n)
            .map(|k| lo + (hi - lo) * k as f64 / n as f64)
            .filter(|v| *v >= 0.0)
            .collect()
    };
    search(grid(0.02, 0.6, 29), grid(0.0, 2.0, 20), &mut best);
    let (x0, i0) = (best.1.x_msg_us, best.1.incast);
    search(
        grid(x0 - 0.02, x0 + 0.02, 8),
        grid(i0 - 0.1, i0 + 0.1, 8),
        &mut best,
    );
    (best.1, best.2)
}

/// Our stream generator against one traced run: messages and bytes per dispatch per PE.
#[derive(Debug, Clone, Serialize)]
pub struct TraceCheck {
    /// The traced configuration (directory name).
    pub run: String,
    /// PEs.
    pub ep: usize,
    /// "batched", "per-token" or "normal".
    pub mode: &'static str,
    /// Messages per dispatch per PE in the trace.
    pub traced: f64,
    /// The generator's at the traced run's shape and placement.
    pub generated: f64,
    /// MB per dispatch per PE in the trace, where recorded.
    pub traced_mb: Option<f64>,
    /// The generator's MB per dispatch per PE.
    pub generated_mb: f64,
}

/// Messages and MB per dispatch per PE our LL generator gives at `ep` PEs, 8 experts each,
/// every peer reached over the network (as in a traced run through the proxy).
pub fn generated_msgs(ep: usize, per_token: bool) -> (f64, f64) {
    let r = Routing::uniform(ep, Shape::decode(8 * ep), SEED);
    per_pe(
        &crate::stream::messages(&ours(per_token), &r, Op::Dispatch, 1, 1),
        ep,
    )
}

/// Messages and MB per dispatch per PE our normal-mode generator gives at `ep` PEs in `nodes`
/// nodes, with the benchmark's routing (uniform top-8 of 256 experts) and FP8 rows.
pub fn generated_normal(ep: usize, nodes: usize) -> (f64, f64) {
    let r = Routing::uniform(ep, Shape::prefill(256), SEED);
    let per_node = ep.div_ceil(nodes.max(1));
    per_pe(
        &crate::stream::messages(&ours_normal(), &r, Op::Dispatch, per_node, 1),
        ep,
    )
}

fn per_pe(msgs: &[crate::stream::Msg], ep: usize) -> (f64, f64) {
    let bytes: u64 = msgs.iter().map(|m| m.bytes).sum();
    (
        msgs.len() as f64 / ep as f64,
        bytes as f64 / ep as f64 / 1e6,
    )
}

/// A projection row.
#[derive(Debug, Clone, Serialize)]
pub struct Projection {
    /// Machine.
    pub fabric: &'static str,
    /// System.
    pub system: String,
    /// GPUs.
    pub ep: usize,
    /// Dispatch, µs (mean over GPUs).
    pub dispatch_us: f64,
    /// Combine, µs (mean over GPUs).
    pub combine_us: f64,
    /// Dispatch and combine of the slowest GPU, µs.
    pub max_us: (f64, f64),
    /// Dispatch messages per GPU.
    pub dispatch_msgs: f64,
}

/// Experts at `ep` GPUs in the projections (the anchors' shapes: 288 up to EP32, 256 at EP64).
pub fn experts_at(ep: usize) -> usize {
    if ep >= 64 { 256 } else { 288 }
}

/// Every low-latency system at EP 16, 32 and 64 on `f` (decode shape).
pub fn project(f: &Fabric) -> Vec<Projection> {
    let systems = [ours(false), ours(true), uccl(), pplx(), deepep_nvshmem()];
    project_with(f, &systems, |ep| {
        Routing::uniform(ep, Shape::decode(experts_at(ep)), SEED)
    })
}

/// The normal-mode systems at EP 16, 32 and 64 on `f` (prefill shape, FP8 dispatch, the
/// benchmarks' grouped routing).
pub fn project_normal(f: &Fabric) -> Vec<Projection> {
    let systems = [ours_normal(), uccl_normal()];
    project_with(f, &systems, |ep| normal_routing(ep, f.gpus_per_node, true))
}

fn project_with(
    f: &Fabric,
    systems: &[System],
    routing: impl Fn(usize) -> Routing,
) -> Vec<Projection> {
    let mut v = Vec::new();
    for ep in [16, 32, 64] {
        let r = routing(ep);
        for s in systems {
            let d = simulate(f, s, &r, Op::Dispatch);
            let c = simulate(f, s, &r, Op::Combine);
            v.push(Projection {
                fabric: f.name,
                system: s.name.clone(),
                ep,
                dispatch_us: d.us,
                combine_us: c.us,
                max_us: (d.max_us, c.max_us),
                dispatch_msgs: d.msgs_per_gpu,
            });
        }
    }
    v
}

/// One parameter's effect on our systems' dispatch and combine.
#[derive(Debug, Clone, Serialize)]
pub struct Sensitivity {
    /// What changed.
    pub change: String,
    /// Dispatch / combine µs of each system, in the order given.
    pub results: Vec<(f64, f64)>,
}

/// `systems` on routing `r` under each fabric parameter halved and doubled, other proxy
/// costs, and the kernels of `fast` (a faster system's).
pub fn sensitivity(f: &Fabric, r: &Routing, systems: &[System], fast: &System) -> Vec<Sensitivity> {
    let run = |f: &Fabric, sys: &[System], change: String| Sensitivity {
        change,
        results: sys
            .iter()
            .map(|s| {
                (
                    simulate(f, s, r, Op::Dispatch).us,
                    simulate(f, s, r, Op::Combine).us,
                )
            })
            .collect(),
    };
    let mut v = vec![run(f, systems, "baseline".into())];
    type FabricKnob = (&'static str, fn(&mut Fabric, f64), fn(&Fabric) -> f64);
    let knobs: [FabricKnob; 7] = [
        ("per-message time", |f, v| f.x_msg_us = v, |f| f.x_msg_us),
        ("fan-out growth", |f, v| f.incast = v, |f| f.incast),
        (
            "cross-rail factor",
            |f, v| f.cross_rail = v,
            |f| f.cross_rail,
        ),
        ("wire latency", |f, v| f.wire_us = v, |f| f.wire_us),
        ("GPU→proxy latency", |f, v| f.d2h_us = v, |f| f.d2h_us),
        ("signal path", |f, v| f.sig_us = v, |f| f.sig_us),
        ("NIC bandwidth", |f, v| f.nic_gbps = v, |f| f.nic_gbps),
    ];
    for (name, set, get) in knobs {
        for m in [0.5, 2.0] {
            let mut g = f.clone();
            set(&mut g, get(f) * m);
            v.push(run(&g, systems, format!("{name} ×{m}")));
        }
    }
    let with = |post: f64, threads: usize, k: Option<(Kernels, Kernels)>| -> Vec<System> {
        systems
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.post_us = post;
                s.threads = threads;
                if let Some((d, c)) = k {
                    s.dispatch = d;
                    s.combine = c;
                }
                s
            })
            .collect()
    };
    for (post, threads) in [(1.0, 4), (3.0, 4), (0.3, 1), (1.0, 1)] {
        v.push(run(
            f,
            &with(post, threads, None),
            format!("proxy post {post} µs, {threads} thread(s)"),
        ));
    }
    v.push(run(
        f,
        &with(0.3, 4, Some((fast.dispatch, fast.combine))),
        format!("kernels as fast as {}", fast.name),
    ));
    v
}
