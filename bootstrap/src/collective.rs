//! The step under every byte collective: each rank's contribution goes to rank 0, which checks
//! that all called the same collective at the same step, combines them and answers each rank.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::{
    Bootstrap, BootstrapError, Result,
    frame::{CollOp, CollTag, Kind, Reader, Writer},
    net::{Failure, Unsent},
};

/// How much longer than rank 0 a rank waits in a collective: time for rank 0's verdict on a
/// straggler to arrive.
const VERDICT_GRACE: Duration = Duration::from_secs(2);

impl Bootstrap {
    /// Runs one collective step. Every rank sends its contribution to rank 0; rank 0 checks that
    /// all called the same collective at the same step, computes each rank's result with
    /// `combine` (given contributions in rank order) and sends it back.
    pub(crate) fn collective(
        &self,
        op: CollOp,
        root: u32,
        contrib: Vec<u8>,
        combine: impl FnOnce(&[Vec<u8>]) -> Result<Vec<Bytes>, Failure>,
    ) -> Result<Bytes> {
        let mut seq_guard = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        let tag = CollTag {
            op,
            seq: *seq_guard,
            root,
        };
        *seq_guard += 1;
        let opname = tag.to_string();
        if self.rt.is_none() && self.world_size() > 1 {
            return Err(BootstrapError::Finalized {
                rank: self.rank(),
                op: opname,
            });
        }
        self.health().map_err(|e| self.with_op(e, &opname))?;
        let deadline = Instant::now() + self.cfg.op_timeout;
        if self.rank() != 0 {
            return self.collective_contribute(tag, opname, contrib, deadline);
        }
        self.collective_relay(tag, &opname, contrib, deadline, combine)
    }

    /// A rank other than 0's part of collective `tag`: sends its contribution to rank 0 and
    /// waits for its result, checking that rank 0 ran the same collective.
    fn collective_contribute(
        &self,
        tag: CollTag,
        opname: String,
        contrib: Vec<u8>,
        deadline: Instant,
    ) -> Result<Bytes> {
        let mut w = Writer::default();
        tag.write(&mut w);
        let mut payload = w.0;
        payload.extend_from_slice(&contrib);
        if !self.shared.send(0, Kind::Contrib, Bytes::from(payload)) {
            return Err(self.failure_or(&opname, 0));
        }
        let reply = self.wait_from(0, deadline, &opname)?;
        let mut r = Reader::new(&reply, "result");
        let got = CollTag::read(&mut r).map_err(|e| BootstrapError::Protocol {
            rank: self.rank(),
            peer: "rank 0".into(),
            source: e,
        })?;
        if got != tag {
            return Err(BootstrapError::CollectiveMismatch {
                rank: self.rank(),
                seq: tag.seq,
                other: 0,
                expected: got.to_string(),
                got: opname,
            });
        }
        Ok(Bytes::copy_from_slice(r.rest()))
    }

    /// Rank 0's part of collective `tag`: gathers every rank's contribution (each must be of
    /// the same collective, else the job is aborted), combines them and sends each its result.
    fn collective_relay(
        &self,
        tag: CollTag,
        opname: &str,
        contrib: Vec<u8>,
        deadline: Instant,
        combine: impl FnOnce(&[Vec<u8>]) -> Result<Vec<Bytes>, Failure>,
    ) -> Result<Bytes> {
        let n = self.world_size();
        let mut contribs = Vec::with_capacity(n);
        contribs.push(contrib);
        for r in 1..n {
            let msg = self.wait_from(r, deadline, opname)?;
            let mut rd = Reader::new(&msg, "contribution");
            let theirs = CollTag::read(&mut rd).map_err(|e| {
                let err = Failure::Protocol {
                    peer: format!("rank {r}"),
                    error: e,
                };
                self.shared.fail(err.clone());
                err.to_error(0, opname)
            })?;
            if theirs != tag {
                let err = BootstrapError::CollectiveMismatch {
                    rank: 0,
                    seq: tag.seq,
                    other: r,
                    expected: opname.to_string(),
                    got: theirs.to_string(),
                };
                self.shared.fail(Failure::Aborted {
                    reason: err.to_string(),
                });
                return Err(err);
            }
            contribs.push(rd.rest().to_vec());
        }
        let results = combine(&contribs).map_err(|f| {
            self.shared.fail(f.clone());
            f.to_error(0, opname)
        })?;
        let mut results = results.into_iter();
        let mine = results.next().expect("one result per rank");
        self.send_results(tag, opname, results)?;
        Ok(mine)
    }

