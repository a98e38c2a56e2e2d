//! The proxy loop: drain rings, queue work per (ring, destination PE), issue it to the
//! transport, handle completions and peers' requests, advance the rings' completion counters.
//!
//! The state is split like the work, each part in its own type:
//! - [`Link`] (`link`): the transport, its capabilities and registrations, the events a poll
//!   hands over and the messages that met back-pressure;
//! - `Initiator` (`initiator`): this PE's own operations — the rings, the operations and parts
//!   in flight, and one `Peer` per destination (`peer`: in-flight count, queues per ring, tags,
//!   landing slots);
//! - `Target` (`target`): what peers ask of this PE — tagged writes and parked signals and
//!   marks, sequenced requests' order, the acks to send, waiting staged gets;
//! - `Home` (`home`): this PE's memory and GPU, and the copies under way on its stream;
//! - the staging buffers, the trace and the fault record, lent with the others as an `Io`
//!   (`io`).
//!
//! Phase methods live on the side they serve and borrow only what they use; the few steps
//! that hand results from one side to the other (a poll's events, a peer's message, a finished
//! copy) are routers here on the engine.
//!
//! One turn of the loop:
//! 1. tell the transport about newly dead peers (here);
//! 2. `accept`: drain up to `batch` operations from each ring into per-(ring, PE) FIFO queues
//!    (operations on this PE itself are applied at once, in order, by `home`; fences by
//!    `fence`: marks in tagged mode, gates in gated mode);
//! 3. `issue`: issue queued work front first, until the transport pushes back (`Retry`),
//!    staging runs out, or a fence gate closes; RMA parts, or host-staged chunks (`staged`);
//! 4. `complete`: poll the transport and finish parts and operations; then issue the counted
//!    signals held aside (gated mode) whose preceding parts all completed, ahead of their
//!    queues (everything still queued there is later);
//! 5. the target (`target`): peers' requests (AMOs, signals, fence marks, stores, staged gets)
//!    and tagged writes, sequenced requests in their source's order; the acks gathered this
//!    turn go out (one message per peer);
//! 6. move each ring's `completed` counter past its finished prefix (here);
//! 7. back off if nothing happened (here).
//!
//! `ctx` owns every bit of the words the engine packs (transport contexts, request ids,
//! remote CQ data); `exclusive` the jobs that borrow the transport between turns.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use pshmem_abi::error as code;
use pshmem_transport::{Caps, Pe};

mod accept;
mod complete;
pub(crate) mod ctx;
pub(crate) mod exclusive;
mod fence;
mod home;
mod initiator;
mod io;
mod issue;
mod link;
mod peer;
pub(crate) mod staged;
pub(crate) mod tags;
mod target;
#[cfg(test)]
mod tests;
mod work;

use ctx::{ImmWidth, RingId};
use exclusive::JobSlot;
use home::{DeviceHeap, Home};
use initiator::Initiator;
use io::{Faults, Io, Tracer};
use link::{Inbox, Link};
use staged::Landing;
use target::Target;
use work::{RingState, Staging};

use crate::{
    Health, ProxyConfig, ProxyError, ProxySetup,
    trace::{Cost, Trace},
};

/// How put-with-signal and fence keep their order on this transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalMode {
    /// Delivery is ordered per peer: nothing to do.
    Ordered,
    /// Unordered, with remote CQ data (8 bytes, or EFA's 4): data writes carry a tag; the
    /// target applies the signal after every tagged write landed. Every request is sequenced;
    /// a fence goes by a mark (a gate the first time, and before a write after it).
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

/// Says once per process that this unordered transport has no remote CQ data, so ordering
/// costs a round trip: the fallback is correct but slow, and the user should know.
fn warn_gated(caps: &Caps) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tracing::warn!("{}", gated_warning(caps)));
}

/// The text of [`warn_gated`].
fn gated_warning(caps: &Caps) -> String {
    format!(
        "{} delivers out of order and offers no remote CQ data: every put-with-signal, counted \
         signal and fence through the proxy waits for the completion of the data before it (a \
         round trip each) instead of being counted at the target",
        caps.name
    )
}

