//! The arguments of pshmem-perf's device-initiated kernels (`cuda/perf.cu`): mirrors of
//! `cuda/perf_args.h`, compared field by field with the C compiler's view in the test below.
//! Pointers are `u64` device (or mapped host) addresses.

use pshmem::kernel_args;

kernel_args! {
    /// `perf_bw`.
    pub struct BwArgs = "perf_bw_args_t" {
        pub dst: u64,
        pub src: u64,
        pub size: u64,
        pub reps: i32,
        pub pe: i32,
        pub get: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `perf_p_pingpong`.
    pub struct PPingpongArgs = "perf_p_pingpong_args_t" {
        pub flag: u64,
        pub base: u64,
        pub ns: u64,
        pub iters: i32,
        pub me: i32,
    }
}

kernel_args! {
    /// `perf_amo`.
    pub struct AmoArgs = "perf_amo_args_t" {
        pub word: u64,
        pub ns: u64,
        pub iters: i32,
        pub pe: i32,
    }
}

kernel_args! {
    /// `perf_msg_rate`.
    pub struct MsgRateArgs = "perf_msg_rate_args_t" {
        pub dst: u64,
        pub per_thread: i32,
        pub pe: i32,
    }
}

kernel_args! {
    /// `perf_barrier`.
    pub struct BarrierArgs = "perf_barrier_args_t" {
        pub ns: u64,
        pub iters: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `perf_spin`.
    pub struct SpinArgs = "perf_spin_args_t" {
        pub ns: u64,
    }
}

kernel_args! {
    /// `perf_coll`.
    pub struct CollArgs = "perf_coll_args_t" {
        pub dest: u64,
        pub src: u64,
        pub n: u64,
        pub ns: u64,
        pub kind: i32,
        pub iters: i32,
    }
}

#[cfg(test)]
mod tests {
    use pshmem::cuda::KernelArgs;
    use pshmem_abi_probe::{Entry, Probe};

    use super::*;

    unsafe extern "C" {
        fn pshmem_benches_probe(n: *mut usize) -> *const Entry;
    }

    fn check<A: KernelArgs>(probe: &Probe) {
        probe.assert_mirror(A::C_NAME, A::FIELDS, size_of::<A>());
    }

    /// Every field of every kernel's arguments where the C compiler puts it.
    #[test]
    fn kernel_arguments_match_the_c_header() {
        // SAFETY: defined by PSHMEM_PROBE_TABLE in src/probe.c.
        let probe = unsafe { Probe::read("benches", pshmem_benches_probe) };
        check::<BwArgs>(&probe);
        check::<PPingpongArgs>(&probe);
        check::<AmoArgs>(&probe);
        check::<MsgRateArgs>(&probe);
        check::<BarrierArgs>(&probe);
        check::<SpinArgs>(&probe);
        check::<CollArgs>(&probe);
    }
}
