//! # pshmem-proxy
//!
//! Owns the proxy threads: each drains a set of command rings, translates symmetric
//! heap offsets into the transport's registrations, posts, polls completions and advances each
//! ring's `completed` counter in order. It also serves the requests peers send to this PE's
//! heap (AMOs and signal updates) and keeps the semantics that are easy to get wrong:
//!
//! - **quiet**: an operation counts as finished only when its effect is visible at the target
//!   (delivery-complete writes; AMOs and signals once the target's proxy acknowledged them);
//! - **fence** gates the queues of its own ring (every destination's), and only on unordered
//!   transports;
//! - **put-with-signal** never exposes the signal before the data: on ordered transports the
//!   signal request follows the data on the same path; on unordered ones with remote CQ data
//!   the data writes carry a tag and the target applies the signal once every tagged write has
//!   landed; otherwise the signal waits for the data's delivery completion;
//! - **AMOs** from any PE are applied by the target's proxy with CPU atomics on the heap
//!   mapping, so they are atomic with respect to each other and to same-host peers' direct
//!   atomics (the rule, for host mode; see proxy/README.md, *Semantics*);
//! - **progress** for manual-progress providers (the transport is polled on every turn, idle or
//!   not); an idle proxy backs off (spin, yield, then short sleeps) instead of burning a core;
//! - **failures** raise every ring's error word with the PE concerned, so no wait hangs, and
//!   keep the transport's or the device's error as the fault's typed cause.
//!
//! The engine is split by phase of a turn (`engine/`), and one module (`engine::ctx`) owns every
//! bit of the words it packs.

pub mod engine;
mod health;
pub mod mem;
mod slab;
pub mod standalone;
pub mod trace;
pub mod wire;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use pshmem_abi::error as code;
use pshmem_ring::Ring;
use pshmem_transport::{MrId, RemoteMrId, Transport, TransportError};

pub use engine::{
    SignalMode,
    exclusive::{Exclusive, ExclusiveError, JOB_CTX_BITS},
};

/// Bytes of a landing slot on the host-staged GPU path: one staging chunk of payload and its
/// header. A PE's landing area holds `n_pes × PSHMEM_GPU_LANDING_SLOTS` of them.
pub fn landing_slot_bytes(staging_chunk: usize) -> usize {
    staging_chunk.max(4096) + engine::staged::HDR
}
pub use health::{Fault, FaultCause, Health};
pub use mem::{HeapMem, MemError};

/// Why a proxy could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// Setting up the proxy's transport resources failed.
    #[error("PE {pe}: proxy set-up failed ({what}): {source}")]
    Setup {
        /// This PE.
        pe: usize,
        /// What was being set up.
        what: &'static str,
        /// The transport's error.
        #[source]
        source: TransportError,
    },
    /// The transport cannot order put-with-signal at all.
    #[error(
        "PE {pe}: transport {transport} offers neither ordered delivery, remote CQ data nor \
         delivery-complete completions: put-with-signal cannot be made safe; choose another provider"
    )]
    Unorderable {
        /// This PE.
        pe: usize,
        /// The transport's name.
        transport: String,
    },
    /// More rings or PEs than the proxy's completion contexts can name.
    #[error("PE {pe}: {what}")]
    Limits {
        /// This PE.
        pe: usize,
        /// Which limit.
        what: String,
    },
    /// The thread could not be started.
    #[error("PE {pe}: could not start the proxy thread: {source}")]
    Spawn {
        /// This PE.
        pe: usize,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A job for the proxy thread (see [`Proxy::exclusive`]) did not run or failed.
    #[error("PE {pe}: proxy job: {detail}")]
    Job {
        /// This PE.
        pe: usize,
        /// What happened.
        detail: String,
    },
    /// The proxy thread panicked.
    #[error("PE {pe}: the proxy thread panicked: {detail}")]
    Panicked {
        /// This PE.
        pe: usize,
        /// The panic message.
        detail: String,
    },
}

