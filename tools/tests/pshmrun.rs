//! pshmrun: environment, output prefixes, failure propagation, timeout and Ctrl-C.

use std::{
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

const PSHMRUN: &str = env!("CARGO_BIN_EXE_pshmrun");

fn pshmrun(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(PSHMRUN)
        .args(args)
        .output()
        .expect("run pshmrun");
    (out, t.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn sets_rank_variables_and_prefixes_lines() {
    let (out, _) = pshmrun(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "echo rank=$PSHMEM_RANK world=$PSHMEM_WORLD_SIZE local=$PSHMEM_LOCAL_RANK/$PSHMEM_LOCAL_SIZE addr=$PSHMEM_BOOTSTRAP_ADDR secret=$(cat /proc/self/fd/$PSHMEM_JOB_SECRET_FD); echo err$PSHMEM_RANK >&2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut secrets = Vec::new();
    for r in 0..3 {
        let line = stdout
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "[{r}] rank={r} world=3 local={r}/3 addr=127.0.0.1:"
                ))
            })
            .unwrap_or_else(|| panic!("no line for rank {r} in:\n{stdout}"));
        secrets.push(line.rsplit("secret=").next().unwrap().to_string());
        assert!(text(&out.stderr).contains(&format!("[{r}] err{r}")));
    }
    assert!(
        secrets.iter().all(|s| s == &secrets[0] && s.len() == 16),
        "{secrets:?}"
    );
}

/// What a one-rank job's `echo` of `vars` prints (`[0] NAME=value ...`), launched with `env` set.
fn launched_values(vars: &[&str], env: &[(&str, &str)]) -> String {
    launched_values_of(&["-n", "1"], vars, env)
}

fn launched_values_of(args: &[&str], vars: &[&str], env: &[(&str, &str)]) -> String {
    let script = vars
        .iter()
        .map(|v| format!("{v}=${v}"))
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new(PSHMRUN)
        .args(args)
        .args(["--", "sh", "-c", &format!("echo {script}")])
        .env_remove("CUDA_MODULE_LOADING")
        .env_remove("CUDA_DEVICE_MAX_CONNECTIONS")
        .env_remove("PSHMEM_DISABLE_P2P")
        .env_remove("NVSHMEM_DISABLE_P2P")
        .envs(env.iter().copied())
        .output()
        .expect("run pshmrun");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn sets_cuda_module_loading_and_queues_where_the_proxy_serves_gpus() {
    let vars = ["CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS"];
    // Every peer's heap mapped (one host, P2P on): CUDA's defaults, which start faster.
    let out = launched_values(&vars, &[]);
    assert!(
        out.contains("[0] CUDA_MODULE_LOADING= CUDA_DEVICE_MAX_CONNECTIONS="),
        "{out}"
    );
    // Peers behind the proxy: P2P disabled (either name), or emulated hosts.
    for p2p in ["PSHMEM_DISABLE_P2P", "NVSHMEM_DISABLE_P2P"] {
        let out = launched_values(&vars, &[(p2p, "1")]);
        assert!(
            out.contains("[0] CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=16"),
            "{p2p}: {out}"
        );
    }
    let out = launched_values_of(&["-n", "2", "--hosts", "2"], &vars, &[]);
    for rank in 0..2 {
        assert!(
            out.contains(&format!(
                "[{rank}] CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=16"
            )),
            "{out}"
        );
    }
    // Values the user set are kept, in either kind of job.
    let env = [
        ("CUDA_MODULE_LOADING", "LAZY"),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "4"),
    ];
    for p2p in ["0", "1"] {
        let mut env = env.to_vec();
        env.push(("PSHMEM_DISABLE_P2P", p2p));
        let out = launched_values(&vars, &env);
        assert!(
            out.contains("[0] CUDA_MODULE_LOADING=LAZY CUDA_DEVICE_MAX_CONNECTIONS=4"),
            "{out}"
        );
    }
}

#[test]
fn lets_efa_reach_gpu_memory_unless_told_otherwise() {
    let vars = ["FI_EFA_USE_DEVICE_RDMA"];
    let out = launched_values(&vars, &[]);
    assert!(out.contains("[0] FI_EFA_USE_DEVICE_RDMA=1"), "{out}");
    // A value the user set is kept.
    let out = launched_values(&vars, &[("FI_EFA_USE_DEVICE_RDMA", "0")]);
    assert!(out.contains("[0] FI_EFA_USE_DEVICE_RDMA=0"), "{out}");
}

