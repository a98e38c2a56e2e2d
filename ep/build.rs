//! Compiles the MoE kernels (`cuda/*.cu`) into fatbins.
fn main() {
    pshmem_cuda_build::fatbins("cuda");
}
