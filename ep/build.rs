//! Compiles the MoE kernels (`cuda/*.cu`, against `include/` and the shared headers) into
//! fatbins, and the probe table of the MoE headers (`src/probe.c`) for the tests.
fn main() {
    pshmem_cuda_build::fatbins_with("cuda", &["include"]);
    pshmem_cuda_build::c_probe("src/probe.c", "pshmem_ep_probe", &["include"]);
}
