//! The published anchors, the fit of the fabric's two free parameters to them, the check of
//! our stream generator against proxy traces, and the projection of our kernels.

use serde::Serialize;

use crate::{
    fabric::Fabric,
    sim::simulate,
    stream::{Kernels, Op, Pattern, Routing, Shape, Signalling, System},
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
        route_exchange: false,
    }
}

/// pplx-garden on p5en: counts exchanged first, then one bulk write per remote GPU (a token
/// once per destination GPU), counted at the receiver; one CPU worker per GPU. Its kernels'
/// time is its EP8 result (NVLink only: 49.7 µs dispatch, 64.2 µs combine) split evenly
/// between send and receive — not fitted. Its speculative private-buffer sends are not
/// modelled (they hide part of the count exchange: the model errs slow).
pub fn pplx() -> System {
    System {
        name: "pplx-garden (per-peer bulk)".into(),
        pattern: Pattern::PerPeer,
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
        route_exchange: true,
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

/// Our kernels' times, µs, measured on one H100 with 2 PEs sharing it under MPS (the hook split
/// of `scripts/bench-ep.sh` at EP 2, direct path; benches/results/ep-ll-h100): pessimistic for
/// a GPU of one's own.
pub const OURS_DISPATCH: Kernels = Kernels {
    pack_us: 84.3,
    unpack_us: 60.1,
};
/// See [`OURS_DISPATCH`].
pub const OURS_COMBINE: Kernels = Kernels {
    pack_us: 39.1,
    unpack_us: 37.5,
};

/// pshmem.ep's LL kernels: batched (one counted put per (remote expert, peer)) or per-token, a
/// counted signal per (remote expert, peer), counted at the receiver's proxy; 4 proxy threads
/// (`PSHMEM_GPU_PROXY_THREADS=4`) posting at UCCL's cost (0.3 µs; the registered path was not
/// measured on EFA).
pub fn ours(per_token: bool) -> System {
    System {
        name: if per_token {
            "pshmem.ep per-token".into()
        } else {
            "pshmem.ep batched".into()
        },
        pattern: if per_token {
            Pattern::PerToken
        } else {
            Pattern::PerExpert
        },
        signalling: Signalling::ReceiverCount,
        threads: 4,
        post_us: 0.3,
        dispatch: OURS_DISPATCH,
        combine: OURS_COMBINE,
        count_msgs: true,
        route_exchange: false,
    }
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
/// (`../shared/ANCHORS.md`). Experts: 288 for UCCL-EP (DeepEP's benchmark), 256 for pplx-garden
/// (DeepSeek-V3's count; an assumption).
pub fn anchors() -> Vec<Anchor> {
    let mut v = Vec::new();
    for (system, experts, rows) in [
        ("uccl", 288, [(16, 226.0, 293.0), (32, 465.0, 694.0)]),
        ("pplx", 256, [(16, 214.8, 241.5), (32, 229.1, 335.0)]),
    ] {
        for (ep, d, c) in rows {
            v.push(Anchor {
                system,
                ep,
                experts,
                op: Op::Dispatch,
                us: d,
            });
            v.push(Anchor {
                system,
                ep,
                experts,
                op: Op::Combine,
                us: c,
            });
        }
    }
    v
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
    anchors()
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

/// Our stream generator against one traced run: messages per dispatch per PE.
#[derive(Debug, Clone, Serialize)]
pub struct TraceCheck {
    /// The traced configuration (directory name).
    pub run: String,
    /// PEs.
    pub ep: usize,
    /// Per-token or batched.
    pub per_token: bool,
    /// Messages per dispatch per PE in the trace.
    pub traced: f64,
    /// The generator's, every peer remote (as in the traced runs, all through the proxy).
    pub generated: f64,
}

/// Messages per dispatch per PE our generator gives at `ep` PEs, 8 experts each, every peer
/// reached over the network (as in a traced run through the proxy).
pub fn generated_msgs(ep: usize, per_token: bool) -> f64 {
    let r = Routing::uniform(ep, Shape::decode(8 * ep), SEED);
    let sys = ours(per_token);
    crate::stream::messages(&sys, &r, Op::Dispatch, 1).len() as f64 / ep as f64
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

/// Every system at EP 16, 32 and 64 on `f`.
pub fn project(f: &Fabric) -> Vec<Projection> {
    let systems = [ours(false), ours(true), uccl(), pplx(), deepep_nvshmem()];
    let mut v = Vec::new();
    for ep in [16, 32, 64] {
        let r = Routing::uniform(ep, Shape::decode(experts_at(ep)), SEED);
        for s in &systems {
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

/// One parameter's effect on our dispatch and combine at EP32 on p5en.
#[derive(Debug, Clone, Serialize)]
pub struct Sensitivity {
    /// What changed.
    pub change: String,
    /// Batched dispatch / combine, µs.
    pub batched: (f64, f64),
    /// Per-token dispatch / combine, µs.
    pub per_token: (f64, f64),
}

/// Our two modes at EP `ep` under each parameter halved and doubled (and a few alternatives).
pub fn sensitivity(f: &Fabric, ep: usize) -> Vec<Sensitivity> {
    let r = Routing::uniform(ep, Shape::decode(experts_at(ep)), SEED);
    let run = |f: &Fabric, b: &System, t: &System, change: String| Sensitivity {
        change,
        batched: (
            simulate(f, b, &r, Op::Dispatch).us,
            simulate(f, b, &r, Op::Combine).us,
        ),
        per_token: (
            simulate(f, t, &r, Op::Dispatch).us,
            simulate(f, t, &r, Op::Combine).us,
        ),
    };
    let (b, t) = (ours(false), ours(true));
    let mut v = vec![run(f, &b, &t, "baseline".into())];
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
            v.push(run(&g, &b, &t, format!("{name} ×{m}")));
        }
    }
    let with = |s: &System, post: f64, threads: usize, k: Option<(Kernels, Kernels)>| {
        let mut s = s.clone();
        s.post_us = post;
        s.threads = threads;
        if let Some((d, c)) = k {
            s.dispatch = d;
            s.combine = c;
        }
        s
    };
    for (post, threads) in [(1.0, 4), (3.0, 4), (0.3, 1), (1.0, 1)] {
        v.push(run(
            f,
            &with(&b, post, threads, None),
            &with(&t, post, threads, None),
            format!("proxy post {post} µs, {threads} thread(s)"),
        ));
    }
    let k = Some((uccl().dispatch, uccl().combine));
    v.push(run(
        f,
        &with(&b, 0.3, 4, k),
        &with(&t, 0.3, 4, k),
        "kernels as fast as UCCL-EP's".into(),
    ));
    v
}
