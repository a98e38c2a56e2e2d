//! Compiles every `cuda/*.cu` into a fatbin (sm_90 SASS + compute_90 PTX) with the pinned CUDA
//! 13.0 nvcc, so that a kernel that does not compile fails the build (and CI). nvcc is found in
//! `PSHMEM_NVCC`, `$CUDA_HOME/bin`, the project's `.tools/cuda` (scripts/setup-cuda.sh installs it
//! there), or on the PATH.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn nvcc() -> PathBuf {
    let candidates = [
        std::env::var_os("PSHMEM_NVCC").map(PathBuf::from),
        std::env::var_os("CUDA_HOME").map(|h| Path::new(&h).join("bin/nvcc")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/cuda/nvidia/cu13/bin/nvcc")),
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

fn main() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let nvcc = nvcc();
    println!("cargo:rerun-if-env-changed=PSHMEM_NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-changed=include");
    // The folder itself: a new .cu file is compiled without a clean build.
    println!("cargo:rerun-if-changed=cuda");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(manifest.join("cuda"))
        .expect("kernels/cuda")
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
        let dst = out.join(format!("{stem}.fatbin"));
        let status = Command::new(&nvcc)
            .args([
                "-gencode",
                "arch=compute_90,code=[sm_90,compute_90]",
                "-fatbin",
                "-O3",
            ])
            .arg("-I")
            .arg(manifest.join("include"))
            .arg("-o")
            .arg(&dst)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {}", src.display());
    }
}
