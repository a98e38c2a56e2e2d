//! `efa-model`: fits the EFA model to the published anchors, checks our stream generator
//! against proxy traces of real runs, and projects our MoE kernels to EP 16–64 on p5en and p5.
//! Prints Markdown; writes `efa-model.json`, `efa-model.md`, `efa-model.svg` (low-latency
//! dispatch) and `efa-model-normal.svg` (normal-mode dispatch) into `--out`.
//! Nothing of this ran on EFA hardware.

use std::{fmt::Write as _, path::PathBuf};

use clap::Parser;
use pshmem_efa_model::{
    Fabric,
    calib::{self, CalRow, NormalCheck, Projection, Sensitivity, TraceCheck},
    stream::{Op, Routing, Shape},
};
use serde_json::json;

#[derive(Parser)]
#[command(about = "EFA model: calibration on published LL results, projection of pshmem.ep")]
struct Args {
    /// Where to write efa-model.{json,md,svg}.
    #[arg(long, default_value = "efa-model-out")]
    out: PathBuf,
    /// The low-latency MoE benchmark's merged results with trace-derived message counts.
    #[arg(
        long,
        default_value = "benches/results/efa-path/packed-c6420c5/ep-ll.json"
    )]
    traces: PathBuf,
    /// The normal-mode MoE benchmark's merged results with trace-derived message counts.
    #[arg(long, default_value = "benches/results/ep-ht-h100/ep-ht.json")]
    ht_traces: PathBuf,
    /// Keep the preset's fitted values instead of fitting again.
    #[arg(long)]
    no_fit: bool,
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("efa-model: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), String> {
    let preset = Fabric::p5en();
    let (p5en, cal) = if a.no_fit {
        (preset.clone(), calib::calibrate(&preset))
    } else {
        calib::fit(&preset)
    };
    let p5 = Fabric {
        x_msg_us: p5en.x_msg_us,
        incast: p5en.incast,
        ..Fabric::p5()
    };
    let mut checks = trace_checks(&a.traces, false)?;
    checks.extend(trace_checks(&a.ht_traces, true)?);
    let held = calib::evaluate(&p5en, calib::holdout());
    let nvshmem = nvshmem_check(&p5en);
    let normal = calib::normal_check(&p5en);
    let mut proj = calib::project(&p5en);
    proj.extend(calib::project(&p5));
    let mut proj_normal = calib::project_normal(&p5en);
    proj_normal.extend(calib::project_normal(&p5));
    let ll = [calib::ours(false), calib::ours(true)];
    let decode32 = Routing::uniform(32, Shape::decode(calib::experts_at(32)), calib::SEED);
    let sens = calib::sensitivity(&p5en, &decode32, &ll, &calib::uccl());
    let normal32 = calib::normal_routing(32, p5en.gpus_per_node, true);
    let sens_normal = calib::sensitivity(
        &p5en,
        &normal32,
        &[calib::ours_normal()],
        &calib::uccl_normal(),
    );
    let md = markdown(&Report {
        preset: &preset,
        f: &p5en,
        cal: &cal,
        held: &held,
        checks: &checks,
        nvshmem: &nvshmem,
        normal: &normal,
        proj: &proj,
        proj_normal: &proj_normal,
        sens: &sens,
        sens_normal: &sens_normal,
    });
    print!("{md}");
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let json = json!({
        "note": "a model: nothing ran on EFA hardware; fitted: x_msg_us and incast of p5en",
        "fabric_p5en": p5en, "fabric_p5": p5, "preset_p5en": preset,
        "calibration": cal, "holdout": held, "worst_error_pct": calib::worst(&cal), "rms_error_pct": calib::rms(&cal),
        "trace_check": checks, "nvshmem_check": nvshmem, "uccl_normal_check": normal,
        "projection": proj, "projection_normal": proj_normal,
        "sensitivity_ep32_p5en": sens, "sensitivity_normal_ep32_p5en": sens_normal,
    });
    let write = |name: &str, text: String| {
        let p = a.out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    write(
        "efa-model.json",
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    )?;
    write("efa-model.md", md)?;
    write(
        "efa-model.svg",
        svg(
            &proj,
            &cal,
            "Low-latency dispatch µs on p5en (model; points: published anchors)",
        ),
    )?;
    write(
        "efa-model-normal.svg",
        svg(
            &proj_normal,
            &[],
            "Normal-mode dispatch µs on p5en, 4096 tokens (model)",
        ),
    )?;
    Ok(())
}

/// Messages (and MB) per dispatch per PE in the traced runs (the MoE reports' merged JSON)
/// beside the generator's; none when the file is absent. `normal`: the normal-mode report's
/// rows across nodes (IPC inside), else the low-latency report's.
fn trace_checks(path: &PathBuf, normal: bool) -> Result<Vec<TraceCheck>, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!(
            "efa-model: no traced results at {} (skipping the trace check)",
            path.display()
        );
        return Ok(Vec::new());
    };
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let ep = r.get("pes")?.as_u64()? as usize;
            let run = r.get("label")?.as_str()?.to_string();
            if normal {
                let nodes = r.get("nodes")?.as_u64()? as usize;
                if nodes < 2 || r.get("p2p")?.as_bool() != Some(true) {
                    return None;
                }
                let (generated, generated_mb) = calib::generated_normal(ep, nodes);
                return Some(TraceCheck {
                    run,
                    ep,
                    mode: "normal",
                    traced: r.get("proxy_messages_per_dispatch_per_pe")?.as_f64()?,
                    generated,
                    traced_mb: r
                        .get("proxy_MB_per_dispatch_per_pe")
                        .and_then(|v| v.as_f64()),
                    generated_mb,
                });
            }
            let per_token = r.get("messages")?.as_str()? == "per_token";
            let (generated, generated_mb) = calib::generated_msgs(ep, per_token);
            Some(TraceCheck {
                run,
                ep,
                mode: if per_token { "per-token" } else { "batched" },
                traced: r.get("messages_per_dispatch_per_pe")?.as_f64()?,
                generated,
                traced_mb: r.get("MB_per_dispatch_per_pe").and_then(|v| v.as_f64()),
                generated_mb,
            })
        })
        .collect())
}

