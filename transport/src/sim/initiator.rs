//! The initiator side of a PE's simulated NIC: opening it (listener, NIC threads, capabilities),
//! checking operations against peers and registrations, and posting requests.

use std::{
    collections::{HashMap, VecDeque},
    io::Write,
    os::{
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixListener},
    },
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    thread,
};

use super::{
    Group, INSTANCE, Incoming, Kind, Msg, Pending, STRIPE_MIN, Shared, SimConfig, SimProfile,
    SimTransport, io_err,
    nic::{acceptor, engine},
};
use crate::{Caps, Job, LocalRef, Pe, PostError, RemoteRef, Result, TransportError, check_bounds};

impl SimTransport {
    /// Opens the simulated NIC of this PE of `job` (not yet connected: see
    /// [`crate::establish`]).
    pub fn open(job: Job, cfg: SimConfig) -> Result<Self> {
        Self::open_raw(job.rank, job.n_pes, cfg)
    }

    /// Opens with explicit rank and world size (threads in one process may each open one).
    pub fn open_raw(me: Pe, n: usize, cfg: SimConfig) -> Result<Self> {
        let unique = format!(
            "pshmem-sim-{}-{}-{me}-{}",
            std::process::id(),
            rand::random::<u32>(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let addr = SocketAddr::from_abstract_name(unique.as_bytes())
            .map_err(io_err("sim: socket name"))?;
        let listener = UnixListener::bind_addr(&addr).map_err(io_err("sim: listen"))?;
        let shared = Arc::new(Shared {
            me,
            regions: RwLock::new(Vec::new()),
            device: std::sync::OnceLock::new(),
            events: Mutex::new(VecDeque::new()),
            pending: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            dead: Mutex::new(vec![None; n]),
            shutdown: AtomicBool::new(false),
            duplicate: cfg.duplicate,
            // (rand's thread generator is a CSPRNG seeded from the OS.)
            token: rand::random(),
        });
        // One target engine per rail: each rail is a NIC with its own link.
        let rails = cfg.rails.max(1);
        let mut txs = Vec::with_capacity(rails);
        for rail in 0..rails {
            let (tx, rx) = mpsc::channel::<Incoming>();
            let shared = shared.clone();
            let cfg = cfg.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-nic-{me}.{rail}"))
                .spawn(move || engine(shared, cfg, rx))
                .map_err(io_err("sim: spawn"))?;
            txs.push(tx);
        }
        {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-accept-{me}"))
                .spawn(move || acceptor(shared, listener, txs))
                .map_err(io_err("sim: spawn"))?;
        }
        let caps = sim_caps(&cfg);
        Ok(Self {
            me,
            n,
            caps,
            gpu_memory: cfg.gpu_memory,
            shared,
            name: unique.into_bytes(),
            conns: (0..n).map(|_| Vec::new()).collect(),
            next_data_rail: rails - 1,
            rail_bytes: vec![0; rails],
            remotes: Vec::new(),
            next_id: 1,
            outstanding: Arc::new(AtomicU64::new(0)),
        })
    }

    pub(super) fn check_peer(&self, pe: Pe, op: &'static str) -> Result<(), PostError> {
        if pe.idx() >= self.n {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} out of range for {} PEs", self.n),
            }
            .into());
        }
        if let Some(r) = &self.shared.dead.lock().unwrap_or_else(|p| p.into_inner())[pe.idx()] {
            return Err(TransportError::PeerLost {
                pe,
                op,
                reason: r.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// The address of `len` bytes at `l`, and whether they are device memory.
    fn local(
        &self,
        l: LocalRef,
        len: usize,
        pe: Pe,
        op: &'static str,
    ) -> Result<(usize, bool), PostError> {
        let regions = self
            .shared
            .regions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let r = regions
            .get(l.mr.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("unknown local registration {:?}", l.mr),
            })?;
        check_bounds(pe, op, "local", l.offset as u64, len, r.len as u64)?;
        Ok((r.addr + l.offset, r.device))
    }

    fn remote(&self, r: RemoteRef, len: usize, pe: Pe, op: &'static str) -> Result<u32, PostError> {
        let &(owner, idx, rlen) =
            self.remotes
                .get(r.mr.0 as usize)
                .ok_or_else(|| TransportError::InvalidArgument {
                    op,
                    reason: format!("unknown remote registration {:?}", r.mr),
                })?;
        if owner != pe {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("remote registration of PE {owner} used for PE {pe}"),
            }
            .into());
        }
        check_bounds(pe, op, "remote", r.offset, len, rlen)?;
        Ok(idx)
    }

