//! Compiles the test kernels (`cuda/*.cu`: the ring protocol on a GPU, the device API) that
//! `pshmem-gpu-tests` loads.
fn main() {
    pshmem_cuda_build::fatbins("cuda");
}