/// DeepEP on NVSHMEM, modelled with the fitted fabric, beside its published ranges.
fn nvshmem_check(f: &Fabric) -> Vec<serde_json::Value> {
    [(16, "405–602 / 446–561"), (32, "≈ 800 / –")]
        .iter()
        .map(|&(ep, published)| {
            let r = Routing::uniform(ep, Shape::decode(288), calib::SEED);
            let s = calib::deepep_nvshmem();
            json!({
                "ep": ep, "published": published,
                "dispatch_us": pshmem_efa_model::simulate(f, &s, &r, Op::Dispatch).us,
                "combine_us": pshmem_efa_model::simulate(f, &s, &r, Op::Combine).us,
            })
        })
        .collect()
}

/// Everything the Markdown report shows.
struct Report<'a> {
    preset: &'a Fabric,
    f: &'a Fabric,
    cal: &'a [CalRow],
    held: &'a [CalRow],
    checks: &'a [TraceCheck],
    nvshmem: &'a [serde_json::Value],
    normal: &'a [NormalCheck],
    proj: &'a [Projection],
    proj_normal: &'a [Projection],
    sens: &'a [Sensitivity],
    sens_normal: &'a [Sensitivity],
}

/// Where our LL kernel times come from, and the heading of the normal-mode projection.
fn kernel_note(s: &mut String) {
    let _ = writeln!(
        s,
        "\nOur LL kernel times (µs: dispatch {:.1} send + {:.1} receive, combine {:.1} + {:.1}) \
         are measured with each EP rank on a GPU of its own (4 H100s at EP 4, moved by later \
         kernels' differences side by side on H200s; send kernels through the proxy, receive \
         kernels over NVLink); our proxy's post cost on EFA's registered path \
         is assumed equal to UCCL-EP's (0.3 µs).\n\n\
         ## Projection, normal mode (4096 tokens; dispatch / combine µs; dispatch messages per \
         GPU)\n",
        calib::OURS_DISPATCH.pack_us,
        calib::OURS_DISPATCH.unpack_us,
        calib::OURS_COMBINE.pack_us,
        calib::OURS_COMBINE.unpack_us
    );
}

