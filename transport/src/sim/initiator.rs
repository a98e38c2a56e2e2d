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
    INSTANCE, Incoming, Kind, Msg, Pending, Shared, SimConfig, SimProfile, SimTransport, io_err,
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
            events: Mutex::new(VecDeque::new()),
            pending: Mutex::new(HashMap::new()),
            dead: Mutex::new(vec![None; n]),
            shutdown: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel::<Incoming>();
        {
            let shared = shared.clone();
            let cfg = cfg.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-nic-{me}"))
                .spawn(move || engine(shared, cfg, rx))
                .map_err(io_err("sim: spawn"))?;
        }
        {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("pshmem-sim-accept-{me}"))
                .spawn(move || acceptor(shared, listener, tx))
                .map_err(io_err("sim: spawn"))?;
        }
        let efa = (cfg.profile == SimProfile::Efa).then_some(());
        let caps = Caps {
            fabric: format!(
                "simulated fabric ({}{})",
                if cfg.reorder { "unordered" } else { "ordered" },
                if efa.is_some() { ", efa profile" } else { "" }
            ),
            name: format!(
                "simulated fabric ({}{}, delay ≤ {:?}, {})",
                if cfg.reorder { "unordered" } else { "ordered" },
                if efa.is_some() { ", efa profile" } else { "" },
                cfg.max_delay,
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
            max_msg_size: 1 << 34,
            max_send_size: efa.map_or(4096, |_| 8192),
            max_outstanding: 4096,
            manual_progress: false,
            rails: 1,
            stripe_min: usize::MAX,
        };
        Ok(Self {
            me,
            n,
            caps,
            shared,
            name: unique.into_bytes(),
            conns: (0..n).map(|_| None).collect(),
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

    fn local(&self, l: LocalRef, len: usize, pe: Pe, op: &'static str) -> Result<usize, PostError> {
        let regions = self
            .shared
            .regions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let (addr, rlen) = regions
            .get(l.mr.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("unknown local registration {:?}", l.mr),
            })?;
        check_bounds(pe, op, "local", l.offset as u64, len, rlen as u64)?;
        Ok(addr + l.offset)
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

    pub(super) fn post(&mut self, pe: Pe, mut msg: Msg, p: Pending) -> Result<(), PostError> {
        if self.outstanding.load(Ordering::Relaxed) >= self.caps.max_outstanding as u64 {
            return Err(PostError::Retry);
        }
        let id = self.next_id;
        self.next_id += 1;
        msg.id = id;
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, p);
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        let conn =
            self.conns[pe.idx()]
                .as_mut()
                .ok_or_else(|| TransportError::InvalidArgument {
                    op: p.op,
                    reason: "not connected (call establish first)".into(),
                })?;
        if let Err(e) = conn.write_all(&msg.encode()) {
            self.shared.lose(pe, &format!("connection lost: {e}"));
        }
        Ok(())
    }

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
        let addr = self.local(local, len, pe, op)?;
        let region = self.remote(remote, len, pe, op)?;
        let payload = if kind == Kind::Read {
            Vec::new()
        } else {
            // SAFETY: addr..addr+len lies in a registration the caller keeps valid (mr_reg).
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
        };
        let msg = Msg {
            kind: kind as u8,
            region,
            offset: remote.offset,
            len: len as u64,
            data,
            payload,
            ..Msg::default()
        };
        let read_into = (kind == Kind::Read).then_some((addr, len));
        self.post(
            pe,
            msg,
            Pending {
                ctx,
                pe,
                op,
                read_into,
            },
        )
    }
}