    /// The striped operations in flight.
    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Group>> {
        self.shared.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// For an operation of `parts` stripes (more than one), a group that reports it once every
    /// stripe answered, named by the id its first stripe will take; 0 for one part.
    fn open_group(&mut self, parts: usize) -> u64 {
        if parts < 2 {
            return 0;
        }
        let g = Group {
            remaining: parts as u32,
            failed: false,
        };
        self.groups().insert(self.next_id, g);
        self.next_id
    }

    /// Whether `parts` more operations would pass the outstanding limit (back-pressure).
    pub(super) fn full(&self, parts: usize) -> bool {
        self.outstanding.load(Ordering::Relaxed) + parts as u64 > self.caps.max_outstanding as u64
    }

    /// The rail that traffic to `pe` takes when nothing else decides (as libfabric's):
    /// `(me + pe) % rails`, spread by destination at the sender and by source at the target.
    pub(super) fn home_rail(&self, pe: Pe) -> usize {
        (self.me.idx() + pe.idx()) % self.rail_bytes.len()
    }

    /// Sends `msg` to `pe` on rail `rail`, to be answered into `p` (the caller checked
    /// [`Self::full`]).
    pub(super) fn post(
        &mut self,
        pe: Pe,
        rail: usize,
        mut msg: Msg,
        p: Pending,
    ) -> Result<(), PostError> {
        let Some(conn) = self.conns[pe.idx()].get_mut(rail) else {
            return Err(TransportError::InvalidArgument {
                op: p.op,
                reason: "not connected (call establish first)".into(),
            }
            .into());
        };
        let id = self.next_id;
        self.next_id += 1;
        msg.id = id;
        let bytes = msg.len;
        let wire = msg.encode();
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, p);
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = conn.write_all(&wire) {
            self.shared.lose(pe, &format!("connection lost: {e}"));
        }
        self.rail_bytes[rail] += bytes;
        Ok(())
    }

    /// A write (with remote CQ data when `kind` says so) or read of `len` bytes: striped over
    /// every rail from [`STRIPE_MIN`] without CQ data, else whole on one rail — the home rail,
    /// or for writes with CQ data the next in turn (each is self-describing at the target).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rma(
        &mut self,
        kind: Kind,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<(), PostError> {
        let op = match kind {
            Kind::Read => "read",
            Kind::WriteData => "write_data",
            _ => "write",
        };
        self.check_peer(pe, op)?;
        let (addr, device) = self.local(local, len, pe, op)?;
        let region = self.remote(remote, len, pe, op)?;
        let rails = self.rail_bytes.len();
        let parts = if kind != Kind::WriteData && len >= self.caps.stripe_min {
            rails
        } else {
            1
        };
        if self.full(parts) {
            return Err(PostError::Retry);
        }
        let home = if kind == Kind::WriteData {
            self.next_data_rail = (self.next_data_rail + 1) % rails;
            self.next_data_rail
        } else {
            self.home_rail(pe)
        };
        let group = self.open_group(parts);
        let chunk = len.div_ceil(parts);
        for k in 0..parts {
            let (off, this) = (k * chunk, chunk.min(len - k * chunk));
            let payload = if kind == Kind::Read {
                Vec::new()
            } else {
                // addr..addr+len lies in a registration the caller keeps valid (mr_reg), and
                // off+this <= len.
                self.shared
                    .load((addr + off, this, device))
                    .map_err(|message| TransportError::Io { op, message })?
            };
            let msg = Msg {
                kind: kind as u8,
                region,
                offset: remote.offset + off as u64,
                len: this as u64,
                data,
                payload,
                ..Msg::default()
            };
            let p = Pending {
                ctx,
                pe,
                op,
                read_into: (kind == Kind::Read).then_some((addr + off, this, device)),
                group,
            };
            if let Err(e) = self.post(pe, (home + k) % rails, msg, p) {
                // Only before connecting, so on the first stripe: nothing else went.
                self.groups().remove(&group);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// What the simulated fabric offers under `cfg`.
fn sim_caps(cfg: &SimConfig) -> Caps {
    let rails = cfg.rails.max(1);
    let efa = (cfg.profile == SimProfile::Efa).then_some(());
    Caps {
        fabric: format!(
            "simulated fabric ({}{})",
            if cfg.reorder { "unordered" } else { "ordered" },
            if efa.is_some() { ", efa profile" } else { "" }
        ),
        name: format!(
            "simulated fabric ({}{}, delay ≤ {:?}, {}{})",
            if cfg.reorder { "unordered" } else { "ordered" },
            if efa.is_some() { ", efa profile" } else { "" },
            cfg.max_delay,
            if rails > 1 {
                format!("{rails} rails of ")
            } else {
                String::new()
            },
            if cfg.bandwidth > 0.0 {
                format!("{:.1} GB/s", cfg.bandwidth / 1e9)
            } else {
                "unlimited".into()
            }
        ),
        ordered: !cfg.reorder,
        delivery_complete: true,
        gpu_memory: false,
        dmabuf: false,
        cq_data_size: efa.map_or(8, |_| 4),
        inject_size: efa.map_or(64, |_| 32),
        max_msg_size: super::MAX_PAYLOAD as usize,
        max_send_size: efa.map_or(4096, |_| 8192),
        max_outstanding: 4096,
        manual_progress: false,
        rails,
        stripe_min: if rails > 1 { STRIPE_MIN } else { usize::MAX },
    }
}
