//! Multi-process runtime tests (2 and 4 PEs): every host operation byte-exact over
//! `tcp;ofi_rxm`, over shm, over the simulated unordered fabric and on the direct path, with
//! identical results (digests) on every path; ordering that the reordering fabric would break
//! without the runtime's care (shown by a negative control); typed errors; collective
//! mismatches; and peers that die while others wait on them.

use std::{collections::HashMap, time::Duration};

use pshmem_tests::{RankResult, assert_all_ok};

mod rt;

use rt::{job, ops, proxied, proxied_efa};

fn direct_and_proxied_agree(n: usize) {
    let direct = ops(n, &[("PSHMEM_PROVIDER", "tcp")]);
    for provider in ["tcp", "sim"] {
        assert_eq!(
            ops(n, &proxied(provider)),
            direct,
            "{provider} through the proxy differs from the direct path"
        );
    }
}

#[test]
fn every_operation_2_pes_direct_tcp_sim_identical() {
    direct_and_proxied_agree(2);
}

#[test]
fn every_operation_4_pes_direct_tcp_sim_identical() {
    direct_and_proxied_agree(4);
}

#[test]
fn every_operation_over_shm_2_and_4_pes() {
    let a = ops(2, &proxied("shm"));
    let b = ops(4, &proxied("shm"));
    assert_eq!(a.len(), 2);
    assert_eq!(b.len(), 4);
}

/// Doorbell batching (`PSHMEM_OFI_MORE`: runs of posts with `FI_MORE`, the last of each proxy
/// batch without) over tcp with 3 rails and over shm, at 2 and 4 PEs: the direct path's bytes,
/// small payloads included (held posts copy them, since the proxy reuses its scratch at once).
#[test]
fn doorbell_batching_gives_the_direct_paths_bytes() {
    for n in [2, 4] {
        let direct = ops(n, &[("PSHMEM_PROVIDER", "tcp")]);
        for (provider, rails, more) in [("tcp", "3", "16"), ("tcp", "1", "2"), ("shm", "1", "16")] {
            let mut env = proxied(provider);
            env.extend([("PSHMEM_OFI_MORE", more), ("PSHMEM_RAILS", rails)]);
            assert_eq!(
                ops(n, &env),
                direct,
                "{n} PEs over {provider}, FI_MORE runs of {more}"
            );
        }
    }
}

#[test]
fn several_proxy_threads_and_rings() {
    let mut env = proxied("tcp");
    env.push(("PSHMEM_PROXY_THREADS", "2"));
    env.push(("PSHMEM_RINGS", "3"));
    env.push(("PSHMEM_RING_SLOTS", "16"));
    let many = ops(4, &env);
    assert_eq!(many, ops(4, &[("PSHMEM_PROVIDER", "tcp")]));
}

/// Emulated hosts mix the direct path and the proxy; their transport binds loopback (the
/// bootstrap met over it: every PE is on this machine), never the machine's external address
/// (issue 41, item 11).
#[test]
fn two_emulated_hosts_mix_direct_and_proxy() {
    let mut spec = job(4, &["rt-ops"], &[("PSHMEM_PROVIDER", "tcp")]);
    for r in 0..4 {
        spec = spec.rank_env(r, "PSHMEM_HOST_ID", format!("host{}", r / 2));
    }
    let res = spec.launch().wait();
    assert_all_ok(&res);
    for r in &res {
        let t = &r.fields("INFO")[0]["transport"];
        assert!(
            t.contains("(lo)"),
            "rank {} bound {t}, not loopback",
            r.rank
        );
    }
    let mixed: Vec<String> = res
        .iter()
        .map(|r| r.fields("DIGEST")[0]["value"].clone())
        .collect();
    assert_eq!(mixed, ops(4, &[("PSHMEM_PROVIDER", "tcp")]));
}

/// The negative control: on the reordering fabric, a put followed by a signal without any
/// ordering, and two `p`s without a fence, are seen out of order. So the put-with-signal and
/// fence checks that pass above on the same fabric are checks that can fail.
#[test]
fn the_simulated_fabric_reorders_what_the_runtime_keeps_in_order() {
    let res = job(2, &["rt-unordered", "--rounds", "300"], &proxied("sim"))
        .launch()
        .wait();
    assert_all_ok(&res);
    let sum = |k: &str| -> u64 {
        res.iter()
            .map(|r| r.fields("OK unordered")[0][k].parse::<u64>().unwrap())
            .sum()
    };
    assert!(sum("early") > 0, "no signal ever overtook its data");
    assert!(sum("inversions") > 0, "no flag ever overtook its data");
}

