//! The systems and the message streams they produce for one dispatch or combine.
//!
//! Routing is DeepEP's benchmarks': every GPU holds `tokens` tokens, each choosing `topk`
//! distinct experts uniformly at random (seeded, so every system sees the same routing) — in
//! the normal-mode benchmark among the experts of at most 4 randomly chosen nodes; experts are
//! spread evenly over the GPUs. Only messages between nodes are produced: traffic inside a
//! node goes over NVLink, overlapped with the network.

use rand::{SeedableRng, rngs::SmallRng, seq::index::sample};
use serde::Serialize;

/// The problem's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shape {
    /// Tokens per GPU.
    pub tokens: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Experts chosen per token.
    pub topk: usize,
    /// Experts in all.
    pub experts: usize,
    /// Dispatch rows in FP8 with a float scale per 128 channels (else BF16).
    pub fp8: bool,
}

impl Shape {
    /// Decode shape of the published LL results: 128 tokens, hidden 7168, top-8.
    pub fn decode(experts: usize) -> Self {
        Self {
            tokens: 128,
            hidden: 7168,
            topk: 8,
            experts,
            fp8: true,
        }
    }

    /// Prefill shape of the normal-mode benchmarks (DeepEP's, UCCL-EP's, ours): 4096 tokens,
    /// hidden 7168, top-8.
    pub fn prefill(experts: usize) -> Self {
        Self {
            tokens: 4096,
            ..Self::decode(experts)
        }
    }

    /// Bytes of one normal-mode ring slot for `op`: pshmem.ep's layout (`ep/ht.h`) — a
    /// 16-byte header, the top-k ids and weights, then the FP8 row and its scales (dispatch)
    /// or the BF16 row (combine), a multiple of 16. DeepEP's slots differ by a few bytes.
    pub fn slot(&self, op: Op) -> u64 {
        let row = match op {
            Op::Dispatch if self.fp8 => self.hidden + self.hidden / 128 * 4,
            _ => 2 * self.hidden,
        };
        (16 + (8 * self.topk).next_multiple_of(16) + row).next_multiple_of(16) as u64
    }

    /// Bytes of one dispatched row: FP8 channels, one float scale per 128 (or BF16
    /// channels), a 16-byte header.
    pub fn dispatch_row(&self) -> u64 {
        if self.fp8 {
            (self.hidden + self.hidden / 128 * 4 + 16) as u64
        } else {
            self.combine_row() + 16
        }
    }

    /// Bytes of one combined row: BF16 channels.
    pub fn combine_row(&self) -> u64 {
        (self.hidden * 2) as u64
    }
}

/// Dispatch (tokens to their experts) or combine (expert outputs back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    /// Tokens to experts.
    Dispatch,
    /// Expert outputs back to the tokens' GPUs.
    Combine,
}

/// How a system cuts the traffic into network messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// One write per (token, remote expert) row, issued while the send kernel runs
    /// (UCCL-EP; DeepEP; pshmem.ep `per_token=True`).
    PerToken,
    /// One write per (remote expert, peer) of all its rows, after the send kernel
    /// (pshmem.ep's batched mode before its dispatch was packed by sending rank).
    PerExpert,
    /// One bulk write per remote peer GPU (pplx-garden, `p2p-all-to-all/src/a2a_worker.rs`):
    /// a row per (token, expert) both ways (its send buffer is laid out by expert: no
    /// deduplication per GPU). With `shard_peers` (pplx-garden's dispatch) the writes shard
    /// the *peers* over the sender's NICs — its list of remote peers, by node then local
    /// index, cut in one contiguous part per NIC — and NIC i writes to the receiver's NIC i;
    /// otherwise (its combine; pshmem.ep's batched dispatch and combine) each peer's bytes
    /// are sharded over every NIC.
    PerPeer {
        /// Dispatch writes pinned to a NIC by the peer's place in the list.
        shard_peers: bool,
    },
    /// The normal (high-throughput) mode of DeepEP's internode kernels, which pshmem.ep's
    /// normal mode and UCCL-EP (DeepEP's kernels) follow: a token goes once per remote node
    /// it has experts on, to the GPU of the same local index (rail-aligned), in chunks
    /// streamed per (channel, node) ring while the kernel runs; combine returns one partial
    /// sum per (token, remote node) the same way.
    NodeRing(Rings),
}

