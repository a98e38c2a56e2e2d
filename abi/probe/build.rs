//! Compiles the probe table of the shared headers under `abi/include` (`src/abi.c`).
fn main() {
    pshmem_cuda_build::c_probe("src/abi.c", "pshmem_abi_probe", &[]);
}
