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

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

use rand::{Rng, SeedableRng, rngs::SmallRng, seq::SliceRandom};

use crate::{
    Caps, Event, LocalMem, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Result, Transport,
    TransportError, check_bounds,
};

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

impl Fabric {
    fn delay(&mut self, max: u32) -> u32 {
        if max == 0 {
            0
        } else {
            self.rng.random_range(0..=max)
        }
    }

    /// One tick: lands what is due, in random or posting order.
    fn tick(&mut self) {
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

fn lost(pe: Pe, op: &'static str) -> TransportError {
    TransportError::PeerLost {
        pe,
        op,
        reason: "declared dead".into(),
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

impl InProcTransport {
    fn local(&self, f: &Fabric, l: LocalRef, len: usize, op: &'static str) -> Result<usize> {
        let r = f.regions[self.me.idx()]
            .get(l.mr.0 as usize)
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("no local region {}", l.mr.0),
            })?;
        check_bounds(self.me, op, "local", l.offset as u64, len, r.len as u64)?;
        Ok(r.ptr + l.offset)
    }

    fn post(&mut self, pe: Pe, kind: Kind, ctx: u64, op: &'static str) -> Result<(), PostError> {
        let mut f = self.fabric.lock();
        if pe.idx() >= self.fabric.n {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} of {}", self.fabric.n),
            }
            .into());
        }
        if f.dead[self.me.idx()][pe.idx()] {
            return Err(lost(pe, op).into());
        }
        if f.in_air[self.me.idx()] >= f.cfg.max_outstanding {
            return Err(PostError::Retry);
        }
        let fail = match f.fail_next.iter().position(|&p| p == (self.me, pe)) {
            Some(i) => {
                f.fail_next.remove(i);
                true
            }
            None => false,
        };
        let max = f.cfg.land_delay;
        let ticks = f.delay(max);
        f.in_air[self.me.idx()] += 1;
        f.flights.push_back(Flight {
            from: self.me,
            to: pe,
            kind,
            ctx,
            ticks,
            fail,
        });
        Ok(())
    }

    fn remote(&self, r: RemoteRef, pe: Pe, op: &'static str) -> Result<(u32, u64), PostError> {
        match self.remotes.get(r.mr.0 as usize) {
            Some(&(owner, mr)) if owner == pe => Ok((mr, r.offset)),
            _ => Err(TransportError::InvalidArgument {
                op,
                reason: format!("remote registration {} is not PE {pe}'s", r.mr.0),
            }
            .into()),
        }
    }

    /// A write's payload: copied now (inject size) or read when it lands.
    fn payload(&self, l: LocalRef, len: usize, op: &'static str) -> Result<Payload, PostError> {
        let f = self.fabric.lock();
        let ptr = self.local(&f, l, len, op)?;
        Ok(if len <= self.caps.inject_size {
            // SAFETY: a registered local range (checked), valid for `len` bytes.
            Payload::Bytes(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec())
        } else {
            Payload::Source { ptr }
        })
    }
}

impl Transport for InProcTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }
    fn my_pe(&self) -> Pe {
        self.me
    }
    fn n_pes(&self) -> usize {
        self.fabric.n
    }
    fn address(&self) -> Vec<u8> {
        self.me.get().to_le_bytes().to_vec()
    }
    fn connect(&mut self, _addresses: &[Vec<u8>]) -> Result<()> {
        Ok(())
    }
    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId> {
        let mut f = self.fabric.lock();
        let regions = &mut f.regions[self.me.idx()];
        regions.push(Region {
            ptr: mem.ptr as usize,
            len: mem.len,
        });
        Ok(MrId(regions.len() as u32 - 1))
    }
    fn mr_dereg(&mut self, mr: MrId) -> Result<()> {
        let mut f = self.fabric.lock();
        if let Some(r) = f.regions[self.me.idx()].get_mut(mr.0 as usize) {
            r.len = 0;
        }
        Ok(())
    }
    fn mr_export(&self, mr: MrId) -> Vec<u8> {
        mr.0.to_le_bytes().to_vec()
    }
    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId> {
        let id = blob.try_into().map(u32::from_le_bytes).map_err(|_| {
            TransportError::InvalidArgument {
                op: "mr_import",
                reason: format!("a {}-byte registration blob", blob.len()),
            }
        })?;
        self.remotes.push((pe, id));
        Ok(RemoteMrId(self.remotes.len() as u32 - 1))
    }
    unsafe fn write(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded (no remote CQ data).
        unsafe { self.write_inner(pe, local, remote, len, None, ctx) }
    }
    unsafe fn write_data(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.caps.check_cq_data(data)?;
        // SAFETY: forwarded.
        unsafe { self.write_inner(pe, local, remote, len, Some(data), ctx) }
    }
    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        let dst = self.local(&self.fabric.lock(), local, len, "read")?;
        let src = self.remote(remote, pe, "read")?;
        self.post(pe, Kind::Read { dst, src, len }, ctx, "read")
    }
    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError> {
        if msg.len() > self.caps.max_send_size {
            return Err(TransportError::InvalidArgument {
                op: "send",
                reason: format!("{} bytes > {}", msg.len(), self.caps.max_send_size),
            }
            .into());
        }
        self.post(pe, Kind::Send(msg.to_vec()), ctx, "send")
    }
    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let due = {
            let mut f = self.fabric.lock();
            f.tick();
            let mut due = Vec::new();
            f.events[self.me.idx()].retain_mut(|(ticks, ev)| {
                if *ticks > 0 {
                    *ticks -= 1;
                    return true;
                }
                due.push(std::mem::replace(ev, Pending::Done(0)));
                false
            });
            due
        };
        let n = due.len();
        for ev in due {
            match ev {
                Pending::Done(ctx) => on_event(Event::Done { ctx }),
                Pending::Failed(ctx, error) => on_event(Event::Failed { ctx, error }),
                Pending::RemoteWrite(data) => on_event(Event::RemoteWrite { data }),
                Pending::Recv(msg) => on_event(Event::Recv { data: &msg }),
            }
        }
        Ok(n)
    }
    fn fail_peer(&mut self, pe: Pe, _reason: &str) {
        let mut f = self.fabric.lock();
        f.dead[self.me.idx()][pe.idx()] = true;
    }
}

