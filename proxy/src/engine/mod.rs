//! The proxy loop: drain rings, queue work per (ring, target PE), issue it to the transport,
//! handle completions and peers' requests, advance the rings' completion counters.
//!
//! One turn of the loop, one module per phase:
//! 1. tell the transport about newly dead peers (here);
//! 2. `accept`: drain up to `batch` operations from each ring into per-(ring, PE) FIFO queues
//!    (operations on this PE itself are applied at once, in order, by `home`);
//! 3. `issue`: issue queued work front first, until the transport pushes back (`Retry`),
//!    staging runs out, or a fence gate closes; RMA parts, or host-staged chunks (`staged`);
//! 4. `complete`: poll the transport and finish parts and operations; then issue the counted
//!    signals held aside (gated mode) whose preceding parts all completed, ahead of their
//!    queues (everything still queued there is later);
//! 5. `serve`: peers' requests (AMOs, signals, staged stores and gets), acks, tagged writes;
//!    send the acks gathered this turn (one message per peer);
//! 6. move each ring's `completed` counter past its finished prefix (here);
//! 7. back off if nothing happened (here).
//!
//! `ctx` owns every bit of the words the engine packs (transport contexts, request ids,
//! remote CQ data); `work` the state kept between phases; `exclusive` the jobs that borrow
//! the transport between turns.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use pshmem_abi::error as code;
use pshmem_transport::{Caps, LocalMem, MemKind, MrId, RemoteMrId, Transport};

mod accept;
mod complete;
pub(crate) mod ctx;
pub(crate) mod exclusive;
mod home;
mod issue;
mod serve;
pub(crate) mod staged;
pub(crate) mod tags;
#[cfg(test)]
mod tests;
mod work;

use ctx::ImmWidth;
use exclusive::JobSlot;
use home::DeviceHeap;
use staged::Landing;
use work::{Ev, Op, Part, RingState, Staging, TagState};

use crate::{
    FaultCause, Health, ProxyConfig, ProxyError, ProxySetup,
    mem::HeapMem,
    slab::GenSlab,
    trace::{Cost, Trace},
    wire::Ack,
};

/// How put-with-signal and fence keep their order on this transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalMode {
    /// Delivery is ordered per peer: nothing to do.
    Ordered,
    /// Unordered, with remote CQ data (8 bytes, or EFA's 4): data writes carry a tag; the
    /// target applies the signal after every tagged write landed. Fence gates the PE's queue.
    Tagged,
    /// Unordered, without remote CQ data (or the host-staged path, where an operation finishes
    /// only when the target acked it): the signal, and anything after a fence, waits for the
    /// completion of what precedes it.
    Gated,
}

impl SignalMode {
    /// The mode a transport's capabilities call for.
    pub fn for_caps(caps: &Caps) -> Option<Self> {
        if caps.ordered {
            Some(Self::Ordered)
        } else if ImmWidth::of(caps.cq_data_size).is_some() {
            Some(Self::Tagged)
        } else if caps.delivery_complete {
            Some(Self::Gated)
        } else {
            None
        }
    }
}