/// The proxy's state, owned by its thread.
pub struct Engine {
    // Drop order: the link first (its transport may still read the staging buffer and the
    // registered region), then home (its device page-locked the staging buffer), then the
    // staging buffer.
    link: Link,
    home: Home,
    staging: Staging,
    init: Initiator,
    target: Target,
    tracer: Tracer,
    faults: Faults,
    cfg: ProxyConfig,
    stop: Arc<AtomicBool>,
    dead_seen: u64,
    /// A job waiting for the transport to itself (see `exclusive`).
    jobs: Arc<JobSlot>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pe", &self.link.me)
            .field("mode", &self.init.mode)
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
        let host_staged = s.device.is_some() && !s.device_registered;
        let mut mode = Self::check_setup(&caps, me, n, s.rings.len(), host_staged)?;
        let imm = ImmWidth::of(caps.cq_data_size).unwrap_or(ImmWidth::Eight);
        tracing::debug!(
            "PE {me}: proxy on {}: {mode:?} signals, {} bytes of remote CQ data, strong signals {}",
            caps.name,
            caps.cq_data_size,
            cfg.strong_signals
        );
        if mode == SignalMode::Gated && !host_staged {
            warn_gated(&caps);
        }
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
                        .map_err(|what| ProxyError::Limits { pe: me.idx(), what })?,
                );
                // An operation finishes only when the target acked it: every ordering is a gate.
                mode = SignalMode::Gated;
            }
        }
        let rings: Vec<RingState> = s.rings.into_iter().map(RingState::new).collect();
        let slots = landing.map_or(0, |l| l.per_group);
        let shape = (mode, imm.tag_bits(), landing.is_some(), slots);
        Ok(Self {
            link: Link {
                t: s.transport,
                caps,
                me,
                n,
                region_mr: s.heap_mr,
                remote: s.remote_heaps,
                imm,
                landing,
                inbox: Inbox::default(),
                outbox: Default::default(),
            },
            home: Home {
                device,
                region: s.heap,
                copying: Default::default(),
            },
            staging,
            init: Initiator::new(rings, (me, n), shape, &cfg),
            target: Target::default(),
            tracer: Tracer::new(cfg.trace.as_ref().map(|p| Box::new(Trace::new(p)))),
            faults: Faults::new(health, me),
            cfg,
            stop,
            dead_seen: 0,
            jobs,
        })
    }

    /// The initiator, the target, and the services both borrow.
    #[inline]
    fn split(&mut self) -> (&mut Initiator, &mut Target, Io<'_>) {
        let Engine {
            link,
            home,
            staging,
            init,
            target,
            tracer,
            faults,
            ..
        } = self;
        let io = Io {
            link,
            staging,
            home,
            tracer,
            faults,
        };
        (init, target, io)
    }

    /// Writes the trace, if one was asked for (when the thread ends).
    pub(crate) fn write_trace(&mut self) {
        let rails = self.link.t.rail_bytes();
        self.tracer.write(self.link.me, rails);
    }

    /// The signal mode of this transport, or why the engine cannot run on it.
    fn check_setup(
        caps: &Caps,
        me: Pe,
        n: usize,
        rings: usize,
        host_staged: bool,
    ) -> Result<SignalMode, ProxyError> {
        let pe = me.idx();
        let mode = SignalMode::for_caps(caps).ok_or_else(|| ProxyError::Unorderable {
            pe,
            transport: caps.name.clone(),
        })?;
        if rings > ctx::MAX_RINGS || n > ctx::MAX_PES {
            return Err(ProxyError::Limits {
                pe,
                what: format!(
                    "{rings} rings and {n} PEs: a proxy thread serves at most {} rings and {} PEs",
                    ctx::MAX_RINGS,
                    ctx::MAX_PES
                ),
            });
        }
        if host_staged && caps.cq_data_size < 8 {
            return Err(ProxyError::Limits {
                pe,
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
                pe,
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
            if self.faults.failed || self.faults.health().faulted() {
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
        self.faults.health().raise(
            code::PROXY,
            None,
            format!(
                "PE {}: proxy stopped with {} operations unfinished after {:?}",
                self.link.me,
                self.init.ops.len(),
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
        let waiting = self.init.waiting() || self.staged_busy();
        if waiting || self.cfg.idle_after.is_zero() || since.elapsed() < self.cfg.idle_after {
            idle.spins = idle.spins.wrapping_add(1);
            if idle.spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else if self.link.t.wait(self.cfg.max_sleep) {
            // Blocked until traffic arrived or the sleep ended (a manual-progress target wakes
            // at once when a peer sends; new ring work waits at most `max_sleep`). Traffic
            // resets the idle clock: a target receiving a stream (RMA into its heap makes no
            // completion here) keeps progressing it at spinning speed, not one wake-up per
            // chunk, until the stream has been quiet for `idle_after`.
            idle.since = None;
        }
    }

    /// Nothing under way on either side.
    fn idle(&self) -> bool {
        !self.init.busy()
            && self.target.idle()
            && self.link.outbox.is_empty()
            && self.home.copying.is_empty()
    }

    /// Whether staged work is still pending (waiting get requests, copies under way).
    fn staged_busy(&self) -> bool {
        !self.target.waiting.is_empty() || !self.home.copying.is_empty()
    }

    /// One turn; returns a measure of the work done (0 = idle).
    pub(crate) fn turn(&mut self) -> usize {
        for (pe, why) in self.faults.health().dead_since(&mut self.dead_seen) {
            self.link.t.fail_peer(Pe::from_idx(pe), &why);
        }
        let staged = self.init.staged;
        let mut work = 0;
        let at = self.tracer.clock();
        let (init, target, mut io) = self.split();
        for r in 0..init.rings.len() {
            work += init.drain(&mut io, RingId::new(r));
        }
        let at = io.tracer.charge(Cost::Drain, at);
        work += init.issue_all(&mut io);
        if staged {
            work += target.serve_waiting(&mut io);
        }
        // The batch's last post rings its rail's doorbell (doorbell batching, PSHMEM_OFI_MORE).
        io.link.t.flush();
        let at = io.tracer.charge(Cost::Issue, at);
        work += self.poll();
        if !self.init.holding.is_empty() {
            let (init, _, mut io) = self.split();
            work += init.release_held(&mut io);
        }
        let at = self.tracer.charge(Cost::Progress, at);
        if staged {
            work += self.flush_copies();
        }
        self.target.take_acks(&mut self.link);
        work += self.link.flush_outbox(&mut self.tracer, &mut self.faults);
        self.link.t.flush();
        self.tracer.charge_since(Cost::Flush, at);
        self.tracer.end_turn(work > 0);
        self.init.publish_completions();
        work
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
        exclusive::run(job, &mut self.link, &self.home.region);
        if !self.link.inbox.is_empty() {
            self.dispatch();
        }
    }
}

/// The back-off state of [`Engine::run`].
#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    stop_at: Option<Instant>,
    spins: u32,
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
