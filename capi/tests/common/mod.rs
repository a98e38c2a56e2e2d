//! What the C API's tests share: `libpshmem.so` built for them, the include folders, and a C
//! compile against them.

#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The folder holding `libpshmem.so` (this test's `target/<profile>`). Integration tests of a
/// cdylib-only crate do not make cargo build the library, so it is built here (a no-op when
/// up to date; cargo does not hold its build lock while tests run).
pub fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable");
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>/deps/<test>")
                .to_path_buf();
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .args(["build", "--quiet", "-p", "pshmem-capi"])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if dir.file_name().is_some_and(|p| p == "release") {
                cargo.arg("--release");
            }
            let o = cargo.output().expect("run cargo build -p pshmem-capi");
            assert!(
                o.status.success(),
                "cargo build -p pshmem-capi failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                dir.join("libpshmem.so").exists(),
                "{} has no libpshmem.so after building it",
                dir.display()
            );
            dir
        })
        .clone()
}

/// The C API's include folders: its own header and the shared ABI header it includes (not the
/// device API: `pshmem.h` is plain C and must compile without `kernels/include`).
pub fn includes() -> [PathBuf; 2] {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join("include"), here.join("../abi/include")]
}

/// Compiles `tests/c/<src>` with `cc` against the C API into `out`.
pub fn compile(src: &str, out: &Path) {
    compile_with("cc", &[], src, out);
}

/// Compiles `tests/c/<src>` with `compiler` (`cc`, `mpicc`) against the C API and the
/// folders `extra` into `out`, linked with `libpshmem.so`.
pub fn compile_with(compiler: &str, extra: &[PathBuf], src: &str, out: &Path) {
    let lib = lib_dir();
    let mut cmd = Command::new(compiler);
    cmd.args(["-std=c99", "-O1", "-Wall", "-Wextra", "-Werror"]);
    for i in includes().iter().chain(extra) {
        cmd.arg("-I").arg(i);
    }
    cmd.arg(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/c")
            .join(src),
    )
    .arg("-L")
    .arg(&lib)
    .arg("-lpshmem")
    .arg(format!("-Wl,-rpath,{}", lib.display()))
    .arg("-o")
    .arg(out);
    let o = cmd.output().expect("run the C compiler");
    assert!(
        o.status.success(),
        "{compiler} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
