//! The high-throughput (normal) mode: the layout of its symmetric buffer ([`HtLayout`]), the
//! arguments its kernels take ([`HtArgs`], the mirror of `pshmem_ep_ht_args_t`) and their
//! launches ([`Ll::launch_ht`]). Device code: `ep/include/pshmem/ep/ht.h` and `ht.cuh`.

use pshmem::{Error, gpu::Gpu, gpu::host_ops::RawStream};

use crate::Ll;

/// Threads per block of every HT kernel (`PSHMEM_EP_HT_THREADS`).
pub const THREADS: u32 = 512;
/// Most ranks (`PSHMEM_EP_HT_MAX_RANKS`).
pub const MAX_RANKS: usize = 64;
/// Most ranks per node (`PSHMEM_EP_HT_MAX_NODE`).
pub const MAX_NODE: usize = 32;
/// Most channels (`PSHMEM_EP_HT_MAX_CHANNELS`).
pub const MAX_CHANNELS: usize = 64;
/// Largest top-k (`PSHMEM_EP_HT_MAX_TOPK`).
pub const MAX_TOPK: usize = 16;

pshmem::kernel_args! {
/// `pshmem_ep_ht_args_t`: what every HT kernel reads (addresses are device addresses).
#[allow(missing_docs)]
pub struct HtArgs = "pshmem_ep_ht_args_t" {
    pub num_tokens: i32,
    pub hidden: i32,
    pub num_topk: i32,
    pub num_experts: i32,
    pub num_ranks: i32,
    pub my_rank: i32,
    pub node_size: i32,
    pub num_channels: i32,
    pub nvl_slots: i32,
    pub rdma_slots: i32,
    pub nvl_chunk: i32,
    pub rdma_chunk: i32,
    pub x_elem_bytes: i32,
    pub num_scales: i32,
    pub expert_alignment: i32,
    pub max_recv: i32,
    pub max_fwd: i32,
    pub msg_ints: i32,
    pub slot_bytes: u64,
    pub ctrl: u64,
    pub inbox: u64,
    pub outbox: u64,
    pub nvl: u64,
    pub nvl_stage: u64,
    pub rdma: u64,
    pub rdma_stage: u64,
    pub rings: u64,
    pub n_rings: u32,
    pub _pad: u32,
    pub topk_idx: u64,
    pub topk_weights: u64,
    pub is_token_in_rank: u64,
    pub num_tokens_per_rank: u64,
    pub num_tokens_per_node: u64,
    pub num_tokens_per_expert: u64,
    pub channel_prefix: u64,
    pub node_channel_prefix: u64,
    pub rank_prefix: u64,
    pub recv_prefix: u64,
    pub recv_node_prefix: u64,
    pub counters: u64,
    pub x: u64,
    pub x_scales: u64,
    pub recv_x: u64,
    pub recv_scales: u64,
    pub recv_topk_idx: u64,
    pub recv_topk_weights: u64,
    pub recv_src_idx: u64,
    pub send_head: u64,
    pub fwd_mask: u64,
    pub bias0: u64,
    pub bias1: u64,
}
}

const _: () = assert!(
    std::mem::size_of::<HtArgs>() == 336,
    "pshmem_ep_ht_args_t is 336 bytes"
);

/// The shape an HT buffer layout is computed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HtShape {
    /// Ranks (N).
    pub ranks: usize,
    /// Ranks per node (G): N for one node.
    pub node_size: usize,
    /// Channels (C): half the SMs of DeepEP's config.
    pub channels: usize,
    /// Slots per NVL ring.
    pub nvl_slots: usize,
    /// Slots per RDMA ring (unused with one node).
    pub rdma_slots: usize,
    /// Hidden size (H).
    pub hidden: usize,
    /// Top-k (K).
    pub topk: usize,
    /// Bytes of one element of the dispatched rows: 1 (FP8) or 2 (bf16).
    pub x_elem_bytes: usize,
    /// Floats of scales per dispatched row (0 without).
    pub num_scales: usize,
    /// Experts (E).
    pub experts: usize,
}

/// Where things are in the HT symmetric buffer (see `pshmem/ep/ht.h`); byte offsets from its
/// start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtLayout {
    /// The shape.
    pub shape: HtShape,
    /// Nodes (R).
    pub nodes: usize,
    /// Bytes the buffer gives one ring slot (the larger kind).
    pub slot_bytes: usize,
    /// Slot stride of a dispatch and of a combine (each at most `slot_bytes`).
    pub dispatch_slot: usize,
    #[allow(missing_docs)]
    pub combine_slot: usize,
    /// int32 words of one notify message.
    pub msg_ints: usize,
    /// Control words (all cleared by the reset kernel).
    pub ctrl_words: usize,
    /// Offsets of the inbox, the outbox, the NVL slots and staging, the RDMA slots and staging.
    pub inbox: usize,
    #[allow(missing_docs)]
    pub outbox: usize,
    #[allow(missing_docs)]
    pub nvl: usize,
    #[allow(missing_docs)]
    pub nvl_stage: usize,
    #[allow(missing_docs)]
    pub rdma: usize,
    #[allow(missing_docs)]
    pub rdma_stage: usize,
    /// Bytes of the whole buffer.
    pub bytes: usize,
}

