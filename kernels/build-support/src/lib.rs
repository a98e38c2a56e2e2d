//! # pshmem-cuda-build
//!
//! Owns how proxyshmem compiles CUDA at build time, for the build scripts of the crates that
//! embed kernels (`pshmem-kernels`: the runtime's own; `pshmem-tests` and `pshmem-benches`:
//! test and benchmark kernels, kept out of the library): every `.cu` file of a folder becomes a
//! fatbin (sm_90 SASS + compute_90 PTX) in `OUT_DIR`, compiled by the pinned CUDA 13.0 nvcc
//! against the device headers in `kernels/include`, so a kernel that does not compile fails the
//! build (and CI). Nothing here needs a GPU or a driver.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The device headers (`kernels/include`).
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include")
}

/// The nvcc to use: `PSHMEM_NVCC`, `$CUDA_HOME/bin/nvcc`, the project's `.tools/cuda`
/// (`scripts/setup-cuda.sh` installs it there), or `nvcc` on the PATH.
pub fn nvcc() -> PathBuf {
    let candidates = [
        std::env::var_os("PSHMEM_NVCC").map(PathBuf::from),
        std::env::var_os("CUDA_HOME").map(|h| Path::new(&h).join("bin/nvcc")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/cuda/nvidia/cu13/bin/nvcc")),
    ];
    for c in candidates.into_iter().flatten() {
        if c.exists() {
            return c;
        }
    }
    if Command::new("nvcc").arg("--version").output().is_ok() {
        return PathBuf::from("nvcc");
    }
    panic!(
        "nvcc not found: run `bash scripts/setup-cuda.sh` (it installs the pinned CUDA 13.0 \
         compiler into .tools/cuda), or set PSHMEM_NVCC or CUDA_HOME"
    );
}

/// From a build script: compiles every `dir/*.cu` (relative to the calling crate) into
/// `OUT_DIR/<stem>.fatbin`, and asks cargo to rerun when a source, the folder or a header
/// changes. Panics (failing the build) naming the file nvcc rejected.
pub fn fatbins(dir: &str) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("a build script"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("a build script"));
    let (nvcc, include) = (nvcc(), include_dir());
    println!("cargo:rerun-if-env-changed=PSHMEM_NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-changed={}", include.display());
    let src_dir = manifest.join(dir);
    // The folder itself: a new .cu file is compiled without a clean build.
    println!("cargo:rerun-if-changed={}", src_dir.display());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&src_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", src_dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    for src in sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let stem = src
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        let status = Command::new(&nvcc)
            .args([
                "-gencode",
                "arch=compute_90,code=[sm_90,compute_90]",
                "-fatbin",
                "-O3",
            ])
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(out.join(format!("{stem}.fatbin")))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {}", src.display());
    }
}
