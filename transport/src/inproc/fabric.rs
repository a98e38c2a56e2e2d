//! The fabric's clock: each tick lands the flights that are due (in seeded random order when
//! reordering), moves their bytes and schedules their completions.

use std::collections::VecDeque;

use rand::{Rng, seq::SliceRandom};

use super::{Fabric, Flight, Kind, Payload, Pending};
use crate::{Pe, Result, TransportError, check_bounds};

impl Fabric {
    pub(super) fn delay(&mut self, max: u32) -> u32 {
        if max == 0 {
            0
        } else {
            self.rng.random_range(0..=max)
        }
    }

    /// One tick: lands what is due, in random or posting order.
    pub(super) fn tick(&mut self) {
        let mut ready = Vec::new();
        let mut waiting = VecDeque::new();
        while let Some(mut f) = self.flights.pop_front() {
            if self.held[f.to.idx()] {
                waiting.push_back(f);
            } else if f.ticks > 0 {
                f.ticks -= 1;
                waiting.push_back(f);
            } else {
                ready.push(f);
            }
        }
        self.flights = waiting;
        if self.cfg.reorder {
            ready.shuffle(&mut self.rng);
        }
        for f in ready {
            self.land(f);
        }
    }

    /// Applies a flight at its target and schedules its completion at the initiator.
    fn land(&mut self, f: Flight) {
        self.in_air[f.from.idx()] -= 1;
        let outcome = if f.fail {
            Err(TransportError::Completion {
                pe: f.to,
                rail: 0,
                op: "in-process flight",
                code: 5,
                prov_errno: 0,
                text: "failure injected by the test".into(),
            })
        } else if self.dead[f.from.idx()][f.to.idx()] {
            Err(lost(f.to, "in-process flight"))
        } else {
            self.apply(&f)
        };
        let d = self.delay(self.cfg.completion_delay);
        let ev = match outcome {
            Ok(()) => Pending::Done(f.ctx),
            Err(e) => Pending::Failed(f.ctx, e),
        };
        self.events[f.from.idx()].push((d, ev));
    }

    /// Moves a landing flight's bytes.
    fn apply(&mut self, f: &Flight) -> Result<()> {
        match &f.kind {
            Kind::Write {
                payload,
                dst: (mr, off),
                len,
                data,
            } => {
                let at = self.target(f.to, *mr, *off, *len, "write")?;
                let src = match payload {
                    Payload::Bytes(b) => b.as_ptr(),
                    Payload::Source { ptr } => *ptr as *const u8,
                };
                // SAFETY: the target range is inside a registration (checked), valid while
                // registered (mr_reg's contract); the source is the initiator's registered
                // memory, which it keeps unchanged until completion (write's contract), or our
                // own copy.
                unsafe { std::ptr::copy(src, at as *mut u8, *len) };
                if let Some(d) = data {
                    self.events[f.to.idx()].push((0, Pending::RemoteWrite(*d)));
                }
            }
            Kind::Read {
                dst,
                src: (mr, off),
                len,
            } => {
                let at = self.target(f.to, *mr, *off, *len, "read")?;
                // SAFETY: as above, the other way round (read's contract keeps the
                // destination untouched until completion).
                unsafe { std::ptr::copy(at as *const u8, *dst as *mut u8, *len) };
            }
            Kind::Send(msg) => self.events[f.to.idx()].push((0, Pending::Recv(msg.clone()))),
        }
        Ok(())
    }

    /// The address of `off..off + len` in region `mr` of `pe`, bounds checked.
    fn target(&self, pe: Pe, mr: u32, off: u64, len: usize, op: &'static str) -> Result<usize> {
        let r = self.regions[pe.idx()].get(mr as usize).ok_or_else(|| {
            TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} has no region {mr}"),
            }
        })?;
        check_bounds(pe, op, "remote", off, len, r.len as u64)?;
        Ok(r.ptr + off as usize)
    }
}

pub(super) fn lost(pe: Pe, op: &'static str) -> TransportError {
    TransportError::PeerLost {
        pe,
        op,
        reason: "declared dead".into(),
    }
}
