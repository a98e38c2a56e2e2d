//! Multi-process bootstrap tests on loopback: collectives byte-exact at N = 1, 2, 4, 8, and every
//! fault the bootstrap must turn into a typed error rather than a hang.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use pshmem_bootstrap::frame::{self, Kind};
use pshmem_tests::{JobSpec, RankResult, assert_all_ok, epoch_ms};

const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");

fn job(n: usize, args: &[&str]) -> JobSpec {
    JobSpec::new(BIN, n, args).timeout(Duration::from_secs(90))
}

/// Launches a `bs-loop` job with `args` and returns once every rank has joined and done its
/// first collective (a fault injected before the join would be a join timeout, not a death).
fn launch_joined(n: usize, args: &[&str]) -> pshmem_tests::Job {
    let dir = std::env::temp_dir().join(format!(
        "pshmem-bs-ready-{}-{}",
        std::process::id(),
        epoch_ms()
    ));
    std::fs::create_dir_all(&dir).expect("ready dir");
    let mut all = vec![
        "bs-loop",
        "--ready-dir",
        dir.to_str().expect("utf-8 temp dir"),
    ];
    all.extend_from_slice(args);
    let job = job(n, &all).launch();
    let t = Instant::now();
    while (0..n).any(|r| !dir.join(r.to_string()).exists()) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the ranks did not all join within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir_all(&dir);
    job
}

fn err_fields(r: &RankResult) -> std::collections::HashMap<String, String> {
    r.fields("ERR")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("rank {} printed no ERR line:\n{r}", r.rank))
}

const SIZES: &str = "0,1,7,4096,65537,1048576,16777216";

#[test]
fn collectives_1_rank() {
    assert_all_ok(
        &job(1, &["bs-collectives", "--sizes", SIZES])
            .launch()
            .wait(),
    );
}

#[test]
fn collectives_2_ranks() {
    assert_all_ok(
        &job(2, &["bs-collectives", "--sizes", SIZES])
            .launch()
            .wait(),
    );
}

#[test]
fn collectives_4_ranks() {
    assert_all_ok(
        &job(4, &["bs-collectives", "--sizes", SIZES])
            .launch()
            .wait(),
    );
}

#[test]
fn collectives_8_ranks() {
    let res = job(8, &["bs-collectives", "--sizes", SIZES])
        .launch()
        .wait();
    assert_all_ok(&res);
    for r in &res {
        assert_eq!(
            r.fields("OK size=").len(),
            7,
            "rank {} did not check every size",
            r.rank
        );
    }
}

/// Survivors must fail naming `dead`, within 5 s of `t0` (epoch ms).
fn assert_death_reported(res: &[RankResult], dead: usize, t0: u128) {
    assert_told(res.iter().filter(|r| r.rank != dead), dead, t0);
}

/// Each of `ranks` must fail naming `dead`, within 5 s of `t0` (epoch ms).
fn assert_told<'a>(ranks: impl Iterator<Item = &'a RankResult>, dead: usize, t0: u128) {
    for r in ranks {
        assert!(
            !r.ok(),
            "rank {} succeeded although rank {dead} died:\n{r}",
            r.rank
        );
        let f = err_fields(r);
        assert_eq!(f["kind"], "PeerDied", "{r}");
        assert_eq!(f["dead"], dead.to_string(), "{r}");
        let at: u128 = f["epoch_ms"].parse().unwrap();
        assert!(
            at.saturating_sub(t0) <= 5000,
            "rank {} noticed after {} ms",
            r.rank,
            at - t0
        );
    }
}

#[test]
fn rank_killing_itself_mid_collective_is_reported_within_5s() {
    let res = job(4, &["bs-loop", "--victim", "2", "--die-at", "20"])
        .launch()
        .wait();
    let dying = &res[2].fields("DYING")[0]["epoch_ms"];
    assert_death_reported(&res, 2, dying.parse().unwrap());
}