fn markdown(r: &Report) -> String {
    let (preset, f, cal) = (r.preset, r.f, r.cal);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# EFA model: calibration and projection (a model: nothing here ran on EFA)\n\n\
         Low-latency (decode) shape: 128 tokens per GPU, hidden 7168, top-8, FP8 dispatch / \
         BF16 combine, uniform random routing (seed {}); normal (prefill) shape: 4096 tokens, \
         the normal-mode benchmarks' routing (a token's experts among those of up to 4 nodes). \
         Times are the mean over GPUs of each GPU's own (as the benchmarks report), the slowest \
         GPU's in the JSON. Command: `cargo run --release -p pshmem-efa-model -- --out DIR`.\n",
        calib::SEED
    );
    let _ = writeln!(
        s,
        "## Parameters (p5en)\n\n\
         Fitted to the anchors below (the only free parameters): per-message NIC time \
         **{:.3} µs** (rail-aligned, one remote node), growth per additional remote node \
         **{:.2}** (preset: {:.3} / {:.2}). Fixed from published measurements: {} NICs × {} GB/s \
         per GPU, cross-rail factor {}, wire {} µs one way, GPU→proxy {} µs, \
         completion {} µs, signal path {} µs. p5: 4 NICs × 12.5 GB/s, the same per-message \
         costs (not calibrated: no public p5 LL results).\n",
        f.x_msg_us,
        f.incast,
        preset.x_msg_us,
        preset.incast,
        f.nics_per_gpu,
        f.nic_gbps,
        f.cross_rail,
        f.wire_us,
        f.d2h_us,
        f.cqe_us,
        f.sig_us
    );
    let _ = writeln!(
        s,
        "## Calibration (p5en; worst error {:.1} %, RMS {:.1} %)\n\n| system | EP | experts | op | published µs | model µs | error |\n| --- | --- | --- | --- | --- | --- | --- |",
        calib::worst(cal),
        calib::rms(cal)
    );
    cal_rows(&mut s, cal);
    let (peers16, bytes16) = calib::pplx_sharding(f, 16);
    let (peers32, bytes32) = calib::pplx_sharding(f, 32);
    let _ = writeln!(
        s,
        "\npplx-garden's dispatch shards its peers over the 2 NICs (NIC i to the receiver's \
         NIC i), so at EP16 each receiver takes all its rows on one NIC: {peers16:.0} µs; \
         with each peer's bytes sharded over both NICs the model gives {bytes16:.0} µs (EP32: \
         {peers32:.0} against {bytes32:.0} µs)."
    );
    let _ = writeln!(
        s,
        "\nOut of sample (published, not used by the fit):\n\n\
         | system | EP | experts | op | published µs | model µs | error |\n\
         | --- | --- | --- | --- | --- | --- | --- |"
    );
    cal_rows(&mut s, r.held);
    let _ = writeln!(
        s,
        "\nNot fitted, for comparison — DeepEP V1 on NVSHMEM's libfabric transport (one proxy \
         thread, fence = quiet):\n\n| EP | published dispatch / combine µs | model |\n| --- | --- | --- |"
    );
    for v in r.nvshmem {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} / {:.0} |",
            v["ep"],
            v["published"].as_str().unwrap_or(""),
            v["dispatch_us"].as_f64().unwrap_or(0.0),
            v["combine_us"].as_f64().unwrap_or(0.0)
        );
    }
    let _ = writeln!(
        s,
        "\nNot fitted, for comparison — UCCL-EP's normal mode (DeepEP's internode kernels, \
         4096 tokens, FP8 dispatch / BF16 combine), its kernels' time its own EP8 result:\n\n| EP | published dispatch / combine µs | model | model / published |\n\
         | --- | --- | --- | --- |"
    );
    for c in r.normal {
        let _ = writeln!(
            s,
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.2} / {:.2} |",
            c.ep,
            c.published_us.0,
            c.published_us.1,
            c.model_us.0,
            c.model_us.1,
            c.model_us.0 / c.published_us.0,
            c.model_us.1 / c.published_us.1
        );
    }
    if !r.checks.is_empty() {
        let _ = writeln!(
            s,
            "\n## Our message streams: generator against proxy traces of real runs\n\n\
             Messages (puts and counted signals) and MB per dispatch per PE in the traced \
             runs (`benches/results/efa-path/packed-c6420c5`, 2 H200s, every peer through \
             the proxy, 8 experts per PE; `benches/results/ep-ht-h100`: two emulated nodes, \
             IPC inside, so every proxy message crosses between them) and from the stream \
             generator the projection uses, at the same shape and placement:\n\n\
             | run | mode | EP | traced msgs | generated | traced MB | generated MB |\n\
             | --- | --- | --- | --- | --- | --- | --- |"
        );
        for c in r.checks {
            let mb = c.traced_mb.map(|v| format!("{v:.1}")).unwrap_or("–".into());
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.1} | {mb} | {:.2} |",
                c.run, c.mode, c.ep, c.traced, c.generated, c.generated_mb
            );
        }
    }
    let _ = writeln!(
        s,
        "\n## Projection, low-latency mode (dispatch / combine µs; dispatch messages per GPU)\n"
    );
    projection_table(&mut s, r.proj);
    kernel_note(&mut s);
    projection_table(&mut s, r.proj_normal);
    let _ = writeln!(
        s,
        "\nOur normal-mode kernel times ({:.0} µs dispatch, {:.0} µs combine) are measured at \
         EP 2 on one H100 shared by 2 PEs without a network; UCCL-EP's are its EP8 NVLink \
         result.\n\n## Sensitivity, low-latency mode (p5en, EP32; dispatch / combine µs)\n",
        calib::OURS_HT_DISPATCH_US,
        calib::OURS_HT_COMBINE_US
    );
    sensitivity_table(&mut s, r.sens, &["batched", "per-token"]);
    let _ = writeln!(
        s,
        "\n## Sensitivity, normal mode (p5en, EP32; dispatch / combine µs)\n"
    );
    sensitivity_table(&mut s, r.sens_normal, &["pshmem.ep normal"]);
    s
}

