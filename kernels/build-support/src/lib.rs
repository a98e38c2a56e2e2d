//! # pshmem-cuda-build
//!
//! Owns how proxyshmem compiles device code and its shared C headers at build time, for the
//! build scripts of the crates that embed kernels (`pshmem-kernels`: the runtime's own;
//! `pshmem-ep`: the MoE kernels; `pshmem-tests` and `pshmem-benches`: test and benchmark
//! kernels, kept out of the library):
//! - [`fatbins`]: every `.cu` file of a folder becomes a fatbin (sm_90 SASS + compute_90 PTX) in
//!   `OUT_DIR`, compiled by the pinned CUDA 13.0 nvcc against the shared headers
//!   (`abi/include`), the device API (`kernels/include`) and the crate's own include folders, so
//!   a kernel that does not compile fails the build (and CI);
//! - [`c_probe`]: a probe table of shared headers, compiled by the host C compiler, which the
//!   crate's tests read through `pshmem-abi-probe`.
//!
//! Nothing here needs a GPU or a driver.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The include folders every kernel is compiled against: the shared C headers (`abi/include`),
/// then the device API (`kernels/include`).
pub fn include_dirs() -> [PathBuf; 2] {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join("../../abi/include"), here.join("../include")]
}

/// The folder of `pshmem_probe.h` (the probe table macros).
fn probe_include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../abi/probe/include")
}

/// The calling crate's folder and `OUT_DIR` (from a build script).
fn build_dirs() -> (PathBuf, PathBuf) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("a build script"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("a build script"));
    (manifest, out)
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
    fatbins_with(dir, &[]);
}

/// [`fatbins`], with the calling crate's own include folders (relative to it) searched first.
pub fn fatbins_with(dir: &str, own_includes: &[&str]) {
    let (manifest, out) = build_dirs();
    let nvcc = nvcc();
    let mut includes: Vec<PathBuf> = own_includes.iter().map(|i| manifest.join(i)).collect();
    includes.extend(include_dirs());
    println!("cargo:rerun-if-env-changed=PSHMEM_NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    for i in &includes {
        println!("cargo:rerun-if-changed={}", i.display());
    }
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
            .args(includes.iter().flat_map(|i| [Path::new("-I"), i]))
            .arg("-o")
            .arg(out.join(format!("{stem}.fatbin")))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {}", src.display());
    }
}

/// From a build script: compiles the probe table `src` (a C file relative to the calling crate,
/// written with `pshmem_probe.h`) against the shared headers and the crate's own include folders
/// into the static library `lib`, for the crate's tests (`pshmem-abi-probe`). The headers' own
/// static asserts run on the host compiler too. Only test code names a table's function, so no
/// shipped library links it.
pub fn c_probe(src: &str, lib: &str, own_includes: &[&str]) {
    let (manifest, _) = build_dirs();
    let mut b = cc::Build::new();
    b.file(manifest.join(src))
        .include(probe_include_dir())
        .warnings(true)
        .extra_warnings(true);
    println!("cargo:rerun-if-changed={}", manifest.join(src).display());
    println!("cargo:rerun-if-changed={}", probe_include_dir().display());
    for i in own_includes
        .iter()
        .map(|i| manifest.join(i))
        .chain(include_dirs())
    {
        println!("cargo:rerun-if-changed={}", i.display());
        b.include(i);
    }
    b.compile(lib);
}