/// A rank whose data path lost rank 1 reports it and leaves at once: the others must fail
/// naming rank 1 (relayed by rank 0), not the reporter, whose exit they also see. Rank 1 itself
/// is alive here, so only the death report can name it.
#[test]
fn a_death_seen_by_the_data_path_is_reported_to_every_rank() {
    for reporter in [2, 0] {
        let rep = reporter.to_string();
        let args = [
            "bs-loop",
            "--size",
            "16",
            "--sleep-ms",
            "5",
            "--die-at",
            "20",
            "--reporter",
            &rep,
            "--lost",
            "1",
        ];
        let res = job(4, &args).launch().wait();
        let t0: u128 = res[reporter].fields("REPORTED")[0]["epoch_ms"]
            .parse()
            .unwrap();
        assert_told(
            res.iter().filter(|r| r.rank != reporter && r.rank != 1),
            1,
            t0,
        );
    }
}

#[test]
fn kill_9_from_outside_mid_collective_is_reported_within_5s() {
    let job = launch_joined(4, &["--size", "1048576"]);
    let t0 = epoch_ms();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.pid(3) as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let res = job.wait();
    assert_death_reported(&res, 3, t0);
}

#[test]
fn silent_peer_is_declared_dead_by_heartbeat_within_5s() {
    // SIGSTOP keeps the socket open but stops heartbeats: only the heartbeat timeout can tell.
    let job = launch_joined(3, &["--size", "16", "--sleep-ms", "20"]);
    let pid = nix::unistd::Pid::from_raw(job.pid(1) as i32);
    let t0 = epoch_ms();
    nix::sys::signal::kill(pid, nix::sys::signal::SIGSTOP).unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(8));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
    });
    let res = job.wait();
    killer.join().unwrap();
    assert_death_reported(&res, 1, t0);
}

#[test]
fn silent_root_is_declared_dead_within_5s() {
    let job = launch_joined(2, &["--size", "16", "--sleep-ms", "20"]);
    let pid = nix::unistd::Pid::from_raw(job.pid(0) as i32);
    let t0 = epoch_ms();
    nix::sys::signal::kill(pid, nix::sys::signal::SIGSTOP).unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(8));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
    });
    let res = job.wait();
    killer.join().unwrap();
    assert_death_reported(&res, 0, t0);
}

#[test]
fn missing_rank_fails_the_join_naming_it() {
    let mut spec = job(3, &["bs-init"]).env("PSHMEM_BOOTSTRAP_TIMEOUT", "2");
    spec.ranks = vec![0, 1];
    let t = Instant::now();
    let res = spec.launch().wait();
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    for r in &res {
        let f = err_fields(r);
        assert_eq!(f["kind"], "JoinTimeout", "{r}");
        assert!(f["msg"].contains("ranks_[2]_did_not_join"), "{r}");
    }
}

