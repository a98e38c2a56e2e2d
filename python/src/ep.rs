//! `pshmem._pshmem.ep_*`: the low-latency MoE kernels of `pshmem-ep` for `pshmem.ep.Buffer`.
//! The Python half allocates the symmetric buffer and the output tensors and passes their
//! addresses; here the buffer's ranges are checked against the GPU heap before each launch.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use pshmem::Pshmem;
use pshmem_ep::{
    Kernel, Ll, LlArgs, LlLayout,
    ht::{HtArgs, HtKernel, HtLayout, HtShape},
};
use pyo3::prelude::*;

use crate::{
    errors::{invalid, to_py},
    ops::{gpu_of, raw},
    state,
};

/// The kernels, loaded once per initialized PE.
static LL: Mutex<Option<(Weak<Pshmem>, Arc<Ll>)>> = Mutex::new(None);

fn kernels(s: &Arc<Pshmem>) -> PyResult<Arc<Ll>> {
    let mut g = LL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((w, ll)) = g.as_ref()
        && w.upgrade().is_some_and(|p| Arc::ptr_eq(&p, s))
    {
        return Ok(ll.clone());
    }
    let gpu = gpu_of(s, "ep")?;
    let ll = Arc::new(Ll::load(gpu, s.my_pe()).map_err(to_py)?);
    *g = Some((Arc::downgrade(s), ll.clone()));
    Ok(ll)
}

/// The LL buffer layout for (Tmax, hidden, ranks, experts): a dict of its sizes; raises
/// `ValueError` naming the requirement a shape breaks.
#[pyfunction]
fn ep_ll_layout(
    max_tokens: usize,
    hidden: usize,
    ranks: usize,
    experts: usize,
) -> PyResult<HashMap<&'static str, usize>> {
    let l = LlLayout::new(max_tokens, hidden, ranks, experts)
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    let (_, send, recv) = l.offsets(0);
    Ok(HashMap::from([
        ("msg_bytes", l.msg_bytes),
        ("sig_bytes", l.sig_bytes),
        ("sig_words", l.sig_words()),
        ("area_bytes", l.area_bytes),
        ("buffer_bytes", l.buffer_bytes()),
        ("send_offset", send),
        ("recv_offset", recv),
        ("size_hint", l.size_hint()),
        ("threads", pshmem_ep::THREADS as usize),
    ]))
}

/// How many GPU rings kernels can spread descriptors over (`PSHMEM_GPU_RINGS`).
#[pyfunction]
fn ep_ring_count() -> PyResult<usize> {
    let s = state()?;
    Ok(gpu_of(&s, "ep_ring_count")?.ring_table().1)
}