/// The proxy's state, owned by its thread.
pub struct Engine {
    // Drop order: the transport first (it may still read the staging buffer and the registered
    // region), then the device (it page-locked the staging buffer), then the staging buffer.
    t: Box<dyn Transport>,
    /// This PE's GPU heap, when it has one: reached through host staging, or registered with
    /// the transport (DMA-BUF).
    device: Option<DeviceHeap>,
    staging: Staging,
    /// The host-staged path's landing slots (a GPU heap the transport cannot register).
    landing: Option<Landing>,
    caps: Caps,
    me: u32,
    n: usize,
    /// What is registered as this PE's heap: the host heap, the GPU heap (registered mode, a
    /// view never dereferenced), or the landing area (host-staged path).
    region: HeapMem,
    region_mr: MrId,
    remote: Vec<RemoteMrId>,
    rings: Vec<RingState>,
    ops: GenSlab<Op>,
    parts: GenSlab<Part>,
    /// (ring, PE) queues with work, in round-robin order.
    active: VecDeque<(u16, u32)>,
    mode: SignalMode,
    /// The layout of tagged writes' remote CQ data (tagged mode).
    imm: ImmWidth,
    /// Strong signals are in effect (asked for, in tagged mode).
    strong: bool,
    /// Target side: tagged writes and parked signals per (source PE, tag).
    tags: HashMap<(u32, u32), TagState>,
    /// Target side: strong signals ready but waiting for an earlier one from their source.
    order: tags::Order<crate::wire::Request>,
    /// Reused: the strong signals to apply now.
    ready: Vec<crate::wire::Request>,
    /// Initiator side: the tags in use toward each PE, and the counted rounds and strong
    /// epochs that hold them.
    itags: tags::Tags,
    acks: HashMap<u32, Vec<Ack>>,
    /// Messages that met back-pressure, in order: (PE, bytes, context).
    outbox: VecDeque<(u32, Vec<u8>, u64)>,
    health: Arc<Health>,
    cfg: ProxyConfig,
    stop: Arc<AtomicBool>,
    dead_seen: u64,
    failed: bool,
    /// Parts posted and not yet complete (bounded by `ProxyConfig::max_inflight`).
    inflight: usize,
    /// The (ring, PE) queues holding counted signals aside (gated mode) until what precedes
    /// them completes.
    holding: Vec<(u16, u32)>,
    /// Parts in flight per destination PE (bounded by `ProxyConfig::max_inflight_per_pe`).
    pe_inflight: Vec<u32>,
    /// Reused buffers (no allocation per turn).
    events: Vec<Ev>,
    msgs: Vec<Vec<u8>>,
    /// A job waiting for the transport to itself (see `exclusive`).
    jobs: Arc<JobSlot>,
    /// The proxy trace, when `PSHMEM_TRACE` asks for one.
    trace: Option<Box<Trace>>,
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
    /// Whether flow control lets one more part go to `pe` now: in flight in total and to
    /// that PE below their limits.
    #[inline]
    pub(super) fn room_for(&self, pe: u32) -> bool {
        self.inflight < self.cfg.max_inflight
            && (self.pe_inflight[pe as usize] as usize) < self.cfg.max_inflight_per_pe
    }

    pub(crate) fn new(
        mut s: ProxySetup,
        cfg: ProxyConfig,
        health: Arc<Health>,
        stop: Arc<AtomicBool>,
        jobs: Arc<JobSlot>,
    ) -> Result<Self, ProxyError> {
        let caps = s.transport.caps().clone();
        let cfg_trace = cfg.trace.clone();
        let me = s.transport.my_pe();
        let n = s.transport.n_pes();
        let host_staged = s.device.is_some() && !s.device_registered;
        let mut mode = Self::check_setup(&caps, me, n, s.rings.len(), host_staged)?;
        let imm = ImmWidth::of(caps.cq_data_size).unwrap_or(ImmWidth::Eight);
        tracing::debug!(
            "PE {me}: proxy on {}: {mode:?} signals, {} bytes of remote CQ data, strong signals {}",
            caps.name,
            caps.cq_data_size,
            cfg.strong_signals
        );
        let mut staging = Staging::register(s.transport.as_mut(), &cfg, &caps, host_staged, me)?;
        let mut device = s.device.take().map(DeviceHeap::new);
        let mut landing = None;
        if let Some(dev) = &mut device {
            // SAFETY: the staging buffer lives as long as the engine, and the device (which
            // unpins it when dropped) is dropped before it (field order).
            unsafe { dev.pin(staging.buf.as_mut_ptr(), staging.buf.len()) };
            if host_staged {
                landing = Some(
                    Landing::new(s.heap.len(), staging.chunk, n)
                        .map_err(|what| ProxyError::Limits { pe: me, what })?,
                );
                // An operation finishes only when the target acked it: every ordering is a gate.
                mode = SignalMode::Gated;
            }
        }
        let rings = s.rings.into_iter().map(|r| RingState::new(r, n)).collect();
        Ok(Self {
            t: s.transport,
            device,
            staging,
            landing,
            caps,
            me: me as u32,
            n,
            region: s.heap,
            region_mr: s.heap_mr,
            remote: s.remote_heaps,
            rings,
            ops: GenSlab::new(),
            parts: GenSlab::new(),
            active: VecDeque::new(),
            mode,
            imm,
            strong: cfg.strong_signals && mode == SignalMode::Tagged,
            tags: HashMap::new(),
            order: tags::Order::default(),
            ready: Vec::new(),
            itags: tags::Tags::new(n, imm.tag_bits()),
            acks: HashMap::new(),
            outbox: VecDeque::new(),
            health,
            cfg,
            stop,
            dead_seen: 0,
            failed: false,
            inflight: 0,
            holding: Vec::new(),
            pe_inflight: vec![0; n],
            events: Vec::new(),
            msgs: Vec::new(),
            jobs,
            trace: cfg_trace.map(|p| Box::new(Trace::new(&p))),
        })
    }

