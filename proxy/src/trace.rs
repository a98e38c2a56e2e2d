//! The proxy trace (`PSHMEM_TRACE=path`): every operation a proxy thread drains from its rings,
//! with the time it arrived, each post to the transport and the time it finished, kept in
//! memory while the job runs and written when the thread ends as
//!
//! - `path.<thread>.json`: Chrome-trace JSON (opens in Perfetto or chrome://tracing): one async
//!   slice per operation from arrival to finish, an instant at each post;
//! - `path.<thread>.summary.json`: operations and messages (posts) per kind, bytes, the time
//!   the thread spent in turns that did work (in all and per message), the gates and holds that
//!   waited for completions (`gates` of signals, `fence_gates`, `holds`: ordering by a round
//!   trip), the fences' marks (`fence_marks`: fences by sequence, no round trip), the
//!   completions the
//!   transport reported twice and the proxy ignored (`duplicates`), the bytes each rail
//!   of the transport carried (`rail_bytes`, where it counts them), and the medians and
//!   99th percentiles of ring → first post, first post → finish and arrival → finish.
//!
//! Recording an event is a push into a vector: timestamps come from at most one clock read per
//! phase of the proxy's turn (drain, issue, poll; read at the phase's first event, see
//! [`Trace::phase`]), so events of one phase share one, and an idle turn reads no clock. Past
//! [`CAP`] events only counts are kept (`dropped` says how many).

use std::{
    collections::HashMap,
    fmt::Write as _,
    io,
    path::{Path, PathBuf},
    time::Instant,
};

use pshmem_ring::Desc;

/// Most events kept per thread (24 bytes each).
pub const CAP: usize = 1 << 22;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    /// Drained from the ring: `a` = target PE, `b` = bytes, `kind` set.
    Arrive,
    /// A message posted to the transport for the operation.
    Post,
    /// The operation finished (its ring's completion advanced past it).
    Finish,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    /// Nanoseconds since the trace started.
    t: u64,
    /// Ring << 48 | sequence number.
    id: u64,
    what: What,
    kind: u8,
    pe: u32,
    bytes: u64,
}

const KINDS: [&str; 9] = [
    "put",
    "get",
    "p",
    "amo",
    "signal",
    "put_signal",
    "fence",
    "put_counted",
    "signal_counted",
];

fn kind_of(d: &Desc) -> (u8, u32, u64) {
    match *d {
        Desc::Put { pe, len, .. } => (0, pe.get(), len),
        Desc::Get { pe, len, .. } => (1, pe.get(), len),
        Desc::P { pe, width, .. } => (2, pe.get(), u64::from(width)),
        Desc::Amo { pe, wide, .. } => (3, pe.get(), if wide { 8 } else { 4 }),
        Desc::Signal { pe, .. } => (4, pe.get(), 8),
        Desc::PutSignal { pe, len, .. } => (5, pe.get(), len),
        Desc::Fence => (6, u32::MAX, 0),
        Desc::PutCounted { pe, len, .. } => (7, pe.get(), len),
        Desc::SignalCounted { pe, .. } => (8, pe.get(), 8),
    }
}

/// Where a proxy thread's time goes: the phases of its turn, and the copies it starts (the
/// summary's CPU profile, for machines without a profiler).
#[derive(Debug, Clone, Copy)]
pub enum Cost {
    /// Taking descriptors from the rings.
    Drain,
    /// Issuing queued work to the transport (staged copies started in it included).
    Issue,
    /// Transport progress and completions (landed chunks, acks, requests served).
    Progress,
    /// Sending acks and messages, and what follows finished copies.
    Flush,
    /// Inside the device's copy-start calls (a subset of the phases above).
    CopyStart,
    /// Inside the device's queries of finished copies (a subset of the phases above).
    CopyDone,
    /// Inside the transport's progress call (a subset of `Progress`).
    Poll,
    /// Inside the transport's post calls of staged writes and acks (a subset of the phases).
    Post,
}

const COSTS: [&str; 8] = [
    "drain",
    "issue",
    "progress",
    "flush",
    "copy_start",
    "copy_done",
    "transport_poll",
    "transport_post",
];