/// Launches LL kernel `kernel` ("dispatch_send", "dispatch_recv", "combine_send",
/// "combine_recv") over (grid_x, grid_y) blocks on `stream` with the arguments of
/// `pshmem_ep_ll_args_t` given by name (missing ones are 0).
#[pyfunction]
fn ep_ll_launch(
    py: Python<'_>,
    kernel: &str,
    grid_x: u32,
    grid_y: u32,
    stream: u64,
    args: HashMap<String, i64>,
) -> PyResult<()> {
    let s = state()?;
    let op = "ep_ll_launch";
    let k = Kernel::from_name(kernel)
        .ok_or_else(|| invalid(s.my_pe(), op, format!("no LL kernel {kernel:?}")))?;
    let get = |n: &str| args.get(n).copied().unwrap_or(0);
    let mut a = LlArgs {
        num_tokens: get("num_tokens") as i32,
        max_tokens: get("max_tokens") as i32,
        hidden: get("hidden") as i32,
        num_topk: get("num_topk") as i32,
        num_experts: get("num_experts") as i32,
        num_ranks: get("num_ranks") as i32,
        flags: get("flags") as u32,
        sig: get("sig") as u64,
        send: get("send") as u64,
        recv: get("recv") as u64,
        x: get("x") as u64,
        topk_idx: get("topk_idx") as u64,
        topk_weights: get("topk_weights") as u64,
        slot_map: get("slot_map") as u64,
        out_x: get("out_x") as u64,
        out_scales: get("out_scales") as u64,
        recv_count: get("recv_count") as u64,
        src_info: get("src_info") as u64,
        layout_range: get("layout_range") as u64,
        cum_stats: get("cum_stats") as u64,
        wait_stats: get("wait_stats") as u64,
        ..LlArgs::default()
    };
    let gpu = gpu_of(&s, op)?;
    if a.num_ranks as usize != s.n_pes() {
        return Err(invalid(
            s.my_pe(),
            op,
            format!("num_ranks {} in a job of {} PEs", a.num_ranks, s.n_pes()),
        ));
    }
    let l = LlLayout::new(
        a.max_tokens as usize,
        a.hidden as usize,
        a.num_ranks as usize,
        a.num_experts as usize,
    )
    .map_err(|e| invalid(s.my_pe(), op, e))?;
    for (name, at, len) in [
        ("the signal words", a.sig, l.sig_bytes),
        ("the send area", a.send, l.area_bytes),
        ("the receive area", a.recv, l.area_bytes),
    ] {
        if gpu.offset_of(at, len).is_none() {
            return Err(invalid(
                s.my_pe(),
                op,
                format!("{name} ({at:#x} + {len} bytes) are not on the GPU symmetric heap"),
            ));
        }
    }
    if !(1..=pshmem_ep::MAX_TOPK as i32).contains(&a.num_topk) {
        return Err(invalid(
            s.my_pe(),
            op,
            format!("top-k {} is not 1..={}", a.num_topk, pshmem_ep::MAX_TOPK),
        ));
    }
    // The slot size follows from the shape: the layout's, not the caller's.
    a.msg_bytes = l.msg_bytes as u64;
    let ll = kernels(&s)?;
    py.detach(|| {
        // SAFETY: the buffer's ranges lie in the GPU heap (checked); the tensors are live
        // device tensors the Python half sized and keeps referenced until the stream ran the
        // kernel; `stream` is torch's current stream of this device.
        unsafe { ll.launch(gpu, k, a, (grid_x, grid_y), raw(stream)) }.map_err(to_py)
    })
}

/// The shape of an HT buffer layout from the launch arguments (missing ones are 0).
fn ht_shape(get: &impl Fn(&str) -> i64) -> HtShape {
    let u = |n: &str| get(n).max(0) as usize;
    HtShape {
        ranks: u("num_ranks"),
        node_size: u("node_size"),
        channels: u("num_channels"),
        nvl_slots: u("nvl_slots"),
        rdma_slots: u("rdma_slots"),
        hidden: u("hidden"),
        topk: u("num_topk"),
        x_elem_bytes: u("x_elem_bytes"),
        num_scales: u("num_scales"),
        experts: u("num_experts"),
    }
}

/// The HT (normal mode) buffer layout for the shape given by name (`num_ranks`, `node_size`,
/// `num_channels`, `nvl_slots`, `rdma_slots`, `hidden`, `num_topk`, `x_elem_bytes`,
/// `num_scales`, `num_experts`): a dict of its sizes; raises `ValueError` naming the
/// requirement a shape breaks.
#[pyfunction]
fn ep_ht_layout(shape: HashMap<String, i64>) -> PyResult<HashMap<&'static str, usize>> {
    let get = |n: &str| shape.get(n).copied().unwrap_or(0);
    let l = HtLayout::new(ht_shape(&get)).map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(HashMap::from([
        ("bytes", l.bytes),
        ("slot_bytes", l.slot_bytes),
        ("msg_ints", l.msg_ints),
        ("ctrl_words", l.ctrl_words),
        ("nodes", l.nodes),
        ("threads", pshmem_ep::ht::THREADS as usize),
    ]))
}

