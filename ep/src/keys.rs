//! Which arguments a MoE kernel launch takes by name (the Python layer passes a dict of them):
//! every host field of its argument struct is accepted; the fields its kernel reads are
//! required; a field the runtime fills itself, or a name that is no field at all, is refused.
//! So a misspelt or forgotten argument is an error naming it, never a silent 0.

use pshmem::cuda::KernelArgs;

use crate::{Kernel, LlArgs, ht::HtArgs, ht::HtKernel};

/// Fields of [`LlArgs`] the launcher fills (the caller's are refused).
const LL_OWNED: &[&str] = &[
    "my_rank",
    "rings",
    "n_rings",
    "msg_bytes",
    "_pad",
    "send_x",
    "send_y",
    "recv_x",
    "recv_y",
    "phases",
    "_pad2",
];

/// Fields of [`HtArgs`] the launcher fills from the ring table and the buffer's layout.
const HT_OWNED: &[&str] = &[
    "my_rank",
    "rings",
    "n_rings",
    "slot_bytes",
    "msg_ints",
    "ctrl",
    "inbox",
    "outbox",
    "nvl",
    "nvl_stage",
    "rdma",
    "rdma_stage",
    "_pad",
];

/// The LL buffer's areas and shape, read by every LL kernel.
const LL_COMMON: &[&str] = &[
    "sig",
    "send",
    "recv",
    "num_tokens",
    "max_tokens",
    "hidden",
    "num_topk",
    "num_experts",
    "num_ranks",
    "flags",
    "x",
    "topk_idx",
    "slot_map",
    "out_x",
    "layout_range",
];
const LL_DISPATCH: &[&str] = &[
    "out_scales",
    "recv_count",
    "src_info",
    "cum_stats",
    "wait_stats",
];
const LL_COMBINE: &[&str] = &["topk_weights"];

/// The HT buffer's shape: its layout follows from it.
pub const HT_SHAPE: &[&str] = &[
    "num_ranks",
    "node_size",
    "num_channels",
    "nvl_slots",
    "rdma_slots",
    "hidden",
    "num_topk",
    "x_elem_bytes",
    "num_scales",
    "num_experts",
];
/// Where the HT buffer is, how it is used, and the tokens: read by every kernel but the layout.
const HT_BUFFER: &[&str] = &["buf", "nvl_chunk", "rdma_chunk", "num_tokens"];
const HT_LAYOUT: &[&str] = &[
    "num_tokens",
    "num_topk",
    "num_experts",
    "num_ranks",
    "node_size",
    "topk_idx",
    "is_token_in_rank",
    "num_tokens_per_rank",
    "num_tokens_per_node",
    "num_tokens_per_expert",
];
const HT_PREFIX: &[&str] = &[
    "expert_alignment",
    "is_token_in_rank",
    "num_tokens_per_rank",
    "num_tokens_per_expert",
    "channel_prefix",
    "node_channel_prefix",
    "rank_prefix",
    "recv_prefix",
    "recv_node_prefix",
    "counters",
];
const HT_DISPATCH: &[&str] = &[
    "expert_alignment",
    "is_token_in_rank",
    "counters",
    "recv_prefix",
    "recv_node_prefix",
    "max_recv",
    "max_fwd",
    "x",
    "x_scales",
    "topk_idx",
    "topk_weights",
    "recv_x",
    "recv_scales",
    "recv_topk_idx",
    "recv_topk_weights",
    "recv_src_idx",
    "send_head",
    "fwd_mask",
];
const HT_COMBINE: &[&str] = &[
    "counters",
    "recv_prefix",
    "recv_node_prefix",
    "max_recv",
    "max_fwd",
    "x",
    "topk_weights",
    "recv_x",
    "recv_topk_weights",
    "send_head",
    "fwd_mask",
    "bias0",
    "bias1",
];

/// The names an LL launch requires for kernel `k`.
pub fn ll_required(k: Kernel) -> Vec<&'static str> {
    let own = match k {
        Kernel::Dispatch => LL_DISPATCH,
        Kernel::Combine => LL_COMBINE,
    };
    LL_COMMON.iter().chain(own).copied().collect()
}

