//! The GPU tests (`pshmem-gpu-tests`) in small sizes: on a machine with a CUDA device they run
//! for real; without one they must say so (a SKIP line with the reason) rather than pass
//! silently. `scripts/gpu-test.sh` runs the full sizes on a GPU machine.

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pshmem-gpu-tests"))
        .args(args)
        .output()
        .expect("run pshmem-gpu-tests");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn ring_protocol_on_the_gpu_or_a_loud_skip() {
    for args in [
        &[
            "ring-stress",
            "--blocks",
            "8",
            "--threads",
            "64",
            "--per-warp",
            "500",
            "--slots",
            "64",
        ][..],
        &[
            "ring-rate",
            "--blocks",
            "4",
            "--threads",
            "64",
            "--per-warp",
            "500",
        ][..],
        &["ring-latency", "--iters", "200"][..],
    ] {
        let out = run(args);
        if let Some(skip) = out.lines().find(|l| l.starts_with("SKIP")) {
            let why = skip.trim_start_matches("SKIP pshmem-gpu-tests: ");
            pshmem_tests::skipped(&format!("gpu {}", args[0]), why);
            assert!(
                skip.len() > "SKIP pshmem-gpu-tests: ".len(),
                "a skip must say why"
            );
        } else {
            assert!(
                out.lines()
                    .any(|l| l.starts_with(&format!("OK {}", args[0]))),
                "{out}"
            );
        }
    }
}