#[test]
fn bad_arguments_and_use_after_finalize_are_typed_errors() {
    for env in [
        proxied("tcp"),
        vec![("PSHMEM_PROVIDER", "tcp")],
        proxied("sim"),
        proxied_efa(),
    ] {
        let res = job(2, &["rt-errors"], &env).launch().wait();
        assert_all_ok(&res);
        for r in &res {
            // 12 argument errors, 11 operations x 3 PEs outside the job, 10 + 2 x 13 ranges
            // outside the heap.
            assert_eq!(r.fields("OK error").len(), 12 + 33 + 36, "{r}");
            assert_eq!(r.fields("OK zero-length").len(), 1, "{r}");
        }
    }
}

/// The host API by address (what the C ABI and Python call) on the host heap: its edges,
/// zero-byte calls, refused streams, put-with-signal nbi, waits and atomic resets under a
/// peer's signals, aligned allocation, peer addresses, a collective; on the direct path and
/// through the proxy (the reordering fabric with EFA's capabilities too).
#[test]
fn the_host_api_by_address_on_the_host_heap() {
    for env in [
        vec![("PSHMEM_PROVIDER", "tcp")],
        proxied("sim"),
        proxied_efa(),
    ] {
        let res = job(2, &["rt-by-addr"], &env).launch().wait();
        assert_all_ok(&res);
        for r in &res {
            assert_eq!(r.fields("OK by-addr").len(), 19, "{r}");
        }
    }
}

fn err(r: &RankResult) -> HashMap<String, String> {
    r.fields("ERR")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("rank {} printed no ERR line:\n{r}", r.rank))
}

#[test]
fn allocations_that_differ_across_pes_fail_on_every_pe() {
    for how in ["size", "order"] {
        let res = job(3, &["rt-mismatch", "--how", how], &[]).launch().wait();
        for r in &res {
            assert!(!r.ok(), "{r}");
            assert_eq!(err(r)["kind"], "CollectiveMismatch", "{r}");
            assert!(err(r)["msg"].contains("PE_0:"), "{r}");
        }
    }
}

fn killed_peer(phase: &str, env: &[(&str, &str)]) {
    let res = job(3, &["rt-kill", "--victim", "1", "--phase", phase], env)
        .launch()
        .wait();
    let dying: u128 = res[1].fields("DYING")[0]["epoch_ms"].parse().unwrap();
    for r in res.iter().filter(|r| r.rank != 1) {
        assert!(
            !r.ok(),
            "rank {} succeeded although PE 1 died:\n{r}",
            r.rank
        );
        let f = err(r);
        assert!(
            f["kind"] == "PeerDied" || f["kind"] == "OpFailed",
            "{phase}: {r}"
        );
        assert_eq!(
            f["pe"], "1",
            "{phase}: the error must name the dead PE:\n{r}"
        );
        let at: u128 = f["epoch_ms"].parse().unwrap();
        assert!(
            at.saturating_sub(dying) <= 5000,
            "{phase}: rank {} noticed after {} ms",
            r.rank,
            at - dying
        );
    }
}

#[test]
fn a_dead_peer_fails_barrier_quiet_and_wait_within_5s_over_tcp() {
    for phase in ["barrier", "quiet", "wait"] {
        killed_peer(phase, &proxied("tcp"));
    }
}

#[test]
fn a_dead_peer_fails_barrier_quiet_and_wait_within_5s_on_the_direct_path() {
    for phase in ["barrier", "quiet", "wait"] {
        killed_peer(phase, &[("PSHMEM_PROVIDER", "tcp")]);
    }
}

#[test]
fn a_dead_peer_fails_barrier_quiet_and_wait_within_5s_on_the_simulated_fabric() {
    for phase in ["barrier", "quiet", "wait"] {
        killed_peer(phase, &proxied("sim"));
        killed_peer(phase, &proxied_efa());
    }
}

/// PEs 2 and 3 stay away from a barrier (asleep, or stopped by SIGSTOP): PEs 0 and 1 time out
/// (PSHMEM_OP_TIMEOUT=1) and their error names PEs 2 and 3: "have not arrived" where their
/// barrier state can be read (the direct path always; through the proxy when the peer
/// answers), "did not answer" for a stopped peer behind a fabric that needs its progress.
fn late_peers(how: &str, env: &[(&str, &str)], want: &str) {
    let mut env = env.to_vec();
    env.push(("PSHMEM_OP_TIMEOUT", "1"));
    let spec =
        job(4, &["rt-late", "--late", "2,3", "--how", how], &env).timeout(Duration::from_secs(60));
    let mut j = spec.launch();
    // The stopped ranks are ended once the others are done.
    let mut on_time: Vec<_> = j.children.drain(..).collect();
    let late: Vec<_> = on_time.split_off(2);
    let res = spec.job(on_time).wait();
    for (_, mut c) in late {
        let _ = c.kill();
        let _ = c.wait();
    }
    for r in &res {
        let f = err(r);
        assert_eq!(f["kind"], "NotArrived", "{how} {env:?}: {r}");
        assert!(
            f["msg"].contains(&want.replace(' ', "_")),
            "{how} {env:?}: want \"{want}\" in {r}"
        );
        assert!(!f["msg"].contains("Some("), "{r}");
    }
}

