//! # pshmem-ep
//!
//! Owns MoE expert parallelism on the symmetric GPU heap: the low-latency (DeepEP-style)
//! dispatch and combine kernels (device code in `ep/include/pshmem/ep/`, entry points in
//! `cuda/ep.cu`), the layout of their double-buffered symmetric buffer ([`LlLayout`]), the
//! arguments they take ([`LlArgs`], the mirror of `pshmem_ep_ll_args_t`) and their launchers
//! ([`Ll`]); and the high-throughput (normal) mode's layout, notify, dispatch and combine
//! ([`ht`]). The Python `pshmem.ep.Buffer` is built on these.
//!
//! Ordering: every count or flag a kernel sends a peer reached through the proxy is a *counted
//! signal* (`pshmem/counted.cuh`): the proxy applies it only after every counted put it covers
//! landed, on any fabric; same-host peers get stores and a release store.

use std::sync::Arc;

pub mod ht;
pub mod keys;

use cudarc::driver::CudaModule;
use pshmem::{
    Error,
    cuda::{self, CudaError, KernelArgs},
    gpu::Gpu,
    gpu::host_ops::RawStream,
};

/// The kernels (`cuda/ep.cu`).
pub static KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ep.fatbin"));

/// Threads per block of every LL kernel (`PSHMEM_EP_THREADS`).
pub const THREADS: u32 = 512;
/// Largest `Tmax` (`PSHMEM_EP_MAX_TOKENS`).
pub const MAX_TOKENS: usize = 1024;
/// Largest top-k (`PSHMEM_EP_MAX_TOPK`).
pub const MAX_TOPK: usize = 16;
/// Most ranks (`PSHMEM_EP_MAX_RANKS`).
pub const MAX_RANKS: usize = 512;
/// Most experts (`PSHMEM_EP_MAX_EXPERTS`: the combine counts rows per expert in shared memory).
pub const MAX_EXPERTS: usize = 4096;

/// Flags of [`LlArgs::flags`] (`PSHMEM_EP_*` in `pshmem/ep/ll.h`).
pub mod flags {
    /// Dispatch: FP8 e4m3 with one FP32 scale per 128 channels (else bf16).
    pub const FP8: u32 = 0x1;
    /// Dispatch: scales are powers of two.
    pub const ROUND_SCALE: u32 = 0x2;
    /// Proxied peers: one message per token (else one per destination rank).
    pub const PER_TOKEN: u32 = 0x4;
    /// Combine: `x` is the send buffer's view, already written.
    pub const ZERO_COPY: u32 = 0x8;
    /// Dispatch FP8 with [`ROUND_SCALE`]: the scales as exponent bytes, four to an int32.
    pub const UE8M0: u32 = 0x10;
}

/// The phases one launch runs ([`LlArgs::phases`], `PSHMEM_EP_PHASE_*`).
pub mod phases {
    /// The send phase.
    pub const SEND: u32 = 0x1;
    /// The receive phase.
    pub const RECV: u32 = 0x2;
}

/// What one LL launch runs: its phases (of [`phases`]) and each phase's grid of blocks
/// (x, y); a phase not run has no grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    /// The send phase's grid, if it runs.
    pub send: Option<(u32, u32)>,
    /// The receive phase's grid, if it runs.
    pub recv: Option<(u32, u32)>,
}

impl Phases {
    /// The blocks of the launch: the larger of the phases' grids.
    pub fn blocks(&self) -> u32 {
        let n = |g: Option<(u32, u32)>| g.map_or(0, |(x, y)| x.saturating_mul(y));
        n(self.send).max(n(self.recv))
    }

    /// Fills `args`' phase fields.
    fn fill(&self, args: &mut LlArgs) {
        let (sx, sy) = self.send.unwrap_or((0, 0));
        let (rx, ry) = self.recv.unwrap_or((0, 0));
        (args.send_x, args.send_y, args.recv_x, args.recv_y) =
            (sx as i32, sy as i32, rx as i32, ry as i32);
        args.phases = self.send.map_or(0, |_| phases::SEND) | self.recv.map_or(0, |_| phases::RECV);
    }
}