/// `"per_kind":{...}`: operations, messages and bytes of each kind that occurred.
fn per_kind_json(s: &mut String, per_kind: &[(u64, u64, u64); KINDS.len()]) {
    s.push_str("\"per_kind\":{");
    let mut first = true;
    for (i, k) in per_kind.iter().enumerate().filter(|(_, k)| k.0 > 0) {
        if !first {
            s.push(',');
        }
        first = false;
        let _ = write!(
            s,
            "\"{}\":{{\"operations\":{},\"messages\":{},\"bytes\":{}}}",
            KINDS[i], k.0, k.1, k.2
        );
    }
    s.push('}');
}

/// One proxy thread's trace.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    t0: Instant,
    events: Vec<Event>,
    dropped: u64,
    /// Time spent in turns of the proxy loop that did work.
    busy_ns: u64,
    /// The time of the current phase, once read.
    now: u64,
    /// The clock is to be read at the next event (a new phase began).
    stale: bool,
    /// The first clock read of this turn.
    turn_start: Option<u64>,
    /// Nanoseconds per [`Cost`], over every turn.
    cost_ns: [u64; COSTS.len()],
    /// Gates of signals, gates of fences and holds that waited for completions (a round trip
    /// each).
    gates: u64,
    fence_gates: u64,
    holds: u64,
    /// Fences' marks sent (tagged mode: a fence by sequence).
    fence_marks: u64,
    /// Completions reported twice by the transport (and ignored).
    duplicates: u64,
    /// Bytes per rail of the transport, when it counts them (set before writing).
    rail_bytes: Vec<u64>,
}

/// What a gate or hold that had to wait for completions was ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// A signal (or a put-with-signal's) behind a gate: gated mode.
    Signal,
    /// What follows a fence.
    Fence,
    /// A counted signal set aside: gated mode.
    Hold,
}

