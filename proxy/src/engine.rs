//! The proxy loop: drain rings, queue work per (channel, target PE), issue it to the transport,
//! handle completions and peers' requests, advance the rings' completion counters.
//!
//! One turn of the loop:
//! 1. tell the transport about newly dead peers;
//! 2. drain up to `batch` operations from each ring into per-(channel, PE) FIFO queues
//!    (operations on this PE itself are applied at once, in order);
//! 3. issue queued work front first, until the transport pushes back (`Retry`), staging runs
//!    out, or a fence gate closes;
//! 4. poll the transport: completions, peers' requests (AMOs, signals) and acks, tagged writes;
//! 5. send the acks gathered this turn (one message per peer);
//! 6. move each ring's `completed` counter past its finished prefix;
//! 7. back off if nothing happened.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use pshmem_gpu_queue::{
    AmoOp, Completions, Consumer, Desc, Local, RawSlot, SignalOp,
    layout::{ctrl_op, error as code, op},
};
use pshmem_transport::{
    Caps, Event, LocalMem, LocalRef, MemKind, MrId, PostError, RemoteMrId, RemoteRef, Transport,
};

pub(crate) mod exclusive;
pub(crate) mod staged;

use exclusive::{Exclusive, JobSlot, is_job_ctx};

use crate::{
    Health, ProxyConfig, ProxyError, ProxySetup,
    mem::{self, HeapMem, MemError},
    slab::GenSlab,
    wire::{self, Ack, Message, Request, RequestKind, Status},
};

/// Marks a transport context as a message send (whose completion the proxy ignores); the rest
/// of a request's context is its part's context.
const SEND: u64 = 1 << 63;
/// Marks the context of a single-part operation: channel in bits 52..61 (9 bits), PE in bits
/// 32..52 (20 bits), the low 32 bits of its completion sequence number below. Slab keys never
/// set bits 61..63.
const FAST: u64 = 1 << 62;
/// The context of ack messages (no part): this tag, and the destination PE in the low 32 bits
/// (so that a failed ack names its PE).
const ACK_CTX: u64 = SEND | 1 << 61;
/// Largest single write or read the proxy posts from the heap (bigger ones are split).
const MAX_PART: u64 = 16 << 20;
/// Bits of a write tag (the rest of the remote CQ data names the source PE).
const TAG_BITS: u32 = 40;

/// How put-with-signal and fence keep their order on this transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalMode {
    /// Delivery is ordered per peer: nothing to do.
    Ordered,
    /// Unordered, with remote CQ data: data writes carry a tag; the target applies the signal
    /// after every tagged write landed. Fence gates the PE's queue.
    Tagged,
    /// Unordered, without remote CQ data: the signal (and anything after a fence) waits for
    /// the delivery completion of what precedes it.
    Gated,
}

impl SignalMode {
    /// The mode a transport's capabilities call for.
    pub fn for_caps(caps: &Caps) -> Option<Self> {
        if caps.ordered {
            Some(Self::Ordered)
        } else if caps.remote_cq_data {
            Some(Self::Tagged)
        } else if caps.delivery_complete {
            Some(Self::Gated)
        } else {
            None
        }
    }
}

/// The operation a work item or part belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpRef {
    /// Tracked in the op slab (several parts, a result cell, a signal after data).
    Slab(u64),
    /// A single-part operation without a result: its part's context carries (channel, PE,
    /// sequence number) and the part's completion finishes the operation, with no slab entry
    /// on either side (the common case: `p`, small puts and gets, signals, non-fetching AMOs).
    Fast(u64),
}

/// Copies an event out of the transport's poll callback for [`Engine::dispatch`].
fn keep(events: &mut Vec<Ev>, msgs: &mut Vec<Vec<u8>>, e: Event<'_>) {
    match e {
        Event::Recv { data } => msgs.push(data.to_vec()),
        Event::Done { ctx } => events.push(Ev::Done(ctx, None)),
        Event::Fetched { ctx, value } => events.push(Ev::Done(ctx, Some(value))),
        Event::Failed { ctx, error } => events.push(Ev::Failed(ctx, error.to_string(), error.pe())),
        Event::RemoteWrite { data } => events.push(Ev::Tagged(data)),
    }
}

/// Whether a completion context is a single-part operation's (not a send's, not a job's).
#[inline]
fn is_fast_ctx(ctx: u64) -> bool {
    ctx & (SEND | FAST | 1 << 61) == FAST
}

/// A single-part operation completed: one fewer in flight, to its PE and in total, and its
/// sequence number finished.
#[inline]
fn fast_done(chans: &mut [Chan], inflight: &mut usize, key: u64) {
    *inflight -= 1;
    let (c, pe) = (
        ((key >> 52) & 0x1ff) as usize,
        ((key >> 32) & 0xf_ffff) as usize,
    );
    let ch = &mut chans[c];
    ch.queues[pe].outstanding -= 1;
    let seq = ch.done.seq_from_low(key as u32);
    ch.done.finish(seq);
}

fn fast_ctx(chan: u16, pe: u32, seq: u64) -> u64 {
    FAST | (u64::from(chan) & 0x1ff) << 52 | (u64::from(pe) & 0xf_ffff) << 32 | (seq & 0xffff_ffff)
}

/// Work queued for one (channel, PE).
#[derive(Debug)]
enum Work {
    Put {
        op: OpRef,
        remote: u64,
        local: Local,
        len: u64,
        issued: u64,
        tag: Option<u64>,
        last: bool,
    },
    Get {
        op: OpRef,
        remote: u64,
        local: Local,
        len: u64,
        issued: u64,
    },
    P {
        op: OpRef,
        remote: u64,
        value: u64,
        width: u8,
    },
    Amo {
        op: OpRef,
        remote: u64,
        aop: AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
    },
    Signal {
        op: OpRef,
        remote: u64,
        value: u64,
        sop: SignalOp,
        tag: Option<u64>,
    },
    /// Passes once everything issued before it to this PE has completed.
    Gate,
    /// Staged path (GPU heap): a put from a device or host address, chunk by chunk.
    SPut {
        op: u64,
        remote: u64,
        src: u64,
        len: u64,
        issued: u64,
        last: bool,
    },
    /// Staged path: a get to a device or host address, chunk by chunk.
    SGet {
        op: u64,
        remote: u64,
        dst: u64,
        len: u64,
        issued: u64,
    },
    /// Staged path: a `p`, stored by the target's proxy.
    Store {
        op: OpRef,
        remote: u64,
        value: u64,
        width: u8,
    },
}