    /// Rank 0: queues every other rank's result of collective `tag`, with no failure's `Abort`
    /// among them (see [`crate::net::Shared::send_each`]).
    fn send_results(
        &self,
        tag: CollTag,
        opname: &str,
        results: impl Iterator<Item = Bytes>,
    ) -> Result<()> {
        let mut prefix = Writer::default();
        tag.write(&mut prefix);
        // Framed before the job's state is taken: the copies of a large collective would hold
        // up the connection tasks that need it.
        let payloads: Vec<Bytes> = results
            .map(|res| {
                let mut payload = Vec::with_capacity(CollTag::LEN + res.len());
                payload.extend_from_slice(&prefix.0);
                payload.extend_from_slice(&res);
                Bytes::from(payload)
            })
            .collect();
        match self.shared.send_each(Kind::Result, payloads) {
            Ok(()) => Ok(()),
            Err(Unsent::Failed(f)) => Err(f.to_error(0, opname)),
            Err(Unsent::NoWriter(r)) => {
                // The ranks after r got no result: the job fails, so that they hear why now
                // rather than at their deadline.
                let err = self.failure_or(opname, r);
                self.shared.fail(Failure::Died {
                    dead: r,
                    detail: "its connection is gone".into(),
                });
                Err(err)
            }
        }
    }

    /// Waits for the next message from `peer`, failing on job failure or at `deadline`. Rank 0,
    /// at its deadline, aborts the job naming the ranks it waited for (the stragglers); the
    /// others wait [`VERDICT_GRACE`] longer for that verdict, so that they name the straggler
    /// too rather than rank 0, their relay (a rank 0 that never came is still named). A failure
    /// ends the wait once final (`State::final_failure`): a rank other than 0
    /// waits for rank 0's last word, since a result rank 0 sent first completes the collective.
    fn wait_from(&self, peer: usize, deadline: Instant, op: &str) -> Result<Vec<u8>> {
        let deadline = if self.rank() == 0 {
            deadline
        } else {
            deadline + VERDICT_GRACE
        };
        let mut st = self.shared.lock();
        loop {
            // A message that arrived whole before a failure is still delivered: a root that
            // sent its results and then exited (an error path) completed the collective.
            if let Some(m) = st.inbox[peer].pop_front() {
                return Ok(m);
            }
            let now = Instant::now();
            let failed = st.final_failure(self.rank(), peer, now);
            if let Some(f) = failed.or(st.failure.as_ref().filter(|_| now >= deadline)) {
                return Err(f.to_error(self.rank(), op));
            }
            if now >= deadline {
                let waiting_for = if self.rank() == 0 {
                    (peer..self.world_size())
                        .filter(|r| st.inbox[*r].is_empty())
                        .collect()
                } else {
                    vec![0]
                };
                let grace = if self.rank() == 0 {
                    Duration::ZERO
                } else {
                    VERDICT_GRACE
                };
                let err = BootstrapError::Timeout {
                    rank: self.rank(),
                    op: op.into(),
                    waited: self.cfg.op_timeout + grace,
                    waiting_for: waiting_for.clone(),
                };
                if self.rank() == 0 {
                    drop(st);
                    self.shared.fail(Failure::Aborted {
                        reason: format!(
                            "ranks {waiting_for:?} did not reach {op} within {:?} \
                             (PSHMEM_BOOTSTRAP_OP_TIMEOUT; rank 0 waited for them)",
                            self.cfg.op_timeout
                        ),
                    });
                }
                return Err(err);
            }
            // A failure not yet final becomes so at its own time, before the deadline.
            let until = st.final_at().map_or(deadline, |t| t.min(deadline));
            st = self
                .shared
                .cv
                .wait_timeout(st, until.saturating_duration_since(now))
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    fn failure_or(&self, op: &str, peer: usize) -> BootstrapError {
        match &self.shared.lock().failure {
            Some(f) => f.to_error(self.rank(), op),
            None => BootstrapError::PeerDied {
                rank: self.rank(),
                dead: peer,
                op: op.into(),
                detail: "its connection is gone".into(),
            },
        }
    }

    fn with_op(&self, e: BootstrapError, op: &str) -> BootstrapError {
        match e {
            BootstrapError::PeerDied {
                rank, dead, detail, ..
            } => BootstrapError::PeerDied {
                rank,
                dead,
                detail,
                op: op.into(),
            },
            BootstrapError::Aborted { rank, reason, .. } => BootstrapError::Aborted {
                rank,
                reason,
                op: op.into(),
            },
            e => e,
        }
    }
}
