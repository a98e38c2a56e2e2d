//! The MoE kernels' message patterns on the host API, so that the proxy's handling of them is
//! checked wherever `rt-ops` runs (the simulated efa profile included), without a GPU: the
//! low-latency mode's counted puts and counted signals, and the normal mode's RDMA rings with
//! counted tails and credits. These replay the patterns the kernels of `ep/` post, not the
//! kernels themselves.

use pshmem::{Cmp, Pshmem, SignalOp, SymPtr};
use pshmem_tests::pattern;

use super::{Digest, R, e, expect_local, seed};

/// Counted puts and counted signals, DeepEP's low-latency pattern: every PE sends each other
/// PE a varying number of messages (0 included) into a per-source region, then one counted
/// signal of -count-1. The receiver checks every message the moment it sees the signal, so a
/// signal applied before all the writes it covers landed fails the round. Three threads send
/// at once, each on its own ring (with `PSHMEM_RINGS` > 1) and for its own words, as the MoE
/// kernels spread experts over rings. Three rounds reuse the same words (the proxy's per-word
/// rounds keep a late round's writes apart).
pub(super) fn counted(s: &Pshmem, rounds: usize, d: &mut Digest) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    const MSG: usize = 1500;
    const MAX: usize = 12;
    const LANES: usize = 3;
    let src = s.malloc(LANES * MAX * MSG).map_err(e)?;
    let dst = s.malloc(n * LANES * MAX * MSG).map_err(e)?;
    let sig = s.calloc(n * LANES, 8).map_err(e)?;
    let count = |from: usize, to: usize, r: usize, l: usize| {
        (from * 7 + to * 3 + r * 5 + l * 11) % (MAX + 1)
    };
    let word = |from: usize, l: usize| sig + (from * LANES + l) * 8;
    let slot = |from: usize, l: usize, i: usize| dst + ((from * LANES + l) * MAX + i) * MSG;
    let body = |from: usize, to: usize, r: usize, l: usize, i: usize| {
        pattern(
            seed(from, 1000 + ((r * LANES + l) * n + to) * MAX + i, MSG),
            MSG,
        )
    };
    for r in 0..rounds {
        let send = |l: usize| -> R<()> {
            for k in 1..n {
                let pe = (me + k) % n;
                let c = count(me, pe, r, l);
                for i in 0..c {
                    // A fresh source slot per message: the puts are in flight together.
                    let from = src + (l * MAX + i) * MSG;
                    s.local_copy_in(from, &body(me, pe, r, l, i)).map_err(e)?;
                    s.put_counted_nbi_sym(slot(me, l, i), from, MSG, word(me, l), pe)
                        .map_err(e)?;
                }
                let v = (-(c as i64) - 1) as u64;
                s.signal_counted(word(me, l), v, SignalOp::Set, pe)
                    .map_err(e)?;
                // The sources are reused for the next PE: wait until these were read.
                s.quiet().map_err(e)?;
            }
            Ok(())
        };
        std::thread::scope(|sc| {
            let lanes: Vec<_> = (0..LANES).map(|l| sc.spawn(move || send(l))).collect();
            lanes
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a sender panicked".into())))
                .collect::<R<Vec<()>>>()
        })?;
        for k in 1..n {
            let from = (me + n - k) % n;
            for l in 0..LANES {
                let seen = s.signal_wait_until(word(from, l), Cmp::Ne, 0).map_err(e)?;
                let c = count(from, me, r, l);
                if seen != (-(c as i64) - 1) as u64 {
                    return Err(format!(
                        "round {r}: the counted signal {l} from PE {from} is {seen:#x}"
                    ));
                }
                for i in 0..c {
                    let what =
                        format!("round {r}: message {i} of {c} ({l}) from PE {from} at its signal");
                    expect_local(s, slot(from, l, i), &body(from, me, r, l, i), &what, d)?;
                }
                s.local_copy_in(word(from, l), &0u64.to_le_bytes())
                    .map_err(e)?;
            }
        }
        s.barrier_all().map_err(e)?;
    }
    println!("OK counted");
    Ok(())
}