/// Launches HT kernel `kernel` ("layout", "reset", "prefix", "notify", "dispatch", "combine")
/// over `blocks` blocks on `stream`. `args` names the fields of `pshmem_ep_ht_args_t` (missing
/// ones are 0) and `buf`, the start of the symmetric buffer: the areas in it follow from the
/// shape's layout, which must lie in the GPU heap.
#[pyfunction]
fn ep_ht_launch(
    py: Python<'_>,
    kernel: &str,
    blocks: u32,
    stream: u64,
    args: HashMap<String, i64>,
) -> PyResult<()> {
    let s = state()?;
    let op = "ep_ht_launch";
    let k = HtKernel::from_name(kernel)
        .ok_or_else(|| invalid(s.my_pe(), op, format!("no HT kernel {kernel:?}")))?;
    let get = |n: &str| args.get(n).copied().unwrap_or(0);
    let gpu = gpu_of(&s, op)?;
    if get("num_ranks") as usize != s.n_pes() {
        return Err(invalid(
            s.my_pe(),
            op,
            format!(
                "num_ranks {} in a job of {} PEs",
                get("num_ranks"),
                s.n_pes()
            ),
        ));
    }
    let p = |n: &str| get(n) as u64;
    let mut a = HtArgs {
        num_tokens: get("num_tokens") as i32,
        hidden: get("hidden") as i32,
        num_topk: get("num_topk") as i32,
        num_experts: get("num_experts") as i32,
        num_ranks: get("num_ranks") as i32,
        node_size: get("node_size") as i32,
        num_channels: get("num_channels") as i32,
        nvl_slots: get("nvl_slots") as i32,
        rdma_slots: get("rdma_slots") as i32,
        nvl_chunk: get("nvl_chunk") as i32,
        rdma_chunk: get("rdma_chunk") as i32,
        x_elem_bytes: get("x_elem_bytes") as i32,
        num_scales: get("num_scales") as i32,
        expert_alignment: get("expert_alignment") as i32,
        max_recv: get("max_recv") as i32,
        max_fwd: get("max_fwd") as i32,
        topk_idx: p("topk_idx"),
        topk_weights: p("topk_weights"),
        is_token_in_rank: p("is_token_in_rank"),
        num_tokens_per_rank: p("num_tokens_per_rank"),
        num_tokens_per_node: p("num_tokens_per_node"),
        num_tokens_per_expert: p("num_tokens_per_expert"),
        channel_prefix: p("channel_prefix"),
        node_channel_prefix: p("node_channel_prefix"),
        rank_prefix: p("rank_prefix"),
        recv_prefix: p("recv_prefix"),
        recv_node_prefix: p("recv_node_prefix"),
        counters: p("counters"),
        x: p("x"),
        x_scales: p("x_scales"),
        recv_x: p("recv_x"),
        recv_scales: p("recv_scales"),
        recv_topk_idx: p("recv_topk_idx"),
        recv_topk_weights: p("recv_topk_weights"),
        recv_src_idx: p("recv_src_idx"),
        send_head: p("send_head"),
        fwd_mask: p("fwd_mask"),
        bias0: p("bias0"),
        bias1: p("bias1"),
        ..HtArgs::default()
    };
    let ll = kernels(&s)?;
    if k == HtKernel::Layout {
        // Reads top-k and writes the counts: no buffer, a shape check only.
        let sh = ht_shape(&get);
        let (n, g) = (sh.ranks, sh.node_size);
        if n == 0
            || n > pshmem_ep::ht::MAX_RANKS
            || g == 0
            || n % g != 0
            || g > pshmem_ep::ht::MAX_NODE
            || sh.experts == 0
            || sh.experts % n != 0
        {
            return Err(invalid(
                s.my_pe(),
                op,
                format!(
                    "layout of {n} ranks in nodes of {g}, {} experts: unsupported",
                    sh.experts
                ),
            ));
        }
        return py.detach(|| {
            // SAFETY: the tensors are live device tensors the Python half sized for this shape
            // (top-k, the counts, the token-in-rank matrix) and keeps until the stream ran it.
            unsafe { ll.launch_ht(gpu, k, a, blocks, raw(stream)) }.map_err(to_py)
        });
    }
    let l = HtLayout::new(ht_shape(&get)).map_err(|e| invalid(s.my_pe(), op, e))?;
    let buf = p("buf");
    if gpu.offset_of(buf, l.bytes).is_none() {
        return Err(invalid(
            s.my_pe(),
            op,
            format!(
                "the buffer ({buf:#x} + {} bytes) is not on the GPU symmetric heap",
                l.bytes
            ),
        ));
    }
    // The areas follow from the layout, not from the caller.
    // Each operation strides its rings by its own slot kind (at most the buffer's).
    a.slot_bytes = if k == HtKernel::Combine {
        l.combine_slot
    } else {
        l.dispatch_slot
    } as u64;
    a.msg_ints = l.msg_ints as i32;
    a.ctrl = buf;
    a.inbox = buf + l.inbox as u64;
    a.outbox = buf + l.outbox as u64;
    a.nvl = buf + l.nvl as u64;
    a.nvl_stage = buf + l.nvl_stage as u64;
    if l.nodes > 1 {
        a.rdma = buf + l.rdma as u64;
        a.rdma_stage = buf + l.rdma_stage as u64;
    }
    py.detach(|| {
        // SAFETY: the buffer lies in the GPU heap (checked) and its areas come from the
        // layout; the tensors are live device tensors the Python half sized for this shape and
        // keeps referenced until the stream ran the kernel; `stream` is torch's current stream
        // of this device.
        unsafe { ll.launch_ht(gpu, k, a, blocks, raw(stream)) }.map_err(to_py)
    })
}

