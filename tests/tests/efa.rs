//! The proxy on EFA's capabilities, simulated (`PSHMEM_SIM_PROFILE=efa`: unordered delivery,
//! 4-byte remote CQ data, 32-byte inject, 8 KiB sends) and on several rails: every host
//! operation gives the direct path's bytes at 2, 4 and 8 PEs with delivery delayed and
//! reordered and completions duplicated; no signal waits for a completion; large puts spread
//! evenly over the rails (over tcp too). Nothing here ran on EFA hardware.

mod rt;

use std::sync::atomic::{AtomicU64, Ordering};

use rt::{job, ops, proxied, proxied_efa};

/// EFA's capabilities on the reordering fabric: put-with-signal and counted signals are
/// counted at the target through tags in the 32-bit immediate (the fabric refuses wider data),
/// AMOs run in the target's proxy; the host heap and a registered GPU heap give the direct
/// path's bytes at 2, 4 and 8 PEs, with and without strong signals, over 4 simulated NICs
/// that delay and reorder delivery and report 5 % of completions twice — and no signal waits
/// for a completion (the proxy traces count no signal gate or hold, fences after each pair's
/// first go by their marks, and the duplicated completions were seen and ignored).
#[test]
fn the_proxy_paths_match_the_direct_path_on_the_efa_profile() {
    for n in [2, 4, 8] {
        let direct = ops(n, &[("PSHMEM_PROVIDER", "tcp")]);
        let mut env = proxied_efa();
        assert_eq!(ops(n, &env), direct, "{n} PEs, host heap, efa profile");
        env.extend([("PSHMEM_RAILS", "4"), ("PSHMEM_SIM_DUPLICATE", "0.05")]);
        env.push(("PSHMEM_EMULATE_GPU_HEAP", "registered"));
        let (digests, sums) = traced_ops(n, &env);
        assert_eq!(digests, direct, "{n} PEs, registered heap, efa profile");
        no_signal_waited(&sums);
        env.push(("PSHMEM_STRONG_SIGNALS", "1"));
        let (digests, sums) = traced_ops(n, &env);
        assert_eq!(
            digests, direct,
            "{n} PEs, registered heap, efa profile, strong signals"
        );
        no_signal_waited(&sums);
    }
}

/// A fresh folder for one job's proxy traces.
fn trace_dir(what: &str) -> std::path::PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pshmem-{what}-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `ops` with a proxy trace: the digests and every proxy thread's trace summary.
fn traced_ops(n: usize, env: &[(&str, &str)]) -> (Vec<String>, Vec<serde_json::Value>) {
    let dir = trace_dir("traced");
    let prefix = dir.join("t");
    let mut env = env.to_vec();
    env.push(("PSHMEM_TRACE", prefix.to_str().unwrap()));
    let digests = ops(n, &env);
    let mut sums = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".summary.json") {
            let text = std::fs::read_to_string(e.path()).unwrap();
            sums.push(serde_json::from_str(&text).unwrap());
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(sums.len() >= n, "{} summaries for {n} PEs", sums.len());
    (digests, sums)
}

/// No proxy thread's signal waited for a completion (`gates`, `holds`: 0), fences went by
/// sequence (`fence_marks`), and the injected duplicated completions were seen (and, the job
/// having passed, ignored).
fn no_signal_waited(sums: &[serde_json::Value]) {
    for s in sums {
        assert_eq!((&s["gates"], &s["holds"]), (&0.into(), &0.into()), "{s}");
    }
    let count = |k: &str| sums.iter().map(|s| s[k].as_u64().unwrap()).sum::<u64>();
    let (marks, fence_gates) = (count("fence_marks"), count("fence_gates"));
    eprintln!("fences: {marks} marks, {fence_gates} gates");
    assert!(
        marks > fence_gates,
        "{marks} fence marks, {fence_gates} fence gates"
    );
    let dups: u64 = sums.iter().map(|s| s["duplicates"].as_u64().unwrap()).sum();
    assert!(dups > 0, "no duplicated completion was injected");
}

/// Four rails over tcp and over the simulated fabric with EFA's profile (both unordered, so
/// tagged signals): 5 large puts, and 5 puts with signal from the heap whose writes carry a tag
/// (remote CQ data, never striped by the transport, so the proxy cuts them into a part per
/// rail; whole, 5 writes could not share 4 rails evenly), spread their bytes over the rails
/// within 10 % (the trace's `rail_bytes`), and no signal waited for a completion (`gates`,
/// `holds`).
#[test]
fn large_puts_spread_over_every_rail() {
    for (provider, signal) in [("tcp", false), ("tcp", true), ("sim", false), ("sim", true)] {
        let dir = trace_dir("rails");
        let prefix = dir.join("t");
        let mut env = match provider {
            "sim" => proxied_efa(),
            _ => proxied("tcp"),
        };
        env.push(("PSHMEM_TRACE", prefix.to_str().unwrap()));
        env.push(("PSHMEM_RAILS", "4"));
        let mut args = vec!["rt-trace", "--count", "5", "--size", "4194304"];
        if signal {
            args.push("--signal");
        }
        let res = job(2, &args, &env).launch().wait();
        for r in &res {
            assert!(r.ok(), "{r}");
        }
        let p = dir.join("t.pshmem-proxy-0.0.summary.json");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let sum: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rails: Vec<u64> = sum["rail_bytes"]
            .as_array()
            .unwrap_or_else(|| panic!("no rail_bytes: {sum}"))
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(rails.len(), 4, "{sum}");
        let mean = rails.iter().sum::<u64>() as f64 / 4.0;
        assert!(
            mean >= (5 << 22) as f64 / 4.0,
            "every byte counted: {rails:?}"
        );
        for b in &rails {
            let off = (*b as f64 - mean).abs() / mean;
            assert!(
                off <= 0.10,
                "{provider}, signal {signal}: rails {rails:?} off the mean by {off:.3}"
            );
        }
        assert_eq!(
            (&sum["gates"], &sum["holds"]),
            (&0.into(), &0.into()),
            "{sum}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
