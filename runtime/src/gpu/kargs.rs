//! The arguments of the runtime's own kernels (`kernels/cuda/runtime.cu`), mirrors of
//! `abi/include/pshmem/kernel_args.h` compared field by field with the C compiler's view in the
//! tests below. Pointers are `u64` device (or mapped host) addresses.

use crate::kernel_args;

kernel_args! {
    /// `pshmem_k_amo`: one AMO a proxy applies to its GPU's memory for a remote initiator.
    pub(crate) struct AmoArgs = "pshmem_k_amo_args_t" {
        pub addr: u64,
        pub operand: u64,
        pub compare: u64,
        pub result: u64,
        pub sub: u32,
        pub _pad: u32,
    }
}

kernel_args! {
    /// `pshmem_k_rma`: a host put (`put` = 1) or get of `n` bytes with `pe`.
    pub(crate) struct RmaArgs = "pshmem_k_rma_args_t" {
        pub dest: u64,
        pub src: u64,
        pub n: u64,
        pub pe: i32,
        pub put: i32,
        pub nbi: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `pshmem_k_put_signal`: a host put-with-signal.
    pub(crate) struct PutSignalArgs = "pshmem_k_put_signal_args_t" {
        pub dest: u64,
        pub src: u64,
        pub n: u64,
        pub sig: u64,
        pub value: u64,
        pub op: i32,
        pub pe: i32,
        pub nbi: i32,
        pub _pad: i32,
    }
}

kernel_args! {
    /// `pshmem_k_signal_op`: a host signal update.
    pub(crate) struct SignalOpArgs = "pshmem_k_signal_op_args_t" {
        pub sig: u64,
        pub value: u64,
        pub op: i32,
        pub pe: i32,
    }
}

kernel_args! {
    /// `pshmem_k_signal_wait`: a stream's wait on a local signal word.
    pub(crate) struct SignalWaitArgs = "pshmem_k_signal_wait_args_t" {
        pub sig: u64,
        pub value: u64,
        pub to: u64,
        pub cmp: i32,
        pub reset: i32,
    }
}

kernel_args! {
    /// `pshmem_k_host_amo`: an AMO of the host.
    pub(crate) struct HostAmoArgs = "pshmem_k_host_amo_args_t" {
        pub dest: u64,
        pub operand: u64,
        pub compare: u64,
        pub result: u64,
        pub sub: u32,
        pub pe: i32,
    }
}

kernel_args! {
    /// `pshmem_k_team_sync`: a team's sync or barrier.
    pub(crate) struct TeamSyncArgs = "pshmem_k_team_sync_args_t" {
        pub team: i32,
        pub barrier: i32,
    }
}

kernel_args! {
    /// `pshmem_k_coll` and `pshmem_k_coll_wide`: a collective of the host or on a stream.
    pub(crate) struct CollArgs = "pshmem_k_coll_args_t" {
        pub dest: u64,
        pub src: u64,
        pub n: u64,
        pub kind: i32,
        pub team: i32,
        pub arg: i32,
        pub dtype: i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::KernelArgs;

    fn matches_the_header<A: KernelArgs>() {
        pshmem_abi_probe::assert_mirror(A::C_NAME, A::FIELDS, size_of::<A>());
    }

    /// Every field of every runtime kernel's arguments where the C compiler puts it.
    #[test]
    fn kernel_arguments_match_the_c_header() {
        matches_the_header::<AmoArgs>();
        matches_the_header::<RmaArgs>();
        matches_the_header::<PutSignalArgs>();
        matches_the_header::<SignalOpArgs>();
        matches_the_header::<SignalWaitArgs>();
        matches_the_header::<HostAmoArgs>();
        matches_the_header::<TeamSyncArgs>();
        matches_the_header::<CollArgs>();
    }
}
