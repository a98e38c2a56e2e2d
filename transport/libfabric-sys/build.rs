//! Generates the libfabric bindings and compiles C wrappers for the `static inline` functions
//! (most of the data path: fi_write, fi_cq_read, fi_mr_reg, ...), which have no symbol to link.

use std::{env, path::PathBuf};

fn main() {
    use_prefix();
    let lib = pkg_config::Config::new()
        .atleast_version("1.17")
        .probe("libfabric")
        .expect(
            "libfabric >= 1.17 development files (Debian/Ubuntu: apt install libfabric-dev; \
             another prefix: PSHMEM_LIBFABRIC_PREFIX)",
        );
    // 2.x's headers put some fields in anonymous unions (fi_mr_attr's iovec pointer with the
    // DMA-BUF one, fi_domain_attr's data_progress with progress): lib.rs reaches them through
    // accessors that compile either way.
    println!("cargo::rustc-check-cfg=cfg(fi_headers_v2)");
    let major: u32 = lib
        .version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(1);
    if major >= 2 {
        println!("cargo:rustc-cfg=fi_headers_v2");
    }
    // For dependents' C code (DEP_FABRIC_INCLUDE): the headers of the very libfabric linked,
    // whichever prefix chose it (C built against other headers would mismatch its structs).
    let dirs = env::join_paths(&lib.include_paths).expect("include paths without ':'");
    println!("cargo:include={}", dirs.to_string_lossy());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let here = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=signals.c");

    let mut builder = bindgen::Builder::default()
        .header(here.join("wrapper.h").to_string_lossy())
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        // Defined by hand in lib.rs (1.17's headers lack them; 1.20 and later have the same
        // layout, which lib.rs asserts): one definition whatever the headers.
        .blocklist_item("FI_MR_DMABUF")
        .blocklist_type("fi_mr_dmabuf")
        .wrap_static_fns(true)
        .wrap_static_fns_path(out.join("fabric_static_fns"))
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for p in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", p.display()));
    }
    builder
        .generate()
        .expect("bindgen on <rdma/fabric.h> (needs libclang-dev)")
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings");

    let mut cc = cc::Build::new();
    cc.file(out.join("fabric_static_fns.c"))
        .file(here.join("signals.c"))
        .include(&here)
        .warnings(false);
    for p in &lib.include_paths {
        cc.include(p);
    }
    cc.compile("pshmem_fabric_static_fns");
}

/// Another libfabric than the system's: PSHMEM_LIBFABRIC_PREFIX names its prefix (an EFA
/// installer's /opt/amazon/efa, or scripts/setup-libfabric.sh's .tools/libfabric), whose
/// pkg-config file is then found first. (PKG_CONFIG_PATH alone works too.) The programs load
/// whichever libfabric.so.1 the loader finds: run them with LD_LIBRARY_PATH=PREFIX/lib.
fn use_prefix() {
    println!("cargo:rerun-if-env-changed=PSHMEM_LIBFABRIC_PREFIX");
    if let Some(prefix) = env::var_os("PSHMEM_LIBFABRIC_PREFIX") {
        let prefix = PathBuf::from(prefix);
        let mut dirs = vec![prefix.join("lib/pkgconfig"), prefix.join("lib64/pkgconfig")];
        if let Some(old) = env::var_os("PKG_CONFIG_PATH") {
            dirs.extend(env::split_paths(&old));
        }
        let joined = env::join_paths(dirs).unwrap_or_else(|_| {
            panic!(
                "PSHMEM_LIBFABRIC_PREFIX={}: a path with ':' cannot go on PKG_CONFIG_PATH",
                prefix.display()
            )
        });
        // SAFETY: a build script is single-threaded here; nothing reads the environment
        // concurrently.
        unsafe { env::set_var("PKG_CONFIG_PATH", joined) };
    }
}
