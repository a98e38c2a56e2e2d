//! Helpers shared by the runtime test files: a job of the test binary, the environments that
//! force the proxy over a transport, and `rt-ops` with its digests.

use std::time::Duration;

use pshmem_tests::{JobSpec, assert_all_ok};

pub const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");

pub fn job(n: usize, args: &[&str], env: &[(&str, &str)]) -> JobSpec {
    let mut j = JobSpec::new(BIN, n, args)
        .timeout(Duration::from_secs(120))
        .env("PSHMEM_SYMMETRIC_SIZE", "64M");
    for (k, v) in env {
        j = j.env(k, v);
    }
    j
}

/// Forced through the proxy over a transport.
pub fn proxied(provider: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![("PSHMEM_DISABLE_P2P", "1"), ("PSHMEM_PROVIDER", provider)];
    if provider == "sim" {
        // Random delivery delays make the simulated fabric reorder for real (see the negative
        // control below).
        v.push(("PSHMEM_SIM_DELAY_US", "200"));
    }
    v
}

/// Through the proxy over the reordering fabric with EFA's capabilities (signals counted through
/// tags in 32-bit immediates, AMOs in the target's proxy).
pub fn proxied_efa() -> Vec<(&'static str, &'static str)> {
    let mut v = proxied("sim");
    v.push(("PSHMEM_SIM_PROFILE", "efa"));
    v
}

/// Runs `rt-ops` and returns each rank's digest, checking that every part passed.
pub fn ops(n: usize, env: &[(&str, &str)]) -> Vec<String> {
    let res = job(n, &["rt-ops"], env).launch().wait();
    assert_all_ok(&res);
    res.iter()
        .map(|r| {
            for part in [
                "OK p-g",
                "OK put-signal",
                "OK counted",
                "OK fence",
                "OK atomics",
                "OK channels",
            ] {
                assert_eq!(
                    r.fields(part).len(),
                    1,
                    "rank {} skipped {part}:\n{r}",
                    r.rank
                );
            }
            assert_eq!(r.fields("OK rma").len(), 5, "rank {}:\n{r}", r.rank);
            r.fields("DIGEST")[0]["value"].clone()
        })
        .collect()
}