impl Trace {
    /// A trace to be written to `path.<thread>.*` when the thread ends.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            t0: Instant::now(),
            // Reserved, not touched: pages are faulted in as events arrive, never copied.
            events: Vec::with_capacity(CAP),
            dropped: 0,
            busy_ns: 0,
            now: 0,
            stale: true,
            turn_start: None,
            cost_ns: [0; COSTS.len()],
            gates: 0,
            fence_gates: 0,
            holds: 0,
            fence_marks: 0,
            duplicates: 0,
            rail_bytes: Vec::new(),
        }
    }

    /// The bytes each rail of the transport carried, for the summary.
    pub fn set_rail_bytes(&mut self, bytes: Vec<u64>) {
        self.rail_bytes = bytes;
    }

    /// A gate (a signal's or a fence's) or a hold (a counted signal set aside) waits for the
    /// completions before it: ordering by a round trip, which the tagged signal mode avoids
    /// for signals.
    pub fn gated(&mut self, kind: Waited) {
        match kind {
            Waited::Signal => self.gates += 1,
            Waited::Fence => self.fence_gates += 1,
            Waited::Hold => self.holds += 1,
        }
    }

    /// A fence went by sequence: `n` marks (one per PE it orders) instead of gates.
    pub fn marked(&mut self, n: u64) {
        self.fence_marks += n;
    }

    /// A completion came for nothing in flight (a duplicate), and was ignored.
    pub fn duplicate(&mut self) {
        self.duplicates += 1;
    }

    /// The clock, for timing a [`Cost`].
    #[inline]
    pub fn start(&self) -> Instant {
        Instant::now()
    }

    /// Adds the time since `from` to `cost`.
    #[inline]
    pub fn charge(&mut self, cost: Cost, from: Instant) {
        self.cost_ns[cost as usize] += from.elapsed().as_nanos() as u64;
    }

    fn push(&mut self, id: u64, what: What, kind: u8, pe: u32, bytes: u64) {
        if self.events.len() >= CAP {
            self.dropped += 1;
            return;
        }
        if self.stale {
            self.now = self.clock();
            self.stale = false;
            self.turn_start.get_or_insert(self.now);
        }
        self.events.push(Event {
            t: self.now,
            id,
            what,
            kind,
            pe,
            bytes,
        });
    }

    fn id(ring: u16, seq: u64) -> u64 {
        (u64::from(ring) << 48) | (seq & ((1 << 48) - 1))
    }

    fn clock(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// A phase of the turn begins: its first event reads the clock (a flag store until then).
    #[inline]
    pub fn phase(&mut self) {
        self.stale = true;
    }

    /// The turn ended, having done work or not: a working turn's time from its first event
    /// counts as busy.
    #[inline]
    pub fn end_turn(&mut self, work: bool) {
        if work && let Some(start) = self.turn_start {
            self.busy_ns += self.clock().saturating_sub(start);
        }
        self.turn_start = None;
        self.stale = true;
    }

    /// Operation `seq` of ring `ring` was drained.
    pub fn arrive(&mut self, ring: u16, seq: u64, d: &Desc) {
        let (kind, pe, bytes) = kind_of(d);
        self.push(Self::id(ring, seq), What::Arrive, kind, pe, bytes);
    }

    /// Takes back the arrival just recorded for operation `seq` of ring `ring` (another path
    /// records it again).
    pub fn retract_arrival(&mut self, ring: u16, seq: u64) {
        let id = Self::id(ring, seq);
        if self
            .events
            .last()
            .is_some_and(|e| e.id == id && e.what == What::Arrive)
        {
            self.events.pop();
        }
    }

    /// A message of operation `seq` of ring `ring` was posted to `pe`.
    pub fn post(&mut self, ring: u16, seq: u64, pe: u32) {
        self.push(Self::id(ring, seq), What::Post, 0, pe, 0);
    }

    /// Operation `seq` of ring `ring` finished.
    pub fn finish(&mut self, ring: u16, seq: u64) {
        self.push(Self::id(ring, seq), What::Finish, 0, 0, 0);
    }

    /// Writes the Chrome trace and the summary of thread `thread` (PE `pe`); returns the two
    /// paths.
    pub fn write(&self, pe: u32, thread: &str) -> io::Result<(PathBuf, PathBuf)> {
        let base = self.path.display().to_string();
        let trace = PathBuf::from(format!("{base}.{thread}.json"));
        let summary = PathBuf::from(format!("{base}.{thread}.summary.json"));
        std::fs::write(&trace, self.chrome(pe, thread))?;
        std::fs::write(&summary, self.summary(pe, thread))?;
        Ok((trace, summary))
    }

    /// Per operation: (kind, pe, bytes, arrive, first post, posts, finish), in arrival order.
    fn ops(&self) -> Vec<OpRecord> {
        let mut at: HashMap<u64, usize> = HashMap::new();
        let mut ops: Vec<OpRecord> = Vec::new();
        for e in &self.events {
            match e.what {
                What::Arrive => {
                    at.insert(e.id, ops.len());
                    ops.push(OpRecord {
                        id: e.id,
                        kind: e.kind,
                        pe: e.pe,
                        bytes: e.bytes,
                        arrive: e.t,
                        first_post: None,
                        posts: Vec::new(),
                        finish: None,
                    });
                }
                What::Post => {
                    if let Some(&i) = at.get(&e.id) {
                        let o = &mut ops[i];
                        o.first_post.get_or_insert(e.t);
                        o.posts.push(e.t);
                    }
                }
                What::Finish => {
                    if let Some(i) = at.remove(&e.id) {
                        ops[i].finish = Some(e.t);
                    }
                }
            }
        }
        ops
    }

    fn chrome(&self, pe: u32, thread: &str) -> String {
        let us = |t: u64| t as f64 / 1000.0;
        let mut s = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        let _ = write!(
            s,
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pe},\"tid\":1,\"args\":{{\"name\":\"{thread}\"}}}}"
        );
        for o in self.ops() {
            let name = KINDS[o.kind as usize];
            let common = format!(
                "\"cat\":\"op\",\"id\":\"{:#x}\",\"pid\":{pe},\"tid\":1",
                o.id
            );
            let _ = write!(
                s,
                ",\n{{\"ph\":\"b\",\"name\":\"{name}\",{common},\"ts\":{:.3},\"args\":{{\"pe\":{},\"bytes\":{},\"posts\":{}}}}}",
                us(o.arrive),
                if o.pe == u32::MAX {
                    -1
                } else {
                    i64::from(o.pe)
                },
                o.bytes,
                o.posts.len()
            );
            for &p in &o.posts {
                let _ = write!(
                    s,
                    ",\n{{\"ph\":\"n\",\"name\":\"post\",{common},\"ts\":{:.3}}}",
                    us(p)
                );
            }
            if let Some(f) = o.finish {
                let _ = write!(
                    s,
                    ",\n{{\"ph\":\"e\",\"name\":\"{name}\",{common},\"ts\":{:.3}}}",
                    us(f)
                );
            }
        }
        s.push_str("\n]}\n");
        s
    }

    fn summary(&self, pe: u32, thread: &str) -> String {
        let ops = self.ops();
        let mut per_kind = [(0u64, 0u64, 0u64); KINDS.len()]; // operations, messages, bytes
        let (mut queued, mut flight, mut total) = (Vec::new(), Vec::new(), Vec::new());
        let mut unfinished = 0u64;
        for o in &ops {
            let k = &mut per_kind[o.kind as usize];
            k.0 += 1;
            k.1 += o.posts.len() as u64;
            k.2 += o.bytes;
            if let Some(p) = o.first_post {
                queued.push(p - o.arrive);
                if let Some(f) = o.finish {
                    flight.push(f.saturating_sub(p));
                }
            }
            match o.finish {
                Some(f) => total.push(f - o.arrive),
                None => unfinished += 1,
            }
        }
        let span = match (ops.first(), self.events.last()) {
            (Some(a), Some(b)) => b.t.saturating_sub(a.arrive),
            _ => 0,
        };
        let messages = per_kind.iter().map(|k| k.1).sum::<u64>();
        let mut s = format!(
            "{{\"pe\":{pe},\"thread\":\"{thread}\",\"operations\":{},\"messages\":{messages},\
             \"bytes\":{},\"unfinished\":{unfinished},\"events_dropped\":{},\"span_us\":{:.3},\
             \"busy_us\":{:.3},\"busy_us_per_message\":{:.4},\"gates\":{},\"fence_gates\":{},\"holds\":{},\
             \"fence_marks\":{},\"duplicates\":{},\"rail_bytes\":{:?},",
            ops.len(),
            per_kind.iter().map(|k| k.2).sum::<u64>(),
            self.dropped,
            span as f64 / 1000.0,
            self.busy_ns as f64 / 1000.0,
            self.busy_ns as f64 / 1000.0 / messages.max(1) as f64,
            self.gates,
            self.fence_gates,
            self.holds,
            self.fence_marks,
            self.duplicates,
            self.rail_bytes
        );
        per_kind_json(&mut s, &per_kind);
        s.push_str(",\"cost_us\":{");
        for (i, name) in COSTS.iter().enumerate() {
            let sep = if i + 1 < COSTS.len() { "," } else { "" };
            let _ = write!(s, "\"{name}\":{:.3}{sep}", self.cost_ns[i] as f64 / 1000.0);
        }
        s.push_str("},");
        for (name, v) in [
            ("ring_to_post_us", &mut queued),
            ("post_to_finish_us", &mut flight),
            ("arrive_to_finish_us", &mut total),
        ] {
            v.sort_unstable();
            let q = |p: f64| {
                v.get(((v.len() as f64 - 1.0) * p).round() as usize)
                    .map_or(0.0, |&x| x as f64 / 1000.0)
            };
            let _ = write!(
                s,
                "\"{name}\":{{\"median\":{:.3},\"p99\":{:.3},\"count\":{}}},",
                q(0.5),
                q(0.99),
                v.len()
            );
        }
        s.pop();
        s.push_str("}\n");
        s
    }
}

#[derive(Debug)]
struct OpRecord {
    id: u64,
    kind: u8,
    pe: u32,
    bytes: u64,
    arrive: u64,
    first_post: Option<u64>,
    posts: Vec<u64>,
    finish: Option<u64>,
}
