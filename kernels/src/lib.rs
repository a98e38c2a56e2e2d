//! # pshmem-kernels
//!
//! Owns proxyshmem's device code: the header-only device API under `include/pshmem/` (one header
//! per topic, `device.cuh` the umbrella; the plain C headers it shares with the host live in
//! `abi/include/pshmem/`, owned by `pshmem-abi`), and the runtime's
//! own kernels under `cuda/`, compiled at build time for sm_90 (with compute_90 PTX for newer
//! GPUs) by the pinned CUDA 13.0 nvcc (`pshmem-cuda-build`) and embedded here as a fatbin, to be
//! loaded with `cuModuleLoadData` at run time. Test and benchmark kernels live with the crates
//! that run them. Nothing here needs a GPU or a driver to build.

/// The runtime's own kernels (`cuda/runtime.cu`): `pshmem_k_amo` (a proxy's AMO on its GPU),
/// `pshmem_k_quiet`, `pshmem_k_barrier_all` (host on-stream calls).
pub static RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime.fatbin"));

#[cfg(test)]
mod tests {
    #[test]
    fn fatbins_are_embedded() {
        // A CUDA fatbin starts with the magic 0xBA55ED50 (little-endian).
        assert_eq!(&super::RUNTIME[..4], &[0x50, 0xed, 0x55, 0xba]);
    }
}
