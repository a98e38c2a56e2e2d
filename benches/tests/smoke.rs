//! The benchmarks still run and produce well-formed results (tiny sizes; no timing asserted).

use std::time::Duration;

use pshmem_tests::{JobSpec, assert_all_ok};

#[test]
fn fabric_bench_runs_and_writes_json() {
    let json = std::env::temp_dir().join(format!("fabric-bench-smoke-{}.json", std::process::id()));
    let res = JobSpec::new(
        env!("CARGO_BIN_EXE_fabric-bench"),
        2,
        &[
            "--min",
            "4096",
            "--max",
            "65536",
            "--reps",
            "1",
            "--lat-iters",
            "200",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .timeout(Duration::from_secs(120))
    .launch()
    .wait();
    assert_all_ok(&res);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let rows = doc["bandwidth"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for r in rows {
        assert!(r["safe_gbps"].as_f64().unwrap() > 0.0 && r["c_gbps"].as_f64().unwrap() > 0.0);
    }
    assert!(doc["latency"]["safe_us"].as_f64().unwrap() > 0.0);
}

#[test]
fn pshmem_perf_runs_every_test_on_both_paths() {
    for p2p in ["0", "1"] {
        let json = std::env::temp_dir().join(format!(
            "pshmem-perf-smoke-{}-{p2p}.json",
            std::process::id()
        ));
        let res = JobSpec::new(
            env!("CARGO_BIN_EXE_pshmem-perf"),
            2,
            &[
                "all",
                "-b",
                "8",
                "-e",
                "4096",
                "-f",
                "8",
                "-n",
                "5",
                "-w",
                "1",
                "--json",
                json.to_str().unwrap(),
            ],
        )
        .env("PSHMEM_DISABLE_P2P", p2p)
        .env("PSHMEM_SYMMETRIC_SIZE", "16M")
        .env("PSHMEM_PROVIDER", "tcp")
        .timeout(Duration::from_secs(120))
        .launch()
        .wait();
        assert_all_ok(&res);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(doc["path"], if p2p == "1" { "proxy" } else { "direct" });
        let tests: std::collections::BTreeSet<&str> = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert!(r["median"].as_f64().unwrap() > 0.0, "{r}");
                r["test"].as_str().unwrap().split(' ').next().unwrap()
            })
            .collect();
        assert_eq!(
            tests.len(),
            15,
            "every test, counted signals and the collectives included: {tests:?}"
        );
    }
}

#[test]
fn datapath_bench_runs_both_comparisons() {
    let json = std::env::temp_dir().join(format!("datapath-smoke-{}.json", std::process::id()));
    let res = JobSpec::new(
        env!("CARGO_BIN_EXE_datapath-bench"),
        2,
        &[
            "vs-raw",
            "--min",
            "65536",
            "--max",
            "131072",
            "--reps",
            "1",
            "--lat-iters",
            "100",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .env("PSHMEM_SYMMETRIC_SIZE", "16M")
    .env("PSHMEM_PROVIDER", "tcp")
    .timeout(Duration::from_secs(120))
    .launch()
    .wait();
    assert_all_ok(&res);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["bandwidth"].as_array().unwrap().len(), 2);
    assert!(doc["latency"]["runtime_pingpong_us"].as_f64().unwrap() > 0.0);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_datapath-bench"))
        .args([
            "rate",
            "--count",
            "20000",
            "--reps",
            "1",
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(doc["rows"].as_array().unwrap().len(), 3);
}