/// Two processes claim rank 1. Whether the second arrives during the join or after the world
/// has formed (the ranks stay 3 s, so it cannot miss the job), every process must fail and
/// rank 0 must name the duplicated rank.
#[test]
fn duplicate_rank_fails_the_join() {
    let mut spec = job(3, &["bs-init", "--hold-ms", "3000"]).env("PSHMEM_BOOTSTRAP_TIMEOUT", "10");
    spec.ranks = vec![0, 1, 1, 2];
    let t = Instant::now();
    let res = spec.launch().wait();
    assert!(t.elapsed() < Duration::from_secs(15));
    assert!(
        res.iter().all(|r| !r.ok()),
        "a rank succeeded despite the duplicate:\n{}",
        res.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(err_fields(&res[0])["kind"], "DuplicateRank", "{}", res[0]);
    assert!(err_fields(&res[0])["msg"].contains("rank_1_joined_twice"));
}

/// The duplicate arrives well after the job started: the join guard must still catch it.
#[test]
fn late_duplicate_rank_aborts_the_running_job() {
    let spec = job(3, &["bs-init", "--hold-ms", "4000"]).env("PSHMEM_BOOTSTRAP_TIMEOUT", "10");
    let mut children: Vec<_> = (0..3).map(|r| spec.spawn(r)).collect();
    std::thread::sleep(Duration::from_millis(1500));
    children.push(spec.spawn(2));
    let res = spec.job(children).wait();
    assert!(
        res.iter().all(|r| !r.ok()),
        "a rank succeeded despite the duplicate"
    );
    assert_eq!(err_fields(&res[0])["kind"], "DuplicateRank", "{}", res[0]);
    assert!(
        err_fields(&res[0])["msg"].contains("rank_2_joined_twice"),
        "{}",
        res[0]
    );
    for r in &res[1..] {
        assert!(!err_fields(r)["msg"].is_empty(), "{r}");
    }
}

#[test]
fn world_size_mismatch_is_reported_on_both_sides() {
    let spec = job(2, &["bs-init"]).rank_env(1, "PSHMEM_WORLD_SIZE", "3");
    let res = spec.launch().wait();
    for r in &res {
        assert_eq!(err_fields(r)["kind"], "WorldSizeMismatch", "{r}");
    }
}

#[test]
fn rank_out_of_range_is_a_config_error() {
    let spec = job(2, &["bs-init"]).rank_env(0, "PSHMEM_RANK", "5");
    let mut spec = spec;
    spec.ranks = vec![0];
    let res = spec.launch().wait();
    assert_eq!(err_fields(&res[0])["kind"], "RankOutOfRange", "{}", res[0]);
}

#[test]
fn wrong_secret_is_rejected_and_root_names_the_missing_rank() {
    let spec = job(2, &["bs-init"])
        .env("PSHMEM_BOOTSTRAP_TIMEOUT", "2")
        .rank_env(1, "PSHMEM_JOB_SECRET", "123456");
    let res = spec.launch().wait();
    let f1 = err_fields(&res[1]);
    assert_eq!(f1["kind"], "Rejected", "{}", res[1]);
    assert!(f1["msg"].contains("wrong_job_secret"));
    let f0 = err_fields(&res[0]);
    assert_eq!(f0["kind"], "JoinTimeout", "{}", res[0]);
}

#[test]
fn collective_mismatch_is_detected() {
    let res = job(3, &["bs-mismatch"]).launch().wait();
    assert_eq!(
        err_fields(&res[0])["kind"],
        "CollectiveMismatch",
        "{}",
        res[0]
    );
    for r in &res[1..] {
        let f = err_fields(r);
        assert!(
            f["kind"] == "Aborted" || f["kind"] == "CollectiveMismatch",
            "{r}"
        );
        assert!(f["msg"].contains("mismatch"), "{r}");
    }
}

fn connect_retry(addr: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("cannot reach rank 0 at {addr}: {e}"),
        }
    }
}

/// Reads until the peer closes; returns what came.
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    buf
}

