//! Compiles the raw libfabric baseline (c/fabric_raw.c) that fabric-bench runs beside the safe layer,
//! and pshmem-perf's device-initiated kernels (cuda/perf.cu).
fn main() {
    let lib = pkg_config::Config::new()
        .atleast_version("1.17")
        .probe("libfabric")
        .expect("libfabric-dev");
    println!("cargo:rerun-if-changed=c/fabric_raw.c");
    let mut cc = cc::Build::new();
    cc.file("c/fabric_raw.c").opt_level(2).warnings(true);
    for p in &lib.include_paths {
        cc.include(p);
    }
    cc.compile("pshmem_fabric_raw");
    pshmem_cuda_build::fatbins("cuda");
}