#[test]
fn emulated_hosts_split_local_ranks() {
    let (out, _) = pshmrun(&[
        "-n",
        "4",
        "--hosts",
        "2",
        "--",
        "sh",
        "-c",
        "echo $PSHMEM_RANK $PSHMEM_LOCAL_RANK $PSHMEM_LOCAL_SIZE $PSHMEM_HOST_ID",
    ]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(s.contains("[3] 3 1 2 pshmrun-emulated-host-1"), "{s}");
    assert!(s.contains("[1] 1 1 2 pshmrun-emulated-host-0"), "{s}");
}

#[test]
fn failing_rank_stops_the_others_and_is_named() {
    let (out, took) = pshmrun(&[
        "-n",
        "4",
        "--",
        "sh",
        "-c",
        "if [ $PSHMEM_RANK = 2 ]; then sleep 0.2; exit 7; fi; exec sleep 60",
    ]);
    assert_eq!(out.status.code(), Some(7));
    assert!(
        text(&out.stderr).contains("rank 2 exited with status 7"),
        "{}",
        text(&out.stderr)
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn killed_rank_is_named_with_its_signal() {
    let (out, took) = pshmrun(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "if [ $PSHMEM_RANK = 1 ]; then kill -9 $$; fi; exec sleep 60",
    ]);
    assert_eq!(out.status.code(), Some(128 + 9));
    assert!(
        text(&out.stderr).contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{}",
        text(&out.stderr)
    );
    assert!(took < Duration::from_secs(15));
}

#[test]
fn ranks_that_ignore_sigterm_are_killed_after_the_grace_period() {
    let (out, took) = pshmrun(&[
        "-n",
        "2",
        "--grace",
        "0.5",
        "--",
        "sh",
        "-c",
        "trap '' TERM; if [ $PSHMEM_RANK = 0 ]; then exit 1; fi; while true; do sleep 0.1; done",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn timeout_stops_everything() {
    let (out, took) = pshmrun(&["-n", "2", "--timeout", "1", "--", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(
        text(&out.stderr).contains("timeout"),
        "{}",
        text(&out.stderr)
    );
    assert!(took < Duration::from_secs(10));
}

#[test]
fn missing_program_is_an_error() {
    let (out, _) = pshmrun(&["-n", "2", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("cannot start"));
}

#[test]
fn sigint_stops_all_ranks() {
    let dir = std::env::temp_dir().join(format!("pshmrun-sigint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "echo $$ > {}/pid.$PSHMEM_RANK; exec sleep 60",
        dir.display()
    );
    let mut child = Command::new(PSHMRUN)
        .args(["-n", "3", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (0..3).any(|r| !dir.join(format!("pid.{r}")).exists()) {
        assert!(Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids: Vec<i32> = (0..3)
        .map(|r| {
            std::fs::read_to_string(dir.join(format!("pid.{r}")))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "pshmrun ignored SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    for pid in pids {
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        assert!(!alive, "rank process {pid} survived SIGINT");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `pid` is gone (or a zombie waiting for its new parent to reap it).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn bad_arguments_are_refused_before_any_rank_starts() {
    let dir = std::env::temp_dir().join(format!("pshmrun-args-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("started");
    let script = format!("touch {}; exec sleep 5", marker.display());
    for t in ["-1", "nan", "inf", "0", "abc", "1e30"] {
        let (out, took) = pshmrun(&["-n", "2", "--timeout", t, "--", "sh", "-c", &script]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--timeout {t}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("--timeout"),
            "{}",
            text(&out.stderr)
        );
        assert!(took < Duration::from_secs(2));
    }
    let (out, _) = pshmrun(&["-n", "2", "--grace", "-3", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!marker.exists(), "a rank started despite bad arguments");
    let _ = std::fs::remove_dir_all(&dir);
}

/// pshmrun killed by SIGKILL (no chance to stop anything itself): every rank dies with it.
#[test]
fn no_rank_outlives_a_killed_launcher() {
    let mut child = Command::new(PSHMRUN)
        .args(["-n", "3", "--", "sh", "-c", "echo PID=$$; exec sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut pids = Vec::new();
    while pids.len() < 3 {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "no PID lines"
        );
        if let Some(p) = line
            .trim()
            .rsplit("PID=")
            .next()
            .and_then(|p| p.parse::<i32>().ok())
        {
            pids.push(p);
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| !gone(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<i32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
    for &p in &alive {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGKILL);
    }
    assert!(alive.is_empty(), "ranks {alive:?} outlived their launcher");
}

/// Rank 2 is killed; the others notice at once (a pipe it held closes) and exit with an error,
/// racing its death to pshmrun: pshmrun names rank 2 and SIGKILL every time.
#[test]
fn the_rank_killed_first_is_blamed_not_those_that_noticed() {
    for i in 0..10 {
        let dir = std::env::temp_dir().join(format!("pshmrun-blame-{}-{i}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let script = format!(
            "if [ $PSHMEM_RANK = 2 ]; then exec 3>{f}; sleep 0.2; kill -9 $$; fi; \
             cat {f} >/dev/null; exit 3",
            f = fifo.display()
        );
        let (out, took) = pshmrun(&["-n", "4", "--", "sh", "-c", &script]);
        let _ = std::fs::remove_dir_all(&dir);
        let err = text(&out.stderr);
        assert!(
            err.contains("rank 2 was killed by signal 9 (SIGKILL)"),
            "run {i} blamed another rank:\n{err}"
        );
        assert_eq!(out.status.code(), Some(128 + 9), "{err}");
        assert!(took < Duration::from_secs(10));
    }
}

/// A rank stopped by SIGSTOP, whose peers then give up on it, is the one named; the stopped
/// rank is killed, so the job ends.
#[test]
fn a_stopped_rank_is_blamed_and_the_job_ends() {
    let script =
        "if [ $PSHMEM_RANK = 1 ]; then kill -STOP $$; exec sleep 60; fi; sleep 0.5; exit 3";
    let (out, took) = pshmrun(&["-n", "3", "--grace", "0.5", "--", "sh", "-c", script]);
    let err = text(&out.stderr);
    assert!(
        err.contains("rank 1 was stopped by signal 19 (SIGSTOP)"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// A rank that stays stopped while no other rank fails (stopped before it joined, say, when
/// nobody would notice) is reported once it has been stopped for the peer timeout, and the
/// job ends; a rank stopped and continued within it is no failure.
#[test]
fn a_rank_left_stopped_ends_the_job_after_the_peer_timeout() {
    let script = "if [ $PSHMEM_RANK = 1 ]; then kill -STOP $$; fi; sleep 30";
    let t0 = Instant::now();
    let out = Command::new(PSHMRUN)
        .env("PSHMEM_BOOTSTRAP_PEER_TIMEOUT_MS", "1000")
        .args(["-n", "3", "--grace", "0.5", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = text(&out.stderr);
    assert!(
        err.contains("rank 1 was stopped by signal 19 (SIGSTOP)")
            && err.contains("not continued within 1.0 s"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(128 + 19), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // A token in the command line that only this test's ranks carry.
    let token = format!("resume-{}", std::process::id());
    let script =
        format!("if [ $PSHMEM_RANK = 1 ]; then kill -STOP $$; fi; sleep 1; exit 0 # {token}");
    // Continue it every 50 ms until the job ends, whenever it stops (a single SIGCONT sent
    // before the rank stopped itself would be lost on a slow machine): a continue comes well
    // within the 3 s timeout.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let resumer = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            while !done.load(std::sync::atomic::Ordering::Relaxed)
                && t.elapsed() < Duration::from_secs(20)
            {
                std::thread::sleep(Duration::from_millis(50));
                for pid in pids_with_arg(&token) {
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGCONT);
                }
            }
        })
    };
    let out = Command::new(PSHMRUN)
        .env("PSHMEM_BOOTSTRAP_PEER_TIMEOUT_MS", "3000")
        .args(["-n", "3", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    resumer.join().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Each launch makes its own secret, and hands it to a rank through a memfd, not the environment
/// (which every process of the user can read in `/proc/<pid>/environ`).
#[test]
fn every_launch_gets_its_own_secret() {
    let secret = || {
        // Read twice, as two programs of one rank's script would.
        let script = "a=$(cat /proc/self/fd/$PSHMEM_JOB_SECRET_FD); \
                      b=$(cat /proc/self/fd/$PSHMEM_JOB_SECRET_FD); \
                      [ \"$a\" = \"$b\" ] && echo S=$a E=${PSHMEM_JOB_SECRET:-none}";
        let (out, _) = pshmrun(&["-n", "1", "--", "sh", "-c", script]);
        let line = text(&out.stdout);
        assert!(
            line.contains("E=none"),
            "the secret is in the environment: {line}"
        );
        line.rsplit("S=")
            .next()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let (a, b) = (secret(), secret());
    assert_eq!(a.len(), 16, "{a}");
    assert_ne!(a, b, "two launches shared a secret");
    assert_ne!(a, "0000000000000000");
}

/// The processes whose command line has an argument containing `token` (as `pkill -f`, which
/// a bare Debian lacks).
fn pids_with_arg(token: &str) -> Vec<nix::unistd::Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(token.len()).any(|w| w == token.as_bytes()))
        })
        .map(nix::unistd::Pid::from_raw)
        .collect()
}
