//! # pshmem
//!
//! The proxyshmem runtime: what an application links. It owns
//!
//! - **init/finalize**: the bootstrap, the transports (one per proxy thread), the symmetric
//!   heap and its registration, the command rings and the proxy threads;
//! - the **symmetric heap** (a memfd per PE in host mode) and its collective allocator, which
//!   detects calls that differ across PEs ([`Pshmem::malloc`], [`Pshmem::free`], ...);
//! - the **host API**: `put`/`get`/`p`/`g` (blocking and nbi), `put_signal`, `signal_op`,
//!   `signal_wait_until`/`wait_until`, atomics, `quiet`, `fence`, `barrier_all`. Every remote
//!   operation goes through the same command ring and proxy a GPU producer uses, so host mode
//!   exercises the device path;
//! - the **direct path**: same-host peers map each other's heaps (memfd over SCM_RIGHTS) and
//!   load and store directly, the host analogue of CUDA IPC; `PSHMEM_DISABLE_P2P=1` forces
//!   everything (this PE included) through the proxy;
//! - the **GPU path** ([`gpu`], [`cuda`]): a GPU symmetric heap, same-host peers through CUDA
//!   IPC, the GPU's command ring and its proxy, the state the device API reads, CUDA errors that
//!   keep the driver's own; and the placement of PEs, NICs and proxy cores ([`placement`]).
//!
//! ```
//! # fn main() -> pshmem::Result<()> {
//! // Without launcher variables this is a 1-PE job; under pshmrun every rank runs the same code.
//! let s = pshmem::Pshmem::init()?; // collective
//! let buf = s.malloc(1 << 20)?; // symmetric: same address on every PE
//! let next = (s.my_pe() + 1) % s.n_pes();
//! s.put(buf, b"hello", next)?; // blocking put
//! s.p(buf + 64, 42u64, next)?; // single value, complete at quiet
//! s.quiet()?;
//! s.barrier_all()?;
//! let x: u64 = s.atomic_fetch_add(buf + 128, 1, 0)?;
//! assert_eq!(x, 0);
//! s.finalize()?;
//! # Ok(())
//! # }
//! ```
//!
//! Addresses are [`SymPtr`]s: byte offsets into the symmetric heap, equal on every PE.
//! Non-blocking operations on raw buffers are `unsafe` (the buffer must outlive the operation,
//! up to the next [`Pshmem::quiet`]); their `_sym` forms on symmetric buffers are safe.

pub mod addr;
pub mod alloc;
mod barrier;
mod checks;
pub mod coll;
pub mod config;
pub mod cuda;
mod elem;
pub mod error;
pub mod gpu;
mod heap;
mod init;
mod memory;
pub mod net;
pub mod placement;
mod proxies;
mod rma;
mod share;
mod signal;
mod startup;
mod sync;
pub mod team;