/// The names an HT launch requires for kernel `k`.
pub fn ht_required(k: HtKernel) -> Vec<&'static str> {
    let parts: &[&[&str]] = match k {
        HtKernel::Layout => &[HT_LAYOUT],
        HtKernel::Reset => &[HT_SHAPE, HT_BUFFER],
        HtKernel::Prefix | HtKernel::Notify => &[HT_SHAPE, HT_BUFFER, HT_PREFIX],
        HtKernel::Dispatch => &[HT_SHAPE, HT_BUFFER, HT_DISPATCH],
        HtKernel::Combine => &[HT_SHAPE, HT_BUFFER, HT_COMBINE],
    };
    let mut v: Vec<&str> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The names an LL launch accepts: every field of [`LlArgs`] the caller fills.
pub fn ll_accepted() -> Vec<&'static str> {
    accepted::<LlArgs>(LL_OWNED, &[])
}

/// The names an HT launch accepts: every field of [`HtArgs`] the caller fills, and `buf`.
pub fn ht_accepted() -> Vec<&'static str> {
    accepted::<HtArgs>(HT_OWNED, &["buf"])
}

fn accepted<A: KernelArgs>(owned: &[&str], extra: &[&'static str]) -> Vec<&'static str> {
    A::FIELDS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !owned.contains(n))
        .chain(extra.iter().copied())
        .collect()
}

/// Checks the names given to a launch of `kernel`: none unknown (or owned by the launcher),
/// none of `required` missing. The error names the offending key and what is expected.
pub fn check<'a>(
    kernel: &str,
    given: impl IntoIterator<Item = &'a str> + Clone,
    accepted: &[&str],
    required: &[&str],
) -> Result<(), String> {
    for k in given.clone() {
        if !accepted.contains(&k) {
            return Err(format!(
                "{kernel}: no argument {k:?} (it takes {})",
                accepted.join(", ")
            ));
        }
    }
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|r| !given.clone().into_iter().any(|k| k == *r))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{kernel}: missing argument(s) {} (0 for an absent pointer)",
            missing.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every required name is one the launch accepts (a field of the struct the caller fills),
    /// and the owned names are fields.
    #[test]
    fn the_tables_name_fields() {
        let ll = ll_accepted();
        for k in [Kernel::Dispatch, Kernel::Combine] {
            for r in ll_required(k) {
                assert!(ll.contains(&r), "{k:?} requires {r}, not an accepted field");
            }
        }
        let ht = ht_accepted();
        for name in HtKernel::NAMES {
            let k =
                HtKernel::from_name(name.trim_start_matches("pshmem_ep_ht_")).expect("a kernel");
            for r in ht_required(k) {
                assert!(ht.contains(&r), "{k:?} requires {r}, not an accepted field");
            }
        }
        let fields = |f: &[(&'static str, usize)]| f.iter().map(|(n, _)| *n).collect::<Vec<_>>();
        for o in LL_OWNED {
            assert!(fields(LlArgs::FIELDS).contains(o), "{o}");
        }
        for o in HT_OWNED {
            assert!(fields(HtArgs::FIELDS).contains(o), "{o}");
        }
    }

    #[test]
    fn unknown_owned_and_missing_names_are_refused() {
        let (acc, req) = (ll_accepted(), ll_required(Kernel::Combine));
        let mut given: Vec<&str> = req.clone();
        assert!(check("combine", given.iter().copied(), &acc, &req).is_ok());
        given.push("num_topks");
        let e = check("combine", given.iter().copied(), &acc, &req).unwrap_err();
        assert!(e.contains("no argument \"num_topks\""), "{e}");
        given.pop();
        given.push("my_rank");
        assert!(check("combine", given.iter().copied(), &acc, &req).is_err());
        given.pop();
        given.retain(|k| *k != "topk_weights");
        let e = check("combine", given.iter().copied(), &acc, &req).unwrap_err();
        assert!(e.contains("missing argument(s) topk_weights"), "{e}");
    }
}