/// How a proxy thread behaves.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Most operations drained from one ring per turn.
    pub batch: usize,
    /// Idle time after which the proxy backs off to sleeping (zero: spin forever).
    pub idle_after: Duration,
    /// Longest sleep while idle.
    pub max_sleep: Duration,
    /// Core to pin the thread to.
    pub cpu: Option<usize>,
    /// Bytes per staging chunk (raw-address sources and destinations).
    pub staging_chunk: usize,
    /// Staging chunks.
    pub staging_chunks: usize,
    /// Longest a stopping proxy waits for its outstanding work.
    pub drain_limit: Duration,
    /// Most transport operations in flight per proxy thread (deeper queues can slow a
    /// provider down; more is queued in the proxy).
    pub max_inflight: usize,
    /// Most transport operations in flight per proxy thread to one destination PE (bounds a
    /// burst to one peer, e.g. a MoE dispatch's, so traffic to the others keeps moving).
    pub max_inflight_per_pe: usize,
    /// Strong signals (`PSHMEM_STRONG_SIGNALS`; tagged signal mode only): a signal waits for
    /// every put and `p` its ring issued to that PE before it, and a PE's signals are applied
    /// at the target in the order issued.
    pub strong_signals: bool,
    /// Where to write the thread's trace (`PSHMEM_TRACE`; see [`trace`]), if anywhere.
    pub trace: Option<std::path::PathBuf>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            batch: 64,
            idle_after: Duration::from_micros(200),
            max_sleep: Duration::from_micros(50),
            cpu: None,
            staging_chunk: 1 << 20,
            staging_chunks: 8,
            drain_limit: Duration::from_secs(5),
            max_inflight: 256,
            max_inflight_per_pe: 256,
            strong_signals: false,
            trace: None,
        }
    }
}

/// A device's error, kept typed (the runtime's CUDA errors carry the driver's own).
pub type DeviceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A GPU heap that the proxy reaches through CUDA, for the host-staged path (implemented by
/// the runtime; the proxy crate itself needs no CUDA). Addresses are in CUDA's unified address
/// space: device memory, pinned or ordinary host memory.
pub trait DeviceMem: Send {
    /// Device address and length of this PE's GPU heap.
    fn heap(&self) -> (u64, u64);
    /// Copies `len` bytes from `src` to `dst`, finished on return.
    ///
    /// # Safety
    /// Both ranges must be valid for the copy and not in use by anything else meanwhile.
    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), DeviceError>;
    /// Starts copying `len` bytes from `src` to `dst` without waiting and returns the copy's
    /// ticket. Tickets count up from 1 and copies finish in the order they started (one
    /// stream), so [`DeviceMem::copies_done`] answers for every earlier copy at once. The
    /// host-staged path overlaps its copies with the transport this way, instead of blocking
    /// its progress for each.
    ///
    /// # Safety
    /// Both ranges must stay valid, and untouched by anything else, until the copy finished.
    unsafe fn copy_start(&mut self, dst: u64, src: u64, len: usize) -> Result<u64, DeviceError>;
    /// The ticket of the latest finished copy of those `copy_start` began (0 before any);
    /// never blocks.
    fn copies_done(&mut self) -> Result<u64, DeviceError>;
    /// Starts a store of the low `width` bytes of `value` at device address `addr`, after the
    /// copies started before it, and returns its ticket (counted with the copies'); `None`
    /// where the device has no such store for this width (the caller stores by [`copy`]).
    ///
    /// [`copy`]: DeviceMem::copy
    fn store_start(
        &mut self,
        _addr: u64,
        _value: u64,
        _width: u8,
    ) -> Result<Option<u64>, DeviceError> {
        Ok(None)
    }
    /// An AMO on this GPU's memory at `addr` (aligned to the width), atomic with respect to
    /// every GPU atomic on it; returns the old value. `idle` is called again and again while
    /// the AMO is pending: the engine frees ring space meanwhile. (The AMO is a kernel, which
    /// needs an SM; if every SM is held by blocks waiting for ring space, only the proxy
    /// draining its rings lets them finish — seen as a stall of the MoE kernels on the H100.)
    fn amo(
        &mut self,
        addr: u64,
        op: pshmem_ring::AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
        idle: &mut dyn FnMut(),
    ) -> Result<u64, DeviceError>;
    /// Page-locks host memory for faster copies (best effort).
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay allocated while this value lives.
    unsafe fn pin(&mut self, ptr: *mut u8, len: usize);
}

