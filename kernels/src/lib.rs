//! # pshmem-kernels
//!
//! Owns proxyshmem's device code: the header-only device API under `include/pshmem/` (the ring
//! layout `ring.h`, shared with the Rust mirror in `gpu-queue`, and the GPU producer
//! `ring_device.cuh`), and the kernels under `cuda/`, compiled at build time for sm_90 (with
//! compute_90 PTX for newer GPUs) by the pinned CUDA 13.0 nvcc and embedded here as fatbins, to be
//! loaded with `cuModuleLoadData` at run time. Nothing here needs a GPU or a driver to build.

/// Ring tests and measurements (`cuda/ring_test.cu`): `pshmem_ring_stress`,
/// `pshmem_ring_roundtrip`, `pshmem_ring_rate`.
pub static RING_TEST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ring_test.fatbin"));

/// The runtime's own kernels (`cuda/runtime.cu`): `pshmem_k_amo` (a proxy's AMO on its GPU),
/// `pshmem_k_quiet`, `pshmem_k_barrier_all` (host on-stream calls).
pub static RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime.fatbin"));

/// Device API tests (`cuda/device_test.cu`), run by `pshmem-gpu-tests`.
pub static DEVICE_TEST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/device_test.fatbin"));

/// pshmem-perf's device-initiated tests (`cuda/perf.cu`).
pub static PERF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/perf.fatbin"));

/// The include folder (for tools that compile against the device API at run time).
pub const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");

#[cfg(test)]
mod tests {
    #[test]
    fn fatbins_are_embedded() {
        // A CUDA fatbin starts with the magic 0xBA55ED50 (little-endian).
        for f in [
            super::RING_TEST,
            super::RUNTIME,
            super::DEVICE_TEST,
            super::PERF,
        ] {
            assert_eq!(&f[..4], &[0x50, 0xed, 0x55, 0xba]);
        }
    }
}