#[test]
fn garbage_wrong_secret_bad_version_and_huge_frames_do_not_disturb_the_job() {
    let spec = job(2, &["bs-init"]);
    let secret = u64::from_str_radix(&spec.env[0].1, 16).unwrap();
    let (_, root) = spec.spawn(0);
    let addr = spec.addr.clone();

    // Garbage: closed without an answer.
    let mut s = connect_retry(&addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
        .unwrap();
    assert!(read_all(&mut s).is_empty());

    // A well-formed hello header with another job's secret: a Reject frame in that secret.
    let mut s = connect_retry(&addr);
    s.write_all(&frame::encode_header(Kind::Hello, 0, secret ^ 1, 0))
        .unwrap();
    let reply = read_all(&mut s);
    assert!(
        reply.len() >= frame::HEADER_LEN,
        "no reject frame for a wrong secret"
    );
    let h = frame::decode_header(
        reply[..24].try_into().unwrap(),
        secret ^ 1,
        frame::MAX_FRAME,
    )
    .unwrap();
    assert_eq!(h.kind, Kind::Reject);
    assert!(String::from_utf8_lossy(&reply).contains("wrong job secret"));

    // Another protocol version: a Reject frame saying so.
    let mut hdr = frame::encode_header(Kind::Hello, 0, secret, 0);
    hdr[4] = 0x7f;
    let mut s = connect_retry(&addr);
    s.write_all(&hdr).unwrap();
    let reply = read_all(&mut s);
    assert!(String::from_utf8_lossy(&reply).contains("protocol version"));

    // Right secret, but a claimed length of 4 GiB: refused from the header alone.
    let mut s = connect_retry(&addr);
    s.write_all(&frame::encode_header(Kind::Hello, 0, secret, u32::MAX))
        .unwrap();
    assert!(read_all(&mut s).is_empty());

    // A truncated hello: dropped after the handshake timeout, the job goes on.
    let mut s = connect_retry(&addr);
    s.write_all(&frame::encode_header(Kind::Hello, 0, secret, 100))
        .unwrap();
    s.write_all(&[1, 2, 3]).unwrap();
    drop(s);

    let (_, r1) = spec.spawn(1);
    let job = spec.job(vec![(0, root), (1, r1)]);
    assert_all_ok(&job.wait());
}

#[test]
fn address_in_use_is_reported() {
    // The holder takes its port first, so nothing can come between choosing it and holding it.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut spec = job(2, &["bs-init"]);
    spec.addr = holder.local_addr().unwrap().to_string();
    spec.ranks = vec![0];
    let res = spec.launch().wait();
    let f = err_fields(&res[0]);
    assert_eq!(f["kind"], "AddrInUse", "{}", res[0]);
}

#[test]
fn unreachable_root_is_reported_after_the_join_timeout() {
    let mut spec = job(2, &["bs-init"]).env("PSHMEM_BOOTSTRAP_TIMEOUT", "1.5");
    spec.ranks = vec![1];
    let t = Instant::now();
    let res = spec.launch().wait();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(err_fields(&res[0])["kind"], "RootUnreachable", "{}", res[0]);
}

#[test]
fn torchrun_variables_are_understood() {
    let mut spec = job(3, &["bs-init"]);
    spec.rank_vars = false;
    let port: u16 = spec.addr.rsplit(':').next().unwrap().parse().unwrap();
    let mut spec = spec
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port - 1)
        .env("WORLD_SIZE", 3);
    for r in 0..3 {
        spec = spec
            .rank_env(r, "RANK", r)
            .rank_env(r, "LOCAL_RANK", r)
            .rank_env(r, "LOCAL_WORLD_SIZE", 3);
    }
    assert_all_ok(&spec.launch().wait());
}

