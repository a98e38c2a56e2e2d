//! Jobs that a launcher started: under Open MPI's `mpirun` (installed by scripts/setup.sh) at 2
//! and 4 ranks, `tests/c/mpi_launch.c` initialises the ways NVSHMEM's MPI programs do (plain
//! init after `MPI_Init`, `nvshmemx_init_attr(NVSHMEMX_INIT_WITH_MPI_COMM)` on a copy of the
//! world and on halves of it, `NVSHMEMX_INIT_WITH_SHMEM` refused) and `tests/c/host_api.c`, a
//! program without MPI, runs plain `pshmem_init` — every rank must be one PE of one job. Then
//! srun's and an MPICH mpiexec's variables (set by hand: no Slurm or MPICH here) on one host
//! and across "hosts" of a Slurm step list; ranks a launcher promised that never come, and an
//! MPI whose world disagrees with the launcher's: a loud failure, never a job of one PE.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use pshmem_tests::{JobSpec, RankResult, assert_all_ok, skipped};

mod common;

use common::{compile, compile_with};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pshmem-mpi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A folder of its own for the rendezvous files of one test (they run in parallel).
fn rdv(dir: &Path) -> String {
    let d = dir.join("rdv");
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}

/// `mpirun -np n program args`, host mode, all output in one result.
fn mpirun(n: usize, program: &Path, args: &[&str], env: &[(&str, &str)]) -> RankResult {
    let np = n.to_string();
    let mut cmd_args = vec![
        "--oversubscribe",
        "--bind-to",
        "none",
        "--mca",
        "btl",
        "self,vader",
        "-np",
        &np,
    ];
    let prog = program.display().to_string();
    cmd_args.push(&prog);
    cmd_args.extend(args);
    let mut spec = JobSpec::new("mpirun", 1, &cmd_args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("PSHMEM_SYMMETRIC_SIZE", "16M")
        .env("PSHMEM_DISABLE_CUDA", "1")
        .timeout(Duration::from_secs(90));
    spec.rank_vars = false;
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    spec.launch().wait().remove(0)
}

fn tools() -> Option<(String, String)> {
    let find = |t: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    Some((find("mpirun")?, find("mpicc")?))
}

/// The lines of `r`'s output starting with `tag`.
fn lines<'a>(r: &'a RankResult, tag: &str) -> Vec<&'a str> {
    r.stdout.lines().filter(|l| l.starts_with(tag)).collect()
}

