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
                            pe: 1,
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
                        pe: 1,
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
                assert_eq!(w.engines[0].itags.in_use(1), 0, "seed {seed}, {mode:?}");
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
        for pe in [1, 2] {
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
                let now = w.engines[0].pe_inflight[pe];
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
