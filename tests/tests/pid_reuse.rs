//! Jobs whose ranks get chosen pids, through the kernel's `ns_last_pid` (root only). It is
//! global to the host, so these tests have a binary of their own: cargo runs test binaries one
//! after another, and no other test's processes take the chosen pids.

use std::time::Duration;

use pshmem_tests::{JobSpec, assert_all_ok};

const BIN: &str = env!("CARGO_BIN_EXE_pshmem-testbin");

/// Where the kernel is told the last pid it gave, so that the next process gets the one after.
const NS_LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

/// Makes `last` the last pid given; `false` (after a skip message) without the right.
fn set_last_pid(last: u32) -> bool {
    match std::fs::write(NS_LAST_PID, last.to_string()) {
        Ok(()) => true,
        Err(e) => {
            pshmem_tests::skipped(
                "pid_reuse shm_job_whose_pids_straddle_a_power_of_ten",
                &format!("cannot choose the next pid ({NS_LAST_PID}: {e}); needs root"),
            );
            false
        }
    }
}

/// shm's endpoint names carry the pid, so ranks whose pids straddle 10000 have names of
/// different lengths; such a job runs like any other. (CI once started a 3-PE shm job at
/// pid 9996, and its ranks refused each other's names.) The test retries from a lower start
/// when other processes take pids in between, and checks that the pids did straddle.
#[test]
fn shm_job_whose_pids_straddle_a_power_of_ten() {
    for attempt in 0..40u32 {
        if !set_last_pid(9998 - attempt) {
            return;
        }
        let job = JobSpec::new(BIN, 2, &["rt-ops", "--rounds", "1", "--sizes", "1,4096"])
            .env("PSHMEM_PROVIDER", "shm")
            .timeout(Duration::from_secs(60))
            .launch();
        let pids = [job.pid(0), job.pid(1)];
        assert_all_ok(&job.wait());
        if pids.iter().any(|&p| p < 10000) && pids.iter().any(|&p| p >= 10000) {
            return;
        }
        eprintln!("attempt {attempt}: pids {pids:?} do not straddle 10000; again");
    }
    panic!("no 2-PE job got pids on both sides of 10000 in 40 attempts");
}
