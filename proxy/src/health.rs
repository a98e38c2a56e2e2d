//! A PE's failure state: the first fault of its data path, the peers found dead, the rings to
//! raise, and who to tell when the transport loses a peer.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use pshmem_abi::error as code;
use pshmem_ring::Ring;
use pshmem_transport::TransportError;

use crate::MemError;

/// What caused a fault, kept typed so that the errors the runtime returns carry it as their
/// source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FaultCause {
    /// The transport failed a post, a completion or a poll.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A heap access or a device (GPU) operation failed.
    #[error(transparent)]
    Memory(#[from] MemError),
}

/// The first failure of a PE's data path.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Ring error code (see [`pshmem_abi::error`]).
    pub code: u32,
    /// The PE concerned.
    pub pe: Option<usize>,
    /// What happened.
    pub detail: String,
    /// The error behind it, when there is one.
    pub cause: Option<FaultCause>,
}

/// Shared failure state of one PE: the rings to raise, the first fault, and dead peers.
#[derive(Debug, Default)]
pub struct Health {
    rings: Mutex<Vec<Arc<Ring>>>,
    first: Mutex<Option<Fault>>,
    dead: Mutex<Vec<(usize, String)>>,
    /// Bumped whenever `dead` grows (proxies compare it with what they have seen).
    dead_gen: AtomicU64,
    /// Set once a fault is recorded (a cheap check for the proxy loop).
    faulted: AtomicBool,
    /// Told when the transport finds a peer gone (see [`Health::on_peer_lost`]).
    lost_hooks: Mutex<Vec<LostHook>>,
}

/// What a [`LostHook`] runs: told which peer the transport lost, and how.
type LostFn = dyn Fn(usize, &str) + Send + Sync;

/// A callback told which peer the transport lost.
struct LostHook(Box<LostFn>);

impl std::fmt::Debug for LostHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LostHook")
    }
}

impl Health {
    /// Empty state.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds rings to raise on failure.
    pub fn watch(&self, rings: impl IntoIterator<Item = Arc<Ring>>) {
        let mut r = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        r.extend(rings);
        if let Some(f) = self.fault() {
            for ring in r.iter() {
                ring.raise(f.code, f.pe.map(|p| p as u32));
            }
        }
    }

    /// Records a fault (the first one sticks) and raises every ring's error word.
    pub fn raise(&self, code: u32, pe: Option<usize>, detail: String) {
        self.raise_with(code, pe, detail, None);
    }

    /// As [`Health::raise`], with the error that caused the fault.
    pub fn raise_with(
        &self,
        code: u32,
        pe: Option<usize>,
        detail: String,
        cause: Option<FaultCause>,
    ) {
        self.record(code, pe, detail, cause, false);
    }

    /// Records a fault (logged as an error unless `quiet`) and raises every ring.
    fn record(
        &self,
        code: u32,
        pe: Option<usize>,
        detail: String,
        cause: Option<FaultCause>,
        quiet: bool,
    ) {
        let lost = match &cause {
            Some(FaultCause::Transport(TransportError::PeerLost { pe, reason, .. })) => {
                Some((pe.idx(), reason.clone()))
            }
            _ => None,
        };
        // A lost peer is a dead one, whichever operation found it: the error says so.
        let code = if lost.is_some() {
            code::PEER_DEAD
        } else {
            code
        };
        {
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                if quiet {
                    tracing::info!("{}: {detail}", pshmem_abi::describe_pe(pe));
                } else {
                    tracing::error!(
                        "data path fault ({}): {detail}",
                        pshmem_abi::describe_pe(pe)
                    );
                }
                *first = Some(Fault {
                    code,
                    pe,
                    detail,
                    cause,
                });
            }
        }
        // Release: pairs with `faulted`'s acquire; the fault above is recorded first.
        self.faulted.store(true, Ordering::Release);
        // The fault is recorded before the rings are raised, so a waiter that sees a raised
        // ring finds the details (the ring's error word is stored with release).
        for r in self.rings.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            r.raise(code, pe.map(|p| p as u32));
        }
        if let Some((pe, reason)) = lost {
            for h in self
                .lost_hooks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
            {
                (h.0)(pe, &reason);
            }
        }
    }

    /// Registers a callback run (from the proxy thread, outside every lock here) whenever a
    /// fault's cause is the transport losing a peer ([`TransportError::PeerLost`]; such a fault
    /// is recorded as [`code::PEER_DEAD`], whatever the caller's code): the runtime
    /// tells the job through it, since the bootstrap of a rank other than 0 sees only rank 0.
    pub fn on_peer_lost(&self, hook: impl Fn(usize, &str) + Send + Sync + 'static) {
        self.lost_hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LostHook(Box::new(hook)));
    }

    /// A peer died (the bootstrap noticed): fail everything that waits on it.
    pub fn peer_dead(&self, pe: usize, detail: String) {
        self.mark_dead(pe, detail, false);
    }

    /// A peer left the job without finalize (it said so): as [`Health::peer_dead`] for
    /// everything that waits on it, but no fault is logged until an operation reports one.
    pub fn peer_left(&self, pe: usize, detail: String) {
        self.mark_dead(pe, detail, true);
    }

    fn mark_dead(&self, pe: usize, detail: String, quiet: bool) {
        self.dead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((pe, detail.clone()));
        self.dead_gen.fetch_add(1, Ordering::Release);
        self.record(code::PEER_DEAD, Some(pe), detail, None, quiet);
    }

    /// Whether a fault was recorded.
    pub fn faulted(&self) -> bool {
        self.faulted.load(Ordering::Acquire)
    }

    /// The first fault, if any.
    pub fn fault(&self) -> Option<Fault> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn dead_since(&self, seen: &mut u64) -> Vec<(usize, String)> {
        let g = self.dead_gen.load(Ordering::Acquire);
        if g == *seen {
            return Vec::new();
        }
        *seen = g;
        self.dead.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a fault caused by the transport losing a peer tells the lost-peer hooks, each time
    /// (the bootstrap keeps the first failure); other faults and the bootstrap's own death
    /// notices do not echo back.
    #[test]
    fn a_lost_peer_reaches_the_hooks_and_nothing_else_does() {
        let h = Health::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        h.on_peer_lost(move |pe, how| s.lock().unwrap().push((pe, how.to_string())));
        h.raise(code::PROXY, None, "a proxy fault".into());
        h.peer_dead(3, "the bootstrap saw it".into());
        let other = TransportError::InvalidArgument {
            op: "put",
            reason: "out of range".into(),
        };
        h.raise_with(code::OP_FAILED, Some(2), "bad".into(), Some(other.into()));
        assert!(seen.lock().unwrap().is_empty());
        for _ in 0..2 {
            let lost = TransportError::PeerLost {
                pe: pshmem_transport::Pe::new(1),
                op: "put",
                reason: "connection closed".into(),
            };
            h.raise_with(code::OP_FAILED, Some(1), "lost".into(), Some(lost.into()));
        }
        let want = vec![(1, "connection closed".to_string()); 2];
        assert_eq!(*seen.lock().unwrap(), want);
        // The first fault still sticks.
        assert_eq!(h.fault().unwrap().code, code::PROXY);
        // Alone, a lost peer is recorded as dead, naming it.
        let h = Health::new();
        let lost = TransportError::PeerLost {
            pe: pshmem_transport::Pe::new(4),
            op: "get",
            reason: "reset".into(),
        };
        h.raise_with(code::OP_FAILED, Some(4), "lost".into(), Some(lost.into()));
        let f = h.fault().unwrap();
        assert_eq!((f.code, f.pe), (code::PEER_DEAD, Some(4)));
    }
}
