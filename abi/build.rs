//! Compiles a probe of the shared C headers (`kernels/include/pshmem/{abi,ring,state,ep/ll,ep/ht}.h`) with
//! the host C compiler, so that tests compare every size, offset and constant of the C side with
//! the Rust side (and the headers' own static asserts run on a real compiler in every build).
fn main() {
    for h in ["abi.h", "ring.h", "state.h", "ep/ll.h", "ep/ht.h"] {
        println!("cargo:rerun-if-changed=../kernels/include/pshmem/{h}");
    }
    println!("cargo:rerun-if-changed=src/probe.c");
    cc::Build::new()
        .file("src/probe.c")
        .include("../kernels/include")
        .warnings(true)
        .extra_warnings(true)
        .compile("pshmem_abi_probe");
}