/// The rings of [`Pattern::NodeRing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rings {
    /// Channels: each streams its contiguous share of the tokens.
    pub channels: usize,
    /// Tokens the sender scans per publish: one message per window with a token for the node.
    pub chunk: usize,
    /// Slots of a (channel, node) ring: a chunk that wraps its end is two writes.
    pub slots: usize,
    /// A separate tail (count) message per chunk (pshmem.ep: a counted signal after its put)
    /// rather than the tail carried in the chunk's last write (UCCL-EP's immediate).
    pub tail_msgs: bool,
}

/// How the receiver learns that the data it counts has landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Signalling {
    /// The receiver counts arrivals (immediate data) and applies the count when all landed:
    /// no round trip on the critical path.
    ReceiverCount,
    /// The sender completes its writes (a round trip) before each count (DeepEP on NVSHMEM's
    /// libfabric transport: fence is quiet on EFA).
    FenceQuiet,
}

/// Send and receive kernel times of one operation, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Kernels {
    /// The send kernel (packing, casting); per-token writes are ready spread over it.
    pub pack_us: f64,
    /// The receive kernel after the last count arrived.
    pub unpack_us: f64,
}

/// A system: its message pattern, proxy and kernels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct System {
    /// Name in tables.
    pub name: String,
    /// Its message pattern.
    pub pattern: Pattern,
    /// The counts or flags (with `count_msgs`) are one per peer, not one per (expert, peer)
    /// (pshmem.ep: both directions packed by sending rank).
    pub flags_per_peer: bool,
    /// The dispatch tells each peer its row count per expert in a header of 4 bytes per
    /// local expert (pshmem.ep): in the bulk write, or per token as a write of its own before
    /// the peer's flag.
    pub dispatch_header: bool,
    /// Its ordering mechanism.
    pub signalling: Signalling,
    /// Proxy threads per GPU.
    pub threads: usize,
    /// Proxy time to post one message, µs.
    pub post_us: f64,
    /// Dispatch kernels.
    pub dispatch: Kernels,
    /// Combine kernels.
    pub combine: Kernels,
    /// Count (or flag) messages besides the data: one per (remote expert, peer), or one per
    /// peer (`flags_per_peer`, or after a [`Pattern::PerPeer`] write).
    pub count_msgs: bool,
    /// Counts are exchanged while the first rows go (pplx-garden): per peer, up to this many
    /// rows are written into a private buffer at once, the rest after every peer's counts
    /// arrived (a second write, its bytes sharded over the NICs). `None`: no exchange.
    pub private_rows: Option<usize>,
}

/// One network message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Msg {
    /// Sending GPU.
    pub src: u32,
    /// Receiving GPU.
    pub dst: u32,
    /// Payload bytes.
    pub bytes: u64,
    /// When the sending GPU has it ready, µs from the operation's start.
    pub ready_us: f64,
    /// The sender's proxy thread that posts it.
    pub thread: u32,
    /// A count or flag (posted after the data it covers).
    pub count: bool,
    /// The sending (and receiving) NIC when the system pins it; `None`: round-robin, and
    /// striped over every NIC from [`crate::sim::STRIPE_BYTES`].
    pub nic: Option<u8>,
    /// Posted only once the route exchange completed (rows beyond the private buffer).
    pub after_route: bool,
}

/// The experts each token of each GPU chose: `[gpu][token] -> experts`.
#[derive(Debug, Clone)]
pub struct Routing {
    /// Chosen experts per (GPU, token).
    pub choice: Vec<Vec<Vec<usize>>>,
    /// GPUs in the job.
    pub n: usize,
    /// Its shape.
    pub shape: Shape,
}