    /// Writes the trace, if one was asked for (when the thread ends).
    pub(crate) fn write_trace(&self) {
        let Some(t) = &self.trace else { return };
        let thread = std::thread::current()
            .name()
            .unwrap_or("pshmem-proxy")
            .to_string();
        match t.write(self.me, &thread) {
            Ok((trace, summary)) => tracing::info!(
                "PE {}: proxy trace written to {} and {}",
                self.me,
                trace.display(),
                summary.display()
            ),
            Err(e) => tracing::warn!("PE {}: writing the proxy trace failed: {e}", self.me),
        }
    }

    /// Operation `seq` of ring `ring` finished: its ring's completion may move past it.
    #[inline]
    pub(super) fn finish_op(&mut self, ring: u16, seq: u64) {
        if let Some(t) = &mut self.trace {
            t.finish(ring, seq);
        }
        self.rings[ring as usize].done.finish(seq);
    }

    /// The signal mode of this transport, or why the engine cannot run on it.
    fn check_setup(
        caps: &Caps,
        me: usize,
        n: usize,
        rings: usize,
        host_staged: bool,
    ) -> Result<SignalMode, ProxyError> {
        let mode = SignalMode::for_caps(caps).ok_or_else(|| ProxyError::Unorderable {
            pe: me,
            transport: caps.name.clone(),
        })?;
        if rings > ctx::MAX_RINGS || n > ctx::MAX_PES {
            return Err(ProxyError::Limits {
                pe: me,
                what: format!(
                    "{rings} rings and {n} PEs: a proxy thread serves at most {} rings and {} PEs",
                    ctx::MAX_RINGS,
                    ctx::MAX_PES
                ),
            });
        }
        if host_staged && caps.cq_data_size < 8 {
            return Err(ProxyError::Limits {
                pe: me,
                what: format!(
                    "the host-staged GPU path needs writes with 8 bytes of remote CQ data, and \
                     {} carries {}",
                    caps.name, caps.cq_data_size
                ),
            });
        }
        if let (SignalMode::Tagged, Some(w)) = (mode, ImmWidth::of(caps.cq_data_size))
            && n > w.max_pes()
        {
            return Err(ProxyError::Limits {
                pe: me,
                what: format!(
                    "{n} PEs: the {} bytes of remote CQ data of {} name at most {} source PEs",
                    caps.cq_data_size,
                    caps.name,
                    w.max_pes()
                ),
            });
        }
        Ok(mode)
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
        let mut idle = Idle::default();
        loop {
            let work = self.turn();
            if self.failed || self.health.faulted() {
                // The job is failing: every ring is raised; keep nothing waiting on us.
                return;
            }
            // Acquire: pairs with `Proxy::exclusive`'s release after it filled the slot.
            if self.jobs.pending.load(Ordering::Acquire) && self.idle() {
                self.run_job();
                idle.since = None;
                continue;
            }
            if self.stopped(&mut idle.stop_at) {
                return;
            }
            self.back_off(work, &mut idle);
        }
    }

    /// Whether a stop was asked for and the engine may stop now: nothing left, or the drain
    /// limit passed (which is then reported as a fault).
    fn stopped(&mut self, stop_at: &mut Option<Instant>) -> bool {
        // Acquire: pairs with `Proxy::stop`'s release.
        if !self.stop.load(Ordering::Acquire) {
            return false;
        }
        let t = *stop_at.get_or_insert_with(Instant::now);
        if self.idle() {
            return true;
        }
        if t.elapsed() <= self.cfg.drain_limit {
            return false;
        }
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
        true
    }