use std::{
    cell::Cell,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use pshmem_abi::error as code;
pub use pshmem_abi::{DType, RedOp};
use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{Health, HeapMem, MemError, Proxy};
pub use pshmem_ring::{AmoOp, SignalOp};
use pshmem_ring::{Desc, Local, Pe, Producer, Ring, RingError, WaitLimit};
/// For executables: `pshmem::hold_signals_through_load!();` at the top level of the binary's
/// crate makes a SIGTERM sent while the process loads end it by that signal (see
/// `pshmem_libfabric_sys::hold_signals_through_load`).
pub use pshmem_transport::hold_signals_through_load;
use pshmem_transport::{LocalMem, MemKind};

pub use crate::{
    addr::{ByAddr, HeapKind, Stream, Sym},
    coll::Coll,
    config::Config,
    elem::{AmoElem, Cmp, Elem},
    error::{Error, Result},
};
use crate::{alloc::Allocator, heap::Mapping};

/// A symmetric address: a byte offset into the symmetric heap, the same on every PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SymPtr(u64);

impl SymPtr {
    /// The address at heap offset `offset` (for tests and tools; normally from `malloc`).
    pub fn from_offset(offset: u64) -> Self {
        Self(offset)
    }

    /// The heap offset.
    pub fn offset(self) -> u64 {
        self.0
    }
}

impl std::ops::Add<usize> for SymPtr {
    type Output = SymPtr;

    /// The address `bytes` further on.
    fn add(self, bytes: usize) -> SymPtr {
        SymPtr(self.0 + bytes as u64)
    }
}

/// Where an operation to a PE goes.
enum Route {
    /// Loads and stores on a mapping of the PE's heap.
    Direct(HeapMem),
    /// Through the command ring and the proxy.
    Ring,
}

thread_local! {
    /// The ring this thread issues on (assigned round-robin at first use).
    static RING: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_RING: AtomicUsize = AtomicUsize::new(0);

/// One PE of a proxyshmem job.
pub struct Pshmem {
    /// The GPU path, once `gpu_init` ran (dropped first: its proxy uses the bootstrap's peers).
    gpu: std::sync::OnceLock<gpu::Gpu>,
    // Drop order matters: proxies (which use the heap and own the transports that registered
    // it) go first, then the direct mappings, then the heap itself.
    proxies: Mutex<Vec<Proxy>>,
    /// Landing areas of the emulated GPU path (registered by the proxies' transports).
    _landings: Vec<Mapping>,
    peers: Vec<Option<HeapMem>>,
    _peer_maps: Vec<Option<Mapping>>,
    mem: HeapMem,
    _local: Mapping,
    producers: Vec<Producer>,
    health: Arc<Health>,
    bs: Mutex<Option<Bootstrap>>,
    alloc: Mutex<Allocator>,
    teams: Mutex<team::Teams>,
    barrier_epoch: Mutex<u64>,
    finalized: AtomicBool,
    me: usize,
    n: usize,
    cfg: Config,
    transport: String,
}

impl std::fmt::Debug for Pshmem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pshmem")
            .field("pe", &self.me)
            .field("n_pes", &self.n)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pshmem {
    /// This PE's number.
    pub fn my_pe(&self) -> usize {
        self.me
    }

    /// Number of PEs.
    pub fn n_pes(&self) -> usize {
        self.n
    }

    /// The transport's name (provider and rails).
    pub fn transport_name(&self) -> &str {
        &self.transport
    }

    /// Runs `f` on proxy thread `proxy` (0 in the default configuration of one) once it has
    /// nothing in flight, with its transport to itself, and returns what `f` returns (see
    /// [`pshmem_proxy::Proxy::exclusive`]): writes between symmetric heaps by
    /// [`SymPtr::offset`] on the runtime's own endpoint, connection and registrations. For
    /// measurements (datapath-bench's raw baseline) and diagnostics; this PE's rings wait while
    /// `f` runs. Fails after `timeout`, or when there is no such proxy thread.
    pub fn exclusive<R: Send + 'static>(
        &self,
        proxy: usize,
        timeout: std::time::Duration,
        f: impl FnOnce(&mut pshmem_proxy::Exclusive<'_>) -> R + Send + 'static,
    ) -> Result<R> {
        self.live("exclusive")?;
        let proxies = lock(&self.proxies);
        let p = proxies.get(proxy).ok_or_else(|| Error::Config {
            me: self.me,
            detail: if proxies.is_empty() {
                format!(
                    "exclusive: no proxy thread: every peer's heap is mapped directly, so none \
                     was started (set {}=1 to reach peers through the proxy)",
                    pshmem_env::DISABLE_P2P.name
                )
            } else {
                format!(
                    "exclusive: no proxy thread {proxy} (this PE runs {})",
                    proxies.len()
                )
            },
        })?;
        Ok(p.exclusive(timeout, f)?)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Whether operations to `pe` use the direct path.
    pub fn is_direct(&self, pe: usize) -> bool {
        self.peers.get(pe).is_some_and(Option::is_some)
    }
}