/// DeepEP's normal-mode pattern (the RDMA rings of `ep/include/pshmem/ep/ht.cuh`): every PE
/// streams a varying number of tokens (0 included) to every other PE through a ring of `SLOTS`
/// token slots in the receiver's heap. A chunk is up to `CHUNK` counted puts into the ring's
/// next slots, then a counted ADD of the chunk's length to the ring's tail word; the receiver
/// consumes tokens as its tail advances, checks each, and returns credits with an ADD to the
/// sender's head word, which the sender waits on before reusing slots. A tail applied before
/// the writes it covers landed, or a credit counted twice, fails the run (or hangs it until
/// the operation timeout).
pub(super) fn channels(s: &Pshmem, d: &mut Digest) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let ch = Channels {
        me,
        // At the receiver: a ring and a tail per source. At the sender: a head (credits) per
        // destination, and a source slot per ring slot per destination.
        ring: s.malloc(n * SLOTS * TOKEN).map_err(e)?,
        tail: s.calloc(n, 8).map_err(e)?,
        head: s.calloc(n, 8).map_err(e)?,
        src: s.malloc(n * SLOTS * TOKEN).map_err(e)?,
    };
    let (mut sent, mut got) = (vec![0usize; n], vec![0usize; n]);
    let peers = || (0..n).filter(move |&p| p != me);
    let done = |sent: &[usize], got: &[usize]| {
        peers().all(|p| sent[p] == total(me, p) && got[p] == total(p, me))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done(&sent, &got) {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "channels: stuck at sent {sent:?}, received {got:?}"
            ));
        }
        for to in peers() {
            ch.send(s, to, &mut sent[to])?;
        }
        for from in peers() {
            ch.receive(s, from, &mut got[from])?;
        }
    }
    // Every credit landed before the rings are freed (a late ADD would hit the next test's
    // memory otherwise).
    for to in peers() {
        s.signal_wait_until(ch.word(ch.head, to), Cmp::Eq, total(me, to) as u64)
            .map_err(e)?;
    }
    // Tokens arrived in an order timing decides: the digest takes them in a fixed one.
    for from in peers() {
        for k in 0..total(from, me) {
            d.update(&body(from, me, k));
        }
    }
    s.barrier_all().map_err(e)?;
    for p in [ch.src, ch.head, ch.tail, ch.ring] {
        s.free(p).map_err(e)?;
    }
    println!("OK channels");
    Ok(())
}

/// Bytes per token, slots per ring, most tokens per chunk.
const TOKEN: usize = 700;
const SLOTS: usize = 4;
const CHUNK: usize = 3;

/// Tokens PE `from` streams to PE `to`.
fn total(from: usize, to: usize) -> usize {
    (from * 5 + to * 7) % 23
}

/// Token `k` from `from` to `to`.
fn body(from: usize, to: usize, k: usize) -> Vec<u8> {
    pattern(seed(from, 5000 + to, k), TOKEN)
}

/// One PE's rings, tails, heads and sources (see [`channels`]).
struct Channels {
    me: usize,
    ring: SymPtr,
    tail: SymPtr,
    head: SymPtr,
    src: SymPtr,
}

impl Channels {
    fn slot(&self, base: SymPtr, peer: usize, k: usize) -> SymPtr {
        base + (peer * SLOTS + k % SLOTS) * TOKEN
    }

    fn word(&self, base: SymPtr, peer: usize) -> SymPtr {
        base + peer * 8
    }

    /// Sends `to` the next chunk that its credits allow: counted puts, then a counted ADD to
    /// its tail.
    fn send(&self, s: &Pshmem, to: usize, sent: &mut usize) -> R<()> {
        let credits = s.local_read::<u64>(self.word(self.head, to)).map_err(e)? as usize;
        let c = CHUNK
            .min(SLOTS - (*sent - credits))
            .min(total(self.me, to) - *sent);
        if c == 0 {
            return Ok(());
        }
        let tail = self.word(self.tail, self.me);
        for k in *sent..*sent + c {
            let from = self.slot(self.src, to, k);
            s.local_copy_in(from, &body(self.me, to, k)).map_err(e)?;
            let at = self.slot(self.ring, self.me, k);
            s.put_counted_nbi_sym(at, from, TOKEN, tail, to)
                .map_err(e)?;
        }
        s.signal_counted(tail, c as u64, SignalOp::Add, to)
            .map_err(e)?;
        *sent += c;
        Ok(())
    }

    /// Checks the tokens `from`'s tail says landed, and returns their slots as credits.
    fn receive(&self, s: &Pshmem, from: usize, got: &mut usize) -> R<()> {
        let t = s.local_read::<u64>(self.word(self.tail, from)).map_err(e)? as usize;
        if t == *got {
            return Ok(());
        }
        for k in *got..t {
            let what = format!(
                "channels: token {k} of {} from PE {from}",
                total(from, self.me)
            );
            let want = body(from, self.me, k);
            expect_local(
                s,
                self.slot(self.ring, from, k),
                &want,
                &what,
                &mut Digest(0),
            )?;
        }
        let read = (t - *got) as u64;
        *got = t;
        s.signal_op(self.word(self.head, self.me), read, SignalOp::Add, from)
            .map_err(e)
    }
}
