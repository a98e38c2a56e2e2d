//! Compiles a probe of kernels/include/pshmem/ring.h with the host C compiler, so that a test can
//! compare every size, offset and constant of the C layout with the Rust mirror (and the header's
//! own static asserts run on a real compiler in every build).
fn main() {
    println!("cargo:rerun-if-changed=../kernels/include/pshmem/ring.h");
    println!("cargo:rerun-if-changed=src/layout_probe.c");
    cc::Build::new()
        .file("src/layout_probe.c")
        .include("../kernels/include")
        .warnings(true)
        .compile("pshmem_ring_layout_probe");
}
