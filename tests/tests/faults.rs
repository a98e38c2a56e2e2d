//! A rank stopped or killed at any moment: it ends promptly, by the signal it was sent, and
//! leaves nothing behind on the host.

use std::{
    os::unix::process::ExitStatusExt,
    thread,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use pshmem_tests::JobSpec;
use rand::Rng;

const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");

/// SIGTERM sent to a rank at a random moment of its start (bootstrap, transport probing and
/// opening, heap exchange, the first operations), over tcp and the simulated fabric: the rank
/// ends within 1 s, killed by SIGTERM, in every trial. (Before the fix, a handler that a PSM
/// library linked by libfabric installs at load turned SIGTERM into `exit()`, which can hang.)
#[test]
fn sigterm_at_any_moment_of_init_ends_the_rank_within_a_second() {
    let mut rng = rand::rng();
    let mut late = 0;
    for trial in 0..40 {
        let provider = if trial % 2 == 0 { "tcp" } else { "sim" };
        let n = 2 + trial % 3;
        let victim = rng.random_range(0..n);
        let spec = JobSpec::new(BIN, n, &["rt-ops", "--rounds", "1", "--sizes", "1,4096"])
            .env("PSHMEM_PROVIDER", provider)
            .timeout(Duration::from_secs(30));
        let mut job = spec.launch();
        // Starting a job takes 250–400 ms here (200 ms of it loading libfabric's
        // dependencies): aim anywhere in it, the first instants included.
        thread::sleep(Duration::from_micros(rng.random_range(0..400_000)));
        let pid = job.pid(victim);
        let sent = Instant::now();
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        let child = &mut job
            .children
            .iter_mut()
            .find(|(r, _)| *r == victim)
            .expect("victim")
            .1;
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break Some(s);
            }
            if sent.elapsed() > Duration::from_secs(5) {
                break None;
            }
            thread::sleep(Duration::from_millis(2));
        };
        let took = sent.elapsed();
        // The others would wait for the victim until their join or peer deadline; a launcher
        // ends them at once, and so does this test.
        for (_, c) in job.children.iter_mut() {
            let _ = c.kill();
        }
        let results = job.wait();
        let status = status.unwrap_or_else(|| {
            panic!(
                "trial {trial} ({provider}, {n} PEs): rank {victim} still running 5 s after \
                 SIGTERM\n{}",
                results[victim]
            )
        });
        // A rank that had already finished is not a failure; one that survived the signal, or
        // turned it into an exit status, is.
        if status.success() {
            continue;
        }
        assert_eq!(
            status.signal(),
            Some(libc::SIGTERM),
            "trial {trial} ({provider}, {n} PEs): rank {victim} ended by {status} instead of \
             SIGTERM\n{}",
            results[victim]
        );
        if took > Duration::from_secs(1) {
            late += 1;
            eprintln!("trial {trial}: rank {victim} took {took:?} to end after SIGTERM");
        }
    }
    assert_eq!(late, 0, "ranks took over 1 s to end after SIGTERM");
}

