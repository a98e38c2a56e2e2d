//! Compiles the runtime's own kernels (`cuda/*.cu`) into fatbins; test and benchmark kernels are
//! compiled by the crates that run them.
fn main() {
    pshmem_cuda_build::fatbins("cuda");
}