    /// After a turn that did `work`: go on at once, spin, or block in the transport.
    fn back_off(&mut self, work: usize, idle: &mut Idle) {
        if work > 0 {
            idle.since = None;
            idle.spins = 0;
            return;
        }
        let since = *idle.since.get_or_insert_with(Instant::now);
        // Sleep only with nothing in flight: a completion or ack may be moments away.
        let waiting = self.parts.len() > 0
            || !self.active.is_empty()
            || !self.holding.is_empty()
            || self.staged_busy();
        if waiting || self.cfg.idle_after.is_zero() || since.elapsed() < self.cfg.idle_after {
            idle.spins = idle.spins.wrapping_add(1);
            if idle.spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else if self.t.wait(self.cfg.max_sleep) {
            // Blocked until traffic arrived or the sleep ended (a manual-progress target wakes
            // at once when a peer sends; new ring work waits at most `max_sleep`). Traffic
            // resets the idle clock: a target receiving a stream (RMA into its heap makes no
            // completion here) keeps progressing it at spinning speed, not one wake-up per
            // chunk, until the stream has been quiet for `idle_after`.
            idle.since = None;
        }
    }

    fn idle(&self) -> bool {
        self.ops.len() == 0
            && self.parts.len() == 0
            && self.outbox.is_empty()
            && self.acks.is_empty()
            && self.active.is_empty()
            && self.holding.is_empty()
            && !self.staged_busy()
            && self.rings.iter().all(|r| r.stash.is_empty())
    }

    /// One turn; returns a measure of the work done (0 = idle).
    pub(crate) fn turn(&mut self) -> usize {
        for (pe, why) in self.health.dead_since(&mut self.dead_seen) {
            self.t.fail_peer(pe, &why);
        }
        let mut work = 0;
        let at = self.clock();
        for r in 0..self.rings.len() {
            work += self.drain(r);
        }
        let at = self.charge(Cost::Drain, at);
        work += self.issue_all();
        if self.landing.is_some() {
            work += self.serve_waiting();
        }
        let at = self.charge(Cost::Issue, at);
        work += self.poll();
        if !self.holding.is_empty() {
            work += self.release_held();
        }
        let at = self.charge(Cost::Progress, at);
        if self.landing.is_some() {
            work += self.flush_copies();
        }
        work += self.flush_messages();
        self.charge(Cost::Flush, at);
        if let Some(t) = &mut self.trace {
            t.end_turn(work > 0);
        }
        for r in &mut self.rings {
            if let Some(v) = r.done.advance()
                && let Some(cons) = &r.cons
            {
                cons.set_completed(v);
            }
        }
        work
    }

    /// With a trace: the clock, to time a [`Cost`] from.
    #[inline]
    pub(super) fn clock(&self) -> Option<Instant> {
        self.trace.as_ref().map(|t| t.start())
    }

    /// With a trace: charges the time since `at` (from [`Engine::clock`]) to `cost`.
    #[inline]
    pub(super) fn charge_since(&mut self, cost: Cost, at: Option<Instant>) {
        if let (Some(t), Some(at)) = (self.trace.as_mut(), at) {
            t.charge(cost, at);
        }
    }

    /// With a trace: charges the phase since `at` to `cost` and starts the next phase.
    #[inline]
    fn charge(&mut self, cost: Cost, at: Option<Instant>) -> Option<Instant> {
        self.charge_since(cost, at);
        self.trace.as_mut()?.phase();
        self.clock()
    }

    /// Records the job's first fault (every ring is raised) and stops issuing.
    fn fault(&mut self, code: u32, pe: Option<usize>, detail: String) {
        self.failed = true;
        self.health.raise(code, pe, detail);
    }

    /// As [`Engine::fault`], keeping the error that caused it.
    fn fault_with(
        &mut self,
        code: u32,
        pe: Option<usize>,
        detail: String,
        cause: impl Into<FaultCause>,
    ) {
        self.failed = true;
        self.health.raise_with(code, pe, detail, Some(cause.into()));
    }
}

/// The back-off state of [`Engine::run`].
#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    stop_at: Option<Instant>,
    spins: u32,
}

impl Staging {
    /// Registers `staging_chunks` chunks (plus, on the host-staged path, a landing header per
    /// chunk, so that a chunk's payload stays a whole `staging_chunk`: a 1 MiB put is one chunk,
    /// not two) and a scratch area of the inject size.
    fn register(
        t: &mut dyn Transport,
        cfg: &ProxyConfig,
        caps: &Caps,
        host_staged: bool,
        me: usize,
    ) -> Result<Self, ProxyError> {
        let chunk = cfg.staging_chunk.max(4096) + if host_staged { staged::HDR } else { 0 };
        let scratch = chunk * cfg.staging_chunks.max(1);
        // Payloads up to the inject size go through the scratch area (the transport copies
        // them at post); larger inline payloads take a chunk.
        let inject = caps.inject_size.clamp(8, 64 << 10);
        let mut buf = vec![0u8; scratch + inject];
        // SAFETY: `buf` is owned by the engine, never reallocated, and lives as long as the
        // transport (the engine drops the transport first: field order).
        let mr = unsafe {
            t.mr_reg(LocalMem {
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
        Ok(Self {
            buf,
            mr,
            chunk,
            free: (0..cfg.staging_chunks.max(1) as u32).rev().collect(),
            scratch,
            inject,
        })
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