#[test]
fn a_barrier_timeout_names_the_pes_that_have_not_arrived() {
    let arrived = "PEs 2, 3 have not arrived";
    late_peers("sleep", &[("PSHMEM_PROVIDER", "tcp")], arrived);
    late_peers("stop", &[("PSHMEM_PROVIDER", "tcp")], arrived);
    late_peers("sleep", &proxied("tcp"), arrived);
    late_peers("stop", &proxied("tcp"), "PEs 2, 3 did not answer");
    late_peers("sleep", &proxied("sim"), arrived);
    late_peers("sleep", &proxied_efa(), arrived);
}

/// A blocking put that times out (its target stopped, behind a proxy) ends the data path: the
/// put returns Timeout only once the proxies are stopped (its source is freed and unmapped right
/// after, and nothing reads it), and the next call fails at once with an error naming the
/// timeout instead of waiting for another one.
#[test]
fn a_timed_out_put_stops_the_proxies_before_returning() {
    let mut env = proxied("tcp");
    env.push(("PSHMEM_OP_TIMEOUT", "1"));
    let spec =
        job(2, &["rt-late", "--late", "1", "--how", "put"], &env).timeout(Duration::from_secs(60));
    let mut j = spec.launch();
    let mut on_time: Vec<_> = j.children.drain(..).collect();
    let late: Vec<_> = on_time.split_off(1);
    let res = spec.job(on_time).wait();
    for (_, mut c) in late {
        let _ = c.kill();
        let _ = c.wait();
    }
    let r = &res[0];
    let stuck = r.fields("STUCK");
    let stuck = stuck
        .first()
        .unwrap_or_else(|| panic!("no STUCK line:\n{r}"));
    assert_eq!(stuck["first"], "Timeout", "{r}");
    let ms: u64 = stuck["ms"].parse().unwrap();
    assert!(ms < 500, "the call after the timeout took {ms} ms:\n{r}");
    let f = err(r);
    assert_eq!(f["kind"], "OpFailed", "{r}");
    assert!(f["msg"].contains("PSHMEM_OP_TIMEOUT"), "{r}");
}

