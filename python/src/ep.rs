//! `pshmem._pshmem.ep_*`: the low-latency MoE kernels of `pshmem-ep` for `pshmem.ep.Buffer`.
//! The Python half allocates the symmetric buffer and the output tensors and passes their
//! addresses; here the buffer's ranges are checked against the GPU heap before each launch.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

use pshmem::{Pshmem, gpu::Gpu};
use pshmem_ep::{
    Kernel, Ll, LlArgs, LlLayout, Phases,
    ht::{HtArgs, HtKernel, HtLayout, HtShape},
    keys,
};
use pyo3::prelude::*;

use crate::{
    errors::{invalid, invalid_arg, to_py},
    ops::{gpu_of, raw},
    state,
};

/// A launch's arguments by name, checked against the kernel's (`pshmem_ep::keys`: none
/// unknown, none required missing) before anything runs; each value checked against its field's
/// type when read. A name the kernel does not read may be left out (it is 0).
struct Args<'a> {
    op: &'static str,
    map: &'a HashMap<String, i64>,
}

/// The names a kind of kernel accepts, and those one kernel of it requires.
type Keys<K> = (Vec<&'static str>, fn(K) -> Vec<&'static str>);

/// The `mode` kernel named `kernel` (`parse`) and its arguments, checked against the names it
/// accepts and requires (`keys`).
fn kernel_args<'a, K: Copy>(
    op: &'static str,
    (mode, kernel): (&str, &str),
    map: &'a HashMap<String, i64>,
    parse: fn(&str) -> Option<K>,
    (accepted, required): Keys<K>,
) -> PyResult<(K, Args<'a>)> {
    let k = parse(kernel).ok_or_else(|| invalid_arg(op, format!("no {mode} kernel {kernel:?}")))?;
    let g = Args::checked(op, kernel, map, (&accepted, &required(k)))?;
    Ok((k, g))
}

impl<'a> Args<'a> {
    fn checked(
        op: &'static str,
        kernel: &str,
        map: &'a HashMap<String, i64>,
        (accepted, required): (&[&str], &[&str]),
    ) -> PyResult<Self> {
        keys::check(kernel, map.keys().map(String::as_str), accepted, required)
            .map_err(|e| invalid_arg(op, e))?;
        Ok(Self { op, map })
    }

    fn raw(&self, n: &str) -> i64 {
        self.map.get(n).copied().unwrap_or(0)
    }

    fn fit<T: TryFrom<i64>>(&self, n: &str, what: &str) -> PyResult<T> {
        let v = self.raw(n);
        T::try_from(v).map_err(|_| invalid_arg(self.op, format!("{n} = {v} is not {what}")))
    }

    /// A C `int` field.
    fn int(&self, n: &str) -> PyResult<i32> {
        self.fit(n, "a 32-bit integer")
    }

    /// A C `unsigned` field.
    fn uint(&self, n: &str) -> PyResult<u32> {
        self.fit(n, "an unsigned 32-bit integer")
    }

    /// An address (0: none).
    fn addr(&self, n: &str) -> PyResult<u64> {
        self.fit(n, "an address")
    }

    /// A count or size (not negative).
    fn size(&self, n: &str) -> PyResult<usize> {
        self.fit(n, "a count")
    }
}

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

/// Launches LL kernel `kernel` ("dispatch", "combine") on `stream`: its send phase over
/// `send_grid` (x, y) blocks and its receive phase over `recv_grid`, each if given (both in
/// one launch need every block resident at once: the caller sizes them so). The arguments of
/// `pshmem_ep_ll_args_t` come by name: every field the kernel reads, and no name that is not
/// a field the caller fills (`pshmem_ep::keys`).
#[pyfunction]
fn ep_ll_launch(
    py: Python<'_>,
    kernel: &str,
    send_grid: Option<(u32, u32)>,
    recv_grid: Option<(u32, u32)>,
    stream: u64,
    args: HashMap<String, i64>,
) -> PyResult<()> {
    let op = "ep_ll_launch";
    let run = Phases {
        send: send_grid,
        recv: recv_grid,
    };
    let empty = |g: Option<(u32, u32)>| g.is_some_and(|(x, y)| x == 0 || y == 0);
    if run.blocks() == 0 || empty(send_grid) || empty(recv_grid) {
        return Err(invalid_arg(
            op,
            format!("{kernel}: a launch runs a phase on a grid of at least one block"),
        ));
    }
    let keys = (keys::ll_accepted(), keys::ll_required as fn(_) -> _);
    let (k, g) = kernel_args(op, ("LL", kernel), &args, Kernel::from_name, keys)?;
    let mut a = ll_args(&g)?;
    ll_grids(k, &run, &a).map_err(|e| invalid_arg(op, format!("{kernel}: {e}")))?;
    let s = state()?;
    let gpu = gpu_of(&s, op)?;
    // The slot size follows from the shape: the layout's, not the caller's.
    a.msg_bytes = ll_layout_of(&s, gpu, &a)?.msg_bytes as u64;
    let ll = kernels(&s)?;
    py.detach(|| {
        // SAFETY: the buffer's ranges lie in the GPU heap (checked); the tensors are live
        // device tensors the Python half sized and keeps referenced until the stream ran the
        // kernel; `stream` is torch's current stream of this device.
        unsafe { ll.launch(gpu, k, a, run, raw(stream)) }.map_err(to_py)
    })
}

