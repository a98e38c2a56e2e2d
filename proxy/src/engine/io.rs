//! The services both sides of the engine use: the fabric ([`Link`]), this PE's memory
//! ([`Home`]), the staging buffers, the trace and the fault record, lent together as an [`Io`]
//! to the initiator's and the target's phases (which own nothing of each other's).

use std::{sync::Arc, time::Instant};

use pshmem_ring::Desc;
use pshmem_transport::Pe;

use super::{ctx::RingId, home::Home, link::Link, work::Staging};
use crate::{
    FaultCause, Health,
    mem::MemError,
    trace::{Cost, Trace},
};

/// What a phase of either side borrows besides its own state.
pub(super) struct Io<'a> {
    pub link: &'a mut Link,
    pub staging: &'a mut Staging,
    pub home: &'a mut Home,
    pub tracer: &'a mut Tracer,
    pub faults: &'a mut Faults,
}

/// The job's first fault, as this engine records it: once raised, every ring's error word says
/// so and the engine stops issuing.
pub(super) struct Faults {
    health: Arc<Health>,
    /// This engine raised a fault (it issues nothing more).
    pub failed: bool,
    me: Pe,
}

impl Faults {
    pub(super) fn new(health: Arc<Health>, me: Pe) -> Self {
        Self {
            health,
            failed: false,
            me,
        }
    }

    /// The health record shared with the runtime.
    pub(super) fn health(&self) -> &Health {
        &self.health
    }

    /// Records the job's first fault (every ring is raised) and stops issuing.
    #[cold]
    pub(super) fn raise(&mut self, code: u32, pe: Option<Pe>, detail: String) {
        self.failed = true;
        self.health.raise(code, pe.map(Pe::idx), detail);
    }

    /// As [`Faults::raise`], keeping the error that caused it.
    #[cold]
    pub(super) fn raise_with(
        &mut self,
        code: u32,
        pe: Option<Pe>,
        detail: String,
        cause: impl Into<FaultCause>,
    ) {
        self.failed = true;
        self.health
            .raise_with(code, pe.map(Pe::idx), detail, Some(cause.into()));
    }

    /// A local memory failure while handling an operation with `pe`: the job fails, blaming
    /// this PE (its memory failed).
    #[cold]
    pub(super) fn mem(&mut self, pe: Pe, e: MemError) {
        let detail = format!("PE {}: an operation with PE {pe}: {e}", self.me);
        self.raise_with(pshmem_abi::error::OP_FAILED, Some(self.me), detail, e);
    }

    /// Posting `what` to `pe` failed at the transport: the job fails, blaming `pe`.
    #[cold]
    pub(super) fn post_failed(&mut self, what: &str, pe: Pe, e: pshmem_transport::TransportError) {
        let detail = format!("PE {}: posting a {what} to PE {pe} failed: {e}", self.me);
        self.raise_with(pshmem_abi::error::OP_FAILED, Some(pe), detail, e);
    }
}

/// The proxy trace, when `PSHMEM_TRACE` asks for one: every method is a test of an `Option`
/// without one.
pub(super) struct Tracer(Option<Box<Trace>>);

impl Tracer {
    pub(super) fn new(trace: Option<Box<Trace>>) -> Self {
        Self(trace)
    }

    /// A trace is being taken.
    #[inline]
    pub(super) fn on(&self) -> bool {
        self.0.is_some()
    }

    /// With a trace: the clock, to time a [`Cost`] from.
    #[inline]
    pub(super) fn clock(&self) -> Option<Instant> {
        self.0.as_ref().map(|t| t.start())
    }

    /// With a trace: charges the time since `at` (from [`Tracer::clock`]) to `cost`.
    #[inline]
    pub(super) fn charge_since(&mut self, cost: Cost, at: Option<Instant>) {
        if let (Some(t), Some(at)) = (self.0.as_mut(), at) {
            t.charge(cost, at);
        }
    }

    /// With a trace: charges the phase since `at` to `cost` and starts the next phase.
    #[inline]
    pub(super) fn charge(&mut self, cost: Cost, at: Option<Instant>) -> Option<Instant> {
        self.charge_since(cost, at);
        self.0.as_mut()?.phase();
        self.clock()
    }

    /// A gate or hold waits for completions.
    #[inline]
    pub(super) fn gated(&mut self, kind: crate::trace::Waited) {
        if let Some(t) = &mut self.0 {
            t.gated(kind);
        }
    }

    #[inline]
    pub(super) fn arrive(&mut self, ring: RingId, seq: u64, d: &Desc) {
        if let Some(t) = &mut self.0 {
            t.arrive(ring.get(), seq, d);
        }
    }

    #[inline]
    pub(super) fn retract_arrival(&mut self, ring: RingId, seq: u64) {
        if let Some(t) = &mut self.0 {
            t.retract_arrival(ring.get(), seq);
        }
    }

    #[inline]
    pub(super) fn post(&mut self, ring: RingId, seq: u64, pe: Pe) {
        if let Some(t) = &mut self.0 {
            t.post(ring.get(), seq, pe.get());
        }
    }

    #[inline]
    pub(super) fn finish(&mut self, ring: RingId, seq: u64) {
        if let Some(t) = &mut self.0 {
            t.finish(ring.get(), seq);
        }
    }

    #[inline]
    pub(super) fn end_turn(&mut self, work: bool) {
        if let Some(t) = &mut self.0 {
            t.end_turn(work);
        }
    }

    /// A fence went by sequence, with `n` marks.
    pub(super) fn marked(&mut self, n: u64) {
        if let Some(t) = &mut self.0 {
            t.marked(n);
        }
    }

    /// A completion for nothing in flight was ignored.
    pub(super) fn duplicate(&mut self) {
        if let Some(t) = &mut self.0 {
            t.duplicate();
        }
    }

    /// Writes the trace of thread `thread` of PE `me`, if one was taken, with the bytes each
    /// rail of its transport carried.
    pub(super) fn write(&mut self, me: Pe, rail_bytes: Vec<u64>) {
        let Some(t) = &mut self.0 else { return };
        t.set_rail_bytes(rail_bytes);
        let thread = std::thread::current()
            .name()
            .unwrap_or("pshmem-proxy")
            .to_string();
        match t.write(me.get(), &thread) {
            Ok((trace, summary)) => tracing::info!(
                "PE {me}: proxy trace written to {} and {}",
                trace.display(),
                summary.display()
            ),
            Err(e) => tracing::warn!("PE {me}: writing the proxy trace failed: {e}"),
        }
    }
}