/// `PSHMEM_TRACE`: PE 0's proxy thread writes a Chrome trace and a summary that account for
/// exactly the puts and `p`s it was given, each operation begun and ended once.
#[test]
fn the_proxy_trace_accounts_for_every_operation() {
    let dir = std::env::temp_dir().join(format!("pshmem-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("t");
    let mut env = proxied("tcp");
    env.push(("PSHMEM_TRACE", prefix.to_str().unwrap()));
    let (count, size) = (50u64, 100_000u64);
    let res = job(2, &["rt-trace", "--count", "50", "--size", "100000"], &env)
        .launch()
        .wait();
    for r in &res {
        assert!(r.ok(), "{r}");
    }
    let read = |name: &str| -> serde_json::Value {
        let p = dir.join(format!("t.pshmem-proxy-0.0.{name}"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let sum = read("summary.json");
    assert_eq!(sum["per_kind"]["put"]["operations"], count, "{sum}");
    assert_eq!(sum["per_kind"]["put"]["bytes"], count * size, "{sum}");
    assert!(
        sum["per_kind"]["put"]["messages"].as_u64().unwrap() >= count,
        "{sum}"
    );
    assert_eq!(sum["per_kind"]["p"]["operations"], count, "{sum}");
    assert_eq!(sum["per_kind"]["p"]["messages"], count, "{sum}");
    assert_eq!(sum["unfinished"], 0, "{sum}");
    assert_eq!(sum["events_dropped"], 0, "{sum}");
    // The CPU profile: time in each phase of the turn, and no more than the trace's span in
    // all of them (the thread did issue and progress work).
    let cost = |k: &str| {
        sum["cost_us"][k]
            .as_f64()
            .unwrap_or_else(|| panic!("cost {k}: {sum}"))
    };
    let phases = ["drain", "issue", "progress", "flush"].map(cost);
    assert!(cost("issue") > 0.0 && cost("progress") > 0.0, "{sum}");
    for k in [
        "copy_start",
        "copy_done",
        "transport_poll",
        "transport_post",
    ] {
        cost(k); // present (a number) even where the path has no copies
    }
    assert!(
        cost("transport_poll") > 0.0 && cost("transport_poll") <= cost("progress"),
        "the transport's progress calls are a part of the progress phase: {sum}"
    );
    assert!(
        phases.iter().sum::<f64>() >= sum["busy_us"].as_f64().unwrap() * 0.5,
        "the phases account for the busy time: {sum}"
    );
    assert!(
        sum["ring_to_post_us"]["count"].as_u64().unwrap() >= 2 * count,
        "{sum}"
    );
    let chrome = read("json");
    let ev = chrome["traceEvents"].as_array().unwrap();
    let count_of = |ph: &str, name: &str| {
        ev.iter()
            .filter(|e| e["ph"] == ph && (name.is_empty() || e["name"] == name))
            .count() as u64
    };
    assert_eq!(count_of("b", "put"), count);
    assert_eq!(count_of("e", "put"), count);
    assert_eq!(
        count_of("b", ""),
        count_of("e", ""),
        "every operation ends once"
    );
    assert_eq!(
        count_of("n", "post"),
        sum["messages"].as_u64().unwrap(),
        "one instant per message"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The host-staged GPU path's protocol on a host heap standing in for GPU memory: landing
/// slots, target-side copies and AMOs, gates for put-with-signal and fence.
fn staged(provider: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut v = proxied(provider);
    v.push(("PSHMEM_EMULATE_GPU_HEAP", "staged"));
    // Small slots: multi-chunk transfers and running out of landing credits are exercised.
    v.push(("PSHMEM_STAGING_CHUNK", "65536"));
    v.push(("PSHMEM_GPU_LANDING_SLOTS", "2"));
    v
}

#[test]
fn the_host_staged_gpu_path_matches_the_direct_path_over_tcp_and_the_reordering_fabric() {
    for n in [2, 4] {
        let direct = ops(n, &[("PSHMEM_PROVIDER", "tcp")]);
        assert_eq!(ops(n, &staged("tcp")), direct, "{n} PEs, staged over tcp");
        assert_eq!(ops(n, &staged("sim")), direct, "{n} PEs, staged over sim");
    }
    // Several rings per PE (counted puts from three threads, one ring each) through the
    // landing slots of the reordering fabric.
    let mut env = staged("sim");
    env.push(("PSHMEM_RINGS", "4"));
    assert_eq!(
        ops(4, &env),
        ops(4, &[("PSHMEM_PROVIDER", "tcp")]),
        "staged over sim with 4 rings"
    );
    // Several tcp endpoints: staged chunks take turns over the rails.
    let mut env = staged("tcp");
    env.push(("PSHMEM_RAILS", "3"));
    assert_eq!(
        ops(4, &env),
        ops(4, &[("PSHMEM_PROVIDER", "tcp")]),
        "staged over 3 rails"
    );
}

/// A GPU heap registered with the transport (as by DMA-BUF) on a host heap standing in for it:
/// data by RMA into the heap, AMOs, signals (tagged on the reordering fabric), self operations
/// and raw-address staging through the device interface.
#[test]
fn the_registered_gpu_heap_path_matches_the_direct_path_over_tcp_and_the_reordering_fabric() {
    let direct = ops(4, &[("PSHMEM_PROVIDER", "tcp")]);
    for provider in ["tcp", "sim"] {
        let mut env = proxied(provider);
        env.push(("PSHMEM_EMULATE_GPU_HEAP", "registered"));
        assert_eq!(ops(4, &env), direct, "registered over {provider}");
    }
}

#[test]
fn a_dead_peer_fails_waits_on_the_host_staged_gpu_path_within_5s() {
    for phase in ["barrier", "quiet", "wait"] {
        killed_peer(phase, &staged("tcp"));
    }
}

/// The host-staged GPU path needs 8 bytes of remote CQ data: on the efa profile it refuses at
/// init, naming the reason, instead of hanging or corrupting.
#[test]
fn the_host_staged_gpu_path_refuses_the_efa_profile_with_a_clear_error() {
    let mut env = staged("sim");
    env.push(("PSHMEM_SIM_PROFILE", "efa"));
    let res = job(2, &["rt-ops"], &env).launch().wait();
    assert!(
        res.iter().all(|r| !r.ok()),
        "staged over the efa profile started"
    );
    assert!(
        res.iter().any(|r| r
            .stderr
            .contains("needs writes with 8 bytes of remote CQ data")),
        "no reason given:\n{}",
        res.iter().map(|r| r.to_string()).collect::<String>()
    );
}