/// Bytes of a dispatch slot: header, ids and weights, then the row (`x_elem_bytes` a channel)
/// and its scales, a multiple of 16.
pub fn dispatch_slot_bytes(
    hidden: usize,
    topk: usize,
    x_elem_bytes: usize,
    num_scales: usize,
) -> usize {
    (16 + (8 * topk).next_multiple_of(16) + hidden * x_elem_bytes + 4 * num_scales)
        .next_multiple_of(16)
}

/// Bytes of a combine slot: header and weights (where a dispatch slot has its ids and
/// weights), then a bf16 row.
pub fn combine_slot_bytes(hidden: usize, topk: usize) -> usize {
    (16 + (8 * topk).next_multiple_of(16) + 2 * hidden).next_multiple_of(16)
}

/// Bytes the buffer gives each slot: the larger of the two kinds. Each operation strides its
/// rings by its own kind (they are drained and reset between operations), so an FP8 dispatch
/// moves FP8-sized slots.
pub fn slot_bytes(hidden: usize, topk: usize, x_elem_bytes: usize, num_scales: usize) -> usize {
    dispatch_slot_bytes(hidden, topk, x_elem_bytes, num_scales)
        .max(combine_slot_bytes(hidden, topk))
}

impl HtLayout {
    /// The layout for `s`; `Err` says which requirement failed.
    pub fn new(s: HtShape) -> Result<Self, String> {
        let HtShape {
            ranks: n,
            node_size: g,
            channels: c,
            ..
        } = s;
        if n == 0 || n > MAX_RANKS {
            return Err(format!("{n} ranks: the normal mode takes 1..={MAX_RANKS}"));
        }
        if g == 0 || g > MAX_NODE || n % g != 0 {
            return Err(format!(
                "{g} ranks per node: must divide the {n} ranks and be 1..={MAX_NODE}"
            ));
        }
        if c == 0 || c > MAX_CHANNELS {
            return Err(format!(
                "{c} channels (half of num_sms): must be 1..={MAX_CHANNELS}"
            ));
        }
        if s.nvl_slots == 0 || (n > g && s.rdma_slots == 0) {
            return Err("the ring sizes (num_max_*_chunked_recv_tokens) must be positive".into());
        }
        if s.hidden == 0 || s.hidden % 8 != 0 || (s.hidden * s.x_elem_bytes) % 16 != 0 {
            return Err(format!(
                "hidden={}: must be a positive multiple of 8 (16 for FP8)",
                s.hidden
            ));
        }
        if !(1..=2).contains(&s.x_elem_bytes) {
            return Err("the dispatched rows must be FP8 or bf16".into());
        }
        if s.topk == 0 || s.topk > MAX_TOPK {
            return Err(format!("top-k {}: must be 1..={MAX_TOPK}", s.topk));
        }
        if s.experts == 0 || s.experts % n != 0 {
            return Err(format!(
                "num_experts={}: must be a positive multiple of the {n} ranks",
                s.experts
            ));
        }
        let r = n / g;
        let rdma_rings = if r > 1 { c * r } else { 0 };
        let slot = slot_bytes(s.hidden, s.topk, s.x_elem_bytes, s.num_scales);
        let msg_ints = n + 2 * c + s.experts / n;
        let ctrl_words = 2 * c * n + 2 * c * r + n;
        let align = |x: usize| x.next_multiple_of(128);
        let inbox = align(ctrl_words * 8);
        let outbox = inbox + align(n * msg_ints * 4);
        let nvl = outbox + align(n * msg_ints * 4);
        let nvl_bytes = c * n * s.nvl_slots * slot;
        let nvl_stage = nvl + nvl_bytes;
        let rdma = nvl_stage + nvl_bytes;
        let rdma_bytes = rdma_rings * s.rdma_slots * slot;
        let rdma_stage = rdma + rdma_bytes;
        Ok(Self {
            shape: s,
            nodes: r,
            slot_bytes: slot,
            dispatch_slot: dispatch_slot_bytes(s.hidden, s.topk, s.x_elem_bytes, s.num_scales),
            combine_slot: combine_slot_bytes(s.hidden, s.topk),
            msg_ints,
            ctrl_words,
            inbox,
            outbox,
            nvl,
            nvl_stage,
            rdma,
            rdma_stage,
            bytes: rdma_stage + rdma_bytes,
        })
    }
}

/// Which HT kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HtKernel {
    /// Tokens per rank / node / expert and the token-in-rank matrix.
    Layout,
    /// Zeroes the control words.
    Reset,
    /// Channel prefixes and the outgoing notify messages.
    Prefix,
    /// The notify exchange and what dispatch needs from it.
    Notify,
    /// Dispatch.
    Dispatch,
    /// Combine.
    Combine,
}

