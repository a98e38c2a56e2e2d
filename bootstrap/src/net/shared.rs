//! State shared by the blocking API and the connection tasks: the inboxes, the job's first
//! failure, and how a failure is recorded, relayed by rank 0 and reported to hooks.

use std::{
    collections::VecDeque,
    sync::{Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::{
    error::BootstrapError,
    frame::{FrameError, Kind, Reader, Writer},
};

/// What went wrong with the job, recorded once; every later call reports it.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// A rank died.
    Died { dead: usize, detail: String },
    /// Rank 0 aborted the job for a reason that is not a death.
    Aborted { reason: String },
    /// A second process claimed a rank of the running job (seen by rank 0's join guard).
    Duplicate {
        rank: usize,
        first: String,
        second: String,
    },
    /// A peer sent garbage after joining.
    Protocol { peer: String, error: FrameError },
}

impl Failure {
    /// A rank left alone (`Bootstrap::leave`): reported quietly (also as rank 0 relays it).
    pub(crate) fn is_leave(&self) -> bool {
        matches!(self, Failure::Died { detail, .. } if detail.ends_with(super::LEFT))
    }

    pub(crate) fn to_error(&self, me: usize, op: &str) -> BootstrapError {
        match self {
            Failure::Died { dead, detail } => BootstrapError::PeerDied {
                rank: me,
                dead: *dead,
                op: op.to_string(),
                detail: detail.clone(),
            },
            Failure::Aborted { reason } => BootstrapError::Aborted {
                rank: me,
                reason: reason.clone(),
                op: op.to_string(),
            },
            Failure::Duplicate {
                rank,
                first,
                second,
            } => BootstrapError::DuplicateRank {
                rank: *rank,
                first: first.clone(),
                second: second.clone(),
            },
            Failure::Protocol { peer, error } => BootstrapError::Protocol {
                rank: me,
                peer: peer.clone(),
                source: error.clone(),
            },
        }
    }
}

/// How long a rank other than 0, waiting for rank 0's answer in a collective, holds back a
/// failure that rank 0 did not tell it of (its data path lost a peer) until rank 0's last word.
/// Rank 0 decides a collective's outcome: a rank that left right after getting its result (an
/// error path) is seen gone by its peers' data paths, while their results, already sent, are
/// still on the wire. Rank 0 relays the report within milliseconds; the bound is for a rank 0
/// that cannot.
pub(crate) const ROOT_WORD_GRACE: Duration = Duration::from_secs(1);

impl State {
    /// The failure that ends rank `me`'s wait for a message from `peer` at `now`, once it is
    /// final: always on rank 0 and for other peers; for a wait on rank 0, once rank 0 said its
    /// last word (after any result it sent) or [`ROOT_WORD_GRACE`] passed.
    pub(crate) fn final_failure(&self, me: usize, peer: usize, now: Instant) -> Option<&Failure> {
        let f = self.failure.as_ref()?;
        let settled = me == 0
            || peer != 0
            || self.ended[0]
            || self.failed_at.is_none_or(|t| now >= t + ROOT_WORD_GRACE);
        settled.then_some(f)
    }

    /// When a failure not yet final (see [`State::final_failure`]) becomes final.
    pub(crate) fn final_at(&self) -> Option<Instant> {
        self.failed_at.map(|t| t + ROOT_WORD_GRACE)
    }
}

/// Outgoing work for a connection's writer task.
#[derive(Debug)]
pub(crate) enum Out {
    /// A message.
    Msg(Kind, Bytes),
    /// Flush, shut the socket down and report.
    Close(oneshot::Sender<()>),
}

/// Why [`Shared::send_each`] sent nothing more.
#[derive(Debug)]
pub(crate) enum Unsent {
    /// The job had failed already.
    Failed(Failure),
    /// This rank has no live writer to that peer.
    NoWriter(usize),
}

/// A callback run once when the job fails.
pub(crate) type Hook = Box<dyn Fn(&BootstrapError) + Send + Sync>;

/// Mutable state shared by the application thread and the tasks.
#[derive(Default)]
pub(crate) struct State {
    /// Messages received per peer rank, in arrival order.
    pub inbox: Vec<VecDeque<Vec<u8>>>,
    /// The first failure.
    pub failure: Option<Failure>,
    /// When `failure` was recorded.
    pub failed_at: Option<Instant>,
    /// Per peer: its reader has stopped (it read an `Abort`, or the connection ended). For a
    /// rank other than 0, rank 0's reader stopping is rank 0's last word.
    pub ended: Vec<bool>,
    /// Peers that said goodbye.
    pub leaving: Vec<bool>,
    /// This rank is finalizing: connection ends are expected.
    pub finalizing: bool,
    /// Callbacks to run on failure.
    pub hooks: Vec<Hook>,
}

/// State shared between the blocking API and the tasks.
pub(crate) struct Shared {
    pub me: usize,
    pub n: usize,
    pub secret: u64,
    pub state: Mutex<State>,
    pub cv: Condvar,
    /// Senders to each peer's writer task (rank 0: all others; others: rank 0 only).
    pub peers: Mutex<Vec<Option<mpsc::UnboundedSender<Out>>>>,
    /// Rank 0: the acceptor of the job's listener (for the job's life, see `root_join`).
    pub acceptor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("me", &self.me)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(me: usize, n: usize, secret: u64) -> Self {
        let state = State {
            inbox: vec![VecDeque::new(); n],
            leaving: vec![false; n],
            ended: vec![false; n],
            ..State::default()
        };
        Self {
            me,
            n,
            secret,
            state: Mutex::new(state),
            cv: Condvar::new(),
            peers: Mutex::new(vec![None; n]),
            acceptor: Mutex::new(None),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (plain pushes/pops), so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a message to a peer. Returns false if the peer has no live writer.
    pub(crate) fn send(&self, to: usize, kind: Kind, payload: Bytes) -> bool {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers[to]
            .as_ref()
            .is_some_and(|tx| tx.send(Out::Msg(kind, payload)).is_ok())
    }

    /// Rank 0: queues `payloads` as `kind`, the first to rank 1, the next to rank 2 and so on,
    /// holding the job's state so that no failure's `Abort` is queued among them. A rank that
    /// leaves as soon as it has a collective's result (an error path: its call failed on what
    /// the collective returned) is then reported to the others only after their results, which
    /// they receive whole.
    pub(crate) fn send_each(
        &self,
        kind: Kind,
        payloads: impl IntoIterator<Item = Bytes>,
    ) -> Result<(), Unsent> {
        let st = self.lock();
        if let Some(f) = &st.failure {
            return Err(Unsent::Failed(f.clone()));
        }
        for (i, p) in payloads.into_iter().enumerate() {
            if !self.send(i + 1, kind, p) {
                return Err(Unsent::NoWriter(i + 1));
            }
        }
        Ok(())
    }

    /// Records the job's first failure, (on rank 0) queues an `Abort` to every other rank, then
    /// wakes every waiter and runs the hooks. The aborts are queued before any waiter can see the
    /// failure: a waiter that returns at once and drops the bootstrap closes the writers, and a
    /// close queued ahead of an abort would leave the others believing rank 0 itself died.
    pub(crate) fn fail(&self, failure: Failure) {
        let hooks = {
            let mut st = self.lock();
            if st.failure.is_some() || st.finalizing {
                return;
            }
            if self.me == 0 {
                self.relay_abort(&failure);
            }
            st.failure = Some(failure.clone());
            st.failed_at = Some(Instant::now());
            self.cv.notify_all();
            std::mem::take(&mut st.hooks)
        };
        let err = failure.to_error(self.me, "job");
        if failure.is_leave() {
            tracing::info!("{err}");
        } else {
            tracing::error!("{err}");
        }
        for h in &hooks {
            h(&err);
        }
    }

    /// This rank learned, outside the bootstrap (its data path lost the connection), that rank
    /// `dead` died. A rank other than 0 tells rank 0 first, which relays it to everyone, so
    /// that the others hear which rank died rather than only see this rank leave: non-root
    /// ranks are connected to rank 0 alone, and rank 0 may read this rank's exit before the
    /// dead rank's. Then the failure is recorded here as if the bootstrap had seen it.
    pub(crate) fn report_dead(&self, dead: usize, detail: &str) {
        if dead >= self.n || dead == self.me {
            return;
        }
        {
            let st = self.lock();
            if st.failure.is_some() || st.finalizing {
                return;
            }
        }
        // Rank 0 prefixes "reported by rank N" when it reads the report; here it is local.
        let detail = format!("seen by the data path: {detail}");
        if self.me != 0 {
            // Queued before `fail` wakes the waiters: a waiter that returns at once and drops
            // the bootstrap flushes what is queued before it closes.
            let mut w = Writer::default();
            w.u32(dead as u32).str(&detail);
            self.send(0, Kind::Abort, Bytes::from(w.0));
        }
        self.fail(Failure::Died { dead, detail });
    }

    /// Rank 0: queues an `Abort` describing `failure` to every other rank.
    fn relay_abort(&self, failure: &Failure) {
        let (dead, reason) = match failure {
            Failure::Died { dead, detail } => (*dead as u32, detail.clone()),
            Failure::Aborted { reason } => (u32::MAX, reason.clone()),
            Failure::Duplicate {
                rank,
                first,
                second,
            } => (
                u32::MAX,
                format!("rank {rank} joined twice (from {first} and {second})"),
            ),
            Failure::Protocol { peer, error } => {
                (u32::MAX, format!("bad frame from {peer}: {error}"))
            }
        };
        let mut w = Writer::default();
        w.u32(dead).str(&reason);
        let payload = Bytes::from(w.0);
        for r in 1..self.n {
            self.send(r, Kind::Abort, payload.clone());
        }
    }

    pub(super) fn is_quiet_end(&self, peer: usize) -> bool {
        let st = self.lock();
        st.finalizing || st.leaving[peer] || st.failure.is_some()
    }
}

/// Decodes an `Abort` payload sent by rank `from` into a failure (rank 0 relays aborts to the
/// others; the others report a death they saw to rank 0).
pub(super) fn abort_failure(from: usize, payload: &[u8]) -> Failure {
    let mut r = Reader::new(payload, "abort");
    match (r.u32(), r.str()) {
        (Ok(dead), Ok(reason)) if dead != u32::MAX => Failure::Died {
            dead: dead as usize,
            detail: format!("reported by rank {from}: {reason}"),
        },
        (Ok(_), Ok(reason)) => Failure::Aborted {
            reason: reason.to_string(),
        },
        _ => Failure::Aborted {
            reason: format!("rank {from} aborted the job (unreadable reason)"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank0_of_three() -> (Shared, Vec<mpsc::UnboundedReceiver<Out>>) {
        let shared = Shared::new(0, 3, 7);
        let mut rxs = Vec::new();
        for r in 1..3 {
            let (tx, rx) = mpsc::unbounded_channel();
            shared.peers.lock().unwrap()[r] = Some(tx);
            rxs.push(rx);
        }
        (shared, rxs)
    }

    fn kinds(rx: &mut mpsc::UnboundedReceiver<Out>) -> Vec<Kind> {
        let mut got = Vec::new();
        while let Ok(Out::Msg(kind, _)) = rx.try_recv() {
            got.push(kind);
        }
        got
    }

    /// Rank 1 leaves (its departure recorded on another thread) while rank 0 is between
    /// queuing rank 1's result and rank 2's: rank 2 must still get its result before the
    /// `Abort` that reports rank 1.
    #[test]
    fn a_failure_during_the_results_is_queued_after_all_of_them() {
        let (shared, mut rxs) = rank0_of_three();
        std::thread::scope(|s| {
            let mut leaver = None;
            let payloads = (1..3).map(|r| {
                if r == 2 {
                    let t = s.spawn(|| {
                        shared.fail(Failure::Died {
                            dead: 1,
                            detail: crate::net::LEFT.into(),
                        })
                    });
                    // Long enough for `fail` to finish if nothing held it back.
                    std::thread::sleep(Duration::from_millis(200));
                    leaver = Some(t);
                }
                Bytes::from_static(b"result")
            });
            shared.send_each(Kind::Result, payloads).unwrap();
            leaver.unwrap().join().unwrap();
        });
        assert_eq!(kinds(&mut rxs[1]), [Kind::Result, Kind::Abort]);
        assert!(matches!(
            shared.send_each(Kind::Result, [Bytes::new()]),
            Err(Unsent::Failed(Failure::Died { dead: 1, .. }))
        ));
    }

    /// A rank with no live writer stops the fan-out there, naming it; the ranks before it
    /// have their results.
    #[test]
    fn a_gone_writer_stops_the_results_and_names_its_rank() {
        let (shared, mut rxs) = rank0_of_three();
        shared.peers.lock().unwrap()[2] = None;
        let payloads = [Bytes::from_static(b"1"), Bytes::from_static(b"2")];
        assert!(matches!(
            shared.send_each(Kind::Result, payloads),
            Err(Unsent::NoWriter(2))
        ));
        assert_eq!(kinds(&mut rxs[0]), [Kind::Result]);
    }

    /// A rank other than 0 whose data path saw a peer die holds that failure back, in a wait
    /// for rank 0, until rank 0's last word or the grace; every other wait fails at once.
    #[test]
    fn a_failure_rank_0_did_not_announce_waits_for_its_last_word() {
        let mut st = State {
            inbox: vec![VecDeque::new(); 3],
            leaving: vec![false; 3],
            ended: vec![false; 3],
            ..State::default()
        };
        let now = Instant::now();
        assert!(st.final_failure(2, 0, now).is_none(), "no failure yet");
        st.failure = Some(Failure::Died {
            dead: 1,
            detail: "seen by the data path".into(),
        });
        st.failed_at = Some(now);
        assert!(
            st.final_failure(2, 0, now).is_none(),
            "rank 0 may have sent the result"
        );
        assert!(
            st.final_failure(0, 1, now).is_some(),
            "rank 0 decides at once"
        );
        assert!(
            st.final_failure(2, 1, now).is_some(),
            "not a wait for rank 0"
        );
        let later = now + ROOT_WORD_GRACE;
        assert!(st.final_failure(2, 0, later).is_some(), "bounded");
        assert_eq!(st.final_at(), Some(later));
        st.ended[0] = true;
        assert!(
            st.final_failure(2, 0, now).is_some(),
            "rank 0 said its last word"
        );
    }
}
