//! `efa-model`: fits the EFA model to the published anchors, checks our stream generator
//! against proxy traces of real runs, and projects our MoE kernels to EP 16–64 on p5en and p5.
//! Prints Markdown; writes `efa-model.json`, `efa-model.md` and `efa-model.svg` into `--out`.
//! Nothing of this ran on EFA hardware.

use std::{fmt::Write as _, path::PathBuf};

use clap::Parser;
use pshmem_efa_model::{
    Fabric,
    calib::{self, CalRow, Projection, Sensitivity, TraceCheck},
    stream::{Op, Routing, Shape},
};
use serde_json::json;

#[derive(Parser)]
#[command(about = "EFA model: calibration on published LL results, projection of pshmem.ep")]
struct Args {
    /// Where to write efa-model.{json,md,svg}.
    #[arg(long, default_value = "efa-model-out")]
    out: PathBuf,
    /// The MoE benchmark's merged results with trace-derived message counts.
    #[arg(long, default_value = "benches/results/ep-ll-h100/ep-ll.json")]
    traces: PathBuf,
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
    let checks = trace_checks(&a.traces)?;
    let nvshmem = nvshmem_check(&p5en);
    let mut proj = calib::project(&p5en);
    proj.extend(calib::project(&p5));
    let sens = calib::sensitivity(&p5en, 32);
    let md = markdown(&preset, &p5en, &cal, &checks, &nvshmem, &proj, &sens);
    print!("{md}");
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let json = json!({
        "note": "a model: nothing ran on EFA hardware; fitted: x_msg_us and incast of p5en",
        "fabric_p5en": p5en, "fabric_p5": p5, "preset_p5en": preset,
        "calibration": cal, "worst_error_pct": calib::worst(&cal), "rms_error_pct": calib::rms(&cal),
        "trace_check": checks, "nvshmem_check": nvshmem,
        "projection": proj, "sensitivity_ep32_p5en": sens,
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
    write("efa-model.svg", svg(&proj, &cal))?;
    Ok(())
}

/// Messages per dispatch per PE in the traced runs (report.py's merged JSON) beside the
/// generator's; none when the file is absent.
fn trace_checks(path: &PathBuf) -> Result<Vec<TraceCheck>, String> {
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
            let traced = r.get("messages_per_dispatch_per_pe")?.as_f64()?;
            let ep = r.get("pes")?.as_u64()? as usize;
            let per_token = r.get("messages")?.as_str()? == "per_token";
            Some(TraceCheck {
                run: r.get("label")?.as_str()?.to_string(),
                ep,
                per_token,
                traced,
                generated: calib::generated_msgs(ep, per_token),
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

fn markdown(
    preset: &Fabric,
    f: &Fabric,
    cal: &[CalRow],
    checks: &[TraceCheck],
    nvshmem: &[serde_json::Value],
    proj: &[Projection],
    sens: &[Sensitivity],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# EFA model: calibration and projection (a model: nothing here ran on EFA)\n\n\
         Decode shape: 128 tokens per GPU, hidden 7168, top-8, FP8 dispatch / BF16 combine; \
         uniform random routing (seed {}); times are the mean over GPUs of each GPU's own (as the benchmarks report), the slowest GPU's in the JSON. Command: \
         `cargo run --release -p pshmem-efa-model -- --out DIR`.\n",
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
    for r in cal {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:?} | {:.1} | {:.1} | {:+.1} % |",
            r.anchor.system,
            r.anchor.ep,
            r.anchor.experts,
            r.anchor.op,
            r.anchor.us,
            r.model_us,
            r.err_pct
        );
    }
    let _ = writeln!(
        s,
        "\nNot fitted, for comparison — DeepEP V1 on NVSHMEM's libfabric transport (one proxy \
         thread, fence = quiet):\n\n| EP | published dispatch / combine µs | model |\n| --- | --- | --- |"
    );
    for v in nvshmem {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} / {:.0} |",
            v["ep"],
            v["published"].as_str().unwrap_or(""),
            v["dispatch_us"].as_f64().unwrap_or(0.0),
            v["combine_us"].as_f64().unwrap_or(0.0)
        );
    }
    if !checks.is_empty() {
        let _ = writeln!(
            s,
            "\n## Our message streams: generator against proxy traces of real runs\n\n\
             Messages per dispatch per PE (puts and counted signals) in the traced H100 runs \
             (`benches/results/ep-ll-h100`, every peer through the proxy) and from the stream \
             generator the projection uses, at the same shape (8 experts per PE):\n\n\
             | run | EP | traced | generated |\n| --- | --- | --- | --- |"
        );
        for c in checks {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} |",
                c.run, c.ep, c.traced, c.generated
            );
        }
    }
    let _ = writeln!(
        s,
        "\n## Projection (dispatch / combine µs; dispatch messages per GPU)\n\n\
         | machine | system | EP16 | EP32 | EP64 |\n| --- | --- | --- | --- | --- |"
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
    let _ = writeln!(
        s,
        "\nOur kernel times are those measured on one H100 shared by 2 PEs (pessimistic); our \
         proxy's post cost on EFA's registered path is assumed equal to UCCL-EP's (0.3 µs).\n\n\
         ## Sensitivity (p5en, EP32; batched and per-token, dispatch / combine µs)\n\n\
         | change | batched | per-token |\n| --- | --- | --- |"
    );
    for r in sens {
        let _ = writeln!(
            s,
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} |",
            r.change, r.batched.0, r.batched.1, r.per_token.0, r.per_token.1
        );
    }
    s
}

/// Dispatch µs against EP for every system on p5en (lines), the anchors as points.
fn svg(proj: &[Projection], cal: &[CalRow]) -> String {
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
         <text x=\"{l}\" y=\"14\">Dispatch µs on p5en (model; points: published anchors)</text>\
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
