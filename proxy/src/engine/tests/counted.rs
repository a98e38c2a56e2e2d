//! Counted puts and signals, and the per-destination flow-control limit, on whole proxies of
//! the in-process fabric (see the parent module).

use super::*;

/// Counted puts, then one counted signal per word: in every signal mode and with every seed,
/// a signal word is never nonzero before every put counted for it landed; a word with no puts
/// (-0-1) is applied at once; a second round on the same words (reset by the receiver, as the
/// MoE receive kernels do) is counted apart from the first.
#[test]
fn counted_signals_never_show_before_any_of_their_puts() {
    for seed in 1..=6 {
        for (mode, fab) in modes(seed) {
            let mut w = World::new(2, fab, cfg());
            let len = 6_000;
            let sig = |k: usize| 512 * 1024 + 8 * k as u64;
            let dst = |k: usize, i: usize| (64 * 1024 * k + 8 * 1024 * i) as u64 + 4096;
            for round in 0..2u64 {
                // Words 0..3 get 3, 0, 5 puts: from the heap (one part) and raw (staged).
                let counts = [3usize, 0, 5];
                let bufs: Vec<Vec<Vec<u8>>> = (0..3)
                    .map(|k| {
                        (0..counts[k])
                            .map(|i| pattern(100 * k + i + 7 * round as usize, len))
                            .collect()
                    })
                    .collect();
                let mut last = 0;
                for (k, msgs) in bufs.iter().enumerate() {
                    for (i, b) in msgs.iter().enumerate() {
                        let local = w.source(i % 2 == 0, 256 * 1024 + dst(k, i), b);
                        let d = Desc::PutCounted {
                            pe: Pe::new(1),
                            remote: dst(k, i),
                            local,
                            len: len as u64,
                            sig: sig(k),
                        };
                        w.push(0, d);
                    }
                }
                for (k, msgs) in bufs.iter().enumerate() {
                    let d = Desc::SignalCounted {
                        pe: Pe::new(1),
                        remote: sig(k),
                        value: (-(msgs.len() as i64) - 1) as u64,
                        op: SignalOp::Set,
                    };
                    last = w.push(0, d);
                }
                let check = |w: &World| {
                    for (k, msgs) in bufs.iter().enumerate() {
                        if w.word(1, sig(k)) == 0 {
                            continue;
                        }
                        for (i, b) in msgs.iter().enumerate() {
                            assert_eq!(
                                &w.bytes(1, dst(k, i), len),
                                b,
                                "seed {seed}, {mode:?}, round {round}: word {k} before put {i}"
                            );
                        }
                    }
                };
                w.run(|w| w.completed(0) >= last, check);
                for (k, msgs) in bufs.iter().enumerate() {
                    let want = (-(msgs.len() as i64) - 1) as u64;
                    assert_eq!(w.word(1, sig(k)), want, "seed {seed}, {mode:?}");
                    w.fill(1, sig(k), &0u64.to_le_bytes());
                }
                // Each round's tags went back with its signals' acks.
                assert_eq!(
                    w.engines[0].init.peers[Pe::new(1)].tags.in_use(),
                    0,
                    "seed {seed}, {mode:?}"
                );
            }
        }
    }
}

/// `max_inflight_per_pe` bounds the parts in flight to one destination, and a burst to one PE
/// does not hold back another's traffic beyond its own limit.
#[test]
fn the_per_pe_limit_bounds_parts_in_flight_to_each_destination() {
    let pcfg = ProxyConfig {
        max_inflight_per_pe: 2,
        ..cfg()
    };
    let mut w = World::new(3, InProcConfig::default(), pcfg);
    let src = pattern(5, 3_000);
    w.fill(0, 256 * 1024, &src);
    let mut last = 0;
    for i in 0..20u64 {
        for pe in [1, 2].map(Pe::new) {
            let d = Desc::Put {
                pe,
                remote: 4096 + i * 4096,
                local: Local::Heap(256 * 1024),
                len: src.len() as u64,
            };
            last = w.push(0, d);
        }
    }
    let mut peak = [0u32; 3];
    w.run(
        |w| w.completed(0) >= last,
        |w| {
            for (pe, p) in peak.iter_mut().enumerate().skip(1) {
                let now = w.engines[0].init.peers[Pe::from_idx(pe)].inflight;
                assert!(now <= 2, "{now} parts in flight to PE {pe}");
                *p = (*p).max(now);
            }
        },
    );
    assert_eq!(peak[1..], [2, 2], "both destinations kept their limit busy");
    for i in 0..20u64 {
        for pe in [1, 2] {
            assert_eq!(w.bytes(pe, 4096 + i * 4096, src.len()), src);
        }
    }
}