/// The grid shapes kernel `k`'s phases assume (`ll.cuh`): a dispatch receive phase has one
/// column of blocks per local expert; the combine's phases are one row of blocks.
fn ll_grids(k: Kernel, run: &Phases, a: &LlArgs) -> Result<(), String> {
    match k {
        Kernel::Dispatch => {
            let local = a.num_experts / a.num_ranks.max(1);
            match run.recv {
                Some((x, _)) if x as i32 != local => Err(format!(
                    "the receive phase's grid has {x} columns, one per local expert ({local})"
                )),
                _ => Ok(()),
            }
        }
        Kernel::Combine => match (run.send, run.recv) {
            (Some((_, y)), _) | (_, Some((_, y))) if y != 1 => {
                Err(format!("a combine phase's grid has {y} rows, not 1"))
            }
            _ => Ok(()),
        },
    }
}

/// An LL launch's arguments from checked names.
fn ll_args(g: &Args<'_>) -> PyResult<LlArgs> {
    Ok(LlArgs {
        num_tokens: g.int("num_tokens")?,
        max_tokens: g.int("max_tokens")?,
        hidden: g.int("hidden")?,
        num_topk: g.int("num_topk")?,
        num_experts: g.int("num_experts")?,
        num_ranks: g.int("num_ranks")?,
        flags: g.uint("flags")?,
        sig: g.addr("sig")?,
        send: g.addr("send")?,
        recv: g.addr("recv")?,
        x: g.addr("x")?,
        topk_idx: g.addr("topk_idx")?,
        topk_weights: g.addr("topk_weights")?,
        slot_map: g.addr("slot_map")?,
        out_x: g.addr("out_x")?,
        out_scales: g.addr("out_scales")?,
        recv_count: g.addr("recv_count")?,
        src_info: g.addr("src_info")?,
        layout_range: g.addr("layout_range")?,
        cum_stats: g.addr("cum_stats")?,
        wait_stats: g.addr("wait_stats")?,
        ..LlArgs::default()
    })
}

/// The LL buffer layout `a` describes, once checked against the job: its rank count, its
/// areas on the GPU heap, its top-k.
fn ll_layout_of(s: &Pshmem, gpu: &Gpu, a: &LlArgs) -> PyResult<LlLayout> {
    let op = "ep_ll_launch";
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
    Ok(l)
}

/// The shape of an HT buffer layout from checked arguments.
fn ht_shape(g: &Args<'_>) -> PyResult<HtShape> {
    Ok(HtShape {
        ranks: g.size("num_ranks")?,
        node_size: g.size("node_size")?,
        channels: g.size("num_channels")?,
        nvl_slots: g.size("nvl_slots")?,
        rdma_slots: g.size("rdma_slots")?,
        hidden: g.size("hidden")?,
        topk: g.size("num_topk")?,
        x_elem_bytes: g.size("x_elem_bytes")?,
        num_scales: g.size("num_scales")?,
        experts: g.size("num_experts")?,
    })
}

