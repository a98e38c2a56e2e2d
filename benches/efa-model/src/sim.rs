//! The queues: proxy threads, sending and receiving NICs, the wire, the receiver's signal path
//! and receive kernel.

use serde::Serialize;

use crate::{
    fabric::Fabric,
    stream::{Msg, Op, Routing, Signalling, System, messages},
};

/// What one operation cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    /// The operation's time as the benchmarks report it: the mean over GPUs of each GPU's
    /// own (its receive kernel finished), µs.
    pub us: f64,
    /// The slowest GPU's, µs.
    pub max_us: f64,
    /// Network messages sent per GPU.
    pub msgs_per_gpu: f64,
    /// Network bytes sent per GPU, MB.
    pub mb_per_gpu: f64,
}

/// When each server of the model is next free.
struct Queues {
    threads: usize,
    nics: usize,
    thread_free: Vec<f64>,
    tx_free: Vec<f64>,
    rx_free: Vec<f64>,
    next_nic: Vec<usize>,
}

impl Queues {
    fn new(n: usize, threads: usize, nics: usize) -> Self {
        Self {
            threads,
            nics,
            thread_free: vec![0.0; n * threads],
            tx_free: vec![0.0; n * nics],
            rx_free: vec![0.0; n * nics],
            next_nic: vec![0; n],
        }
    }

    /// Serves `msgs` through every queue, each in arrival order (exact for this feed-forward
    /// network); returns when each message's last byte is in the receiver's memory.
    fn run(&mut self, f: &Fabric, n: usize, post_us: f64, msgs: &[Msg]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..msgs.len()).collect();
        // Proxy threads: a thread posts its messages in the order the GPU made them ready
        // (counts after the data they cover); those ready together from the GPU of the same
        // local index on the next node on (`dst − src − per_node` mod n), as DeepEP staggers.
        // The model's NICs serve messages one after another where EFA's interleave the writes
        // in flight: without this stagger every sender of a node would start at the same
        // receiver and convoy, which interleaving avoids.
        let pn = f.gpus_per_node % n.max(1);
        let stagger = |m: &Msg| (m.dst as usize + 2 * n - m.src as usize - pn) % n.max(1);
        order.sort_by(|&a, &b| {
            let (x, y) = (&msgs[a], &msgs[b]);
            (x.src, x.thread)
                .cmp(&(y.src, y.thread))
                .then(x.ready_us.total_cmp(&y.ready_us))
                .then(x.count.cmp(&y.count))
                .then(stagger(x).cmp(&stagger(y)))
        });
        let mut posted = vec![0.0; msgs.len()];
        for &i in &order {
            let m = &msgs[i];
            let slot = m.src as usize * self.threads + m.thread as usize % self.threads;
            let t = (m.ready_us + f.d2h_us).max(self.thread_free[slot]) + post_us;
            self.thread_free[slot] = t;
            posted[i] = t;
        }
        // Sending NICs: a GPU's messages go round-robin over its NICs in posting order.
        order.sort_by(|&a, &b| posted[a].total_cmp(&posted[b]).then(a.cmp(&b)));
        let mut nic = vec![0usize; msgs.len()];
        let mut tx_start = vec![0.0; msgs.len()];
        let mut tx_done = vec![0.0; msgs.len()];
        let mut svc = vec![0.0; msgs.len()];
        for &i in &order {
            let m = &msgs[i];
            let s = m.src as usize;
            nic[i] = match m.nic {
                Some(k) => k as usize % self.nics,
                None => {
                    self.next_nic[s] += 1;
                    (self.next_nic[s] - 1) % self.nics
                }
            };
            svc[i] = f.service_us(m.bytes, s, m.dst as usize, n);
            let q = s * self.nics + nic[i];
            tx_start[i] = posted[i].max(self.tx_free[q]);
            tx_done[i] = tx_start[i] + svc[i];
            self.tx_free[q] = tx_done[i];
        }
        // Receiving NICs (same rail index), in order of first bytes: packets stream through,
        // so an idle receiver ends a message with its last byte's arrival; a busy one serves
        // it after what it is busy with (its link is the bottleneck then).
        let first_byte: Vec<f64> = tx_start.iter().map(|t| t + f.wire_us).collect();
        order.sort_by(|&a, &b| first_byte[a].total_cmp(&first_byte[b]).then(a.cmp(&b)));
        let mut rx_done = vec![0.0; msgs.len()];
        for &i in &order {
            let q = msgs[i].dst as usize * self.nics + nic[i];
            let start = first_byte[i].max(self.rx_free[q]);
            rx_done[i] = (start + svc[i]).max(tx_done[i] + f.wire_us);
            self.rx_free[q] = rx_done[i];
        }
        rx_done
    }
}

