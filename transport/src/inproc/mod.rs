//! A deterministic in-process fabric: every PE's transport in one process, stepped by its caller
//! (a unit test driving proxy engines turn by turn), with no sockets and no threads.
//!
//! A post becomes a *flight*. Every [`Transport::poll`] of any endpoint is one tick of the whole
//! fabric: flights whose delay ran out land — in an order drawn from a seeded RNG when
//! `reorder` is set — writing the target's registered memory (a write's source is read when it
//! lands, as a NIC's DMA would, unless it fit the inject size and was copied at post) and
//! delivering remote CQ data and messages to the target; each landing's completion reaches the
//! initiator a further random number of ticks later. The same seed and the same calls give the
//! same history, so a failure is reproducible from its seed.
//!
//! Faults on demand: [`InProcFabric::hold`] keeps everything to a PE on the wire (a slow link),
//! [`InProcFabric::fail_next`] makes the next flight between two PEs complete with an error,
//! and [`Transport::fail_peer`] fails what is in flight to a peer and every later post to it.
//!
//! Beside the types and the shared handle here: `fabric` (ticks, landings, faults) and
//! `endpoint` (one PE's transport over it).
//!
//! [`Transport::poll`]: crate::Transport::poll
//! [`Transport::fail_peer`]: crate::Transport::fail_peer

mod endpoint;
mod fabric;

#[cfg(test)]
mod tests;

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

use rand::{SeedableRng, rngs::SmallRng};

use crate::{Caps, Pe, TransportError};

/// How the in-process fabric behaves.
#[derive(Debug, Clone)]
pub struct InProcConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Land ready flights in a random order (else in posting order).
    pub reorder: bool,
    /// A flight lands after 0..=`land_delay` ticks (drawn per flight).
    pub land_delay: u32,
    /// A completion reaches the initiator 0..=`completion_delay` ticks after its landing.
    pub completion_delay: u32,
    /// Bytes of remote CQ data a write carries (0: none offered; 4 as on EFA; 8).
    pub cq_data_size: usize,
    /// Payloads up to this size are copied at post.
    pub inject_size: usize,
    /// Largest message.
    pub max_send_size: usize,
    /// Flights one endpoint may have in the air before posts return `Retry`.
    pub max_outstanding: usize,
}

impl Default for InProcConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            reorder: true,
            land_delay: 3,
            completion_delay: 3,
            cq_data_size: 8,
            inject_size: 64,
            max_send_size: 4096,
            max_outstanding: 64,
        }
    }
}

impl InProcConfig {
    /// Whether delivery is ordered per peer (no reordering, no landing delays).
    pub fn ordered(&self) -> bool {
        !self.reorder && self.land_delay == 0
    }
}

/// A registered region: its address and length in this process.
#[derive(Debug, Clone, Copy)]
struct Region {
    ptr: usize,
    len: usize,
}

#[derive(Debug)]
enum Payload {
    /// Copied at post (inject size) or a message.
    Bytes(Vec<u8>),
    /// Read from the initiator's registered memory when the flight lands.
    Source { ptr: usize },
}

#[derive(Debug)]
enum Kind {
    Write {
        payload: Payload,
        /// Target region and offset.
        dst: (u32, u64),
        len: usize,
        data: Option<u64>,
    },
    Read {
        /// Local destination address.
        dst: usize,
        /// Target region and offset.
        src: (u32, u64),
        len: usize,
    },
    Send(Vec<u8>),
}

#[derive(Debug)]
struct Flight {
    from: Pe,
    to: Pe,
    kind: Kind,
    ctx: u64,
    ticks: u32,
    fail: bool,
}

/// An event waiting for its endpoint's poll.
#[derive(Debug)]
enum Pending {
    Done(u64),
    Failed(u64, TransportError),
    RemoteWrite(u64),
    Recv(Vec<u8>),
}

#[derive(Debug)]
struct Fabric {
    cfg: InProcConfig,
    rng: SmallRng,
    regions: Vec<Vec<Region>>,
    flights: VecDeque<Flight>,
    /// Per PE: events and the ticks before each is reported.
    events: Vec<Vec<(u32, Pending)>>,
    /// Flights in the air per initiator.
    in_air: Vec<usize>,
    held: Vec<bool>,
    /// (from, to) pairs whose next flight fails.
    fail_next: Vec<(Pe, Pe)>,
    /// Per PE: peers it declared dead.
    dead: Vec<Vec<bool>>,
}

/// The shared fabric; [`InProcFabric::endpoint`] gives each PE its transport.
#[derive(Debug, Clone)]
pub struct InProcFabric {
    fabric: Arc<Mutex<Fabric>>,
    n: usize,
}

impl InProcFabric {
    /// A fabric of `n` PEs.
    pub fn new(n: usize, cfg: InProcConfig) -> Self {
        let fabric = Fabric {
            rng: SmallRng::seed_from_u64(cfg.seed),
            cfg,
            regions: vec![Vec::new(); n],
            flights: VecDeque::new(),
            events: (0..n).map(|_| Vec::new()).collect(),
            in_air: vec![0; n],
            held: vec![false; n],
            fail_next: Vec::new(),
            dead: vec![vec![false; n]; n],
        };
        Self {
            fabric: Arc::new(Mutex::new(fabric)),
            n,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Fabric> {
        self.fabric.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// PE `pe`'s transport (one per PE).
    pub fn endpoint(&self, pe: Pe) -> InProcTransport {
        let cfg = self.lock().cfg.clone();
        let caps = Caps {
            name: format!("in-process fabric (seed {})", cfg.seed),
            fabric: "in-process fabric".into(),
            ordered: cfg.ordered(),
            delivery_complete: true,
            gpu_memory: false,
            dmabuf: false,
            cq_data_size: cfg.cq_data_size,
            inject_size: cfg.inject_size,
            max_msg_size: usize::MAX,
            max_send_size: cfg.max_send_size,
            max_outstanding: cfg.max_outstanding,
            manual_progress: true,
            rails: 1,
            stripe_min: usize::MAX,
        };
        InProcTransport {
            fabric: self.clone(),
            me: pe,
            caps,
            remotes: Vec::new(),
        }
    }

    /// Keeps every flight to `pe` on the wire while `held` (a stalled link).
    pub fn hold(&self, pe: Pe, held: bool) {
        self.lock().held[pe.idx()] = held;
    }

    /// The next flight from `from` to `to` completes with an error instead of landing.
    pub fn fail_next(&self, from: Pe, to: Pe) {
        self.lock().fail_next.push((from, to));
    }

    /// Flights on the wire and events not yet reported.
    pub fn pending(&self) -> usize {
        let f = self.lock();
        f.flights.len() + f.events.iter().map(Vec::len).sum::<usize>()
    }
}

/// One PE's endpoint on an [`InProcFabric`].
#[derive(Debug)]
pub struct InProcTransport {
    fabric: InProcFabric,
    me: Pe,
    caps: Caps,
    /// Imported registrations: (PE, region).
    remotes: Vec<(Pe, u32)>,
}
