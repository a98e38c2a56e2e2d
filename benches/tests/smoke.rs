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