#[derive(Debug, Default)]
struct PeQueue {
    work: VecDeque<Work>,
    /// Parts posted to this PE from this channel and not yet complete.
    outstanding: u32,
    /// In the active list.
    active: bool,
}

/// One logical operation from a ring.
#[derive(Debug)]
struct Op {
    chan: u16,
    seq: u64,
    /// 1 while still being issued, plus the parts in flight.
    pending: u32,
    /// Where a fetching AMO's old value goes (0: nowhere).
    result: u64,
    /// Data parts issued (a tagged signal waits for this many writes).
    data_parts: u32,
}

/// One transport operation (a write, a read, or a request awaiting its ack).
#[derive(Debug)]
struct Part {
    op: u64,
    pe: u32,
    chan: u16,
    chunk: Option<u32>,
    /// Copy `len` bytes from the chunk to this process address on completion.
    copy_out: Option<(u64, usize)>,
    /// Staged path: the landing slot (owner group's PE, slot) this part frees when done.
    landing: Option<(u32, u32)>,
}

/// Registered bounce memory for raw-address sources and destinations.
struct Staging {
    buf: Vec<u8>,
    mr: MrId,
    chunk: usize,
    free: Vec<u32>,
    /// A small area for payloads that fit the inject size (copied by the transport at post).
    scratch: usize,
    /// Its length: the largest payload posted from it.
    inject: usize,
}

impl Staging {
    fn chunk_ptr(&mut self, c: u32) -> *mut u8 {
        self.buf[c as usize * self.chunk..].as_mut_ptr()
    }
}

/// A target-side record of tagged writes and the signal waiting for them.
#[derive(Debug, Default)]
struct TagState {
    arrived: u32,
    signal: Option<Request>,
}

struct Chan {
    /// Taken out while the ring is drained (so each operation is handled inside the drain).
    cons: Option<Consumer>,
    done: Completions,
    queues: Vec<PeQueue>,
}

/// A transport event, copied out of the poll callback.
#[derive(Debug)]
enum Ev {
    Done(u64, Option<u64>),
    /// Context, error text, and the PE the error names (if it names one).
    Failed(u64, String, Option<usize>),
    Tagged(u64),
}

/// What issuing one queue achieved.
enum Issue {
    /// The queue is empty.
    Drained,
    /// Blocked (transport back-pressure, staging, or a closed gate).
    Blocked,
}

