//! Compiles the test kernels (`cuda/*.cu`: the ring protocol on a GPU, the device API) that
//! `pshmem-gpu-tests` loads, and the probe table of their arguments (`src/probe.c`).
fn main() {
    pshmem_cuda_build::fatbins("cuda");
    pshmem_cuda_build::c_probe("src/probe.c", "pshmem_tests_probe", &["cuda"]);
}