impl HtKernel {
    /// The entry points, in the order of the variants.
    pub(crate) const NAMES: [&'static str; 6] = [
        "pshmem_ep_ht_layout",
        "pshmem_ep_ht_reset",
        "pshmem_ep_ht_prefix",
        "pshmem_ep_ht_notify",
        "pshmem_ep_ht_dispatch",
        "pshmem_ep_ht_combine",
    ];

    /// From the names the Python layer uses.
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "layout" => Self::Layout,
            "reset" => Self::Reset,
            "prefix" => Self::Prefix,
            "notify" => Self::Notify,
            "dispatch" => Self::Dispatch,
            "combine" => Self::Combine,
            _ => return None,
        })
    }
}

impl Ll {
    /// Launches HT kernel `k` with `args` on `stream` over `blocks` blocks of [`THREADS`];
    /// fills `my_rank` and the ring table from `gpu`.
    ///
    /// # Safety
    /// Every address in `args` must be a device address valid for what the kernel does with it
    /// (see `pshmem/ep/ht.h`) until the stream has run it; `stream` is a live stream of `gpu`'s
    /// context.
    pub unsafe fn launch_ht(
        &self,
        gpu: &Gpu,
        k: HtKernel,
        mut args: HtArgs,
        blocks: u32,
        stream: RawStream,
    ) -> Result<(), Error> {
        let (rings, n) = gpu.ring_table();
        args.my_rank = self.me as i32;
        args.rings = rings;
        args.n_rings = n as u32;
        // SAFETY: the addresses are the caller's contract.
        unsafe { self.ht[k as usize].launch((blocks, 1), THREADS, stream, args) }.map_err(
            |source| Error::Cuda {
                me: self.me,
                what: "launching a MoE kernel",
                source,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pshmem::cuda::KernelArgs;

    /// The Rust mirror of `pshmem_ep_ht_args_t` and the constants equal the C compiler's view.
    #[test]
    fn the_arguments_and_constants_match_the_c_header() {
        let probe = crate::probe();
        // Every field (the struct lists them all: `kernel_args!`).
        probe.assert_mirror(HtArgs::C_NAME, HtArgs::FIELDS, size_of::<HtArgs>());
        probe.assert_constants(&[
            ("PSHMEM_EP_HT_MAX_RANKS", MAX_RANKS as u64),
            ("PSHMEM_EP_HT_MAX_NODE", MAX_NODE as u64),
            ("PSHMEM_EP_HT_MAX_CHANNELS", MAX_CHANNELS as u64),
            ("PSHMEM_EP_HT_THREADS", u64::from(THREADS)),
            ("PSHMEM_EP_HT_MAX_TOPK", MAX_TOPK as u64),
        ]);
    }

    fn shape(ranks: usize, node_size: usize) -> HtShape {
        HtShape {
            ranks,
            node_size,
            channels: 12,
            nvl_slots: 256,
            rdma_slots: 128,
            hidden: 7168,
            topk: 8,
            x_elem_bytes: 1,
            num_scales: 56,
            experts: 256,
        }
    }

    #[test]
    fn the_layout_matches_the_documented_sizes() {
        // One node of 8: no RDMA rings.
        let l = HtLayout::new(shape(8, 8)).unwrap();
        // A slot: header + 8 ids + 8 weights (64 bytes), then the larger of FP8 + scales
        // (7168 + 224) and the combine's bf16 row (14336).
        assert_eq!(l.slot_bytes, 16 + 64 + 14336);
        // An FP8 dispatch strides by its own, smaller slot; a combine by the bf16 one.
        assert_eq!(l.dispatch_slot, 16 + 64 + 7168 + 224);
        assert_eq!(l.combine_slot, l.slot_bytes);
        assert_eq!(l.nodes, 1);
        assert_eq!(l.ctrl_words, 2 * 12 * 8 + 2 * 12 + 8);
        assert_eq!(l.msg_ints, 8 + 24 + 32);
        assert_eq!(l.nvl_stage - l.nvl, 12 * 8 * 256 * l.slot_bytes);
        assert_eq!(l.rdma, l.rdma_stage);
        assert_eq!(l.bytes, l.rdma);
        assert_eq!(l.inbox % 128, 0);
        // Two nodes of 4: RDMA rings per (channel, node).
        let l = HtLayout::new(shape(8, 4)).unwrap();
        assert_eq!(l.nodes, 2);
        assert_eq!(l.rdma_stage - l.rdma, 12 * 2 * 128 * l.slot_bytes);
        assert_eq!(l.bytes - l.rdma_stage, l.rdma_stage - l.rdma);
        for bad in [
            HtShape {
                ranks: 65,
                ..shape(8, 8)
            },
            HtShape {
                node_size: 3,
                ..shape(8, 8)
            },
            HtShape {
                channels: 0,
                ..shape(8, 8)
            },
            HtShape {
                hidden: 7000,
                ..shape(8, 8)
            },
            HtShape {
                topk: 17,
                ..shape(8, 8)
            },
            HtShape {
                experts: 250,
                ..shape(8, 8)
            },
        ] {
            assert!(HtLayout::new(bad).is_err(), "{bad:?}");
        }
    }
}