/// The proxy's state, owned by its thread.
pub struct Engine {
    t: Box<dyn Transport>,
    caps: Caps,
    me: u32,
    n: usize,
    heap: HeapMem,
    heap_mr: MrId,
    remote: Vec<RemoteMrId>,
    chans: Vec<Chan>,
    ops: GenSlab<Op>,
    parts: GenSlab<Part>,
    staging: Staging,
    active: VecDeque<(u16, u32)>,
    mode: SignalMode,
    tags: HashMap<(u32, u64), TagState>,
    next_tag: u64,
    acks: HashMap<u32, Vec<Ack>>,
    /// Messages that met back-pressure, in order.
    outbox: VecDeque<(u32, Vec<u8>, u64)>,
    health: Arc<Health>,
    cfg: ProxyConfig,
    stop: Arc<AtomicBool>,
    dead_seen: u64,
    failed: bool,
    /// Parts posted and not yet complete (bounded by `ProxyConfig::max_inflight`).
    inflight: usize,
    /// Reused buffers (no allocation per turn).
    events: Vec<Ev>,
    msgs: Vec<Vec<u8>>,
    /// This PE's GPU heap, when it has one: reached through host staging, or registered with
    /// the transport (DMA-BUF); see `staged`.
    staged: Option<staged::Staged>,
    /// A job waiting for the transport to itself (see `exclusive`).
    jobs: Arc<JobSlot>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pe", &self.me)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(crate) fn new(
        mut s: ProxySetup,
        cfg: ProxyConfig,
        health: Arc<Health>,
        stop: Arc<AtomicBool>,
        jobs: Arc<JobSlot>,
    ) -> Result<Self, ProxyError> {
        let caps = s.transport.caps().clone();
        let me = s.transport.my_pe();
        let n = s.transport.n_pes();
        let mode = SignalMode::for_caps(&caps).ok_or_else(|| ProxyError::Unorderable {
            pe: me,
            transport: caps.name.clone(),
        })?;
        if s.channels.len() > 512 || n > 1 << 20 {
            return Err(ProxyError::Limits {
                pe: me,
                what: format!(
                    "{} channels and {n} PEs: a proxy thread serves at most 512 channels and \
                     2^20 PEs",
                    s.channels.len()
                ),
            });
        }
        // On the host-staged path each chunk also carries a landing header, so that a chunk's
        // payload stays a whole `staging_chunk` (a 1 MiB put is one chunk, not two).
        let staged_path = s.device.is_some() && !s.device_registered;
        let chunk = cfg.staging_chunk.max(4096) + if staged_path { staged::HDR } else { 0 };
        let chunks = cfg.staging_chunks.max(1);
        let scratch = chunk * chunks;
        // Payloads up to the inject size go through the scratch area (the transport copies
        // them at post); larger inline payloads take a chunk.
        let inject = caps.inject_size.clamp(8, 64 << 10);
        let mut buf = vec![0u8; scratch + inject];
        // SAFETY: `buf` is owned by the engine, never reallocated, and lives as long as the
        // transport (the engine drops the transport first: field order).
        let mr = unsafe {
            s.transport.mr_reg(LocalMem {
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
                kind: MemKind::Host,
            })
        }
        .map_err(|source| ProxyError::Setup {
            pe: me,
            what: "registering the staging buffers",
            source,
        })?;
        let registered = s.device_registered;
        let staged = match s.device.take() {
            None => None,
            Some(mut dev) => {
                if !registered && !caps.remote_cq_data {
                    return Err(ProxyError::Limits {
                        pe: me,
                        what: format!(
                            "the host-staged GPU path needs writes with remote CQ data, which \
                             {} does not offer",
                            caps.name
                        ),
                    });
                }
                // SAFETY: the staging buffer lives as long as the engine (and the device
                // handle, which the engine owns).
                unsafe { dev.pin(buf.as_mut_ptr(), buf.len()) };
                let landing = (!registered).then_some(s.heap.len());
                Some(
                    staged::Staged::new(dev, landing, chunk, n)
                        .map_err(|what| ProxyError::Limits { pe: me, what })?,
                )
            }
        };
        let chans = s
            .channels
            .into_iter()
            .map(|r| Chan {
                cons: Some(Consumer::new(r)),
                done: Completions::new(),
                queues: (0..n).map(|_| PeQueue::default()).collect(),
            })
            .collect();
        Ok(Self {
            t: s.transport,
            caps,
            me: me as u32,
            n,
            heap: s.heap,
            heap_mr: s.heap_mr,
            remote: s.remote_heaps,
            chans,
            ops: GenSlab::new(),
            parts: GenSlab::new(),
            staging: Staging {
                buf,
                mr,
                chunk,
                free: (0..chunks as u32).rev().collect(),
                scratch,
                inject,
            },
            active: VecDeque::new(),
            mode,
            tags: HashMap::new(),
            next_tag: 1,
            acks: HashMap::new(),
            outbox: VecDeque::new(),
            health,
            cfg,
            stop,
            dead_seen: 0,
            failed: false,
            inflight: 0,
            events: Vec::new(),
            msgs: Vec::new(),
            staged,
            jobs,
        })
    }

    /// Runs until stopped (draining outstanding work first, within the drain limit) or until
    /// the job fails.
    pub(crate) fn run(&mut self) {
        if let Some(cpu) = self.cfg.cpu {
            pin(cpu);
        }
        // Short sleeps of an idle proxy should last what they say (the default timer slack of
        // 50 µs would double a 50 µs sleep).
        let _ = nix::sys::prctl::set_timerslack(1000);
        let mut idle_since: Option<Instant> = None;
        let mut stop_at: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            let work = self.turn();
            if self.failed || self.health.faulted() {
                // The job is failing: every ring is raised; keep nothing waiting on us.
                return;
            }
            // Acquire: pairs with `Proxy::exclusive`'s release after it filled the slot.
            if self.jobs.pending.load(Ordering::Acquire) && self.idle() {
                self.run_job();
                idle_since = None;
                continue;
            }
            // Acquire: pairs with `Proxy::stop`'s release.
            if self.stop.load(Ordering::Acquire) {
                let t = *stop_at.get_or_insert_with(Instant::now);
                if self.idle() || t.elapsed() > self.cfg.drain_limit {
                    if !self.idle() {
                        self.health.raise(
                            code::PROXY,
                            None,
                            format!(
                                "PE {}: proxy stopped with {} operations unfinished after {:?}",
                                self.me,
                                self.ops.len(),
                                self.cfg.drain_limit
                            ),
                        );
                    }
                    return;
                }
            }
            if work > 0 {
                idle_since = None;
                spins = 0;
                continue;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            // Sleep only with nothing in flight: a completion or ack may be moments away.
            let waiting = self.parts.len() > 0 || !self.active.is_empty();
            if waiting || self.cfg.idle_after.is_zero() || since.elapsed() < self.cfg.idle_after {
                spins = spins.wrapping_add(1);
                if spins % 64 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            } else {
                // Block until traffic arrives or the sleep ends (a manual-progress target wakes
                // at once when a peer sends; new ring work waits at most `max_sleep`). Traffic
                // resets the idle clock: a target receiving a stream (RMA into its heap makes
                // no completion here) keeps progressing it at spinning speed, not one wake-up
                // per chunk, until the stream has been quiet for `idle_after`.
                if self.t.wait(self.cfg.max_sleep) {
                    idle_since = None;
                }
            }
        }
    }

    fn idle(&self) -> bool {
        self.ops.len() == 0
            && self.parts.len() == 0
            && self.outbox.is_empty()
            && self.acks.is_empty()
            && self.active.is_empty()
            && !self.staged_busy()
    }

    /// One turn; returns a measure of the work done (0 = idle).
    fn turn(&mut self) -> usize {
        for (pe, why) in self.health.dead_since(&mut self.dead_seen) {
            self.t.fail_peer(pe, &why);
        }
        let mut work = 0;
        for c in 0..self.chans.len() {
            work += self.drain(c);
        }
        work += self.issue_all();
        if self.staging_path() {
            work += self.serve_waiting();
        }
        work += self.poll();
        work += self.flush_messages();
        for c in &mut self.chans {
            if let Some(v) = c.done.advance()
                && let Some(cons) = &c.cons
            {
                cons.set_completed(v);
            }
        }
        work
    }

    fn fault(&mut self, code: u32, pe: Option<usize>, detail: String) {
        self.failed = true;
        self.health.raise(code, pe, detail);
    }

    // ---- draining ---------------------------------------------------------------------------

    fn drain(&mut self, c: usize) -> usize {
        let Some(mut cons) = self.chans[c].cons.take() else {
            return 0;
        };
        let batch = self.cfg.batch;
        let mut bad = None;
        let res = cons.poll(batch, |idx, slots| {
            let seq = self.chans[c].done.push(idx + slots.len() as u64);
            if bad.is_none() && self.p_fast(c as u16, seq, slots) {
                return;
            }
            match Desc::decode(slots) {
                Ok(d) if bad.is_none() => self.accept(c as u16, seq, d),
                Ok(_) => {}
                Err(e) => {
                    bad.get_or_insert(e.to_string());
                }
            }
        });
        self.chans[c].cons = Some(cons);
        let n = match res {
            Ok(n) => n,
            Err(e) => {
                bad.get_or_insert(e.to_string());
                0
            }
        };
        if let Some(e) = bad {
            self.fault(code::PROXY, None, format!("PE {}: ring {c}: {e}", self.me));
        }
        n
    }

    fn new_op(&mut self, chan: u16, seq: u64, result: u64) -> OpRef {
        OpRef::Slab(self.ops.insert(Op {
            chan,
            seq,
            pending: 1,
            result,
            data_parts: 0,
        }))
    }

    /// The reference of an operation that will be exactly one part without a result when
    /// `single`, else a slab entry.
    fn op_ref(&mut self, chan: u16, seq: u64, single: bool) -> OpRef {
        if single {
            OpRef::Fast(seq)
        } else {
            self.new_op(chan, seq, 0)
        }
    }

    /// Takes one operation from a ring: applies it (this PE, fences on ordered transports) or
    /// queues it for its target PE.
    fn accept(&mut self, chan: u16, seq: u64, mut d: Desc) {
        if let Some(pe) = d.pe()
            && pe as usize >= self.n
        {
            self.fault(
                code::OP_FAILED,
                None,
                format!("PE {}: operation for PE {pe} of {}: {d:?}", self.me, self.n),
            );
            return;
        }
        if self.staged.is_some() && self.accept_staged(chan, seq, &mut d) {
            return;
        }
        if d.pe() == Some(self.me) {
            let res = self.apply_local(&d);
            match res {
                Ok(()) => self.chans[chan as usize].done.finish(seq),
                Err(e) => self.fault(
                    code::OP_FAILED,
                    Some(self.me as usize),
                    format!("PE {}: {d:?} on itself: {e}", self.me),
                ),
            }
            return;
        }
        let ordered = self.mode == SignalMode::Ordered;
        match d {
            Desc::Fence => {
                // Staged operations finish only when acked: gate like an unordered transport.
                if !ordered || self.staging_path() {
                    for pe in 0..self.n as u32 {
                        let q = &self.chans[chan as usize].queues[pe as usize];
                        if q.outstanding > 0 || !q.work.is_empty() {
                            self.enqueue(chan, pe, Work::Gate);
                        }
                    }
                }
                self.chans[chan as usize].done.finish(seq);
            }
            Desc::Put {
                pe,
                remote,
                local,
                len,
            } => {
                let single = len <= MAX_PART
                    && match local {
                        Local::Heap(_) => true,
                        Local::Raw(_) => len as usize <= self.staging.inject,
                    };
                let op = self.op_ref(chan, seq, single);
                self.enqueue(
                    chan,
                    pe,
                    Work::Put {
                        op,
                        remote,
                        local,
                        len,
                        issued: 0,
                        tag: None,
                        last: true,
                    },
                );
            }
            Desc::Get {
                pe,
                remote,
                local,
                len,
            } => {
                let single = len <= MAX_PART && matches!(local, Local::Heap(_));
                let op = self.op_ref(chan, seq, single);
                self.enqueue(
                    chan,
                    pe,
                    Work::Get {
                        op,
                        remote,
                        local,
                        len,
                        issued: 0,
                    },
                );
            }
            Desc::P {
                pe,
                remote,
                value,
                width,
            } => {
                if self.post_p_now(chan, seq, pe, remote, value, width) {
                    return;
                }
                let op = self.op_ref(chan, seq, width as usize <= self.staging.inject);
                self.enqueue(
                    chan,
                    pe,
                    Work::P {
                        op,
                        remote,
                        value,
                        width,
                    },
                );
            }
            Desc::Amo {
                pe,
                remote,
                op: aop,
                wide,
                operand,
                compare,
                result,
            } => {
                let op = if result == 0 {
                    OpRef::Fast(seq)
                } else {
                    self.new_op(chan, seq, result)
                };
                self.enqueue(
                    chan,
                    pe,
                    Work::Amo {
                        op,
                        remote,
                        aop,
                        wide,
                        operand,
                        compare,
                    },
                );
            }
            Desc::Signal {
                pe,
                remote,
                value,
                op: sop,
            } => {
                let op = OpRef::Fast(seq);
                self.enqueue(
                    chan,
                    pe,
                    Work::Signal {
                        op,
                        remote,
                        value,
                        sop,
                        tag: None,
                    },
                );
            }
            Desc::PutSignal {
                pe,
                remote,
                local,
                len,
                sig,
                value,
                op: sop,
            } => {
                let op = self.new_op(chan, seq, 0);
                let tag = (self.mode == SignalMode::Tagged).then(|| {
                    let t = self.next_tag;
                    self.next_tag = (self.next_tag + 1) & ((1 << TAG_BITS) - 1);
                    t
                });
                self.enqueue(
                    chan,
                    pe,
                    Work::Put {
                        op,
                        remote,
                        local,
                        len,
                        issued: 0,
                        tag,
                        last: false,
                    },
                );
                if self.mode == SignalMode::Gated {
                    self.enqueue(chan, pe, Work::Gate);
                }
                self.enqueue(
                    chan,
                    pe,
                    Work::Signal {
                        op,
                        remote: sig,
                        value,
                        sop,
                        tag,
                    },
                );
            }
        }
    }

    /// A `p` to another PE straight from its slot, without decoding it into a [`Desc`] and
    /// going through [`Engine::accept`] (whose checks it repeats: a valid width and PE, no
    /// staged heap). Returns false when it did nothing; the general path then takes the slot.
    #[inline]
    fn p_fast(&mut self, chan: u16, seq: u64, slots: &[RawSlot]) -> bool {
        let [s] = slots else { return false };
        if ctrl_op(s.ctrl) != op::P
            || !matches!(s.c, 1 | 2 | 4 | 8)
            || s.pe as usize >= self.n
            || s.pe == self.me
            || self.staged.is_some()
        {
            return false;
        }
        self.post_p_now(chan, seq, s.pe, s.a, s.b, s.c as u8)
    }

    /// The hottest case, straight to the transport: a `p` that fits the inject size, to a PE
    /// with nothing queued, with room in flight. Returns false (nothing done) otherwise, or on
    /// back-pressure, and the general path queues it.
    #[inline]
    fn post_p_now(
        &mut self,
        chan: u16,
        seq: u64,
        pe: u32,
        remote: u64,
        value: u64,
        width: u8,
    ) -> bool {
        let q = &self.chans[chan as usize].queues[pe as usize];
        if !q.work.is_empty()
            || width as usize > self.staging.inject
            || self.inflight >= self.cfg.max_inflight
        {
            return false;
        }
        let off = self.staging.scratch;
        self.staging.buf[off..off + 8].copy_from_slice(&value.to_le_bytes());
        let ctx = fast_ctx(chan, pe, seq);
        let lref = LocalRef {
            mr: self.staging.mr,
            offset: off,
        };
        let rref = RemoteRef {
            mr: self.remote[pe as usize],
            offset: remote,
        };
        // SAFETY: the value is in the scratch area, copied by the transport at post (inject).
        let r = unsafe { self.t.write(pe as usize, lref, rref, width as usize, ctx) };
        match r {
            Ok(()) => {
                self.chans[chan as usize].queues[pe as usize].outstanding += 1;
                self.inflight += 1;
                true
            }
            Err(PostError::Retry) => false,
            Err(PostError::Failed(e)) => {
                self.fault(
                    code::OP_FAILED,
                    Some(pe as usize),
                    format!("PE {}: posting a p to PE {pe} failed: {e}", self.me),
                );
                true
            }
        }
    }

    /// Queues work for (channel, PE); when nothing is queued there yet, issues it at once
    /// (the same order as queuing it and issuing the queue, without the round trip).
    fn enqueue(&mut self, chan: u16, pe: u32, mut w: Work) {
        let q = &mut self.chans[chan as usize].queues[pe as usize];
        if q.work.is_empty() {
            let done = match w {
                Work::Gate => q.outstanding == 0,
                _ => self.issue_one(chan, pe, &mut w) == Ok(true),
            };
            if done {
                self.finish_issuing(&w);
                return;
            }
        }
        let q = &mut self.chans[chan as usize].queues[pe as usize];
        q.work.push_back(w);
        if !q.active {
            q.active = true;
            self.active.push_back((chan, pe));
        }
    }

    /// Applies an operation on this PE's own heap (in order, at once).
    fn apply_local(&mut self, d: &Desc) -> Result<(), MemError> {
        let h = self.heap;
        match *d {
            Desc::Put {
                remote, local, len, ..
            } => copy_in(&h, remote, local, len),
            Desc::Get {
                remote, local, len, ..
            } => copy_out(&h, remote, local, len),
            Desc::P {
                remote,
                value,
                width,
                ..
            } => h.store(remote, value, width),
            Desc::Amo {
                remote,
                op,
                wide,
                operand,
                compare,
                result,
                ..
            } => {
                let old = h.amo(remote, wide, op, operand, compare)?;
                if result != 0 {
                    // SAFETY: the producer keeps the result cell valid until the operation
                    // completes (API contract), which is after this write.
                    unsafe { mem::write_result(result, old) };
                }
                Ok(())
            }
            Desc::Signal {
                remote, value, op, ..
            } => h.amo(remote, true, op.as_amo(), value, 0).map(|_| ()),
            Desc::PutSignal {
                remote,
                local,
                len,
                sig,
                value,
                op,
                ..
            } => {
                copy_in(&h, remote, local, len)?;
                h.amo(sig, true, op.as_amo(), value, 0).map(|_| ())
            }
            Desc::Fence => Ok(()),
        }
    }

    // ---- issuing ----------------------------------------------------------------------------

    fn issue_all(&mut self) -> usize {
        let mut work = 0;
        for _ in 0..self.active.len() {
            let Some((c, pe)) = self.active.pop_front() else {
                break;
            };
            let before = self.chans[c as usize].queues[pe as usize].work.len();
            match self.issue(c, pe) {
                Issue::Drained => {
                    self.chans[c as usize].queues[pe as usize].active = false;
                    work += before;
                }
                Issue::Blocked => {
                    let after = self.chans[c as usize].queues[pe as usize].work.len();
                    work += before - after;
                    self.active.push_back((c, pe));
                }
            }
            if self.failed {
                break;
            }
        }
        work
    }

    fn issue(&mut self, c: u16, pe: u32) -> Issue {
        loop {
            let q = &mut self.chans[c as usize].queues[pe as usize];
            let Some(front) = q.work.front_mut() else {
                return Issue::Drained;
            };
            let finished = match front {
                Work::Gate => q.outstanding == 0,
                _ => {
                    let mut w = std::mem::replace(front, Work::Gate);
                    let r = self.issue_one(c, pe, &mut w);
                    let q = &mut self.chans[c as usize].queues[pe as usize];
                    *q.work.front_mut().expect("front") = w;
                    match r {
                        Ok(done) => done,
                        Err(()) => return Issue::Blocked,
                    }
                }
            };
            if !finished {
                return Issue::Blocked;
            }
            let w = self.chans[c as usize].queues[pe as usize]
                .work
                .pop_front()
                .expect("front");
            self.finish_issuing(&w);
        }
    }

    /// The op token a finished work item gives back (the last item of an operation).
    fn finish_issuing(&mut self, w: &Work) {
        let op = match *w {
            Work::Put { op, last: true, .. }
            | Work::Get { op, .. }
            | Work::P { op, .. }
            | Work::Amo { op, .. }
            | Work::Signal { op, .. }
            | Work::Store { op, .. } => op,
            Work::SPut { op, last: true, .. } | Work::SGet { op, .. } => OpRef::Slab(op),
            Work::Put { last: false, .. } | Work::SPut { last: false, .. } | Work::Gate => return,
        };
        // A fast operation finishes with its one part, not when issued.
        if let OpRef::Slab(k) = op {
            self.release(k);
        }
    }

    /// Drops one pending count of `op`; finishes it at zero.
    fn release(&mut self, op: u64) {
        let Some(o) = self.ops.get_mut(op) else {
            return;
        };
        o.pending -= 1;
        if o.pending == 0 {
            let o = self.ops.remove(op).expect("op");
            self.chans[o.chan as usize].done.finish(o.seq);
        }
    }

    /// Issues as much of `w` as possible. `Ok(true)`: fully issued; `Ok(false)` or `Err(())`:
    /// blocked, try again later.
    fn issue_one(&mut self, c: u16, pe: u32, w: &mut Work) -> Result<bool, ()> {
        match w {
            Work::Put {
                op,
                remote,
                local,
                len,
                issued,
                tag,
                ..
            } => {
                while *issued < *len {
                    if self.inflight >= self.cfg.max_inflight {
                        return Err(());
                    }
                    let left = *len - *issued;
                    let (lref, part_len, chunk) = match *local {
                        Local::Heap(off) => (
                            LocalRef {
                                mr: self.heap_mr,
                                offset: (off + *issued) as usize,
                            },
                            left.min(MAX_PART),
                            None,
                        ),
                        Local::Raw(addr) => {
                            let small = left as usize <= self.staging.inject;
                            let (off, chunk, part) = if small {
                                (self.staging.scratch, None, left)
                            } else {
                                let Some(ch) = self.staging.free.pop() else {
                                    return Err(());
                                };
                                let part = left.min(self.staging.chunk as u64);
                                (ch as usize * self.staging.chunk, Some(ch), part)
                            };
                            let at = self.staging.buf[off..].as_mut_ptr() as u64;
                            // SAFETY: the producer keeps raw sources valid until the operation
                            // completes (API contract); the staging range is ours and idle.
                            let copied =
                                unsafe { self.copy_raw(at, addr + *issued, part as usize) };
                            if let Err(e) = copied {
                                if let Some(ch) = chunk {
                                    self.staging.free.push(ch);
                                }
                                self.mem_fault(pe, e);
                                return Err(());
                            }
                            (
                                LocalRef {
                                    mr: self.staging.mr,
                                    offset: off,
                                },
                                part,
                                chunk,
                            )
                        }
                    };
                    let rref = RemoteRef {
                        mr: self.remote[pe as usize],
                        offset: *remote + *issued,
                    };
                    let part = self.new_part(*op, pe, c, chunk, None);
                    let plen = part_len as usize;
                    // SAFETY: heap sources are registered and outlive the transport; staged
                    // sources stay untouched until the part completes (the chunk is ours), or
                    // are copied at post (inject size, scratch).
                    let r = unsafe {
                        match *tag {
                            Some(t) => self.t.write_data(
                                pe as usize,
                                lref,
                                rref,
                                plen,
                                (u64::from(self.me) << TAG_BITS) | t,
                                part,
                            ),
                            None => self.t.write(pe as usize, lref, rref, plen, part),
                        }
                    };
                    if !self.posted(r, part, pe, "put")? {
                        return Err(());
                    }
                    if let OpRef::Slab(k) = *op
                        && let Some(o) = self.ops.get_mut(k)
                    {
                        o.data_parts += 1;
                    }
                    *issued += part_len;
                }
                Ok(true)
            }
            Work::Get {
                op,
                remote,
                local,
                len,
                issued,
            } => {
                while *issued < *len {
                    if self.inflight >= self.cfg.max_inflight {
                        return Err(());
                    }
                    let left = *len - *issued;
                    let (lref, part_len, chunk, copy_out) = match *local {
                        Local::Heap(off) => (
                            LocalRef {
                                mr: self.heap_mr,
                                offset: (off + *issued) as usize,
                            },
                            left.min(MAX_PART),
                            None,
                            None,
                        ),
                        Local::Raw(addr) => {
                            let Some(ch) = self.staging.free.pop() else {
                                return Err(());
                            };
                            let part = left.min(self.staging.chunk as u64);
                            (
                                LocalRef {
                                    mr: self.staging.mr,
                                    offset: ch as usize * self.staging.chunk,
                                },
                                part,
                                Some(ch),
                                Some((addr + *issued, part as usize)),
                            )
                        }
                    };
                    let part = self.new_part(*op, pe, c, chunk, copy_out);
                    let rref = RemoteRef {
                        mr: self.remote[pe as usize],
                        offset: *remote + *issued,
                    };
                    // SAFETY: the destination (heap, or our staging chunk) is registered and
                    // not touched until the part completes.
                    let r = unsafe {
                        self.t
                            .read(pe as usize, lref, rref, part_len as usize, part)
                    };
                    if !self.posted(r, part, pe, "get")? {
                        return Err(());
                    }
                    *issued += part_len;
                }
                Ok(true)
            }
            Work::P {
                op,
                remote,
                value,
                width,
            } => {
                if self.inflight >= self.cfg.max_inflight {
                    return Err(());
                }
                let w = *width as usize;
                let (off, chunk) = if w <= self.staging.inject {
                    (self.staging.scratch, None)
                } else {
                    let Some(ch) = self.staging.free.pop() else {
                        return Err(());
                    };
                    (ch as usize * self.staging.chunk, Some(ch))
                };
                // The scratch area and every chunk hold at least 8 bytes; only `w` are sent.
                self.staging.buf[off..off + 8].copy_from_slice(&value.to_le_bytes());
                let part = self.new_part(*op, pe, c, chunk, None);
                let lref = LocalRef {
                    mr: self.staging.mr,
                    offset: off,
                };
                let rref = RemoteRef {
                    mr: self.remote[pe as usize],
                    offset: *remote,
                };
                // SAFETY: the value is in our staging memory: injected at post, or in a chunk
                // held until completion.
                let r = unsafe { self.t.write(pe as usize, lref, rref, w, part) };
                self.posted(r, part, pe, "p")
            }
            Work::Amo {
                op,
                remote,
                aop,
                wide,
                operand,
                compare,
            } => {
                let req = Request {
                    id: 0,
                    offset: *remote,
                    operand: *operand,
                    compare: *compare,
                    tag: 0,
                    kind: RequestKind::Amo {
                        op: *aop,
                        wide: *wide,
                    },
                };
                self.request(c, pe, *op, req)
            }
            Work::Signal {
                op,
                remote,
                value,
                sop,
                tag,
            } => {
                let expect = match (*tag, *op) {
                    (Some(_), OpRef::Slab(k)) => self.ops.get_mut(k).map_or(0, |o| o.data_parts),
                    _ => 0,
                };
                let req = Request {
                    id: 0,
                    offset: *remote,
                    operand: *value,
                    compare: 0,
                    tag: tag.unwrap_or(0),
                    kind: RequestKind::Signal { op: *sop, expect },
                };
                self.request(c, pe, *op, req)
            }
            Work::Gate => Ok(true),
            Work::SPut { .. } | Work::SGet { .. } | Work::Store { .. } => {
                self.issue_staged(c, pe, w)
            }
        }
    }

    /// Sends a request whose ack completes a part of `op`.
    fn request(&mut self, c: u16, pe: u32, op: OpRef, mut req: Request) -> Result<bool, ()> {
        if self.inflight >= self.cfg.max_inflight {
            return Err(());
        }
        let part = self.new_part(op, pe, c, None, None);
        req.id = part;
        let msg = wire::encode_request(self.me, &req);
        let r = self.t.send(pe as usize, &msg, SEND | part);
        self.posted(r, part, pe, "request")
    }

    /// The context of a new part of `op` to `pe` on channel `c`.
    fn new_part(
        &mut self,
        op: OpRef,
        pe: u32,
        c: u16,
        chunk: Option<u32>,
        copy_out: Option<(u64, usize)>,
    ) -> u64 {
        match op {
            OpRef::Fast(seq) => {
                debug_assert!(chunk.is_none() && copy_out.is_none());
                fast_ctx(c, pe, seq)
            }
            OpRef::Slab(op) => self.parts.insert(Part {
                op,
                pe,
                chan: c,
                chunk,
                copy_out,
                landing: None,
            }),
        }
    }

    /// Books a post's outcome. `Ok(true)`: posted; `Ok(false)`: back-pressure (undone);
    /// `Err(())`: failed (the job is failing).
    fn posted(
        &mut self,
        r: Result<(), PostError>,
        part: u64,
        pe: u32,
        what: &str,
    ) -> Result<bool, ()> {
        match r {
            Ok(()) => {
                let chan = if part & FAST != 0 {
                    ((part >> 52) & 0x1ff) as u16
                } else {
                    let p = self.parts.get_mut(part).expect("part");
                    let (op, chan) = (p.op, p.chan);
                    if let Some(o) = self.ops.get_mut(op) {
                        o.pending += 1;
                    }
                    chan
                };
                self.chans[chan as usize].queues[pe as usize].outstanding += 1;
                self.inflight += 1;
                Ok(true)
            }
            Err(PostError::Retry) => {
                if part & FAST == 0 {
                    let p = self.parts.remove(part).expect("part");
                    if let Some(ch) = p.chunk {
                        self.staging.free.push(ch);
                    }
                }
                Ok(false)
            }
            Err(PostError::Failed(e)) => {
                if part & FAST == 0 {
                    self.parts.remove(part);
                }
                self.fault(
                    code::OP_FAILED,
                    Some(pe as usize),
                    format!("PE {}: posting a {what} to PE {pe} failed: {e}", self.me),
                );
                Err(())
            }
        }
    }

    // ---- completions and messages -----------------------------------------------------------

    fn poll(&mut self) -> usize {
        let mut events = std::mem::take(&mut self.events);
        let mut msgs = std::mem::take(&mut self.msgs);
        // The hottest event, a single-part operation's completion, is finished inside the
        // callback (it touches only the channels and the in-flight count, not the transport).
        let (chans, inflight) = (&mut self.chans, &mut self.inflight);
        let mut fast = 0;
        let r = self.t.poll(&mut |e| match e {
            Event::Done { ctx } if is_fast_ctx(ctx) => {
                fast_done(chans, inflight, ctx);
                fast += 1;
            }
            e => keep(&mut events, &mut msgs, e),
        });
        if let Err(e) = r {
            self.fault(
                code::OP_FAILED,
                e.pe(),
                format!("PE {}: polling the transport failed: {e}", self.me),
            );
            return 0;
        }
        let n = fast + events.len() + msgs.len();
        self.dispatch(&mut events, &mut msgs);
        self.events = events;
        self.msgs = msgs;
        n
    }

    /// Handles events gathered by a poll (and by a job's polls).
    fn dispatch(&mut self, events: &mut Vec<Ev>, msgs: &mut Vec<Vec<u8>>) {
        for ev in events.drain(..) {
            match ev {
                // A job's write that completed after its job returned.
                Ev::Done(ctx, _) if is_job_ctx(ctx) => {}
                Ev::Failed(ctx, err, _) if is_job_ctx(ctx) => {
                    tracing::warn!("PE {}: a finished job's write failed: {err}", self.me)
                }
                Ev::Done(ctx, _) if staged::is_stage_ctx(ctx) => {
                    self.staging.free.push(ctx as u32);
                }
                Ev::Done(ctx, _) if ctx & SEND != 0 => {}
                Ev::Done(ctx, value) => self.part_done(ctx, value),
                Ev::Tagged(data) if self.staging_path() => self.landed(data),
                Ev::Tagged(data) => self.tagged_write(data),
                Ev::Failed(ctx, err, err_pe) => {
                    let pe = if staged::is_stage_ctx(ctx) {
                        Some(((ctx >> 32) & 0xf_ffff) as usize)
                    } else if ctx >> 32 == ACK_CTX >> 32 {
                        Some((ctx & 0xffff_ffff) as usize)
                    } else if ctx & FAST != 0 {
                        Some(((ctx >> 32) & 0xf_ffff) as usize)
                    } else {
                        self.parts.get_mut(ctx & !SEND).map(|p| p.pe as usize)
                    }
                    .or(err_pe);
                    self.fault(
                        code::OP_FAILED,
                        pe,
                        format!("PE {}: an operation to PE {pe:?} failed: {err}", self.me),
                    );
                }
            }
        }
        for m in msgs.drain(..) {
            self.message(&m);
        }
    }

    /// Runs the waiting job with the transport to itself (nothing is in flight), then handles
    /// the events its polls kept for the proxy.
    fn run_job(&mut self) {
        // Cleared before the slot is emptied: a job installed meanwhile sets it again. Relaxed:
        // the slot's mutex orders the job itself; a stale `true` only costs a lock.
        self.jobs.pending.store(false, Ordering::Relaxed);
        let Some(job) = self.jobs.lock().take() else {
            return;
        };
        let mut events = std::mem::take(&mut self.events);
        let mut msgs = std::mem::take(&mut self.msgs);
        let mut x = Exclusive {
            t: &mut *self.t,
            heap: &self.heap,
            heap_mr: self.heap_mr,
            remote: &self.remote,
            events: &mut events,
            msgs: &mut msgs,
            outstanding: 0,
        };
        job(&mut x);
        self.dispatch(&mut events, &mut msgs);
        self.events = events;
        self.msgs = msgs;
    }

    /// A part completed (a write or read, or a request's ack with the old value).
    fn part_done(&mut self, key: u64, fetched: Option<u64>) {
        if key & FAST != 0 {
            fast_done(&mut self.chans, &mut self.inflight, key);
            return;
        }
        let Some(p) = self.parts.remove(key) else {
            return;
        };
        self.inflight -= 1;
        if let Some((owner, slot)) = p.landing {
            self.free_landing(owner, slot);
        }
        if let (Some((dst, len)), Some(ch)) = (p.copy_out, p.chunk) {
            let src = self.staging.chunk_ptr(ch) as u64;
            // SAFETY: the producer keeps raw destinations valid until the operation completes,
            // which is after this copy; the chunk holds `len` bytes just read.
            if let Err(e) = unsafe { self.copy_raw(dst, src, len) } {
                self.mem_fault(p.pe, e);
            }
        }
        if let Some(ch) = p.chunk {
            self.staging.free.push(ch);
        }
        if let (Some(v), Some(o)) = (fetched, self.ops.get_mut(p.op))
            && o.result != 0
        {
            let (cell, b) = (o.result, v.to_le_bytes());
            // SAFETY: the result cell stays valid until the operation completes (API
            // contract), which is after this write.
            if let Err(e) = unsafe { self.copy_raw(cell, b.as_ptr() as u64, 8) } {
                self.mem_fault(p.pe, e);
            }
        }
        self.chans[p.chan as usize].queues[p.pe as usize].outstanding -= 1;
        self.release(p.op);
    }

    fn message(&mut self, m: &[u8]) {
        match wire::decode(m) {
            Ok(Message::Request { src, req }) => self.serve(src, req),
            Ok(Message::Acks { src, acks }) => {
                for a in acks {
                    if a.status != Status::Ok {
                        self.fault(
                            code::OP_FAILED,
                            Some(src as usize),
                            format!(
                                "PE {src} refused a request from PE {}: {:?}",
                                self.me, a.status
                            ),
                        );
                        return;
                    }
                    self.part_done(a.id, Some(a.value));
                }
            }
            Err(e) => {
                tracing::warn!("PE {}: dropped a message: {e}", self.me);
            }
        }
    }

    /// Applies a peer's request to this PE's heap (or parks a signal for its tagged writes).
    fn serve(&mut self, src: u32, req: Request) {
        match req.kind {
            RequestKind::Amo { op, wide } => {
                let r = self.heap_amo(req.offset, wide, op, req.operand, req.compare);
                self.ack(src, req.id, r);
            }
            RequestKind::Signal { op, expect } => {
                if expect == 0 {
                    let r = self.heap_amo(req.offset, true, op.as_amo(), req.operand, 0);
                    self.ack(src, req.id, r.map(|_| 0));
                    return;
                }
                let key = (src, req.tag);
                let st = self.tags.entry(key).or_default();
                if st.arrived >= expect {
                    self.tags.remove(&key);
                    let r = self.heap_amo(req.offset, true, op.as_amo(), req.operand, 0);
                    self.ack(src, req.id, r.map(|_| 0));
                } else {
                    st.signal = Some(req);
                }
            }
            RequestKind::Store { .. } | RequestKind::GetData { .. } if self.staging_path() => {
                self.serve_staged(src, req)
            }
            RequestKind::Store { .. } | RequestKind::GetData { .. } => self.fault(
                code::OP_FAILED,
                Some(src as usize),
                format!(
                    "PE {src} sent a host-staged request to PE {}, whose heap is registered \
                     (PEs disagree on the data path)",
                    self.me
                ),
            ),
        }
    }

    /// An AMO on this PE's heap: CPU atomics on a host heap, the GPU's own atomics (a kernel)
    /// on a GPU heap.
    fn heap_amo(
        &mut self,
        off: u64,
        wide: bool,
        op: AmoOp,
        operand: u64,
        compare: u64,
    ) -> Result<u64, MemError> {
        match self.staged.as_mut() {
            Some(st) => st.amo(off, wide, op, operand, compare),
            None => self.heap.amo(off, wide, op, operand, compare),
        }
    }

    /// Copies between process (or, with a GPU heap, device) addresses.
    ///
    /// # Safety
    /// Both ranges must be valid and not in use by anything else meanwhile.
    unsafe fn copy_raw(&mut self, dst: u64, src: u64, len: usize) -> Result<(), MemError> {
        match self.staged.as_mut() {
            // SAFETY: forwarded.
            Some(st) => unsafe { st.copy(dst, src, len) },
            None => {
                // SAFETY: forwarded; the ranges are distinct (staging memory is the proxy's).
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
                Ok(())
            }
        }
    }

    /// A local memory failure while handling an operation for `pe`: the job fails.
    fn mem_fault(&mut self, pe: u32, e: MemError) {
        self.fault(
            code::OP_FAILED,
            Some(self.me as usize),
            format!("PE {}: an operation with PE {pe}: {e}", self.me),
        );
    }

    /// A tagged write landed: apply its signal if it was the last one awaited.
    fn tagged_write(&mut self, data: u64) {
        let key = ((data >> TAG_BITS) as u32, data & ((1 << TAG_BITS) - 1));
        let st = self.tags.entry(key).or_default();
        st.arrived += 1;
        let ready = match &st.signal {
            Some(Request {
                kind: RequestKind::Signal { expect, .. },
                ..
            }) => st.arrived >= *expect,
            _ => false,
        };
        if ready {
            let req = self
                .tags
                .remove(&key)
                .and_then(|s| s.signal)
                .expect("signal");
            if let RequestKind::Signal { op, .. } = req.kind {
                let r = self.heap_amo(req.offset, true, op.as_amo(), req.operand, 0);
                self.ack(key.0, req.id, r.map(|_| 0));
            }
        }
    }

    fn ack(&mut self, to: u32, id: u64, r: Result<u64, MemError>) {
        let (value, status) = match r {
            Ok(v) => (v, Status::Ok),
            Err(MemError::OutOfBounds { .. }) => (0, Status::OutOfBounds),
            Err(MemError::Misaligned { .. }) => (0, Status::Misaligned),
            Err(e @ MemError::Device { .. }) => {
                self.mem_fault(to, e);
                return;
            }
        };
        self.acks
            .entry(to)
            .or_default()
            .push(Ack { id, value, status });
    }

    /// Sends the acks gathered this turn and retries messages that met back-pressure.
    fn flush_messages(&mut self) -> usize {
        let per = wire::acks_per_message(self.caps.max_send_size);
        for (to, acks) in std::mem::take(&mut self.acks) {
            for chunk in acks.chunks(per) {
                self.outbox.push_back((
                    to,
                    wire::encode_acks(self.me, chunk),
                    ACK_CTX | u64::from(to),
                ));
            }
        }
        let mut sent = 0;
        while let Some((to, msg, ctx)) = self.outbox.pop_front() {
            match self.t.send(to as usize, &msg, ctx) {
                Ok(()) => sent += 1,
                Err(PostError::Retry) => {
                    self.outbox.push_front((to, msg, ctx));
                    break;
                }
                Err(PostError::Failed(e)) => {
                    self.fault(
                        code::OP_FAILED,
                        Some(to as usize),
                        format!("PE {}: sending acks to PE {to} failed: {e}", self.me),
                    );
                    break;
                }
            }
        }
        sent
    }
}