impl Routing {
    /// Uniform top-k routing of every GPU's tokens, from `seed`.
    pub fn uniform(n: usize, shape: Shape, seed: u64) -> Self {
        let choice = (0..n)
            .map(|g| {
                let mut rng = SmallRng::seed_from_u64(seed ^ (g as u64).wrapping_mul(0x9E37_79B9));
                (0..shape.tokens)
                    .map(|_| sample(&mut rng, shape.experts, shape.topk).into_vec())
                    .collect()
            })
            .collect();
        Self { choice, n, shape }
    }

    /// DeepEP's normal-mode benchmark routing: each token picks `groups` distinct nodes of
    /// `per_node` GPUs at random, then `topk` distinct experts among theirs, from `seed`.
    pub fn grouped(n: usize, shape: Shape, seed: u64, per_node: usize, groups: usize) -> Self {
        let nodes = n.div_ceil(per_node).max(1);
        let per_expert_node = shape.experts.div_ceil(nodes);
        let groups = groups.clamp(1, nodes);
        let choice = (0..n)
            .map(|g| {
                let mut rng = SmallRng::seed_from_u64(seed ^ (g as u64).wrapping_mul(0x9E37_79B9));
                (0..shape.tokens)
                    .map(|_| {
                        let picked = sample(&mut rng, nodes, groups).into_vec();
                        let pool = (groups * per_expert_node).min(shape.experts);
                        sample(&mut rng, pool, shape.topk.min(pool))
                            .into_iter()
                            .map(|i| {
                                picked[i / per_expert_node] * per_expert_node + i % per_expert_node
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Self { choice, n, shape }
    }

    /// The GPU holding expert `e`.
    pub fn gpu_of(&self, e: usize) -> usize {
        e / self.shape.experts.div_ceil(self.n)
    }
}

/// Whether GPUs `a` and `b` are on different nodes (`per_node` GPUs a node).
pub fn remote(a: usize, b: usize, per_node: usize) -> bool {
    a / per_node != b / per_node
}

/// The network messages of `op` for `sys` under `r`, with `per_node` GPUs and `nics` NICs a
/// GPU. Count messages follow the data of their sender and thread.
pub fn messages(sys: &System, r: &Routing, op: Op, per_node: usize, nics: usize) -> Vec<Msg> {
    let sh = r.shape;
    let k = match op {
        Op::Dispatch => sys.dispatch,
        Op::Combine => sys.combine,
    };
    let row = match op {
        Op::Dispatch => sh.dispatch_row(),
        Op::Combine => sh.combine_row(),
    };
    let thr = |key: usize| (key % sys.threads.max(1)) as u32;
    let pattern = sys.pattern;
    // (source GPU s, expert e, rows n): the traffic of s's tokens with expert e, before
    // choosing who sends (dispatch: s to e's GPU; combine: e's GPU back to s).
    if let Pattern::NodeRing(rings) = pattern {
        return node_ring(rings, sys, r, op, per_node);
    }
    let mut out = Vec::new();
    let msg = |s: usize, g: usize, bytes: u64, ready: f64, key: usize, count: bool| {
        let (src, dst) = match op {
            Op::Dispatch => (s, g),
            Op::Combine => (g, s),
        };
        Msg {
            src: src as u32,
            dst: dst as u32,
            bytes,
            ready_us: ready,
            thread: thr(key),
            count,
            nic: None,
            after_route: false,
        }
    };
    for (s, tokens) in r.choice.iter().enumerate() {
        let mut per_expert = vec![0u64; sh.experts];
        let mut per_gpu_rows = vec![0u64; r.n];
        for (t, experts) in tokens.iter().enumerate() {
            for &e in experts {
                let g = r.gpu_of(e);
                per_expert[e] += 1;
                per_gpu_rows[g] += 1;
                if pattern == Pattern::PerToken && remote(s, g, per_node) {
                    let ready = k.pack_us * (t + 1) as f64 / sh.tokens as f64;
                    let key = if sys.flags_per_peer {
                        receiver(op, s, g)
                    } else {
                        e
                    };
                    out.push(msg(s, g, row, ready, key, false));
                }
            }
        }
        // Destinations in an order staggered by the sender (as DeepEP does): from the GPU of
        // the same local index on the next node on, so that at each step the senders of a
        // node write to different receivers.
        let first = s + per_node;
        let experts = (0..sh.experts).map(|i| (i + first * sh.experts / r.n) % sh.experts);
        match pattern {
            Pattern::PerToken | Pattern::NodeRing(_) => {}
            Pattern::PerExpert => {
                for e in experts.clone() {
                    let (g, rows) = (r.gpu_of(e), per_expert[e]);
                    if rows > 0 && remote(s, g, per_node) {
                        out.push(msg(s, g, rows * row, k.pack_us, e, false));
                    }
                }
            }
            Pattern::PerPeer { shard_peers } => {
                let head = header(sys, r, op);
                let bulk = Bulk {
                    s,
                    op,
                    shard_peers,
                    nics,
                    head,
                    row,
                    ready: k.pack_us,
                };
                bulk_writes(&mut out, sys, r, &bulk, &per_gpu_rows, per_node, &msg);
            }
        }
        if sys.count_msgs {
            counts(&mut out, sys, r, op, s, experts, per_node, &msg);
        }
    }
    out
}

/// What [`bulk_writes`] needs of its caller's loop: token GPU `s`'s side of `op`.
struct Bulk {
    s: usize,
    op: Op,
    shard_peers: bool,
    nics: usize,
    /// Header bytes leading a write that carries rows.
    head: u64,
    row: u64,
    ready: f64,
}

/// The bulk writes of [`Pattern::PerPeer`] for token GPU `b.s`, `rows[g]` rows with GPU `g`.
fn bulk_writes(
    out: &mut Vec<Msg>,
    sys: &System,
    r: &Routing,
    b: &Bulk,
    rows: &[u64],
    per_node: usize,
    msg: &dyn Fn(usize, usize, u64, f64, usize, bool) -> Msg,
) {
    let (s, op) = (b.s, b.op);
    // pplx-garden's peer list: the next node's GPUs by local index, then the node after; its
    // NIC shards follow this list (the queues stagger the posting order).
    let node = s / per_node;
    let peers: Vec<usize> = (1..r.n.div_ceil(per_node))
        .flat_map(|d| (0..per_node).map(move |l| ((node + d) * per_node + l) % r.n))
        .collect();
    let private = sys.private_rows.unwrap_or(usize::MAX) as u64;
    let shard = peers.len().div_ceil(b.nics.max(1)).max(1);
    for (i, &g) in peers.iter().enumerate() {
        let n = rows[g];
        // Keyed (proxy thread) by the sending GPU: one thread per GPU posts them
        // (pplx-garden's worker; pshmem.ep's batched mode, on ring 0).
        let from = if op == Op::Dispatch { s } else { g };
        let head = if n > 0 { b.head } else { 0 };
        let mut m = msg(s, g, n.min(private) * b.row + head, b.ready, from, false);
        m.nic = (b.shard_peers && op == Op::Dispatch).then_some((i / shard) as u8);
        if op == Op::Dispatch && n > private {
            out.push(m);
            m.bytes = (n - private) * b.row;
            m.nic = None;
            m.after_route = true;
        }
        if m.bytes > 0 {
            out.push(m);
        }
    }
}

/// The GPU that receives the traffic between token GPU `s` and expert GPU `g`.
fn receiver(op: Op, s: usize, g: usize) -> usize {
    match op {
        Op::Dispatch => g,
        Op::Combine => s,
    }
}

/// Bytes of the dispatch header `sys` sends a peer (a row count per local expert), or 0.
fn header(sys: &System, r: &Routing, op: Op) -> u64 {
    if sys.dispatch_header && op == Op::Dispatch {
        (4 * r.shape.experts / r.n).next_multiple_of(16) as u64
    } else {
        0
    }
}

/// The count or flag messages of token GPU `s` (after the data they cover): one per (remote
/// expert, peer), or one per peer after a bulk write or where the system's flags are per peer
/// (then per token, the dispatch's header write before each flag). `experts` in the
/// staggered order; `msg` builds a message as [`messages`] does.
#[allow(clippy::too_many_arguments)]
fn counts(
    out: &mut Vec<Msg>,
    sys: &System,
    r: &Routing,
    op: Op,
    s: usize,
    experts: impl Iterator<Item = usize>,
    per_node: usize,
    msg: &dyn Fn(usize, usize, u64, f64, usize, bool) -> Msg,
) {
    let k = match op {
        Op::Dispatch => sys.dispatch,
        Op::Combine => sys.combine,
    };
    let bulk = matches!(sys.pattern, Pattern::PerPeer { .. });
    let keys: Vec<(usize, usize)> = if bulk {
        // Keyed (proxy thread) by the sending GPU, as the bulk writes they follow.
        (0..r.n)
            .map(|g| (g, if op == Op::Dispatch { s } else { g }))
            .collect()
    } else if sys.flags_per_peer {
        // On the ring of the per-token writes they cover: the receiver's.
        (0..r.n).map(|g| (g, receiver(op, s, g))).collect()
    } else {
        experts.map(|e| (r.gpu_of(e), e)).collect()
    };
    let head = if bulk { 0 } else { header(sys, r, op) };
    for (g, key) in keys {
        if !remote(s, g, per_node) {
            continue;
        }
        let rows = r.choice[s]
            .iter()
            .flatten()
            .filter(|&&e| r.gpu_of(e) == g)
            .count();
        if head > 0 && rows > 0 {
            out.push(msg(s, g, head, k.pack_us, key, false));
        }
        out.push(msg(s, g, 8, k.pack_us, key, true));
    }
}

/// The messages of [`Pattern::NodeRing`]: for each (source GPU, channel, remote node), one
/// write per window of `chunk` tokens holding a token for that node (two where it wraps the
/// ring's end), ready as the channel's cursor passes the window, plus its tail. Dispatch goes
/// from the token's GPU to the GPU of the same local index on the node, combine back.
fn node_ring(rg: Rings, sys: &System, r: &Routing, op: Op, per_node: usize) -> Vec<Msg> {
    let sh = r.shape;
    let k = match op {
        Op::Dispatch => sys.dispatch,
        Op::Combine => sys.combine,
    };
    let slot = sh.slot(op);
    let nodes = r.n.div_ceil(per_node);
    let per = sh.tokens.div_ceil(rg.channels.max(1));
    let window = rg.chunk.max(1);
    let mut out = Vec::new();
    for (s, tokens) in r.choice.iter().enumerate() {
        let on_node = |t: usize, m: usize| tokens[t].iter().any(|&e| r.gpu_of(e) / per_node == m);
        for c in 0..rg.channels.max(1) {
            let (t0, t1) = ((c * per).min(sh.tokens), ((c + 1) * per).min(sh.tokens));
            for m in (0..nodes).filter(|&m| m != s / per_node) {
                let g = m * per_node + s % per_node;
                let (src, dst) = match op {
                    Op::Dispatch => (s, g),
                    Op::Combine => (g, s),
                };
                let msg = |bytes: u64, ready_us: f64, count: bool| Msg {
                    src: src as u32,
                    dst: dst as u32,
                    bytes,
                    ready_us,
                    thread: (c % sys.threads.max(1)) as u32,
                    count,
                    nic: None,
                    after_route: false,
                };
                let mut pos = 0usize;
                for w in (t0..t1).step_by(window) {
                    let end = (w + window).min(t1);
                    let n = (w..end).filter(|&t| on_node(t, m)).count();
                    if n == 0 {
                        continue;
                    }
                    let ready = k.pack_us * (end - t0) as f64 / (t1 - t0) as f64;
                    let slots = rg.slots.max(1);
                    let first = n.min(slots - pos % slots);
                    out.push(msg(first as u64 * slot, ready, false));
                    if n > first {
                        out.push(msg((n - first) as u64 * slot, ready, false));
                    }
                    if rg.tail_msgs {
                        out.push(msg(8, ready, true));
                    }
                    pos += n;
                }
            }
        }
    }
    out
}