#[test]
fn mpirun_makes_one_job_of_every_rank() {
    let Some((_, mpicc)) = tools() else {
        skipped(
            "mpirun_makes_one_job_of_every_rank",
            "no mpirun/mpicc (Open MPI: scripts/setup.sh installs openmpi-bin libopenmpi-dev)",
        );
        return;
    };
    let dir = scratch("mpirun");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let compat = here.join("../compat/nvshmem/include");
    let prog = dir.join("mpi_launch");
    compile_with(&mpicc, &[compat], "mpi_launch.c", &prog);
    let host_api = dir.join("host_api");
    compile("host_api.c", &host_api);
    let rdv = rdv(&dir);
    let base = [("PSHMEM_PROVIDER", "tcp"), ("PSHMEM_RENDEZVOUS_DIR", &rdv)];
    for n in [2, 4] {
        for mode in ["world", "attr", "split"] {
            let r = mpirun(n, &prog, &[mode], &base);
            assert!(r.ok(), "mpirun -np {n} mpi_launch {mode}:\n{r}");
            let ok = lines(&r, "OK mpi");
            assert_eq!(
                ok.len(),
                n,
                "mpirun -np {n} {mode}: an OK line per rank:\n{r}"
            );
            let job = if mode == "split" { n / 2 } else { n };
            for pe in 0..job {
                let done = format!("[{pe} of {job}] run complete");
                let times = r.stdout.lines().filter(|l| *l == done).count();
                let want = if mode == "split" { 2 } else { 1 };
                assert_eq!(times, want, "mpirun -np {n} {mode}: '{done}':\n{r}");
            }
        }
        let r = mpirun(n, &prog, &["shmem"], &base);
        assert!(r.ok(), "NVSHMEMX_INIT_WITH_SHMEM is refused cleanly:\n{r}");
        assert_eq!(lines(&r, "OK shmem refused").len(), n, "{r}");
        assert!(
            r.stderr
                .contains("NVSHMEMX_INIT_WITH_SHMEM is not supported"),
            "{r}"
        );
        // A program without MPI: plain init through the launcher's variables, every call
        // family, direct and through the proxy.
        for (how, p2p) in [("direct", "0"), ("proxied", "1")] {
            let env = [base[0], base[1], ("PSHMEM_DISABLE_P2P", p2p)];
            let r = mpirun(n, &host_api, &[how], &env);
            assert!(r.ok(), "mpirun -np {n} host_api {how}:\n{r}");
            assert_eq!(
                lines(&r, "OK rma").len(),
                n,
                "{how}: every rank of one job:\n{r}"
            );
        }
    }
    // The launcher says 2 ranks but the program's MPI makes this one a singleton (as a program
    // built against another MPI than the launcher's would): refused, not a job of one PE.
    let mut spec = JobSpec::new(&prog, 1, &["world"])
        .env("OMPI_COMM_WORLD_RANK", "0")
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .env("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
        .env("PSHMEM_DISABLE_CUDA", "1")
        .timeout(Duration::from_secs(60));
    spec.rank_vars = false;
    let r = spec.launch().wait().remove(0);
    assert!(
        !r.ok(),
        "a singleton MPI under a 2-rank launch must fail:\n{r}"
    );
    assert!(r.stdout.contains("is not the one that launched it"), "{r}");
    assert!(lines(&r, "OK mpi").is_empty(), "{r}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Ranks started with `launcher`'s variables (`vars(rank)`), without ours.
fn launched(
    program: &Path,
    n: usize,
    rdv: &str,
    vars: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> JobSpec {
    let mut spec = JobSpec::new(program, n, &["direct"])
        .env("PSHMEM_PROVIDER", "tcp")
        .env("PSHMEM_SYMMETRIC_SIZE", "16M")
        .env("PSHMEM_DISABLE_CUDA", "1")
        .env("PSHMEM_RENDEZVOUS_DIR", rdv)
        .timeout(Duration::from_secs(60));
    spec.rank_vars = false;
    for r in 0..n {
        for (k, v) in vars(r) {
            spec = spec.rank_env(r, k, v);
        }
    }
    spec
}

#[test]
fn srun_and_mpiexec_variables_make_one_job() {
    let dir = scratch("env");
    let prog = dir.join("host_api");
    compile("host_api.c", &prog);
    let rdv = rdv(&dir);
    let job = std::process::id().to_string();
    for n in [2, 4] {
        // srun on one node: the ranks meet through the rendezvous file.
        let slurm = |hosts: usize| {
            let job = job.clone();
            move |r: usize| {
                vec![
                    ("SLURM_PROCID", r.to_string()),
                    ("SLURM_LOCALID", r.to_string()),
                    ("SLURM_STEP_NUM_TASKS", n.to_string()),
                    ("SLURM_STEP_NUM_NODES", hosts.to_string()),
                    ("SLURM_STEP_NODELIST", "localhost".to_string()),
                    ("SLURM_JOB_ID", job.clone()),
                    ("SLURM_STEP_ID", format!("{n}{hosts}")),
                ]
            }
        };
        let res = launched(&prog, n, &rdv, slurm(1)).launch().wait();
        assert_all_ok(&res);
        // srun across nodes: rank 0 listens on the step list's first host (here loopback).
        let res = launched(&prog, n, &rdv, slurm(2)).launch().wait();
        assert_all_ok(&res);
        // MPICH's Hydra (PMI variables).
        let hydra = |r: usize| {
            vec![
                ("PMI_RANK", r.to_string()),
                ("PMI_SIZE", n.to_string()),
                ("MPI_LOCALRANKID", r.to_string()),
                ("MPI_LOCALNRANKS", n.to_string()),
                ("PMI_KVSNAME", format!("kvs_{job}_{n}")),
            ]
        };
        let res = launched(&prog, n, &rdv, hydra).launch().wait();
        assert_all_ok(&res);
        for r in &res {
            assert_eq!(r.fields("OK rma").len(), 1, "{r}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ranks_a_launcher_promised_that_never_come_fail_loudly() {
    let dir = scratch("missing");
    let prog = dir.join("host_api");
    compile("host_api.c", &prog);
    let rdv = rdv(&dir);
    let ompi = |r: usize| {
        vec![
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "2".to_string()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2".to_string()),
            ("PMIX_NAMESPACE", format!("missing-{}", std::process::id())),
        ]
    };
    for (alone, says) in [(0, "did not join"), (1, "no rendezvous from rank 0")] {
        let mut spec = launched(&prog, 2, &rdv, ompi).env("PSHMEM_BOOTSTRAP_TIMEOUT", "2");
        spec.ranks = vec![alone];
        let res = spec.launch().wait();
        let r = &res[0];
        assert!(
            !r.ok(),
            "rank {alone} alone must fail, not run a 1-PE job:\n{r}"
        );
        assert!(
            r.stdout.contains(says),
            "rank {alone} says why ({says}):\n{r}"
        );
        assert!(!r.stdout.contains("OK "), "nothing ran:\n{r}");
    }
    // Across hosts (one of the two ranks here) without MPI or an address: refused at once,
    // naming what to set, rather than waiting for a file no other host can see.
    let spread = |r: usize| {
        let mut v = ompi(r);
        for (k, val) in &mut v {
            if *k == "OMPI_COMM_WORLD_LOCAL_SIZE" {
                *val = "1".to_string();
            }
        }
        v
    };
    let mut spec = launched(&prog, 2, &rdv, spread);
    spec.ranks = vec![1];
    let started = std::time::Instant::now();
    let r = spec.launch().wait().remove(0);
    assert!(!r.ok() && r.stdout.contains("PSHMEM_BOOTSTRAP_ADDR"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(20), "at once: {r}");
    std::fs::remove_dir_all(&dir).ok();
}
