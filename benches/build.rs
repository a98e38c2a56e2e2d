//! Compiles the raw libfabric baseline (c/fabric_raw.c) that fabric-bench runs beside the safe layer,
//! pshmem-perf's device-initiated kernels (cuda/perf.cu), and the probe table of their arguments
//! (src/probe.c).
fn main() {
    println!("cargo:rerun-if-changed=c/fabric_raw.c");
    let mut cc = cc::Build::new();
    cc.file("c/fabric_raw.c").opt_level(2).warnings(true);
    // The headers of the libfabric pshmem-libfabric-sys links (PSHMEM_LIBFABRIC_PREFIX or the
    // system's): the C baseline's structs must match the library it calls.
    match std::env::var_os("DEP_FABRIC_INCLUDE") {
        Some(dirs) => {
            for p in std::env::split_paths(&dirs).filter(|p| !p.as_os_str().is_empty()) {
                cc.include(p);
            }
        }
        None => {
            let lib = pkg_config::Config::new()
                .atleast_version("1.17")
                .probe("libfabric")
                .expect("libfabric-dev");
            for p in &lib.include_paths {
                cc.include(p);
            }
        }
    }
    cc.compile("pshmem_fabric_raw");
    pshmem_cuda_build::fatbins("cuda");
    pshmem_cuda_build::c_probe("src/probe.c", "pshmem_benches_probe", &["cuda"]);
}