/// The shm provider's region files (`/dev/shm/<pid>:<uid>:<n>`) of these processes.
fn shm_files_of(pids: &[u32]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.split(':')
                        .next()
                        .and_then(|p| p.parse::<u32>().ok())
                        .is_some_and(|p| pids.contains(&p))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A shm job whose rank is SIGKILLed after the job started leaves no region file in
/// /dev/shm (each was 16 MiB, left for good before); one killed at a random moment, its start
/// included, leaves none once the next job on the host has started.
#[test]
fn killed_shm_jobs_leave_nothing_in_dev_shm() {
    let spec = JobSpec::new(BIN, 3, &["rt-kill", "--victim", "1", "--phase", "barrier"])
        .env("PSHMEM_PROVIDER", "shm")
        .timeout(Duration::from_secs(60));
    let job = spec.launch();
    let pids: Vec<u32> = (0..3).map(|r| job.pid(r)).collect();
    let results = job.wait();
    assert!(
        results[1].status.and_then(|s| s.signal()) == Some(libc::SIGKILL),
        "rank 1 should have killed itself:\n{}",
        results[1]
    );
    assert_eq!(shm_files_of(&pids), Vec::<String>::new(), "left behind");

    let mut rng = rand::rng();
    let mut killed = Vec::new();
    for _ in 0..10 {
        let spec = JobSpec::new(BIN, 2, &["rt-ops", "--rounds", "2", "--sizes", "1,4096"])
            .env("PSHMEM_PROVIDER", "shm")
            .timeout(Duration::from_secs(30));
        let mut job = spec.launch();
        thread::sleep(Duration::from_micros(rng.random_range(0..500_000)));
        let victim = rng.random_range(0..2);
        killed.extend((0..2).map(|r| job.pid(r)));
        let _ = kill(Pid::from_raw(job.pid(victim) as i32), Signal::SIGKILL);
        for (_, c) in job.children.iter_mut() {
            let _ = c.kill();
        }
        job.wait();
    }
    let next = JobSpec::new(BIN, 2, &["rt-ops", "--rounds", "1", "--sizes", "1"])
        .env("PSHMEM_PROVIDER", "shm")
        .timeout(Duration::from_secs(60))
        .launch()
        .wait();
    pshmem_tests::assert_all_ok(&next);
    assert_eq!(shm_files_of(&killed), Vec::<String>::new(), "left behind");
}

/// A rank whose bootstrap starts in a thread that then ends (a Python thread may) still dies
/// with its launcher: the kernel forgets a parent-death signal when the thread that set it
/// ends. A shell stands in for pshmrun (`PSHMEM_LAUNCHER_PID` names it) and is SIGKILLed.
#[test]
fn a_rank_initialised_in_a_thread_dies_with_its_launcher() {
    use std::io::BufRead;
    let mut sh = std::process::Command::new("sh")
        .args([
            "-c",
            "PSHMEM_LAUNCHER_PID=$$ \"$0\" bs-thread-init --hold-ms 30000 & wait",
            BIN,
        ])
        .env("PSHMEM_RANK", "0")
        .env("PSHMEM_WORLD_SIZE", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the shell");
    let mut out = std::io::BufReader::new(sh.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the rank's PID line");
    let pid: i32 = line
        .trim()
        .strip_prefix("PID=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no PID line: {line:?}"));
    kill(Pid::from_raw(sh.id() as i32), Signal::SIGKILL).expect("kill the shell");
    let _ = sh.wait();
    let deadline = Instant::now() + Duration::from_secs(3);
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    };
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survived = alive();
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    assert!(!survived, "the rank (pid {pid}) outlived its launcher");
}

/// Every rank finalizes and joins again at once, in the same process, at the same address:
/// before, a rank out of finalize first reached rank 0's old listener, which took its hello for
/// the rank joining twice and aborted the job.
#[test]
fn a_job_joins_again_at_once_after_finalize() {
    for _ in 0..3 {
        let res = JobSpec::new(BIN, 4, &["bs-reinit"])
            .timeout(Duration::from_secs(60))
            .launch()
            .wait();
        pshmem_tests::assert_all_ok(&res);
        let rounds: usize = res.iter().map(|r| r.fields("OK reinit").len()).sum();
        assert_eq!(rounds, 8, "{res:?}");
    }
}

/// Rank 2 reaches a barrier past the op timeout: every rank names rank 2, none its relay,
/// rank 0 (before, ranks 1 and 2 said they waited for rank 0).
#[test]
fn a_straggler_is_named_by_every_rank() {
    let res = JobSpec::new(BIN, 4, &["bs-straggler", "--rank", "2", "--ms", "6000"])
        .env("PSHMEM_BOOTSTRAP_OP_TIMEOUT", 2)
        .timeout(Duration::from_secs(60))
        .launch()
        .wait();
    for r in &res {
        let err = r.fields("ERR");
        let msg = err
            .first()
            .map(|f| f["msg"].clone())
            .unwrap_or_else(|| panic!("rank {} printed no ERR line:\n{r}", r.rank));
        assert!(
            msg.contains("[2]") && !msg.contains("[0]"),
            "rank {} does not name the straggler alone: {msg}",
            r.rank
        );
    }
}
