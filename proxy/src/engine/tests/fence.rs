//! Fences by sequence (tagged mode): a fence's mark makes the signals, AMOs and `p`s after it
//! wait at the target for the writes before it, without a round trip; a write after it still
//! waits (the target's NIC places it), and only the first fence of a (ring, PE) pair, whose
//! writes were not yet counted, takes a gate.

use super::*;
use crate::engine::initiator::Gated;

/// What follows each round's fence: the word it changes at PE 1 shows the round's number
/// (or, for the AMO, a count of rounds).
#[derive(Debug, Clone, Copy)]
enum After {
    P8,
    P4,
    Signal,
    Add,
}

const FLAG: u64 = 64;
const DATA: u64 = 64 * 1024;
const LEN: usize = 9_000;

/// `rounds` rounds from PE 0 to PE 1 of: a put (from the heap or a raw buffer, so of one part
/// or of staged chunks), a fence, then one of [`After`]; round `i` puts `datas[i]` at its own
/// offset. Each round is pushed once the previous one finished (so a write never waits for the
/// mark of the fence before it). Checks after every turn that a flag never shows a round whose
/// data (or an earlier round's) has not landed. Returns the initiator's round trip counts.
fn rounds(fab: InProcConfig, rounds: usize) -> Gated {
    let seed = fab.seed;
    let mut w = World::new(2, fab, cfg());
    let datas: Vec<Vec<u8>> = (0..rounds)
        .map(|i| pattern(seed as usize + i, LEN))
        .collect();
    let afters = [After::P8, After::Signal, After::Add, After::P4];
    let at = |i: usize| DATA + (i * 16 * 1024) as u64;
    for (i, data) in datas.iter().enumerate() {
        let local = w.source(i % 2 == 0, 512 * 1024 + (i % 4 * 16 * 1024) as u64, data);
        let put = Desc::Put {
            pe: Pe::new(1),
            remote: at(i),
            local,
            len: LEN as u64,
        };
        w.push(0, put);
        w.push(0, Desc::Fence);
        let n = i as u64 + 1;
        let after = afters[i % afters.len()];
        let (remote, value) = (FLAG + 8 * (i % afters.len()) as u64, n);
        let d = match after {
            After::P8 | After::P4 => Desc::P {
                pe: Pe::new(1),
                remote,
                value,
                width: if matches!(after, After::P8) { 8 } else { 4 },
            },
            After::Signal => Desc::Signal {
                pe: Pe::new(1),
                remote,
                value,
                op: SignalOp::Set,
            },
            After::Add => Desc::Amo {
                pe: Pe::new(1),
                remote,
                op: AmoOp::Add,
                wide: true,
                operand: 1,
                compare: 0,
                result: 0,
            },
        };
        let last = w.push(0, d);
        w.run(
            |w| w.completed(0) >= last,
            |w| {
                for (k, a) in afters.iter().enumerate() {
                    let v = w.word(1, FLAG + 8 * k as u64);
                    // The highest round this word can show: an AMO counts its rounds.
                    let shown = match a {
                        After::Add => (v as usize).saturating_sub(1) * afters.len() + k + 1,
                        _ => v as usize,
                    };
                    if v == 0 {
                        continue;
                    }
                    for (j, d) in datas.iter().enumerate().take(shown) {
                        assert_eq!(
                            &w.bytes(1, at(j), LEN),
                            d,
                            "seed {seed}: {a:?} of round {shown} shows before round {j}'s data"
                        );
                    }
                }
            },
        );
    }
    w.engines[0].init.gated
}

/// In tagged mode (8 and 4 bytes of remote CQ data) only the first fence takes a gate; every
/// later one goes by a mark, and what follows it never shows before the data before it. In
/// gated mode every fence keeps its gate.
#[test]
fn fences_after_the_first_go_by_sequence() {
    for seed in 1..=8 {
        for (mode, fab) in modes(seed) {
            let fab = InProcConfig {
                land_delay: if fab.ordered() { 0 } else { 6 },
                ..fab
            };
            let g = rounds(fab, 12);
            match mode {
                SignalMode::Tagged => {
                    assert_eq!(g.fences, 1, "seed {seed}: only the first fence gates");
                    assert_eq!(g.marks, 11, "seed {seed}: the others go by their marks");
                }
                SignalMode::Gated => {
                    assert_eq!(g.marks, 0, "seed {seed}");
                    assert!(g.fences >= 6, "seed {seed}: {g:?}");
                }
                SignalMode::Ordered => assert_eq!((g.fences, g.marks), (0, 0), "seed {seed}"),
            }
        }
    }
}

/// With strong signals every write carries the epoch tag from the start: the first fence goes
/// by a mark too.
#[test]
fn strong_signals_fence_by_sequence_from_the_first() {
    for seed in 1..=4 {
        let mut w = World::new(
            2,
            efa_width(seed),
            ProxyConfig {
                strong_signals: true,
                ..cfg()
            },
        );
        let data = pattern(seed as usize, LEN);
        let local = w.source(true, 512 * 1024, &data);
        let put = Desc::Put {
            pe: Pe::new(1),
            remote: DATA,
            local,
            len: LEN as u64,
        };
        w.push(0, put);
        w.push(0, Desc::Fence);
        let flag = Desc::P {
            pe: Pe::new(1),
            remote: FLAG,
            value: 5,
            width: 8,
        };
        let last = w.push(0, flag);
        w.run(
            |w| w.completed(0) >= last,
            |w| {
                if w.word(1, FLAG) == 5 {
                    assert_eq!(w.bytes(1, DATA, LEN), data, "seed {seed}");
                }
            },
        );
        let g = w.engines[0].init.gated;
        assert_eq!((g.fences, g.marks), (0, 1), "seed {seed}");
    }
}

/// A write right after a fence by sequence waits for the writes before the fence: the second
/// put to one region always wins, in every round, however the fabric reorders.
#[test]
fn a_write_after_a_marked_fence_lands_last() {
    for seed in 1..=8 {
        let mut w = World::new(2, efa_width(seed), cfg());
        let mut last = 0;
        for i in 0..6usize {
            let (a, b) = (pattern(seed as usize + i, LEN), pattern(99 + i, LEN));
            let remote = DATA + (i * 16 * 1024) as u64;
            for (k, d) in [a, b].iter().enumerate() {
                let local = w.source(k == 0, 512 * 1024 + (k * 16 * 1024) as u64, d);
                w.push(
                    0,
                    Desc::Put {
                        pe: Pe::new(1),
                        remote,
                        local,
                        len: LEN as u64,
                    },
                );
                if k == 0 {
                    w.push(0, Desc::Fence);
                }
            }
            last = w.push(0, Desc::Fence);
            w.run(|w| w.completed(0) >= last, |_| {});
            let b = pattern(99 + i, LEN);
            assert_eq!(w.bytes(1, remote, LEN), b, "seed {seed}: round {i}");
        }
        assert!(w.completed(0) >= last);
        let g = w.engines[0].init.gated;
        assert!(g.marks > 0, "seed {seed}: {g:?}");
    }
}