/// One row per anchor.
fn cal_rows(s: &mut String, rows: &[CalRow]) {
    for c in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:?} | {:.1} | {:.1} | {:+.1} % |",
            c.anchor.system,
            c.anchor.ep,
            c.anchor.experts,
            c.anchor.op,
            c.anchor.us,
            c.model_us,
            c.err_pct
        );
    }
}

/// One row per (machine, system), one column per EP size.
fn projection_table(s: &mut String, proj: &[Projection]) {
    let _ = writeln!(
        s,
        "| machine | system | EP16 | EP32 | EP64 |\n| --- | --- | --- | --- | --- |"
    );
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for p in proj {
        if !keys.contains(&(p.fabric, p.system.as_str())) {
            keys.push((p.fabric, &p.system));
        }
    }
    for (fab, sys) in keys {
        let cells: Vec<String> = [16, 32, 64]
            .iter()
            .map(|&ep| {
                proj.iter()
                    .find(|p| p.fabric == fab && p.system == sys && p.ep == ep)
                    .map(|p| {
                        format!(
                            "{:.0} / {:.0} ({:.0})",
                            p.dispatch_us, p.combine_us, p.dispatch_msgs
                        )
                    })
                    .unwrap_or_default()
            })
            .collect();
        let _ = writeln!(s, "| {fab} | {sys} | {} |", cells.join(" | "));
    }
}

/// One row per change, one column per system.
fn sensitivity_table(s: &mut String, rows: &[Sensitivity], names: &[&str]) {
    let _ = writeln!(
        s,
        "| change | {} |\n| --- |{}",
        names.join(" | "),
        " --- |".repeat(names.len())
    );
    for r in rows {
        let cells: Vec<String> = r
            .results
            .iter()
            .map(|(d, c)| format!("{d:.0} / {c:.0}"))
            .collect();
        let _ = writeln!(s, "| {} | {} |", r.change, cells.join(" | "));
    }
}

/// Dispatch µs against EP for every system on p5en (lines), the anchors as points.
fn svg(proj: &[Projection], cal: &[CalRow], title: &str) -> String {
    let (w, h, l, b) = (640.0, 400.0, 60.0, 40.0);
    let ymax = proj
        .iter()
        .filter(|p| p.fabric == "p5en")
        .map(|p| p.dispatch_us)
        .fold(100.0, f64::max)
        * 1.1;
    let x = |ep: usize| l + ((ep as f64).log2() - 4.0) / 2.0 * (w - l - 20.0);
    let y = |us: f64| h - b - us / ymax * (h - b - 20.0);
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\
         <text x=\"{l}\" y=\"14\">{title}</text>\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{l}\" y1=\"20\" x2=\"{l}\" y2=\"{}\" stroke=\"black\"/>",
        h - b,
        w - 20.0,
        h - b,
        h - b
    );
    for ep in [16, 32, 64] {
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\">EP{ep}</text>",
            x(ep) - 10.0,
            h - b + 15.0
        );
    }
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let _ = write!(s, "<text x=\"5\" y=\"{:.1}\">{v:.0}</text>", y(v) + 4.0);
    }
    let mut names: Vec<&str> = Vec::new();
    for p in proj.iter().filter(|p| p.fabric == "p5en") {
        if !names.contains(&p.system.as_str()) {
            names.push(&p.system);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let c = colors[i % colors.len()];
        let pts: Vec<String> = proj
            .iter()
            .filter(|p| p.fabric == "p5en" && p.system == *name)
            .map(|p| format!("{:.1},{:.1}", x(p.ep), y(p.dispatch_us)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" fill=\"{c}\">{name}</text>",
            pts.join(" "),
            l + 10.0,
            34.0 + 14.0 * i as f64
        );
    }
    for r in cal.iter().filter(|r| r.anchor.op == Op::Dispatch) {
        let c = if r.anchor.system == "uccl" {
            colors[2]
        } else {
            colors[3]
        };
        let _ = write!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"none\" stroke=\"{c}\"/>",
            x(r.anchor.ep),
            y(r.anchor.us)
        );
    }
    s.push_str("</svg>\n");
    s
}
