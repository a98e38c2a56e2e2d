//! Jobs run on a proxy thread with its transport to themselves ([`crate::Proxy::exclusive`]):
//! the raw transport measured on the very endpoint, connection, registered heap and core the
//! runtime uses (datapath-bench), so that a comparison with the runtime differs only in the ring
//! and the proxy. The engine runs a job between turns once it has nothing in flight; the rings
//! wait meanwhile. Events that are not the job's (a peer's request arriving, a message send's
//! completion) are kept and handled by the engine after the job.

use std::sync::{
    Mutex,
    atomic::{AtomicBool, Ordering},
};

use pshmem_transport::{
    Event, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Transport, TransportError,
};

use super::{
    ctx::{self, Ctx},
    link::{Inbox, Link},
};
use crate::mem::{HeapMem, MemError};

/// Bits of a context a job chooses (the rest of the word says it is a job's: see `ctx`).
pub const JOB_CTX_BITS: u32 = 52;
const _: () = assert!(JOB_CTX_BITS <= ctx::PAYLOAD_BITS);

/// A job for a proxy thread.
pub(crate) type Job = Box<dyn FnOnce(&mut Exclusive<'_>) + Send>;

/// The job waiting for a proxy thread (at most one).
#[derive(Default)]
pub(crate) struct JobSlot {
    /// Set after `job` is filled; the engine checks it once per turn.
    pub(crate) pending: AtomicBool,
    pub(crate) job: Mutex<Option<Job>>,
}

impl std::fmt::Debug for JobSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSlot")
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl JobSlot {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Option<Job>> {
        self.job.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A proxy thread's transport, lent to a job while the proxy has nothing in flight. Writes go
/// from this PE's symmetric heap to a peer's, by heap offset; the job polls through
/// [`Exclusive::poll`], which reports its own completions and keeps everything else for the
/// proxy.
pub struct Exclusive<'a> {
    t: &'a mut dyn Transport,
    heap: &'a HeapMem,
    heap_mr: MrId,
    remote: &'a [RemoteMrId],
    /// Where events that are not the job's wait for the engine.
    inbox: &'a mut Inbox,
    /// The job's writes posted and not yet reported by `poll`.
    outstanding: usize,
}

/// Runs `job` with `link`'s transport to itself, writing from `heap` (this PE's registered
/// heap); the events its polls keep for the proxy stay in the link's inbox.
pub(super) fn run(job: Job, link: &mut Link, heap: &HeapMem) {
    let mut x = Exclusive {
        t: &mut *link.t,
        heap,
        heap_mr: link.region_mr,
        remote: &link.remote,
        inbox: &mut link.inbox,
        outstanding: 0,
    };
    job(&mut x);
}

impl std::fmt::Debug for Exclusive<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exclusive")
            .field("transport", &self.t.caps().name)
            .field("outstanding", &self.outstanding)
            .finish_non_exhaustive()
    }
}

/// Why a job's operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExclusiveError {
    /// The context does not fit [`JOB_CTX_BITS`].
    #[error("job context {0:#x} has more than {JOB_CTX_BITS} bits")]
    Context(u64),
    /// The transport refused or failed the operation.
    #[error(transparent)]
    Transport(#[from] pshmem_transport::TransportError),
    /// A heap access out of bounds or misaligned.
    #[error(transparent)]
    Mem(#[from] MemError),
}

impl Exclusive<'_> {
    /// This PE.
    pub fn my_pe(&self) -> Pe {
        self.t.my_pe()
    }

    /// The transport's name.
    pub fn transport_name(&self) -> &str {
        &self.t.caps().name
    }

    /// Posts a write of `len` bytes from this PE's heap at offset `src` to PE `pe`'s heap at
    /// `dst`; its completion (for delivery-complete transports: delivery) is reported by
    /// [`Exclusive::poll`] with `ctx` (below 2^[`JOB_CTX_BITS`]). `Ok(false)`: back-pressure,
    /// poll and post again.
    pub fn write(
        &mut self,
        pe: Pe,
        src: u64,
        dst: u64,
        len: usize,
        ctx: u64,
    ) -> Result<bool, ExclusiveError> {
        if ctx >> JOB_CTX_BITS != 0 {
            return Err(ExclusiveError::Context(ctx));
        }
        self.heap.check(src, len as u64)?;
        let remote = *self.remote.get(pe.idx()).ok_or_else(|| {
            ExclusiveError::Transport(pshmem_transport::TransportError::InvalidArgument {
                op: "exclusive write",
                reason: format!("PE {pe} out of range for {} PEs", self.remote.len()),
            })
        })?;
        let local = LocalRef {
            mr: self.heap_mr,
            offset: src as usize,
        };
        let remote = RemoteRef {
            mr: remote,
            offset: dst,
        };
        // SAFETY: the source lies in this PE's heap (checked above), registered for as long as
        // the transport lives; the engine owns both and drops the transport first.
        match unsafe { self.t.write(pe, local, remote, len, Ctx::Job(ctx).encode()) } {
            Ok(()) => {
                self.outstanding += 1;
                Ok(true)
            }
            Err(PostError::Retry) => Ok(false),
            Err(PostError::Failed(e)) => Err((*e).into()),
        }
    }

    /// Loads the 8-byte word at `off` in this PE's heap (atomically, with acquire ordering:
    /// a flag a peer's write sets).
    pub fn load(&self, off: u64) -> Result<u64, ExclusiveError> {
        Ok(self.heap.load(off, true)?)
    }

    /// Stores an 8-byte word at `off` in this PE's heap.
    pub fn store(&self, off: u64, value: u64) -> Result<(), ExclusiveError> {
        Ok(self.heap.store(off, value, 8)?)
    }

    /// The job's writes not yet reported by [`Exclusive::poll`].
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Progresses the transport; calls `done(ctx, error)` for each of the job's completions
    /// and keeps every other event for the proxy. Returns how many were the job's.
    pub fn poll(
        &mut self,
        done: &mut dyn FnMut(u64, Option<TransportError>),
    ) -> Result<usize, ExclusiveError> {
        let inbox = &mut *self.inbox;
        let mut mine = 0;
        self.t.poll(&mut |e| {
            let job = match &e {
                Event::Done { ctx } | Event::Failed { ctx, .. } => ctx::job(*ctx),
                _ => None,
            };
            match (job, e) {
                (Some(j), Event::Failed { error, .. }) => {
                    mine += 1;
                    done(j, Some(error));
                }
                (Some(j), _) => {
                    mine += 1;
                    done(j, None);
                }
                (None, e) => inbox.keep(e),
            }
        })?;
        self.outstanding -= mine.min(self.outstanding);
        Ok(mine)
    }
}
