//! Multi-process tests of the collectives on the host heap (`pshmem::coll`): every collective
//! on the world team, an even/odd split, a strided team and one-PE teams, at sizes 0, 1, odd and
//! over 1 MiB, every reduction type and operator (in place too), checked against references
//! that every PE computes itself — on 1, 2, 3, 4 and 8 PEs, on the direct path, through the
//! proxy over tcp and over the simulated fabric that reorders, and on two emulated hosts
//! (direct inside, proxy across), with the same digest on every path. A PE killed during a
//! collective makes the others' collective fail within 5 s, naming it.

use std::time::Duration;

use pshmem_tests::{JobSpec, RankResult, assert_all_ok};

const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");

fn job(n: usize, args: &[&str], env: &[(&str, &str)]) -> JobSpec {
    let mut j = JobSpec::new(BIN, n, args)
        .timeout(Duration::from_secs(300))
        .env("PSHMEM_SYMMETRIC_SIZE", "64M");
    for (k, v) in env {
        j = j.env(k, v);
    }
    j
}

const TCP: &[(&str, &str)] = &[("PSHMEM_DISABLE_P2P", "1"), ("PSHMEM_PROVIDER", "tcp")];
const SIM: &[(&str, &str)] = &[
    ("PSHMEM_DISABLE_P2P", "1"),
    ("PSHMEM_PROVIDER", "sim"),
    ("PSHMEM_SIM_DELAY_US", "100"),
];
const DIRECT: &[(&str, &str)] = &[("PSHMEM_PROVIDER", "tcp")];

fn digests(res: &[RankResult]) -> Vec<String> {
    assert_all_ok(res);
    res.iter()
        .map(|r| {
            assert_eq!(r.fields("OK coll all").len(), 1, "rank {}:\n{r}", r.rank);
            r.fields("DIGEST")[0]["value"].clone()
        })
        .collect()
}

fn coll(n: usize, big: bool, env: &[(&str, &str)]) -> Vec<String> {
    let args: &[&str] = if big {
        &["rt-coll", "--big"]
    } else {
        &["rt-coll"]
    };
    digests(&job(n, args, env).launch().wait())
}

#[test]
fn collectives_on_2_and_3_pes_agree_on_every_path() {
    for n in [2, 3] {
        let direct = coll(n, true, DIRECT);
        assert_eq!(
            coll(n, true, TCP),
            direct,
            "{n} PEs: tcp differs from direct"
        );
        assert_eq!(
            coll(n, false, SIM),
            coll(n, false, DIRECT),
            "{n} PEs: sim differs"
        );
    }
}

/// EFA's capabilities on the reordering fabric (signals counted through 32-bit immediates, AMOs
/// in the proxy), over 4 simulated NICs that report 5 % of completions twice.
const SIM_EFA: &[(&str, &str)] = &[
    ("PSHMEM_DISABLE_P2P", "1"),
    ("PSHMEM_PROVIDER", "sim"),
    ("PSHMEM_SIM_DELAY_US", "100"),
    ("PSHMEM_SIM_PROFILE", "efa"),
    ("PSHMEM_RAILS", "4"),
    ("PSHMEM_SIM_DUPLICATE", "0.05"),
];

#[test]
fn collectives_agree_on_the_efa_profile() {
    for n in [2, 4, 8] {
        assert_eq!(
            coll(n, false, SIM_EFA),
            coll(n, false, DIRECT),
            "{n} PEs: the efa profile differs"
        );
    }
}

#[test]
fn collectives_on_1_4_and_8_pes() {
    coll(1, true, DIRECT);
    let four = coll(4, true, DIRECT);
    assert_eq!(coll(4, false, SIM).len(), 4);
    assert_eq!(coll(4, true, TCP), four, "4 PEs: tcp differs from direct");
    coll(8, false, DIRECT);
    coll(8, false, TCP);
}

#[test]
fn collectives_on_two_emulated_hosts_mix_direct_and_proxy() {
    let mut spec = job(4, &["rt-coll", "--big"], DIRECT);
    for r in 0..4 {
        spec = spec.rank_env(r, "PSHMEM_HOST_ID", format!("host{}", r / 2));
    }
    let mixed = digests(&spec.launch().wait());
    assert_eq!(mixed, coll(4, true, DIRECT));
}

fn err(r: &RankResult) -> std::collections::HashMap<String, String> {
    r.fields("ERR")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("rank {} printed no ERR line:\n{r}", r.rank))
}

#[test]
fn a_pe_killed_during_a_collective_fails_the_others_within_5s() {
    for (phase, env) in [("reduce", TCP), ("fcollect", DIRECT), ("reduce", DIRECT)] {
        let res = job(3, &["rt-kill", "--victim", "1", "--phase", phase], env)
            .launch()
            .wait();
        let dying: u128 = res[1].fields("DYING")[0]["epoch_ms"].parse().unwrap();
        for r in res.iter().filter(|r| r.rank != 1) {
            let f = err(r);
            assert!(
                f["kind"] == "PeerDied" || f["kind"] == "OpFailed",
                "{phase}: {r}"
            );
            assert_eq!(f["pe"], "1", "{phase}: the error must name PE 1:\n{r}");
            let at: u128 = f["epoch_ms"].parse().unwrap();
            assert!(
                at.saturating_sub(dying) <= 5000,
                "{phase}: rank {} noticed after {} ms",
                r.rank,
                at - dying
            );
        }
    }
}