pshmem::kernel_args! {
/// `pshmem_ep_ll_args_t`: what every LL kernel reads (addresses are device addresses).
#[allow(missing_docs)]
pub struct LlArgs = "pshmem_ep_ll_args_t" {
    pub num_tokens: i32,
    pub max_tokens: i32,
    pub hidden: i32,
    pub num_topk: i32,
    pub num_experts: i32,
    pub num_ranks: i32,
    pub my_rank: i32,
    pub flags: u32,
    pub sig: u64,
    pub send: u64,
    pub recv: u64,
    pub msg_bytes: u64,
    pub rings: u64,
    pub n_rings: u32,
    pub _pad: u32,
    pub x: u64,
    pub topk_idx: u64,
    pub topk_weights: u64,
    pub slot_map: u64,
    pub out_x: u64,
    pub out_scales: u64,
    pub recv_count: u64,
    pub src_info: u64,
    pub layout_range: u64,
    pub cum_stats: u64,
    pub wait_stats: u64,
    pub send_x: i32,
    pub send_y: i32,
    pub recv_x: i32,
    pub recv_y: i32,
    pub phases: u32,
    pub _pad2: u32,
}
}

pshmem::kernel_args! {
    /// `pshmem_ep_ll_clean_args_t`: the signal words the clean kernel zeroes.
    pub struct CleanArgs = "pshmem_ep_ll_clean_args_t" {
        /// Device address of the first word.
        pub sig: u64,
        /// Words.
        pub words: u64,
    }
}

const _: () = assert!(
    std::mem::size_of::<LlArgs>() == 192,
    "pshmem_ep_ll_args_t is 192 bytes"
);

/// Where things are in the LL symmetric buffer (see `pshmem/ep/ll.h`): two buffers, each a
/// signal area, a send area and a receive area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlLayout {
    /// Largest tokens per rank (`Tmax`).
    pub max_tokens: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Ranks.
    pub ranks: usize,
    /// Experts.
    pub experts: usize,
    /// Stride of a dispatch message.
    pub msg_bytes: usize,
    /// Bytes of one buffer's signal words.
    pub sig_bytes: usize,
    /// Bytes of one buffer's send (and receive) area.
    pub area_bytes: usize,
}

impl LlLayout {
    /// The layout for `max_tokens` tokens per rank, `hidden`, `ranks` and `experts`; `Err`
    /// says which requirement failed.
    pub fn new(
        max_tokens: usize,
        hidden: usize,
        ranks: usize,
        experts: usize,
    ) -> Result<Self, String> {
        if max_tokens == 0 || max_tokens > MAX_TOKENS {
            return Err(format!(
                "num_max_dispatch_tokens_per_rank={max_tokens}: must be 1..={MAX_TOKENS}"
            ));
        }
        if hidden == 0 || hidden % 256 != 0 {
            return Err(format!(
                "hidden={hidden}: must be a positive multiple of 256"
            ));
        }
        if ranks == 0 || ranks > MAX_RANKS {
            return Err(format!("{ranks} ranks: must be 1..={MAX_RANKS}"));
        }
        if experts == 0 || experts % ranks != 0 || experts > MAX_EXPERTS {
            return Err(format!(
                "num_experts={experts}: must be a positive multiple of the {ranks} ranks, at \
                 most {MAX_EXPERTS}"
            ));
        }
        let msg = (16 + (2 * hidden).max(hidden + hidden / 128 * 4)).next_multiple_of(16);
        let local = experts / ranks;
        // ll.h: dispatch and combine flags, receive and dispatch-send done counters,
        // combine-send ones.
        let sig_bytes = ((3 * experts + local + 1 + ranks) * 8).next_multiple_of(128);
        // ll.h: a dispatch region per rank, its header (a row count per local expert, padded
        // to 16 bytes) and room for every row of the largest stride; the combine's rows are
        // smaller. The headers take at most 16 bytes per expert (ranks <= experts), reserved
        // as such so that the size depends on the experts only, as DeepEP's hint does.
        let area_bytes = (16 * experts + experts * max_tokens * msg).next_multiple_of(128);
        Ok(Self {
            max_tokens,
            hidden,
            ranks,
            experts,
            msg_bytes: msg,
            sig_bytes,
            area_bytes,
        })
    }

    /// Bytes of one buffer (signal words, send area, receive area).
    pub fn buffer_bytes(&self) -> usize {
        self.sig_bytes + 2 * self.area_bytes
    }

    /// Bytes of the whole symmetric buffer (two buffers): DeepEP's
    /// `get_low_latency_rdma_size_hint`.
    pub fn size_hint(&self) -> usize {
        2 * self.buffer_bytes()
    }

    /// Offsets of buffer `b`'s (signal words, send area, receive area) from the start.
    pub fn offsets(&self, b: usize) -> (usize, usize, usize) {
        let base = b * self.buffer_bytes();
        (
            base,
            base + self.sig_bytes,
            base + self.sig_bytes + self.area_bytes,
        )
    }

    /// Signal words per buffer (all cleared by `clean`).
    pub fn sig_words(&self) -> usize {
        self.sig_bytes / 8
    }
}

