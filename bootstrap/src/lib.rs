//! # pshmem-bootstrap
//!
//! Owns how the processes of a proxyshmem job find each other and stay watched:
//!
//! - **Configuration** from our variables (`PSHMEM_RANK`, `PSHMEM_WORLD_SIZE`, …), torchrun's
//!   (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, …), a launcher's (mpirun, mpiexec, srun:
//!   [`launcher`]) or a [`UniqueId`] distributed by the application — or over the program's
//!   own MPI ([`Bootstrap::init_mpi`]). A launcher's job without a named address meets by
//!   itself (`rendezvous`): never as several one-rank jobs.
//! - **The rendezvous**: rank 0 listens, the others connect with retry and backoff, and every
//!   fault (missing, duplicate or out-of-range rank, world-size mismatch, wrong secret or
//!   version, garbage on the port) becomes a typed [`BootstrapError`] instead of a hang.
//! - **Byte collectives** used by the other crates to exchange endpoint names, memory keys and
//!   IPC handles: [`Bootstrap::allgather`], [`Bootstrap::alltoall`], [`Bootstrap::broadcast`],
//!   [`Bootstrap::barrier`].
//! - **Failure detection** for the whole job: connections stay open after init, with heartbeats;
//!   a dead rank fails every rank's pending or next call (and runs [`Bootstrap::on_failure`]
//!   hooks, which the runtime uses to raise its error flag) within the peer timeout.
//!
//! The I/O runs on a small private tokio runtime; the public API is blocking, with every wait
//! bounded. Collectives are matched by order, like MPI's: every rank must call the same
//! collectives in the same order (a mismatch is detected and reported).

#![forbid(unsafe_code)]

mod collective;
pub mod config;
pub mod error;
pub mod frame;
pub mod launcher;
mod net;
mod peer_uid;
mod port;
mod rendezvous;
mod uid;

use std::{
    net::TcpListener as StdListener,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;

pub use config::BootstrapConfig;
pub use error::{BootstrapError, Result};
pub use net::PeerInfo;
pub use port::free_loopback_port;
pub use pshmem_mpi_sys as mpi;
pub use uid::{UNIQUE_ID_LEN, UniqueId};

use frame::{CollOp, Kind, Reader, Writer};
use net::{Failure, Shared};

/// A joined bootstrap network: this rank's view of the job.
pub struct Bootstrap {
    cfg: BootstrapConfig,
    shared: Arc<Shared>,
    world: Vec<PeerInfo>,
    local_rank: usize,
    local_size: usize,
    /// Next collective sequence number; the lock also keeps one collective at a time.
    seq: Mutex<u64>,
    rt: Option<tokio::runtime::Runtime>,
}

/// Reports, from outside the bootstrap, that a rank died (see [`Bootstrap::death_reporter`]).
/// Cheap to clone; harmless after the job failed or finished (it then does nothing).
#[derive(Clone)]
pub struct DeathReporter(Arc<Shared>);

impl std::fmt::Debug for DeathReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DeathReporter").field(&self.0.me).finish()
    }
}

impl DeathReporter {
    /// This rank lost its connection to rank `dead` (`detail` says how): the job fails as if
    /// the bootstrap had seen `dead` die, on this rank at once and, through rank 0, on every
    /// other, whose errors then name `dead` rather than this rank when it leaves.
    pub fn peer_lost(&self, dead: usize, detail: &str) {
        self.0.report_dead(dead, detail);
    }
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.cfg.rank)
            .field("world_size", &self.cfg.world_size)
            .field("local_rank", &self.local_rank)
            .field("local_size", &self.local_size)
            .finish_non_exhaustive()
    }
}

impl Bootstrap {
    /// Joins the job described by the environment (see [`BootstrapConfig::from_env`]); a job
    /// a launcher started without naming rank 0's address meets over the program's MPI, a file
    /// on this host or Slurm's host list (`rendezvous`).
    pub fn from_env() -> Result<Self> {
        rendezvous::from_env()
    }

