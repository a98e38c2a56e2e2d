//! Hostile local users: what another user, or a process of the same user outside the job, can
//! obtain from a running job. Nothing: no heap descriptor, no slot, no abort.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use pshmem_tests::{JobSpec, assert_all_ok, epoch_ms};

const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");

/// The worker binary copied where any user may run it (the checkout may sit under a private
/// home), and a fresh folder for the snoops' stop file.
fn shared_copy() -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir =
        std::env::temp_dir().join(format!("pshmem-sec-{}-{}", std::process::id(), epoch_ms()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("pshmem-testbin");
    std::fs::copy(BIN, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, dir)
}

/// `(attempts, fds)` from a snoop's SNOOP line.
fn snoop_result(out: &std::process::Output) -> (u64, u64) {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("SNOOP"))
        .unwrap_or_else(|| {
            panic!(
                "no SNOOP line: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {line}"))
    };
    (field("attempts="), field("fds="))
}

/// While jobs of 4 PEs on the direct path start one after another, a process of another user
/// (uid 65534, when the suite runs as root) and a process of the same user outside the job
/// connect to every heap socket they can see, at least 100 times each: neither receives a
/// descriptor, and every job runs undisturbed.
#[test]
fn heap_sockets_give_nothing_to_other_users_or_other_jobs() {
    let (bin, dir) = shared_copy();
    let stop = dir.join("stop");
    let root = nix::unistd::getuid().is_root();
    let mut snoops = Vec::new();
    let spawn = |cmd: &mut Command| {
        cmd.args(["heap-snoop", "--seconds", "120", "--stop-file"])
            .arg(&stop)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a snoop")
    };
    if root {
        snoops.push(("another user", spawn(&mut as_nobody(&bin))));
    } else {
        pshmem_tests::skipped(
            "security heap_sockets_give_nothing_to_other_users_or_other_jobs",
            "the other-user part: the suite does not run as root (setpriv needs it)",
        );
    }
    snoops.push((
        "the same user outside the job",
        spawn(&mut Command::new(&bin)),
    ));
    let t0 = Instant::now();
    let mut jobs = 0;
    while jobs < 40 && t0.elapsed() < Duration::from_secs(60) {
        let res = JobSpec::new(BIN, 4, &["rt-ops", "--sizes", "8,4096", "--rounds", "1"])
            .timeout(Duration::from_secs(60))
            .launch()
            .wait();
        assert_all_ok(&res);
        jobs += 1;
    }
    std::fs::write(&stop, b"").unwrap();
    for (who, child) in snoops {
        let out = child.wait_with_output().unwrap();
        let (attempts, fds) = snoop_result(&out);
        println!(
            "{who}: {attempts} connections to heap sockets over {jobs} jobs, {fds} descriptors"
        );
        assert_eq!(fds, 0, "{who} obtained {fds} heap descriptors");
        assert!(
            attempts >= 100,
            "{who} reached the heap sockets only {attempts} times in {jobs} jobs: inconclusive"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The testbin copy `bin` run as uid 65534 (the suite must run as root).
fn as_nobody(bin: &std::path::Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin);
    c
}

/// Floods rank 0's bootstrap port for 8 s with silent connections from `flooder` (the testbin,
/// or `as_nobody`; `probes` of them probes), starting rank 1
/// two seconds in: rank 1 must join at once, within 2.5 s (before the fix it waited until the
/// flood's pending handshakes expired, 3.4 s here, or never under a faster flood). Returns the
/// flood's FLOOD line.
fn flooded_join(mut flooder: Command, probes: usize) -> String {
    let spec = JobSpec::new(BIN, 2, &["bs-init"])
        .timeout(Duration::from_secs(60))
        .env("PSHMEM_BOOTSTRAP_TIMEOUT", 25);
    let (_, r0) = spec.spawn(0);
    let flood = flooder
        .args(["bs-flood", "--addr", &spec.addr, "--seconds", "8"])
        .args(["--probes", &probes.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the flood");
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    let (_, r1) = spec.spawn(1);
    let res = spec.job(vec![(0, r0), (1, r1)]).wait();
    let joined = t.elapsed();
    let out = flood.wait_with_output().expect("the flood");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!("{line}; rank 1 joined and finished in {joined:?}");
    assert_all_ok(&res);
    assert!(
        joined < Duration::from_millis(2500),
        "the join took {joined:?} under a flood"
    );
    line
}

fn flood_field(line: &str, key: &str) -> usize {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// A sustained flood of silent connections by a process of the job's own user fills rank 0's
/// pending handshakes over and over: the oldest are evicted, so a late rank still joins.
#[test]
fn a_connection_flood_does_not_keep_a_late_rank_out() {
    let line = flooded_join(Command::new(BIN), 0);
    // Twice rank 0's 64 handshake slots at least: every slot was taken, and taken again.
    assert!(
        flood_field(&line, "connects=") > 128,
        "the flood made too few connections to be one: {line}"
    );
}

/// Connections from another user's process (uid 65534, when the suite runs as root) are closed
/// at once, before any byte is read, and take no handshake slot.
#[test]
fn other_users_bootstrap_connections_are_closed_at_once() {
    if !nix::unistd::getuid().is_root() {
        pshmem_tests::skipped(
            "security other_users_bootstrap_connections_are_closed_at_once",
            "the suite does not run as root (setpriv needs it)",
        );
        return;
    }
    let (bin, dir) = shared_copy();
    let line = flooded_join(as_nobody(&bin), 20);
    let _ = std::fs::remove_dir_all(&dir);
    let probes = flood_field(&line, "probes=");
    assert!(probes > 0, "{line}");
    assert_eq!(
        flood_field(&line, "closed_at_once="),
        probes,
        "another user's connections were not all closed at once: {line}"
    );
}

/// The short form of `scripts/attack.sh`: another user's process (uid 65534) attacks two tcp
/// jobs and two jobs on the simulated fabric while they run and verify their bytes: guessed
/// registration keys on every libfabric endpoint, reads on every simulated NIC without the
/// token, hellos with a wrong secret on every bootstrap port. It gets nothing; the jobs pass.
#[test]
fn another_users_attacks_on_running_jobs_get_nothing() {
    if !nix::unistd::getuid().is_root() {
        pshmem_tests::skipped(
            "security another_users_attacks_on_running_jobs_get_nothing",
            "the suite does not run as root (setpriv needs it); scripts/attack.sh is the long form",
        );
        return;
    }
    let (bin, dir) = shared_copy();
    let stop = dir.join("stop");
    let attacker = as_nobody(&bin)
        .args(["attack", "--seconds", "300", "--stop-file"])
        .arg(&stop)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the attacker");
    for provider in ["tcp", "tcp", "sim", "sim"] {
        let res = JobSpec::new(BIN, 2, &["rt-ops", "--sizes", "8,4096", "--rounds", "300"])
            .env("PSHMEM_PROVIDER", provider)
            .env("PSHMEM_DISABLE_P2P", 1)
            .timeout(Duration::from_secs(120))
            .launch()
            .wait();
        assert_all_ok(&res);
    }
    std::fs::write(&stop, b"").unwrap();
    let out = attacker.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("ATTACK")).unwrap_or("");
    println!("{line}");
    let field = |k: &str| flood_field(line, k);
    assert!(
        field("tcp_attempts=") > 0 && field("sim_attempts=") > 0 && field("bs_attempts=") > 0,
        "{line}"
    );
    assert_eq!(
        field("tcp_got=") + field("sim_got=") + field("bs_got="),
        0,
        "{line}"
    );
}

/// A job whose PEs all map each other's heaps opens no transport: nothing of it listens on the
/// fabric (only rank 0's bootstrap port). The same job through the proxy (the control) listens
/// on one endpoint per PE, over tcp and over the simulated fabric alike.
#[test]
fn a_job_on_the_direct_path_opens_no_fabric_endpoint() {
    let listening = |env: &[(&str, &str)]| {
        let mut spec = JobSpec::new(BIN, 3, &["rt-sockets"]);
        for (k, v) in env {
            spec = spec.env(k, v);
        }
        let port = spec.addr.rsplit(':').next().unwrap().to_string();
        let res = spec.launch().wait();
        assert_all_ok(&res);
        res.iter()
            .map(|r| {
                let f = &r.fields("SOCKETS")[0];
                // Rank 0's bootstrap listener is the job's rendezvous, not a fabric endpoint.
                let tcp: Vec<&str> = f["tcp_listen"]
                    .split(',')
                    .filter(|p| *p != "-" && *p != port)
                    .collect();
                (
                    tcp.len(),
                    f["unix_listen"].parse::<usize>().unwrap(),
                    f["transport"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    for (provider, tcp, unix) in [("tcp", 1, 0), ("sim", 0, 1)] {
        for (r, (t, u, name)) in listening(&[("PSHMEM_PROVIDER", provider)])
            .iter()
            .enumerate()
        {
            assert_eq!(
                (t, u),
                (&0, &0),
                "rank {r} over {provider} listens ({name})"
            );
            assert!(name.starts_with("none"), "rank {r} opened {name}");
        }
        let proxied = [("PSHMEM_PROVIDER", provider), ("PSHMEM_DISABLE_P2P", "1")];
        for (r, (t, u, name)) in listening(&proxied).iter().enumerate() {
            assert_eq!(
                (*t, *u),
                (tcp, unix),
                "rank {r} through the proxy over {name}"
            );
        }
    }
}
