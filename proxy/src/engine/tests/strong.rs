//! Strong signals (`ProxyConfig::strong_signals`): a signal never shows before any put or `p`
//! that its ring issued to that PE before it, and a PE's signals apply in the order issued —
//! in every signal mode, with EFA's 4-byte remote CQ data among them.

use super::*;

/// Ten rounds of (put, `p`, then a signal or a put-with-signal setting one word to the
/// round's number) from PE 0 to PE 1. Returns the turns at which the target showed a signal
/// before an earlier write, or a smaller signal after a larger one.
fn violations(fab: InProcConfig, strong: bool) -> usize {
    let pcfg = ProxyConfig {
        strong_signals: strong,
        ..cfg()
    };
    let mut w = World::new(2, fab, pcfg);
    let len = 7_000;
    let rounds = 10;
    let bufs: Vec<Vec<u8>> = (0..rounds).map(|i| pattern(i + 50, len)).collect();
    let small: Vec<Vec<u8>> = (0..rounds).map(|i| pattern(i + 90, 48)).collect();
    let dst = |i: usize| (4096 + 16 * 1024 * i) as u64;
    let pword = |i: usize| (400 * 1024 + 8 * i) as u64;
    let sig = 500 * 1024;
    let mut last = 0;
    for i in 0..rounds {
        // Half from the heap (one RMA part), half from raw memory (staged, 2 parts).
        let local = if i % 2 == 0 {
            let src = 256 * 1024 + dst(i);
            w.fill(0, src, &bufs[i]);
            Local::Heap(src)
        } else {
            Local::Raw(bufs[i].as_ptr() as u64)
        };
        let put = Desc::Put {
            pe: 1,
            remote: dst(i),
            local,
            len: len as u64,
        };
        w.push(0, put);
        let p = Desc::P {
            pe: 1,
            remote: pword(i),
            value: i as u64 + 1,
            width: 8,
        };
        w.push(0, p);
        let value = i as u64 + 1;
        let d = if i % 2 == 0 {
            Desc::Signal {
                pe: 1,
                remote: sig,
                value,
                op: SignalOp::Set,
            }
        } else {
            Desc::PutSignal {
                pe: 1,
                remote: (450 * 1024 + 64 * i) as u64,
                local: Local::Raw(small[i].as_ptr() as u64),
                len: 48,
                sig,
                value,
                op: SignalOp::Set,
            }
        };
        last = w.push(0, d);
    }
    let mut bad = 0;
    let mut seen = 0;
    let check = |w: &World| {
        let v = w.word(1, sig);
        let mut ok = v >= seen;
        seen = seen.max(v);
        for (j, b) in bufs.iter().enumerate().take(v as usize) {
            ok &= w.bytes(1, dst(j), len) == *b && w.word(1, pword(j)) == j as u64 + 1;
        }
        bad += usize::from(!ok);
    };
    w.run(|w| w.completed(0) >= last, check);
    if strong {
        assert_eq!(
            w.word(1, sig),
            rounds as u64,
            "the last signal is the last applied"
        );
        assert_eq!(
            w.engines[0].itags.in_use(1),
            0,
            "every epoch's tag went back"
        );
        assert_eq!(
            w.engines[1].order.held(),
            0,
            "nothing left held at the target"
        );
    }
    bad
}

#[test]
fn strong_signals_never_overtake_earlier_writes_or_signals() {
    for seed in 1..=8 {
        for (mode, fab) in modes(seed) {
            let n = violations(fab, true);
            assert_eq!(n, 0, "seed {seed}, {mode:?}: {n} turns out of order");
        }
    }
}

/// The check above can fail: without strong signals the reordering fabric lets a signal show
/// before an earlier put, or an older signal land after a newer one, for some seeds.
#[test]
fn without_strong_signals_the_fabric_reorders() {
    let mut n = 0;
    for seed in 1..=8 {
        n += violations(efa_width(seed), false);
    }
    assert!(n > 0, "no seed reordered: the strong test proves nothing");
}

/// The tagged modes really run as tagged (the strong machinery is in play, not a gate).
#[test]
fn strong_signals_are_tagged_on_both_widths() {
    for fab in [InProcConfig::default(), efa_width(3)] {
        let pcfg = ProxyConfig {
            strong_signals: true,
            ..cfg()
        };
        let w = World::new(2, fab, pcfg);
        assert_eq!(w.engines[0].mode, SignalMode::Tagged);
        assert!(w.engines[0].strong);
    }
}

/// A job of more PEs than EFA's 32-bit immediate can name is refused at start, naming the limit.
#[test]
fn too_many_pes_for_a_32_bit_immediate_are_refused() {
    let fabric = InProcFabric::new(1, efa_width(1));
    let caps = fabric.endpoint(0).caps().clone();
    assert!(Engine::check_setup(&caps, 0, 16384, 1, false).is_ok());
    let e = Engine::check_setup(&caps, 0, 16385, 1, false).expect_err("refused");
    assert!(e.to_string().contains("16384 source PEs"), "{e}");
}