impl InProcTransport {
    /// # Safety
    /// As [`Transport::write`].
    unsafe fn write_inner(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        let payload = self.payload(local, len, "write")?;
        let dst = self.remote(remote, pe, "write")?;
        let kind = Kind::Write {
            payload,
            dst,
            len,
            data,
        };
        self.post(pe, kind, ctx, "write")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cfg: InProcConfig) -> (InProcFabric, Vec<InProcTransport>) {
        let fab = InProcFabric::new(2, cfg);
        let ts = Pe::all(2).map(|pe| fab.endpoint(pe)).collect();
        (fab, ts)
    }

    fn drain(ts: &mut [InProcTransport], fab: &InProcFabric) -> Vec<(usize, u64)> {
        let mut seen = Vec::new();
        for _ in 0..100 {
            for (pe, t) in ts.iter_mut().enumerate() {
                t.poll(&mut |e| {
                    if let Event::Done { ctx } = e {
                        seen.push((pe, ctx));
                    }
                })
                .unwrap();
            }
            if fab.pending() == 0 {
                break;
            }
        }
        seen
    }

    #[test]
    fn writes_land_and_complete_with_their_contexts() {
        let (fab, mut ts) = pair(InProcConfig::default());
        let mut a = vec![7u8; 256];
        let mut b = vec![0u8; 256];
        // SAFETY: both buffers outlive the transports' use of them (drained below).
        let (ma, mb) = unsafe {
            (
                ts[0].mr_reg(LocalMem {
                    ptr: a.as_mut_ptr(),
                    len: 256,
                    kind: crate::MemKind::Host,
                }),
                ts[1].mr_reg(LocalMem {
                    ptr: b.as_mut_ptr(),
                    len: 256,
                    kind: crate::MemKind::Host,
                }),
            )
        };
        let blob = ts[1].mr_export(mb.unwrap());
        let rb = ts[0].mr_import(Pe::new(1), &blob).unwrap();
        for i in 0..4u64 {
            let l = LocalRef {
                mr: ma.as_ref().copied().unwrap(),
                offset: (i * 64) as usize,
            };
            let r = RemoteRef {
                mr: rb,
                offset: i * 64,
            };
            // SAFETY: `a` is registered and unchanged until completion.
            unsafe { ts[0].write(Pe::new(1), l, r, 64, 100 + i) }.unwrap();
        }
        let mut seen = drain(&mut ts, &fab);
        seen.sort_unstable();
        assert_eq!(seen, (0..4).map(|i| (0, 100 + i)).collect::<Vec<_>>());
        assert_eq!(b, a);
    }

    #[test]
    fn the_same_seed_gives_the_same_order() {
        let order = |seed| {
            let (fab, mut ts) = pair(InProcConfig {
                seed,
                ..InProcConfig::default()
            });
            for i in 0..16 {
                ts[0].send(Pe::new(1), &[i], u64::from(i)).unwrap();
            }
            drain(&mut ts, &fab)
        };
        assert_eq!(order(7), order(7));
        assert_ne!(order(7), order(8), "another seed, another order");
    }

    #[test]
    fn dead_peers_and_injected_failures_fail() {
        let (fab, mut ts) = pair(InProcConfig::default());
        fab.fail_next(Pe::new(0), Pe::new(1));
        ts[0].send(Pe::new(1), b"x", 1).unwrap();
        let mut failed = Vec::new();
        for _ in 0..20 {
            ts[0]
                .poll(&mut |e| {
                    if let Event::Failed { ctx, error } = e {
                        failed.push((ctx, error.pe()));
                    }
                })
                .unwrap();
        }
        assert_eq!(failed, vec![(1, Some(Pe::new(1)))]);
        ts[0].fail_peer(Pe::new(1), "test");
        assert!(matches!(
            ts[0].send(Pe::new(1), b"x", 2),
            Err(PostError::Failed(_))
        ));
    }

    #[test]
    fn back_pressure_past_the_outstanding_limit() {
        let (_fab, mut ts) = pair(InProcConfig {
            max_outstanding: 2,
            ..InProcConfig::default()
        });
        ts[0].send(Pe::new(1), b"a", 1).unwrap();
        ts[0].send(Pe::new(1), b"b", 2).unwrap();
        assert!(matches!(
            ts[0].send(Pe::new(1), b"c", 3),
            Err(PostError::Retry)
        ));
    }
}