/// Which LL kernel: one per operation, its phases chosen per launch ([`Phases`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Dispatch.
    Dispatch,
    /// Combine.
    Combine,
}

impl Kernel {
    /// From the names the Python layer uses.
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "dispatch" => Self::Dispatch,
            "combine" => Self::Combine,
            _ => return None,
        })
    }
}

/// The mangled names of the LL kernels (`cuda/ep.cu`: `pshmem_ep::ll::dispatch` and
/// `::combine`, templates instantiated for `pshmem_ep_ll_args_t`), in [`Kernel`]'s order.
/// C++ names, not `extern "C"` ones, so that a profiler shows `pshmem_ep::ll::dispatch<...>`,
/// the form DeepEP's timing helpers match.
pub const LL_KERNELS: [&str; 2] = [
    "_ZN9pshmem_ep2ll8dispatchI17pshmem_ep_ll_argsEEvT_",
    "_ZN9pshmem_ep2ll7combineI17pshmem_ep_ll_argsEEvT_",
];

/// The loaded MoE kernels of one PE's GPU (low-latency and normal mode).
#[derive(Debug)]
pub struct Ll {
    _module: Arc<CudaModule>,
    ll: [cuda::Kernel<LlArgs>; 2],
    clean: cuda::Kernel<CleanArgs>,
    ht: [cuda::Kernel<ht::HtArgs>; 6],
    me: usize,
}

fn cuda_err(me: usize, what: &'static str) -> impl FnOnce(CudaError) -> Error {
    move |source| Error::Cuda { me, what, source }
}

impl Ll {
    /// Loads the kernels into `gpu`'s context (the runtime fills their device state).
    pub fn load(gpu: &Gpu, me: usize) -> Result<Self, Error> {
        let m = gpu.load(KERNELS)?;
        fn load<A: KernelArgs>(
            gpu: &Gpu,
            m: &Arc<CudaModule>,
            me: usize,
            name: &'static str,
        ) -> Result<cuda::Kernel<A>, Error> {
            cuda::Kernel::load(gpu.context(), m, name)
                .map_err(cuda_err(me, "loading the MoE kernels"))
        }
        let ll = [
            load(gpu, &m, me, LL_KERNELS[0])?,
            load(gpu, &m, me, LL_KERNELS[1])?,
        ];
        let clean = load(gpu, &m, me, "pshmem_ep_ll_clean")?;
        let [a, b, c, d, e, g] = ht::HtKernel::NAMES.map(|name| load(gpu, &m, me, name));
        let ht = [a?, b?, c?, d?, e?, g?];
        Ok(Self {
            _module: m,
            ll,
            clean,
            ht,
            me,
        })
    }

    /// Launches `k` with `args` on `stream`: the phases `run` names, each on its grid (one
    /// launch of [`Phases::blocks`] blocks of [`THREADS`]); fills `my_rank`, the ring table and
    /// the phase fields. A launch of both phases needs all its blocks resident at once (the
    /// receive phase waits for every rank's send phase): the caller sizes the grids so, or
    /// launches the phases one after the other.
    ///
    /// # Safety
    /// Every address in `args` must be a device address valid for what the kernel does with it
    /// (see `pshmem/ep/ll.h`) until the stream has run it; `stream` is a live stream of `gpu`'s
    /// context.
    pub unsafe fn launch(
        &self,
        gpu: &Gpu,
        k: Kernel,
        mut args: LlArgs,
        run: Phases,
        stream: RawStream,
    ) -> Result<(), Error> {
        let (rings, n) = gpu.ring_table();
        args.my_rank = self.me as i32;
        args.rings = rings;
        args.n_rings = n as u32;
        run.fill(&mut args);
        let grid = (run.blocks().max(1), 1);
        // SAFETY: the addresses are the caller's contract.
        unsafe { self.ll[k as usize].launch(grid, THREADS, stream, args) }
            .map_err(cuda_err(self.me, "launching a MoE kernel"))
    }

    /// Zeroes `words` signal words at `sig` on `stream` (the caller brackets it with barriers).
    ///
    /// # Safety
    /// `sig` must be `words` writable 8-byte words of device memory; `stream` as in `launch`.
    pub unsafe fn clean(&self, sig: u64, words: u64, stream: RawStream) -> Result<(), Error> {
        let blocks = words.div_ceil(u64::from(THREADS)).clamp(1, 64) as u32;
        let args = CleanArgs { sig, words };
        // SAFETY: `sig` is the caller's.
        unsafe { self.clean.launch((blocks, 1), THREADS, stream, args) }
            .map_err(cuda_err(self.me, "launching a MoE kernel"))
    }
}