/// Zeroes `words` 8-byte signal words at `sig` (on the GPU heap) on `stream`.
#[pyfunction]
fn ep_ll_clean(sig: u64, words: u64, stream: u64) -> PyResult<()> {
    let s = state()?;
    let op = "ep_ll_clean";
    let gpu = gpu_of(&s, op)?;
    if gpu.offset_of(sig, (words * 8) as usize).is_none() {
        return Err(invalid(
            s.my_pe(),
            op,
            "the signal words are not on the GPU symmetric heap",
        ));
    }
    let ll = kernels(&s)?;
    // SAFETY: `words` words of the GPU heap (checked); a live stream of this device.
    unsafe { ll.clean(gpu, sig, words, raw(stream)) }.map_err(to_py)
}

/// Loads the MoE kernels' module now (`Buffer` does at construction). Loading a module may
/// wait for the context's running kernels while holding the driver's lock; loaded at the first
/// dispatch instead, behind a barrier kernel waiting for a peer reached through the proxy, it
/// blocked this PE's proxy (same context) until the barrier timed out.
#[pyfunction]
fn ep_load(py: Python<'_>) -> PyResult<()> {
    let s = state()?;
    py.detach(|| kernels(&s).map(|_| ()))
}

/// Raises the first error a device call of this PE recorded (a wait that timed out, a peer's
/// fault on the data path, a bad address), as the runtime's typed error; returns when none.
#[pyfunction]
fn ep_check(py: Python<'_>) -> PyResult<()> {
    let s = state()?;
    let gpu = gpu_of(&s, "ep_check")?;
    py.detach(|| gpu.check("ep_check")).map_err(to_py)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ep_check, m)?)?;
    m.add_function(wrap_pyfunction!(ep_load, m)?)?;
    m.add_function(wrap_pyfunction!(ep_ll_layout, m)?)?;
    m.add_function(wrap_pyfunction!(ep_ring_count, m)?)?;
    m.add_function(wrap_pyfunction!(ep_ll_launch, m)?)?;
    m.add_function(wrap_pyfunction!(ep_ll_clean, m)?)?;
    m.add_function(wrap_pyfunction!(ep_ht_layout, m)?)?;
    m.add_function(wrap_pyfunction!(ep_ht_launch, m)?)?;
    Ok(())
}