/// The HT (normal mode) buffer layout for the shape given by name (`num_ranks`, `node_size`,
/// `num_channels`, `nvl_slots`, `rdma_slots`, `hidden`, `num_topk`, `x_elem_bytes`,
/// `num_scales`, `num_experts`, all of them and no other): a dict of its sizes; raises
/// `ValueError` naming the requirement a shape breaks.
#[pyfunction]
fn ep_ht_layout(shape: HashMap<String, i64>) -> PyResult<HashMap<&'static str, usize>> {
    let g = Args::checked(
        "ep_ht_layout",
        "layout",
        &shape,
        (keys::HT_SHAPE, keys::HT_SHAPE),
    )?;
    let l = HtLayout::new(ht_shape(&g)?).map_err(pyo3::exceptions::PyValueError::new_err)?;
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
/// over `blocks` blocks on `stream`. `args` names the fields of `pshmem_ep_ht_args_t` the
/// caller fills (every one the kernel reads: `pshmem_ep::keys`) and `buf`, the start of the
/// symmetric buffer: the areas in it follow from the shape's layout, which must lie in the GPU
/// heap.
#[pyfunction]
fn ep_ht_launch(
    py: Python<'_>,
    kernel: &str,
    blocks: u32,
    stream: u64,
    args: HashMap<String, i64>,
) -> PyResult<()> {
    let op = "ep_ht_launch";
    let keys = (keys::ht_accepted(), keys::ht_required as fn(_) -> _);
    let (k, g) = kernel_args(op, ("HT", kernel), &args, HtKernel::from_name, keys)?;
    let p = |n: &str| g.addr(n);
    let mut a = HtArgs {
        num_tokens: g.int("num_tokens")?,
        hidden: g.int("hidden")?,
        num_topk: g.int("num_topk")?,
        num_experts: g.int("num_experts")?,
        num_ranks: g.int("num_ranks")?,
        node_size: g.int("node_size")?,
        num_channels: g.int("num_channels")?,
        nvl_slots: g.int("nvl_slots")?,
        rdma_slots: g.int("rdma_slots")?,
        nvl_chunk: g.int("nvl_chunk")?,
        rdma_chunk: g.int("rdma_chunk")?,
        x_elem_bytes: g.int("x_elem_bytes")?,
        num_scales: g.int("num_scales")?,
        expert_alignment: g.int("expert_alignment")?,
        max_recv: g.int("max_recv")?,
        max_fwd: g.int("max_fwd")?,
        topk_idx: p("topk_idx")?,
        topk_weights: p("topk_weights")?,
        is_token_in_rank: p("is_token_in_rank")?,
        num_tokens_per_rank: p("num_tokens_per_rank")?,
        num_tokens_per_node: p("num_tokens_per_node")?,
        num_tokens_per_expert: p("num_tokens_per_expert")?,
        channel_prefix: p("channel_prefix")?,
        node_channel_prefix: p("node_channel_prefix")?,
        rank_prefix: p("rank_prefix")?,
        recv_prefix: p("recv_prefix")?,
        recv_node_prefix: p("recv_node_prefix")?,
        counters: p("counters")?,
        x: p("x")?,
        x_scales: p("x_scales")?,
        recv_x: p("recv_x")?,
        recv_scales: p("recv_scales")?,
        recv_topk_idx: p("recv_topk_idx")?,
        recv_topk_weights: p("recv_topk_weights")?,
        recv_src_idx: p("recv_src_idx")?,
        send_head: p("send_head")?,
        fwd_mask: p("fwd_mask")?,
        bias0: p("bias0")?,
        bias1: p("bias1")?,
        ..HtArgs::default()
    };
    let s = state()?;
    let gpu = gpu_of(&s, op)?;
    if a.num_ranks as usize != s.n_pes() {
        return Err(invalid(
            s.my_pe(),
            op,
            format!("num_ranks {} in a job of {} PEs", a.num_ranks, s.n_pes()),
        ));
    }
    let ll = kernels(&s)?;
    if k == HtKernel::Layout {
        // Reads top-k and writes the counts: no buffer, a shape check only.
        let (n, g, experts) = (
            g.size("num_ranks")?,
            g.size("node_size")?,
            g.size("num_experts")?,
        );
        if n == 0
            || n > pshmem_ep::ht::MAX_RANKS
            || g == 0
            || n % g != 0
            || g > pshmem_ep::ht::MAX_NODE
            || experts == 0
            || experts % n != 0
        {
            return Err(invalid(
                s.my_pe(),
                op,
                format!("layout of {n} ranks in nodes of {g}, {experts} experts: unsupported"),
            ));
        }
        return py.detach(|| {
            // SAFETY: the tensors are live device tensors the Python half sized for this shape
            // (top-k, the counts, the token-in-rank matrix) and keeps until the stream ran it.
            unsafe { ll.launch_ht(gpu, k, a, blocks, raw(stream)) }.map_err(to_py)
        });
    }
    let l = HtLayout::new(ht_shape(&g)?).map_err(|e| invalid(s.my_pe(), op, e))?;
    let buf = p("buf")?;
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
    unsafe { ll.clean(sig, words, raw(stream)) }.map_err(to_py)
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
