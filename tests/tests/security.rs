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
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin);
        snoops.push(("another user", spawn(&mut c)));
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