/// Messages of [`STRIPE_BYTES`] or more split in one part per NIC (a bulk write is sharded over
/// the GPU's NICs, as pplx-garden shards by bytes and proxyshmem stripes over rails), unless
/// the system pins their NIC.
fn stripe(msgs: Vec<Msg>, nics: usize) -> Vec<Msg> {
    let nics = nics.max(1) as u64;
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        if m.bytes >= STRIPE_BYTES && nics > 1 && m.nic.is_none() {
            for k in 0..nics {
                let bytes = m.bytes / nics + u64::from(k < m.bytes % nics);
                out.push(Msg { bytes, ..m });
            }
        } else {
            out.push(m);
        }
    }
    out
}

/// Size from which a message is striped over the NICs.
pub const STRIPE_BYTES: u64 = 64 << 10;

/// Simulates `op` of `sys` on `f` for the routing `r`.
pub fn simulate(f: &Fabric, sys: &System, r: &Routing, op: Op) -> Outcome {
    let n = r.n;
    let k = match op {
        Op::Dispatch => sys.dispatch,
        Op::Combine => sys.combine,
    };
    let mut msgs = stripe(
        messages(sys, r, op, f.gpus_per_node, f.nics_per_gpu),
        f.nics_per_gpu,
    );
    let mut q = Queues::new(n, sys.threads.max(1), f.nics_per_gpu.max(1));
    let mut extra = 0usize;
    if msgs.iter().any(|m| m.after_route) {
        // Every GPU tells every remote peer its counts; the rows beyond the private buffers
        // go once all peers' counts reached their sender. (The exchange's messages share the
        // queues only through this gate: in the published shapes nothing overflows.)
        let route: Vec<Msg> = (0..n)
            .flat_map(|s| {
                (0..n)
                    .filter(move |&g| crate::stream::remote(s, g, f.gpus_per_node))
                    .map(move |g| Msg {
                        src: s as u32,
                        dst: g as u32,
                        bytes: 64,
                        ready_us: k.pack_us,
                        thread: (g % sys.threads.max(1)) as u32,
                        count: true,
                        nic: None,
                        after_route: false,
                    })
            })
            .collect();
        let done = q.run(f, n, sys.post_us, &route);
        let mut start = vec![k.pack_us; n];
        for (m, t) in route.iter().zip(&done) {
            let s = &mut start[m.dst as usize];
            *s = s.max(t + f.cqe_us);
        }
        for m in msgs.iter_mut().filter(|m| m.after_route) {
            m.ready_us = m.ready_us.max(start[m.src as usize]);
        }
        extra = route.len();
    }
    let landed = if sys.signalling == Signalling::FenceQuiet {
        // Data first; each count waits until the sender saw its writes complete (the target's
        // acknowledgement back over the wire).
        let (data, counts): (Vec<Msg>, Vec<Msg>) = msgs.iter().partition(|m| !m.count);
        let done = q.run(f, n, sys.post_us, &data);
        let mut quiet = vec![0.0f64; n];
        for (m, t) in data.iter().zip(&done) {
            let s = &mut quiet[m.src as usize];
            *s = s.max(t + f.wire_us + f.cqe_us);
        }
        let counts: Vec<Msg> = counts
            .into_iter()
            .map(|m| Msg {
                ready_us: m.ready_us.max(quiet[m.src as usize]),
                ..m
            })
            .collect();
        let cdone = q.run(f, n, sys.post_us, &counts);
        msgs = data.into_iter().chain(counts).collect();
        done.into_iter().chain(cdone).collect()
    } else {
        q.run(f, n, sys.post_us, &msgs)
    };
    let mut last = vec![f64::NEG_INFINITY; n];
    for (m, t) in msgs.iter().zip(&landed) {
        let l = &mut last[m.dst as usize];
        *l = l.max(*t);
    }
    let mut done: Vec<f64> = last
        .iter()
        .map(|&l| {
            let seen = if l.is_finite() {
                l + f.cqe_us + f.sig_us
            } else {
                0.0
            };
            seen.max(k.pack_us) + k.unpack_us
        })
        .collect();
    done.sort_by(f64::total_cmp);
    let bytes: u64 = msgs.iter().map(|m| m.bytes).sum();
    Outcome {
        us: done.iter().sum::<f64>() / done.len().max(1) as f64,
        max_us: done.last().copied().unwrap_or(0.0),
        msgs_per_gpu: (msgs.len() + extra) as f64 / n as f64,
        mb_per_gpu: bytes as f64 / n as f64 / 1e6,
    }
}
