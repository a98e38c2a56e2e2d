//! Generates the libfabric bindings and compiles C wrappers for the `static inline` functions
//! (most of the data path: fi_write, fi_cq_read, fi_mr_reg, ...), which have no symbol to link.

use std::{env, path::PathBuf};

fn main() {
    let lib = pkg_config::Config::new()
        .atleast_version("1.17")
        .probe("libfabric")
        .expect("libfabric >= 1.17 development files (Debian/Ubuntu: apt install libfabric-dev)");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let here = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=signals.c");

    let mut builder = bindgen::Builder::default()
        .header(here.join("wrapper.h").to_string_lossy())
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
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
