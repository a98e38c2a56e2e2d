//! Strong signals (`ProxyConfig::strong_signals`): a signal never shows before any put or `p`
//! that its ring issued to that PE before it, and a PE's signals apply in the order issued —
//! in every signal mode, with EFA's 4-byte remote CQ data among them.

use super::*;

const LEN: usize = 7_000;
const ROUNDS: usize = 10;
const SIG: u64 = 500 * 1024;

fn dst(i: usize) -> u64 {
    (4096 + 16 * 1024 * i) as u64
}

fn pword(i: usize) -> u64 {
    (400 * 1024 + 8 * i) as u64
}

/// Publishes round `i` on PE 0's ring: a put of `buf` (from the heap or raw memory), a `p`, then
/// a signal (even rounds) or a put-with-signal of `small` (odd ones) setting `SIG` to `i + 1`.
/// Returns the index past it.
fn push_round(w: &World, i: usize, buf: &[u8], small: &[u8]) -> u64 {
    // Half from the heap (one RMA part), half from raw memory (staged, 2 parts).
    let local = w.source(i % 2 == 0, 256 * 1024 + dst(i), buf);
    let put = Desc::Put {
        pe: Pe::new(1),
        remote: dst(i),
        local,
        len: buf.len() as u64,
    };
    w.push(0, put);
    let value = i as u64 + 1;
    let p = Desc::P {
        pe: Pe::new(1),
        remote: pword(i),
        value,
        width: 8,
    };
    w.push(0, p);
    let d = if i % 2 == 0 {
        Desc::Signal {
            pe: Pe::new(1),
            remote: SIG,
            value,
            op: SignalOp::Set,
        }
    } else {
        Desc::PutSignal {
            pe: Pe::new(1),
            remote: (450 * 1024 + 64 * i) as u64,
            local: Local::Raw(small.as_ptr() as u64),
            len: small.len() as u64,
            sig: SIG,
            value,
            op: SignalOp::Set,
        }
    };
    w.push(0, d)
}

/// `ROUNDS` rounds of (put, `p`, signal or put-with-signal) from PE 0 to PE 1. Returns the turns
/// at which the target showed a signal before an earlier write, or a smaller signal after a
/// larger one.
fn violations(fab: InProcConfig, strong: bool) -> usize {
    let pcfg = ProxyConfig {
        strong_signals: strong,
        ..cfg()
    };
    let mut w = World::new(2, fab, pcfg);
    let bufs: Vec<Vec<u8>> = (0..ROUNDS).map(|i| pattern(i + 50, LEN)).collect();
    let small: Vec<Vec<u8>> = (0..ROUNDS).map(|i| pattern(i + 90, 48)).collect();
    let mut last = 0;
    for i in 0..ROUNDS {
        last = push_round(&w, i, &bufs[i], &small[i]);
    }
    let mut bad = 0;
    let mut seen = 0;
    let check = |w: &World| {
        let v = w.word(1, SIG);
        let mut ok = v >= seen;
        seen = seen.max(v);
        for (j, b) in bufs.iter().enumerate().take(v as usize) {
            ok &= w.bytes(1, dst(j), LEN) == *b && w.word(1, pword(j)) == j as u64 + 1;
        }
        bad += usize::from(!ok);
    };
    w.run(|w| w.completed(0) >= last, check);
    if strong {
        assert_eq!(
            w.word(1, SIG),
            ROUNDS as u64,
            "the last signal is the last applied"
        );
        assert_eq!(
            w.engines[0].init.peers[Pe::new(1)].tags.in_use(),
            0,
            "every epoch's tag went back"
        );
        assert_eq!(
            w.engines[1].target.order.held(),
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
        assert_eq!(w.engines[0].init.mode, SignalMode::Tagged);
        assert!(w.engines[0].init.strong);
    }
}

/// A job of more PEs than EFA's 32-bit immediate can name is refused at start, naming the limit.
#[test]
fn too_many_pes_for_a_32_bit_immediate_are_refused() {
    let fabric = InProcFabric::new(1, efa_width(1));
    let caps = fabric.endpoint(Pe::new(0)).caps().clone();
    assert!(Engine::check_setup(&caps, Pe::new(0), 16384, 1, false).is_ok());
    let e = Engine::check_setup(&caps, Pe::new(0), 16385, 1, false).expect_err("refused");
    assert!(e.to_string().contains("16384 source PEs"), "{e}");
}
