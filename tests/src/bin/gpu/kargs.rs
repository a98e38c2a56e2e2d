//! The arguments of the GPU test kernels (`tests/cuda/ring_test.cu`, `device_test.cu`):
//! mirrors of `tests/cuda/args.h`, compared field by field with the C compiler's view in the
//! test below. Pointers are `u64` device (or mapped host) addresses.

use pshmem::{cuda::RingDeviceHandle, kernel_args};

kernel_args! {
    /// `pshmem_ring_stress`.
    pub struct RingStressArgs = "pshmem_ring_stress_args_t" {
        pub r: RingDeviceHandle,
        pub per_warp: u64,
        pub status: u64,
    }
}

kernel_args! {
    /// `pshmem_ring_roundtrip`.
    pub struct RingRoundtripArgs = "pshmem_ring_roundtrip_args_t" {
        pub r: RingDeviceHandle,
        pub iters: u64,
        pub cycles: u64,
        pub status: u64,
        pub pe: u32,
        pub _pad: u32,
    }
}

kernel_args! {
    /// `pshmem_ring_rate`.
    pub struct RingRateArgs = "pshmem_ring_rate_args_t" {
        pub r: RingDeviceHandle,
        pub per_warp: u64,
        pub status: u64,
        pub pe: u32,
        pub _pad: u32,
    }
}

kernel_args! {
    /// `pshmem_mailbox`.
    pub struct MailboxArgs = "pshmem_mailbox_args_t" {
        pub to_cpu: u64,
        pub to_gpu: u64,
        pub iters: u64,
        pub cycles: u64,
    }
}

kernel_args! {
    /// `t_fill`.
    pub struct FillArgs = "t_fill_args_t" {
        pub buf: u64,
        pub n: u64,
        pub seed: u64,
    }
}

kernel_args! {
    /// `t_putget`.
    pub struct PutgetArgs = "t_putget_args_t" {
        pub dst: u64,
        pub src: u64,
        pub len: u64,
        pub put: i32,
        pub v: i32,
        pub pe: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `t_pg`.
    pub struct PgArgs = "t_pg_args_t" {
        pub p64: u64,
        pub p32: u64,
        pub p8: u64,
        pub pd: u64,
        pub pf: u64,
        pub gout: u64,
        pub gsrc: u64,
        pub n: i32,
        pub pe: i32,
        pub me: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `t_put_signal`.
    pub struct PutSignalArgs = "t_put_signal_args_t" {
        pub buf: u64,
        pub src: u64,
        pub msg: u64,
        pub sig: u64,
        pub peer_seed: u64,
        pub errors: u64,
        pub k: i32,
        pub pe: i32,
        pub variant: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `t_atomics`.
    pub struct AtomicsArgs = "t_atomics_args_t" {
        pub c64: u64,
        pub c32: u64,
        pub iters: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `t_amo_semantics`.
    pub struct AmoSemanticsArgs = "t_amo_semantics_args_t" {
        pub x64: u64,
        pub x32: u64,
        pub errors: u64,
        pub pe: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `t_barrier`.
    pub struct BarrierArgs = "t_barrier_args_t" {
        pub word: u64,
        pub errors: u64,
        pub rounds: i32,
        pub pe: i32,
    }
}

kernel_args! {
    /// `t_wait`.
    pub struct WaitArgs = "t_wait_args_t" {
        pub sig: u64,
        pub out: u64,
    }
}

#[cfg(test)]
mod tests {
    use pshmem::cuda::KernelArgs;
    use pshmem_abi_probe::{Entry, Probe};

    use super::*;

    unsafe extern "C" {
        fn pshmem_tests_probe(n: *mut usize) -> *const Entry;
    }

    fn check<A: KernelArgs>(probe: &Probe) {
        probe.assert_mirror(A::C_NAME, A::FIELDS, size_of::<A>());
    }

    /// Every field of every kernel's arguments where the C compiler puts it.
    #[test]
    fn kernel_arguments_match_the_c_header() {
        // SAFETY: defined by PSHMEM_PROBE_TABLE in tests/src/probe.c.
        let probe = unsafe { Probe::read("tests", pshmem_tests_probe) };
        check::<RingStressArgs>(&probe);
        check::<RingRoundtripArgs>(&probe);
        check::<RingRateArgs>(&probe);
        check::<MailboxArgs>(&probe);
        check::<FillArgs>(&probe);
        check::<PutgetArgs>(&probe);
        check::<PgArgs>(&probe);
        check::<PutSignalArgs>(&probe);
        check::<AtomicsArgs>(&probe);
        check::<AmoSemanticsArgs>(&probe);
        check::<BarrierArgs>(&probe);
        check::<WaitArgs>(&probe);
    }
}
