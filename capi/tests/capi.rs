//! The C API from C: `tests/c/host_api.c` compiled by the system's C compiler with -Wall
//! -Wextra -Werror against `include/pshmem/pshmem.h` and linked with `libpshmem.so`, run on 2
//! and 4 PEs on the direct path and through the proxy (tcp and the simulated fabric), checking
//! every call family; the header also compiles as C++.

use std::{path::Path, process::Command, time::Duration};

use pshmem_tests::{JobSpec, RankResult, assert_all_ok};

mod common;

use common::{compile, includes};

#[test]
fn the_header_compiles_as_c_and_cpp_without_warnings() {
    for (compiler, std) in [("cc", "-std=c99"), ("c++", "-std=c++17")] {
        let mut cmd = Command::new(compiler);
        if compiler == "c++" {
            cmd.args(["-x", "c++"]);
        }
        cmd.args([
            std,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ]);
        for i in includes() {
            cmd.arg("-I").arg(i);
        }
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/host_api.c"));
        let o = cmd.output().expect("run the compiler");
        assert!(
            o.status.success(),
            "{compiler} {std}:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Runs the C program `exe` on `n` PEs with `args` and `env` (a 16 MiB host heap, no CUDA);
/// every rank must succeed.
fn c_job(exe: &Path, n: usize, args: &[&str], env: &[(&str, &str)]) -> Vec<RankResult> {
    let mut spec = JobSpec::new(exe, n, args)
        .env("PSHMEM_SYMMETRIC_SIZE", "16M")
        .env("PSHMEM_DISABLE_CUDA", "1")
        .env("PSHMEM_OP_TIMEOUT", "10")
        .timeout(Duration::from_secs(60));
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    let res = spec.launch().wait();
    assert_all_ok(&res);
    res
}

#[test]
fn a_c_program_runs_every_call_family_on_every_path() {
    let dir = std::env::temp_dir().join(format!("pshmem-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("host_api");
    compile("host_api.c", &exe);
    let paths: [(&str, &[(&str, &str)]); 3] = [
        ("direct", &[("PSHMEM_PROVIDER", "tcp")]),
        (
            "proxied",
            &[("PSHMEM_PROVIDER", "tcp"), ("PSHMEM_DISABLE_P2P", "1")],
        ),
        (
            "proxied",
            &[("PSHMEM_PROVIDER", "sim"), ("PSHMEM_DISABLE_P2P", "1")],
        ),
    ];
    for n in [2, 4] {
        for (how, env) in paths {
            let res = c_job(&exe, n, &[how], env);
            for r in &res {
                for part in [
                    "OK rma",
                    "OK atomics",
                    "OK teams",
                    "OK collectives",
                    "OK errors",
                    "OK done",
                ] {
                    assert_eq!(r.fields(part).len(), 1, "{n} PEs {env:?}: {part}\n{r}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 41's sweep of the C API: `tests/c/sweep.c` calls every function with bad arguments
/// before init, while the job runs (on the direct path and through the proxy) and after
/// finalize. Every call must give its typed error with a message naming what is wrong; none
/// may crash or hang, and the job must work afterwards.
#[test]
fn every_c_call_with_bad_arguments_is_a_typed_error() {
    let dir = std::env::temp_dir().join(format!("pshmem-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("sweep");
    compile("sweep.c", &exe);
    let mut total = 0;
    for env in [&[][..], &[("PSHMEM_DISABLE_P2P", "1")][..]] {
        let res = c_job(&exe, 2, &[], env);
        for r in &res {
            assert!(
                !r.stdout.contains("BAD "),
                "{env:?}: calls not refused:\n{r}"
            );
            let phases = r.fields("SWEEP");
            assert_eq!(phases.len(), 4, "{env:?}: every phase\n{r}");
            for p in &phases {
                assert_eq!(p["calls"], p["refused"], "{env:?} {}\n{r}", p["phase"]);
                total += p["calls"].parse::<usize>().unwrap();
            }
        }
    }
    eprintln!("sweep: {total} bad C calls over 2 paths x 2 PEs, every one a typed error");
    let _ = std::fs::remove_dir_all(&dir);
}