    /// Joins with an explicit configuration.
    pub fn init(cfg: BootstrapConfig) -> Result<Self> {
        Self::init_with_listener(cfg, None)
    }

    /// Joins through a unique id created by rank 0 with [`UniqueId::new`] and distributed by the
    /// application; timeouts come from the environment table.
    pub fn init_unique_id(id: &UniqueId, rank: usize, world_size: usize) -> Result<Self> {
        let cfg = BootstrapConfig::with_rank(rank, world_size, id.addr.to_string(), id.secret)?;
        let listener = if rank == 0 { id.take_listener() } else { None };
        Self::init_with_listener(cfg, listener)
    }

    /// [`Bootstrap::init_unique_id`] keeping the launcher's local rank and size.
    pub(crate) fn init_unique_id_at(id: &UniqueId, ranks: &config::Ranks) -> Result<Self> {
        let mut cfg =
            BootstrapConfig::with_rank(ranks.rank, ranks.world, id.addr.to_string(), id.secret)?;
        (cfg.local_rank, cfg.local_size) = (ranks.local_rank, ranks.local_size);
        let listener = if ranks.rank == 0 {
            id.take_listener()
        } else {
            None
        };
        Self::init_with_listener(cfg, listener)
    }

    fn init_with_listener(cfg: BootstrapConfig, listener: Option<StdListener>) -> Result<Self> {
        let shared = Arc::new(Shared::new(cfg.rank, cfg.world_size, cfg.secret));
        if cfg.world_size == 1 {
            let world = vec![PeerInfo {
                rank: 0,
                host_id: cfg.host_id.clone(),
                hostname: config::hostname(),
                pid: std::process::id(),
            }];
            return Ok(Self::assemble(cfg, shared, world, None));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("pshmem-bootstrap-{}", cfg.rank))
            .enable_all()
            .build()
            .map_err(|e| BootstrapError::Io {
                rank: cfg.rank,
                op: "starting the bootstrap runtime".into(),
                message: e.to_string(),
            })?;
        let world = rt.block_on(async {
            if cfg.rank == 0 {
                let listener = match listener {
                    Some(l) => l,
                    None => StdListener::bind(&cfg.root_addr)
                        .map_err(|e| uid::bind_error(&cfg.root_addr, e))?,
                };
                listener
                    .set_nonblocking(true)
                    .map_err(|e| uid::bind_error(&cfg.root_addr, e))?;
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|e| uid::bind_error(&cfg.root_addr, e))?;
                net::root_join(&shared, &cfg, listener).await
            } else {
                net::peer_join(&shared, &cfg).await
            }
        })?;
        Ok(Self::assemble(cfg, shared, world, Some(rt)))
    }

    fn assemble(
        cfg: BootstrapConfig,
        shared: Arc<Shared>,
        world: Vec<PeerInfo>,
        rt: Option<tokio::runtime::Runtime>,
    ) -> Self {
        let me = &world[cfg.rank].host_id;
        let local: Vec<usize> = world
            .iter()
            .filter(|p| &p.host_id == me)
            .map(|p| p.rank)
            .collect();
        let computed_rank = local.iter().position(|r| *r == cfg.rank).unwrap_or(0);
        let local_rank = cfg.local_rank.unwrap_or(computed_rank);
        let local_size = cfg.local_size.unwrap_or(local.len());
        if (local_rank, local_size) != (computed_rank, local.len()) {
            tracing::warn!(
                "rank {}: launcher says local rank {local_rank} of {local_size}, host ids say {computed_rank} of {}",
                cfg.rank,
                local.len()
            );
        }
        Self {
            cfg,
            shared,
            world,
            local_rank,
            local_size,
            seq: Mutex::new(0),
            rt,
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.cfg.world_size
    }

    /// Rank among the ranks of this host.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Number of ranks on this host.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// The world table (host identity and pid of every rank).
    pub fn peers(&self) -> &[PeerInfo] {
        &self.world
    }

    /// Whether `rank` runs on this host.
    pub fn same_host(&self, rank: usize) -> bool {
        self.world
            .get(rank)
            .is_some_and(|p| p.host_id == self.world[self.cfg.rank].host_id)
    }

    /// The configuration in use.
    pub fn config(&self) -> &BootstrapConfig {
        &self.cfg
    }

    /// `Ok` while every rank is alive and the job has not been aborted.
    pub fn health(&self) -> Result<()> {
        match &self.shared.lock().failure {
            Some(f) => Err(f.to_error(self.cfg.rank, "health check")),
            None => Ok(()),
        }
    }

    /// Registers a callback run once, from a background thread, when the job fails (a rank died
    /// or the job was aborted); immediately if it already has. Keep it short and non-blocking.
    pub fn on_failure(&self, hook: impl Fn(&BootstrapError) + Send + Sync + 'static) {
        let mut st = self.shared.lock();
        match &st.failure {
            Some(f) => {
                let e = f.to_error(self.cfg.rank, "job");
                drop(st);
                hook(&e);
            }
            None => st.hooks.push(Box::new(hook)),
        }
    }

    /// A handle through which the data path reports a rank it found dead (its connection to
    /// that rank was lost) to the whole job; see [`DeathReporter::peer_lost`].
    pub fn death_reporter(&self) -> DeathReporter {
        DeathReporter(self.shared.clone())
    }

    /// Gathers every rank's bytes (sizes may differ) on every rank, in rank order.
    pub fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.world_size();
        let out = self.collective(CollOp::Allgather, 0, data.to_vec(), |contribs| {
            let mut w = Writer::default();
            frame::encode_blocks(&mut w, contribs);
            let all = Bytes::from(w.0);
            Ok(vec![all; n])
        })?;
        self.decode(&out, "allgather", |r| frame::decode_blocks(r, n))
    }

    /// Sends `blocks[j]` to rank `j` and returns what every rank sent to this one, in rank order
    /// (`alltoallv`: sizes may differ).
    pub fn alltoall<B: AsRef<[u8]>>(&self, blocks: &[B]) -> Result<Vec<Vec<u8>>> {
        let n = self.world_size();
        if blocks.len() != n {
            return Err(self.invalid("alltoall", format!("{} blocks for {n} ranks", blocks.len())));
        }
        let mut w = Writer::default();
        frame::encode_blocks(&mut w, blocks);
        let out = self.collective(CollOp::Alltoall, 0, w.0, |contribs| {
            let rows = contribs
                .iter()
                .enumerate()
                .map(|(src, c)| {
                    frame::decode_blocks(&mut Reader::new(c, "alltoall"), n).map_err(|e| {
                        Failure::Protocol {
                            peer: format!("rank {src}"),
                            error: e,
                        }
                    })
                })
                .collect::<Result<Vec<_>, Failure>>()?;
            Ok((0..n)
                .map(|dst| {
                    let col: Vec<&[u8]> = rows.iter().map(|row| row[dst].as_slice()).collect();
                    let mut w = Writer::default();
                    frame::encode_blocks(&mut w, &col);
                    Bytes::from(w.0)
                })
                .collect())
        })?;
        self.decode(&out, "alltoall", |r| frame::decode_blocks(r, n))
    }

    /// Returns `root`'s `data` on every rank (`data` is ignored elsewhere).
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        let n = self.world_size();
        if root >= n {
            return Err(self.invalid(
                "broadcast",
                format!("root {root} out of range for {n} ranks"),
            ));
        }
        let mine = if self.rank() == root {
            data.to_vec()
        } else {
            Vec::new()
        };
        let out = self.collective(CollOp::Broadcast, root as u32, mine, |contribs| {
            Ok(vec![Bytes::copy_from_slice(&contribs[root]); n])
        })?;
        Ok(out.to_vec())
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        let n = self.world_size();
        self.collective(CollOp::Barrier, 0, Vec::new(), |_| {
            Ok(vec![Bytes::new(); n])
        })
        .map(|_| ())
    }

    /// Leaves the job in order: a barrier, then goodbyes, so that no rank mistakes the others'
    /// exit for a death.
    pub fn finalize(mut self) -> Result<()> {
        self.close_listener();
        let res = self.barrier();
        self.goodbye(res.is_ok().then_some(Bytes::new()));
        res
    }

    /// Leaves the job alone (not collective): goodbyes to the ranks this one is connected to,
    /// then closes. For a process that ends without `finalize`: the others see it leave, not
    /// die, and a collective that waits for it fails at once naming it.
    pub fn leave(mut self) {
        self.close_listener();
        self.goodbye(Some(Bytes::from_static(net::GOODBYE_ALONE)));
    }

    /// Rank 0: closes the job's listener before the last barrier, so that no rank, once out of
    /// finalize, can reach it: a rank that initializes again at once (the same address) must
    /// find the next job's listener, not be taken by this one for a rank joining twice.
    fn close_listener(&self) {
        let acceptor = self
            .shared
            .acceptor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(h) = acceptor else { return };
        h.abort();
        // Dropping the aborted task's future drops the listener: wait until it has (bounded;
        // polled, since finalize may run inside the caller's own async context, where
        // blocking on our runtime would panic).
        let deadline = Instant::now() + Duration::from_secs(2);
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends goodbyes (`say`: their payload, empty after finalize's barrier), closes every
    /// connection (bounded) and stops the runtime.
    fn goodbye(&mut self, say: Option<Bytes>) {
        let Some(rt) = self.rt.take() else { return };
        self.shared.lock().finalizing = true;
        let senders: Vec<_> = self
            .shared
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flatten()
            .cloned()
            .collect();
        if let Some(payload) = say {
            for tx in &senders {
                let _ = tx.send(net::Out::Msg(Kind::Goodbye, payload.clone()));
            }
            if self.rank() == 0 {
                // Give the others a moment to say goodbye first, so none sees a closed socket
                // before its own goodbye is out (bounded: dead ranks do not hold us).
                let deadline = Instant::now() + Duration::from_secs(2);
                let mut st = self.shared.lock();
                while !st.leaving[1..].iter().all(|l| *l) && Instant::now() < deadline {
                    st = self
                        .shared
                        .cv
                        .wait_timeout(st, Duration::from_millis(10))
                        .map(|r| r.0)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            }
        }
        close_all(&rt, senders, Duration::from_secs(2));
        rt.shutdown_timeout(Duration::from_millis(200));
    }

    fn invalid(&self, op: &str, reason: String) -> BootstrapError {
        BootstrapError::InvalidArgument {
            rank: self.rank(),
            op: op.into(),
            reason,
        }
    }

    fn decode<T>(
        &self,
        payload: &[u8],
        op: &'static str,
        f: impl FnOnce(&mut Reader<'_>) -> Result<T, frame::FrameError>,
    ) -> Result<T> {
        let mut r = Reader::new(payload, op);
        f(&mut r)
            .and_then(|v| r.finish().map(|_| v))
            .map_err(|e| BootstrapError::Protocol {
                rank: self.rank(),
                peer: "rank 0".into(),
                source: e,
            })
    }
}

/// Asks every writer to flush what is queued and close its socket, waiting at most `limit`
/// in all.
fn close_all(
    rt: &tokio::runtime::Runtime,
    senders: Vec<tokio::sync::mpsc::UnboundedSender<net::Out>>,
    limit: Duration,
) {
    if tokio::runtime::Handle::try_current().is_ok() {
        return; // Cannot block inside someone's async context; the sockets just close.
    }
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + limit;
        for tx in senders {
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            if tx.send(net::Out::Close(done_tx)).is_ok() {
                let _ = tokio::time::timeout_at(deadline, done_rx).await;
            }
        }
    });
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        // Dropped without finalize (an error path): flush what is queued (an Abort relayed by
        // rank 0 must reach the others), then close, so the others notice promptly.
        if let Some(rt) = self.rt.take() {
            let senders: Vec<_> = self
                .shared
                .peers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .flatten()
                .cloned()
                .collect();
            close_all(&rt, senders, Duration::from_secs(1));
            rt.shutdown_background();
        }
    }
}