#[test]
fn unique_id_mode() {
    let dir =
        std::env::temp_dir().join(format!("pshmem-uid-{}-{}", std::process::id(), epoch_ms()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("uid");
    let mut spec = job(3, &["bs-uid", "--file", file.to_str().unwrap()]);
    spec.rank_vars = false;
    for r in 0..3 {
        spec = spec
            .rank_env(r, "TEST_RANK", r)
            .rank_env(r, "TEST_WORLD", 3);
    }
    let res = spec.launch().wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_all_ok(&res);
}

/// A complete hello frame for `rank` of `n`, carrying `secret`.
fn hello_frame(rank: u32, n: u32, secret: u64) -> Vec<u8> {
    let body = frame::Hello {
        rank,
        world_size: n,
        host_id: "intruder".into(),
        hostname: "intruder".into(),
        pid: 1,
    }
    .encode();
    let mut f = frame::encode_header(Kind::Hello, 0, secret, body.len() as u32).to_vec();
    f.extend(body);
    f
}

/// The kind of the first frame of `reply` (read in `secret`), if it holds one.
fn first_kind(reply: &[u8], secret: u64) -> Option<Kind> {
    let h: &[u8; frame::HEADER_LEN] = reply.get(..frame::HEADER_LEN)?.try_into().ok()?;
    frame::decode_header(h, secret, frame::MAX_FRAME)
        .ok()
        .map(|h| h.kind)
}

/// 100 hellos without the job's secret, for a rank that has not joined yet (during the join)
/// and for ranks that have (after it): none takes a slot, none learns the world table (every
/// answer is a Reject, never a Welcome), none aborts the job.
#[test]
fn a_hello_without_the_secret_takes_no_slot_learns_nothing_and_aborts_nothing() {
    let spec = job(
        3,
        &[
            "bs-loop",
            "--size",
            "64",
            "--sleep-ms",
            "20",
            "--iters",
            "100",
        ],
    );
    let secret = u64::from_str_radix(&spec.env[0].1, 16).unwrap();
    let (_, r0) = spec.spawn(0);
    let (_, r1) = spec.spawn(1);
    let attempt = |i: u64| {
        let wrong = secret ^ (1 + i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut s = connect_retry(&spec.addr);
        s.write_all(&hello_frame((i % 3) as u32, 3, wrong)).unwrap();
        let reply = read_all(&mut s);
        assert_ne!(
            first_kind(&reply, secret),
            Some(Kind::Welcome),
            "attempt {i} got the world table"
        );
        assert_eq!(
            first_kind(&reply, wrong),
            Some(Kind::Reject),
            "attempt {i}: no Reject in its own secret"
        );
    };
    for i in 0..50 {
        attempt(i);
    }
    // Rank 2's slot is still free: the real rank 2 joins and the job runs.
    let (_, r2) = spec.spawn(2);
    std::thread::sleep(Duration::from_millis(500));
    for i in 50..100 {
        attempt(i);
    }
    let res = spec.job(vec![(0, r0), (1, r1), (2, r2)]).wait();
    assert_all_ok(&res);
}

/// Slow connections past the cap of pending handshakes, each trickling a byte every 4 s (under
/// the 5 s idle timer, which every byte once restarted: 24 header bytes held a connection for
/// 96 s), neither exhaust rank 0's descriptors nor stall the join.
#[test]
fn slow_connections_past_the_cap_do_not_stall_the_join() {
    // Rank 0 with few descriptors: the slow connections would use them all up.
    let spec = job(2, &["bs-init"])
        .rank_env(0, "PSHMEM_TEST_NOFILE", 200)
        .env("PSHMEM_BOOTSTRAP_TIMEOUT", 40);
    let (_, r0) = spec.spawn(0);
    let mut slow: Vec<TcpStream> = Vec::new();
    let t0 = Instant::now();
    while slow.len() < 400 && t0.elapsed() < Duration::from_secs(10) {
        if let Ok(s) = TcpStream::connect(&spec.addr) {
            slow.push(s);
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &mut slow {
                    let _ = s.write_all(&[0x50]);
                }
                for _ in 0..40 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    let t = Instant::now();
    let (_, r1) = spec.spawn(1);
    let res = spec.job(vec![(0, r0), (1, r1)]).wait();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
    assert_all_ok(&res);
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the join took {:?}",
        t.elapsed()
    );
}

/// Without a job secret (torchrun mode with PSHMEM_JOB_SECRET unset) a job still runs, and
/// says once, naming the variable, that its bootstrap is unauthenticated.
#[test]
fn a_job_without_a_secret_says_it_is_unauthenticated() {
    let mut spec = job(2, &["bs-init"]);
    spec.env.retain(|(k, _)| k != "PSHMEM_JOB_SECRET");
    let res = spec.launch().wait();
    assert_all_ok(&res);
    for r in &res {
        assert_eq!(
            r.stderr.matches("PSHMEM_JOB_SECRET is not set").count(),
            1,
            "{r}"
        );
    }
}

/// A malformed bootstrap address fails at once, naming the variable, instead of being retried
/// until the join timeout.
#[test]
fn a_malformed_bootstrap_address_fails_at_once() {
    for bad in [
        "localhost",
        "127.0.0.1:",
        ":29500",
        "127.0.0.1:notaport",
        "127.0.0.1:70000",
    ] {
        let mut spec = job(2, &["bs-init"]);
        spec.addr = bad.into();
        spec.ranks = vec![1];
        let t = Instant::now();
        let res = spec.launch().wait();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{bad}: {:?}",
            t.elapsed()
        );
        let f = err_fields(&res[0]);
        assert_eq!(f["kind"], "Config", "{bad}: {}", res[0]);
        assert!(
            f["msg"].contains("PSHMEM_BOOTSTRAP_ADDR"),
            "{bad}: {}",
            res[0]
        );
    }
}