/// The C compiler's view of the MoE headers (`src/probe.c`), for the mirror tests.
#[cfg(test)]
fn probe() -> pshmem_abi_probe::Probe {
    unsafe extern "C" {
        fn pshmem_ep_probe(n: *mut usize) -> *const pshmem_abi_probe::Entry;
    }
    // SAFETY: `pshmem_ep_probe` is defined by PSHMEM_PROBE_TABLE in src/probe.c.
    unsafe { pshmem_abi_probe::Probe::read("ep", pshmem_ep_probe) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Rust mirror of `pshmem_ep_ll_args_t` and the constants equal the C compiler's view.
    #[test]
    fn the_arguments_and_constants_match_the_c_header() {
        let probe = crate::probe();
        // Every field (the struct lists them all: `kernel_args!`).
        probe.assert_mirror(LlArgs::C_NAME, LlArgs::FIELDS, size_of::<LlArgs>());
        probe.assert_mirror(CleanArgs::C_NAME, CleanArgs::FIELDS, size_of::<CleanArgs>());
        probe.assert_constants(&[
            ("PSHMEM_EP_MAX_TOKENS", MAX_TOKENS as u64),
            ("PSHMEM_EP_MAX_RANKS", MAX_RANKS as u64),
            ("PSHMEM_EP_THREADS", u64::from(THREADS)),
            ("PSHMEM_EP_MAX_TOPK", MAX_TOPK as u64),
            ("PSHMEM_EP_MAX_EXPERTS", MAX_EXPERTS as u64),
            ("PSHMEM_EP_FP8", u64::from(flags::FP8)),
            ("PSHMEM_EP_ROUND_SCALE", u64::from(flags::ROUND_SCALE)),
            ("PSHMEM_EP_PER_TOKEN", u64::from(flags::PER_TOKEN)),
            ("PSHMEM_EP_ZERO_COPY", u64::from(flags::ZERO_COPY)),
            ("PSHMEM_EP_UE8M0", u64::from(flags::UE8M0)),
            ("PSHMEM_EP_PHASE_SEND", u64::from(phases::SEND)),
            ("PSHMEM_EP_PHASE_RECV", u64::from(phases::RECV)),
        ]);
    }

    #[test]
    fn fatbin_is_embedded() {
        assert_eq!(&KERNELS[..4], &[0x50, 0xed, 0x55, 0xba]);
    }

    /// The LL kernels' mangled names are the ones `cuda/ep.cu` defines (the fatbin is not
    /// compressed: its symbol table holds them as they are loaded).
    #[test]
    fn the_ll_kernels_are_found_by_their_mangled_names() {
        for name in LL_KERNELS.iter().chain(ht::HtKernel::NAMES.iter()) {
            let found = KERNELS
                .windows(name.len() + 1)
                .any(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0);
            assert!(found, "{name} is not an entry point of the fatbin");
        }
    }

    #[test]
    fn the_layout_matches_the_documented_sizes() {
        // DeepEP's benchmark shape: 128 tokens, hidden 7168, 8 ranks, 64 experts.
        let l = LlLayout::new(128, 7168, 8, 64).unwrap();
        assert_eq!(l.msg_bytes, 16 + 2 * 7168);
        assert_eq!(l.area_bytes, 16 * 64 + 64 * 128 * (16 + 2 * 7168));
        for (ranks, experts) in [(1, 1), (2, 2), (3, 9), (8, 64), (16, 64), (512, 4096)] {
            let l = LlLayout::new(1, 256, ranks, experts).unwrap();
            let header = (4 * (experts / ranks)).next_multiple_of(16);
            let regions = ranks * (header + experts / ranks * l.msg_bytes);
            assert!(regions <= l.area_bytes, "{ranks} ranks, {experts} experts");
        }
        assert_eq!(
            l.sig_bytes,
            ((3 * 64 + 8 + 1 + 8) * 8usize).next_multiple_of(128)
        );
        assert_eq!(l.size_hint(), 2 * (l.sig_bytes + 2 * l.area_bytes));
        let (s1, send1, recv1) = l.offsets(1);
        assert_eq!(s1, l.buffer_bytes());
        assert_eq!(send1, s1 + l.sig_bytes);
        assert_eq!(recv1, send1 + l.area_bytes);
        assert!(LlLayout::new(2048, 7168, 8, 64).is_err());
        assert!(LlLayout::new(128, 7000, 8, 64).is_err());
        assert!(LlLayout::new(128, 7168, 8, 60).is_err());
        assert!(
            LlLayout::new(128, 7168, 8, 8 * 513).is_err(),
            "over MAX_EXPERTS"
        );
    }
}