/// What a proxy thread drives.
pub struct ProxySetup {
    /// Its transport (connected, heap registered).
    pub transport: Box<dyn Transport>,
    /// This PE's heap.
    pub heap: HeapMem,
    /// The heap's registration with `transport`.
    pub heap_mr: MrId,
    /// Every PE's heap registration, imported into `transport`, in PE order.
    pub remote_heaps: Vec<RemoteMrId>,
    /// The rings this thread drains.
    pub rings: Vec<Arc<Ring>>,
    /// When this PE's heap is GPU memory: the device. Unless `device_registered`, `heap` (with
    /// its registrations) is the pinned landing area of the host-staged path (see
    /// `engine::staged`).
    pub device: Option<Box<dyn DeviceMem>>,
    /// The GPU heap itself is registered with the transport (DMA-BUF, FI_HMEM): `heap` and its
    /// registrations are the GPU heap's, data moves by RMA; AMOs, signals and copies that need
    /// the CPU's hands go through `device`.
    pub device_registered: bool,
}

impl std::fmt::Debug for ProxySetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxySetup")
            .field("transport", &self.transport.caps().name)
            .field("rings", &self.rings.len())
            .finish_non_exhaustive()
    }
}

/// A running proxy thread.
#[derive(Debug)]
pub struct Proxy {
    pe: usize,
    stop: Arc<AtomicBool>,
    jobs: Arc<engine::exclusive::JobSlot>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy thread named `name`.
    pub fn spawn(
        name: String,
        setup: ProxySetup,
        cfg: ProxyConfig,
        health: Arc<Health>,
    ) -> Result<Self, ProxyError> {
        let pe = setup.transport.my_pe().idx();
        let stop = Arc::new(AtomicBool::new(false));
        let jobs = Arc::new(engine::exclusive::JobSlot::default());
        let mut engine =
            engine::Engine::new(setup, cfg, health.clone(), stop.clone(), jobs.clone())?;
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.run()));
                engine.write_trace();
                if let Err(p) = res {
                    let detail = panic_text(&p);
                    health.raise(
                        code::PROXY,
                        None,
                        format!("the proxy thread panicked: {detail}"),
                    );
                }
            })
            .map_err(|source| ProxyError::Spawn { pe, source })?;
        Ok(Self {
            pe,
            stop,
            jobs,
            thread: Some(thread),
        })
    }

    /// Runs `f` on the proxy thread once it has nothing in flight, with its transport to
    /// itself ([`Exclusive`]), and returns what `f` returns. The rings wait meanwhile, and
    /// peers' requests are handled after `f`. Meant for measurements on the runtime's own
    /// endpoint (datapath-bench) and diagnostics. Fails when `f` panics, when another job is
    /// waiting, or when `f` has not finished within `timeout` (from this call; the job still
    /// runs later if it had not started, unless taken back here first).
    pub fn exclusive<R: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&mut Exclusive<'_>) -> R + Send + 'static,
    ) -> Result<R, ProxyError> {
        let err = |detail: String| ProxyError::Job {
            pe: self.pe,
            detail,
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job: engine::exclusive::Job = Box::new(move |x| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(x)));
            // The caller may have given up waiting: nobody to tell then.
            let _ = tx.send(r.map_err(|p| panic_text(&p)));
        });
        {
            let mut slot = self.jobs.lock();
            if slot.is_some() {
                return Err(err("another job is waiting for this proxy thread".into()));
            }
            *slot = Some(job);
        }
        // Release: the engine's acquire load that sees the flag finds the slot filled.
        self.jobs.pending.store(true, Ordering::Release);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(panic)) => return Err(err(format!("the job panicked: {panic}"))),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(err("the job was dropped unrun".into()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            let ended = self.thread.as_ref().is_none_or(|t| t.is_finished());
            if ended || left.is_zero() {
                let unrun = self.jobs.lock().take().is_some();
                return Err(err(format!(
                    "{} {}",
                    if unrun {
                        "not started:"
                    } else {
                        "still running:"
                    },
                    if ended {
                        "the proxy thread has stopped".to_string()
                    } else {
                        format!("no result within {timeout:?}")
                    }
                )));
            }
        }
    }

    /// Asks the thread to finish its outstanding work and stop, and waits for it.
    pub fn stop(mut self) -> Result<(), ProxyError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), ProxyError> {
        // Release: pairs with the engine's acquire load; nothing else is published.
        self.stop.store(true, Ordering::Release);
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(p)) => Err(ProxyError::Panicked {
                pe: self.pe,
                detail: panic_text(&p),
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