/// Gated mode: a counted signal waits aside for the parts before it, and what follows it to
/// the same PE is not held back — a later put lands while the signal still waits for an
/// earlier put's completion (slow completions), and the signal still never shows before the
/// data it counts.
#[test]
fn a_held_counted_signal_lets_later_puts_go() {
    let mut overtaken = 0;
    for seed in 1..=4 {
        let fab = InProcConfig {
            seed,
            cq_data_size: 0,
            land_delay: 0,
            completion_delay: 200,
            ..InProcConfig::default()
        };
        let mut w = World::new(2, fab, cfg());
        assert_eq!(w.engines[0].init.mode, SignalMode::Gated);
        let (a, b, sig) = (4096u64, 64 * 1024u64, 512 * 1024u64);
        let data = pattern(seed as usize, 3_000);
        let later = pattern(seed as usize + 9, 3_000);
        w.fill(0, 256 * 1024, &data);
        w.fill(0, 300 * 1024, &later);
        let put = |remote, local| Desc::PutCounted {
            pe: Pe::new(1),
            remote,
            local: Local::Heap(local),
            len: 3_000,
            sig,
        };
        w.push(0, put(a, 256 * 1024));
        w.push(
            0,
            Desc::SignalCounted {
                pe: Pe::new(1),
                remote: sig,
                value: (-2i64) as u64,
                op: SignalOp::Set,
            },
        );
        let last = w.push(
            0,
            Desc::Put {
                pe: Pe::new(1),
                remote: b,
                local: Local::Heap(300 * 1024),
                len: 3_000,
            },
        );
        let mut seen = false;
        w.run(
            |w| w.completed(0) >= last,
            |w| {
                if w.word(1, sig) != 0 {
                    assert_eq!(
                        w.bytes(1, a, 3_000),
                        data,
                        "seed {seed}: signal before its put"
                    );
                }
                // The later put landed before the first put completed (a gate would have
                // held it behind the signal, and the signal behind that completion).
                seen |= w.completed(0) == 0 && w.bytes(1, b, 3_000) == later;
            },
        );
        assert_eq!(w.word(1, sig), (-2i64) as u64, "seed {seed}");
        assert!(w.engines[0].init.holding.is_empty());
        overtaken += seen as usize;
    }
    assert!(
        overtaken > 0,
        "a later put never went while the signal was held"
    );
}

/// A counted round: its signal's value and its puts (offset, data).
type Round = (u64, Vec<(u64, Vec<u8>)>);

/// Pushes rounds of 1, 0, 2, 0 and 3 counted puts of `len` bytes to PE 1 (an empty round's
/// signal follows the previous signal with nothing between), each closed by a counted signal
/// setting word `sig` to -(puts) - 1 - 10 k for round k; returns them and the next offset.
fn push_rounds(w: &mut World, seed: u64, sig: u64, len: usize) -> (Vec<Round>, u64) {
    let mut rounds = Vec::new();
    let mut at = 4096u64;
    for (k, puts) in [1usize, 0, 2, 0, 3].into_iter().enumerate() {
        let mut mine = Vec::new();
        for i in 0..puts {
            let data = pattern(seed as usize * 10 + k * 3 + i, len);
            let local = w.source(true, 256 * 1024 + at, &data);
            w.push(
                0,
                Desc::PutCounted {
                    pe: Pe::new(1),
                    remote: at,
                    local,
                    len: len as u64,
                    sig,
                },
            );
            mine.push((at, data));
            at += 4096;
        }
        let value = (-(puts as i64) - 1 - 10 * k as i64) as u64;
        w.push(
            0,
            Desc::SignalCounted {
                pe: Pe::new(1),
                remote: sig,
                value,
                op: SignalOp::Set,
            },
        );
        rounds.push((value, mine));
    }
    (rounds, at)
}

/// Gated mode under back-pressure (one flight in the air per endpoint, slow completions, so a
/// released signal often cannot be posted at once): several counted signals to one word are
/// held at once and released in their order — the word never goes back to an earlier round's
/// value, and each value shows only after its round's data — and a fence after them keeps a
/// later put behind every one of them.
#[test]
fn held_signals_keep_their_order_and_fences_wait_for_them() {
    let mut most_held = 0;
    for seed in 1..=6 {
        let fab = InProcConfig {
            seed,
            cq_data_size: 0,
            land_delay: 20,
            completion_delay: 50,
            max_outstanding: 1,
            ..InProcConfig::default()
        };
        let mut w = World::new(2, fab, cfg());
        assert_eq!(w.engines[0].init.mode, SignalMode::Gated);
        let (sig, len) = (512 * 1024u64, 2_000);
        let (rounds, at) = push_rounds(&mut w, seed, sig, len);
        w.push(0, Desc::Fence);
        let after = pattern(seed as usize + 77, len);
        let local = w.source(true, 256 * 1024 + at, &after);
        let last = w.push(
            0,
            Desc::Put {
                pe: Pe::new(1),
                remote: at,
                local,
                len: len as u64,
            },
        );
        let mut reached = 0usize; // rounds whose value the word has shown
        w.run(
            |w| w.completed(0) >= last,
            |w| {
                let held = w.engines[0].init.peers[Pe::new(1)]
                    .queues
                    .iter()
                    .map(|q| q.held.len());
                most_held = most_held.max(held.max().unwrap_or(0));
                let v = w.word(1, sig);
                if v != 0 {
                    let k = rounds.iter().position(|(want, _)| *want == v);
                    let k = k.unwrap_or_else(|| panic!("seed {seed}: word {v:#x}"));
                    assert!(k + 1 >= reached, "seed {seed}: round {k} after a later one");
                    reached = reached.max(k + 1);
                    for (off, data) in &rounds[k].1 {
                        assert_eq!(&w.bytes(1, *off, len), data, "seed {seed}: round {k}");
                    }
                }
                if reached < rounds.len() {
                    assert_ne!(
                        w.bytes(1, at, len),
                        after,
                        "seed {seed}: the fence was passed"
                    );
                }
            },
        );
        assert_eq!(w.word(1, sig), rounds[rounds.len() - 1].0, "seed {seed}");
        assert_eq!(w.bytes(1, at, len), after);
        assert!(w.engines[0].init.holding.is_empty());
    }
    assert!(
        most_held >= 2,
        "never more than {most_held} signal held at once"
    );
}
