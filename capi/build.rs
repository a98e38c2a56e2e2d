//! Gives libpshmem.so its soname, so that programs linked against it (directly or through the
//! NVSHMEM tree's libnvshmem_host.so) record "libpshmem.so" and find it on the library path.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpshmem.so");
}
