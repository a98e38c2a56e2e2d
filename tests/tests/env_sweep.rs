//! The environment sweep: every variable of the table (`pshmem_env::VARS`), set to values its
//! kind or bounds refuse, must stop a one-PE job at init, at once, with a typed error naming the
//! variable: no crash, no hang, no silent acceptance; so must a provider, topology file or
//! trace folder that does not exist, and an unreadable log filter gives a warning naming it.
//! The other text and path variables (a host id, a folder or interface some paths only use)
//! are listed as taking any value. `scripts/env-sweep.sh` runs this and keeps the table as JSON
//! (`PSHMEM_SWEEP_JSON`).

use std::{
    io::Read,
    process::{Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

use pshmem_env::{EnvVar, Kind, VARS};

const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");
/// Longest a refused setting may take to stop the job.
const LIMIT: Duration = Duration::from_secs(10);

/// Values `v` must refuse: malformed for its kind, and past its bounds.
fn bad_values(v: &EnvVar) -> Vec<String> {
    let mut out: Vec<String> = match v.kind {
        Kind::Count => vec!["abc".into(), "-1".into(), "1.5".into()],
        Kind::Size => vec!["12Q".into(), "-1".into()],
        Kind::Bool => vec!["maybe".into()],
        Kind::Seconds | Kind::Number => vec!["abc".into(), "-1".into(), "nan".into()],
        Kind::Millis | Kind::Micros => vec!["1.5".into(), "abc".into(), "-5".into()],
        Kind::Hex => vec!["zz".into(), "1234567890abcdef0".into()],
        Kind::Address => vec!["nohostport".into(), "host:99999".into()],
        Kind::CpuList => vec!["5-3".into(), "abc".into(), "0-4294967295".into()],
        Kind::Choice(_) => vec!["no-such-choice".into()],
        Kind::Path | Kind::Text => vec![],
    };
    let r = v.range;
    if r.hi.is_finite() && r.hi < 1e15 {
        out.push(format!("{}", (r.hi + 1.0).floor()));
    }
    if r.lo.is_finite() && r.lo >= 1.0 && !matches!(v.kind, Kind::Seconds | Kind::Number) {
        out.push(format!("{}", (r.lo - 1.0).floor()));
    }
    if r.lo.is_finite() && r.lo > 0.0 && matches!(v.kind, Kind::Seconds | Kind::Number) {
        out.push(format!("{}", r.lo / 2.0));
    }
    out
}

/// Text and path values that name nothing usable here: refused like malformed ones.
const UNUSABLE: &[(&str, &str)] = &[
    ("PSHMEM_PROVIDER", "nosuch"),
    ("PSHMEM_TOPOLOGY_XML", "/nonexistent/topology.xml"),
    ("PSHMEM_TRACE", "/nonexistent/dir/trace"),
];

/// What one setting did.
#[derive(Debug)]
enum Outcome {
    /// Refused at init, naming the variable, within `LIMIT`.
    Refused,
    /// Something else (the reason).
    Wrong(String),
}

/// A one-PE job with `name=value`.
fn run(name: &str, value: &str) -> Outcome {
    let mut cmd = Command::new(BIN);
    cmd.args(["rt-ops", "--sizes", "8", "--rounds", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("PSHMEM_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("PSHMEM_RANK", "0")
        .env("PSHMEM_WORLD_SIZE", "1")
        .env("PSHMEM_PROVIDER", "tcp")
        .env(name, value);
    let t = Instant::now();
    let mut child = cmd.spawn().expect("start the testbin");
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    let _ = child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out);
    let Some(status) = status else {
        return Outcome::Wrong(format!("no exit within {LIMIT:?} (hang)"));
    };
    if name == pshmem_env::LOG.name {
        // Logging cannot stop a job: a filter it cannot read is a warning naming it.
        let mut e = String::new();
        let _ = child.stderr.take().expect("stderr").read_to_string(&mut e);
        return match e.lines().any(|l| l.contains("warning") && l.contains(name)) {
            true if status.success() => Outcome::Refused,
            _ => Outcome::Wrong(format!("{status}, no warning naming it: {e}")),
        };
    }
    let err = out.lines().find(|l| l.starts_with("ERR "));
    match err {
        None if status.success() => Outcome::Wrong("accepted silently".into()),
        None => Outcome::Wrong(format!("{status} without an ERR line (a crash?)")),
        Some(l) if l.contains(name) => Outcome::Refused,
        Some(l) => Outcome::Wrong(format!("refused without naming it: {l}")),
    }
}

#[test]
fn every_invalid_setting_is_refused_naming_the_variable() {
    let mut cases: Vec<(&'static str, String)> = VARS
        .iter()
        .flat_map(|v| bad_values(v).into_iter().map(move |b| (v.name, b)))
        .collect();
    cases.extend(UNUSABLE.iter().map(|(n, v)| (*n, v.to_string())));
    cases.push((pshmem_env::LOG.name, "[[not-a-filter".into()));
    let free: Vec<&str> = VARS
        .iter()
        .filter(|v| matches!(v.kind, Kind::Path | Kind::Text))
        .map(|v| v.name)
        .filter(|n| *n != pshmem_env::LOG.name && UNUSABLE.iter().all(|(u, _)| u != n))
        .collect();
    let next = Mutex::new(cases.iter());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while let Some((name, value)) = {
                    let mut it = next.lock().unwrap();
                    it.next()
                } {
                    let o = run(name, value);
                    results.lock().unwrap().push((*name, value.clone(), o));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let wrong: Vec<String> = results
        .iter()
        .filter_map(|(n, v, o)| match o {
            Outcome::Wrong(why) => Some(format!("{n}={v:?}: {why}")),
            Outcome::Refused => None,
        })
        .collect();
    println!(
        "env sweep: {} invalid settings of {} variables, {} refused naming the variable; {} \
         variables take any text or path here: {}",
        results.len(),
        VARS.len() - free.len(),
        results.len() - wrong.len(),
        free.len(),
        free.join(" ")
    );
    if let Some(path) = std::env::var_os("PSHMEM_SWEEP_JSON") {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(n, v, o)| {
                serde_json::json!({
                    "variable": n,
                    "value": v,
                    "refused": matches!(o, Outcome::Refused),
                    "why": match o { Outcome::Wrong(w) => w.clone(), Outcome::Refused => String::new() },
                })
            })
            .collect();
        let doc = serde_json::json!({ "settings": rows, "free_text": free });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    }
    assert!(
        wrong.is_empty(),
        "settings not refused properly:\n{}",
        wrong.join("\n")
    );
}
