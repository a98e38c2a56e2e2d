//! The systems and the message streams they produce for one dispatch or combine.
//!
//! Routing is DeepEP's benchmark's: every GPU holds `tokens` tokens, each choosing `topk`
//! distinct experts uniformly at random (seeded, so every system sees the same routing);
//! experts are spread evenly over the GPUs. Only messages between nodes are produced: traffic
//! inside a node goes over NVLink, overlapped with the network.

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
}

impl Shape {
    /// Decode shape of the published LL results: 128 tokens, hidden 7168, top-8.
    pub fn decode(experts: usize) -> Self {
        Self {
            tokens: 128,
            hidden: 7168,
            topk: 8,
            experts,
        }
    }

    /// Bytes of one dispatched row: FP8 channels, one float scale per 128, a 16-byte header.
    pub fn dispatch_row(&self) -> u64 {
        (self.hidden + self.hidden / 128 * 4 + 16) as u64
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
    /// (pshmem.ep's default, batched).
    PerExpert,
    /// One bulk write per remote peer GPU (pplx-garden): dispatch sends a token once per
    /// destination GPU, combine one partial sum per (token, expert GPU).
    PerPeer,
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
    /// One count (or flag) message per (remote expert, peer) besides the data.
    pub count_msgs: bool,
    /// Counts are exchanged first and the bulk writes wait for every peer's (pplx-garden).
    pub route_exchange: bool,
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

    /// The GPU holding expert `e`.
    pub fn gpu_of(&self, e: usize) -> usize {
        e / self.shape.experts.div_ceil(self.n)
    }
}

/// Whether GPUs `a` and `b` are on different nodes (`per_node` GPUs a node).
pub fn remote(a: usize, b: usize, per_node: usize) -> bool {
    a / per_node != b / per_node
}

/// The network messages of `op` for `sys` under `r`, with `per_node` GPUs a node. Count
/// messages follow the data of their sender and thread.
pub fn messages(sys: &System, r: &Routing, op: Op, per_node: usize) -> Vec<Msg> {
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
    // (source GPU s, expert e, rows n): the traffic of s's tokens with expert e, before
    // choosing who sends (dispatch: s to e's GPU; combine: e's GPU back to s).
    let mut out = Vec::new();
    let mut push = |s: usize, g: usize, bytes: u64, ready: f64, key: usize, count: bool| {
        let (src, dst) = match op {
            Op::Dispatch => (s, g),
            Op::Combine => (g, s),
        };
        out.push(Msg {
            src: src as u32,
            dst: dst as u32,
            bytes,
            ready_us: ready,
            thread: thr(key),
            count,
        });
    };
    for (s, tokens) in r.choice.iter().enumerate() {
        let mut per_expert = vec![0u64; sh.experts];
        let mut per_gpu_tokens = vec![0u64; r.n];
        for (t, experts) in tokens.iter().enumerate() {
            let mut seen = vec![false; r.n];
            for &e in experts {
                let g = r.gpu_of(e);
                per_expert[e] += 1;
                if !seen[g] {
                    seen[g] = true;
                    per_gpu_tokens[g] += 1;
                }
                if sys.pattern == Pattern::PerToken && remote(s, g, per_node) {
                    let ready = k.pack_us * (t + 1) as f64 / sh.tokens as f64;
                    push(s, g, row, ready, e, false);
                }
            }
        }
        // Destinations in an order staggered by the sender (as DeepEP and pplx do): from the
        // GPU of the same local index on the next node on, so that at each step the senders
        // of a node write to different receivers.
        let first = s + per_node;
        let experts = (0..sh.experts).map(|i| (i + first * sh.experts / r.n) % sh.experts);
        let gpus = (0..r.n).map(|i| (i + first) % r.n);
        match sys.pattern {
            Pattern::PerToken => {}
            Pattern::PerExpert => {
                for e in experts.clone() {
                    let (g, rows) = (r.gpu_of(e), per_expert[e]);
                    if rows > 0 && remote(s, g, per_node) {
                        push(s, g, rows * row, k.pack_us, e, false);
                    }
                }
            }
            Pattern::PerPeer => {
                for g in gpus.filter(|&g| remote(s, g, per_node)) {
                    // A token once per destination GPU; combine returns one partial sum per
                    // (token, expert GPU) (an assumption about pplx-garden's combine).
                    let rows = per_gpu_tokens[g];
                    if rows > 0 {
                        push(s, g, rows * row, k.pack_us, g, false);
                    }
                }
            }
        }
        if sys.count_msgs {
            for e in experts {
                let g = r.gpu_of(e);
                if remote(s, g, per_node) {
                    push(s, g, 8, k.pack_us, e, true);
                }
            }
        }
    }
    out
}