/// Copies into the heap at `dst` from a local source.
fn copy_in(h: &HeapMem, dst: u64, src: Local, len: u64) -> Result<(), MemError> {
    match src {
        Local::Heap(off) => h.copy_from(dst, h, off, len),
        // SAFETY: the producer keeps raw sources valid until the operation completes.
        Local::Raw(addr) => unsafe { h.write_from_raw(dst, addr as *const u8, len as usize) },
    }
}

/// Copies from the heap at `src` to a local destination.
fn copy_out(h: &HeapMem, src: u64, dst: Local, len: u64) -> Result<(), MemError> {
    match dst {
        Local::Heap(off) => h.copy_from(off, h, src, len),
        // SAFETY: the producer keeps raw destinations valid until the operation completes.
        Local::Raw(addr) => unsafe { h.read_to_raw(src, addr as *mut u8, len as usize) },
    }
}

fn pin(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    let res = set
        .set(cpu)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = res {
        tracing::warn!("could not pin the proxy thread to core {cpu}: {e}");
    }
}

#[cfg(test)]
mod ctx_tests {
    use super::*;

    /// A part's slab slot reused 2^28 times gets a generation with bit 28 set, which is bit 60
    /// of its key. The send of a request (an AMO, a signal, a staged get) carries `SEND | key`
    /// as its context; its completion must still be read as a request's send, never as the
    /// completion of a staged write (whose chunk it would free a second time).
    #[test]
    fn reused_slab_slot_is_never_read_as_staged_write() {
        let mut parts = GenSlab::new();
        let mut key = parts.insert(());
        for _ in 0..1u64 << 28 {
            parts.remove(key);
            key = parts.insert(());
        }
        let send = SEND | key;
        assert!(
            !staged::is_stage_ctx(send),
            "the send of request {key:#x} is classified as a staged write"
        );
    }
}
