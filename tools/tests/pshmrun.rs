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
        "echo rank=$PSHMEM_RANK world=$PSHMEM_WORLD_SIZE local=$PSHMEM_LOCAL_RANK/$PSHMEM_LOCAL_SIZE addr=$PSHMEM_BOOTSTRAP_ADDR secret=$PSHMEM_JOB_SECRET; echo err$PSHMEM_RANK >&2",
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
