//! Tags running out: the immediate's tag space (2^18 per target with EFA's 4 bytes) shrunk to 4
//! tags, so that a burst of signals exhausts it.

use super::*;

/// The tagged fabrics (8 and 4 bytes of remote CQ data), with 4 tags from PE 0 to PE 1.
fn small_tag_worlds(seed: u64) -> Vec<World> {
    modes(seed)
        .into_iter()
        .filter(|(m, _)| *m == SignalMode::Tagged)
        .map(|(_, fab)| {
            let mut w = World::new(2, fab, cfg());
            w.engines[0].init.peers[Pe::new(1)].tags.shrink(2);
            w
        })
        .collect()
}

/// 40 puts-with-signal in one burst with 4 tags: the ring waits for acks to give tags back
/// (back-pressure, never a failure), and no signal shows before its data — a tag reused
/// before its ack would mix two signals' counts at the target and show one early.
#[test]
fn exhausted_tags_hold_the_ring_until_acks_give_them_back() {
    for seed in 1..=4 {
        for mut w in small_tag_worlds(seed) {
            let len = 3_000;
            let n = 40;
            let bufs: Vec<Vec<u8>> = (0..n).map(|i| pattern(i, len)).collect();
            let sig = |i: usize| 768 * 1024 + 8 * i as u64;
            let dst = |i: usize| 4096 + (len as u64 + 64) * i as u64;
            let mut last = 0;
            for (i, b) in bufs.iter().enumerate() {
                let local = w.source(i % 2 == 0, 384 * 1024 + dst(i), b);
                let d = Desc::PutSignal {
                    pe: Pe::new(1),
                    remote: dst(i),
                    local,
                    len: len as u64,
                    sig: sig(i),
                    value: i as u64 + 1,
                    op: SignalOp::Set,
                };
                last = w.push(0, d);
            }
            let mut waited = false;
            let check = |w: &World| {
                waited |= !w.engines[0].init.rings[0].stash.is_empty();
                assert!(w.engines[0].init.peers[Pe::new(1)].tags.in_use() <= 4);
                for (i, b) in bufs.iter().enumerate() {
                    if w.word(1, sig(i)) != 0 {
                        assert_eq!(&w.bytes(1, dst(i), len), b, "seed {seed}: signal {i} early");
                    }
                }
            };
            w.run(|w| w.completed(0) >= last, check);
            assert!(w.health[0].fault().is_none(), "{:?}", w.health[0].fault());
            assert!(waited, "seed {seed}: the burst never waited for a tag");
            for i in 0..n {
                assert_eq!(w.word(1, sig(i)), i as u64 + 1, "seed {seed}");
            }
            assert_eq!(w.engines[0].init.peers[Pe::new(1)].tags.in_use(), 0);
        }
    }
}

/// Counted rounds opened on 5 signal words with 4 tags, their signals later in the same ring:
/// no tag can ever come back, and the job fails naming the PE instead of hanging.
#[test]
fn tags_only_the_waiting_ring_could_free_fail_the_job() {
    for mut w in small_tag_worlds(1) {
        for k in 0..5u64 {
            w.push(
                0,
                Desc::PutCounted {
                    pe: Pe::new(1),
                    remote: 4096 + 1024 * k,
                    local: Local::Heap(64 * 1024),
                    len: 512,
                    sig: 512 * 1024 + 8 * k,
                },
            );
        }
        for k in 0..5u64 {
            w.push(
                0,
                Desc::SignalCounted {
                    pe: Pe::new(1),
                    remote: 512 * 1024 + 8 * k,
                    value: u64::MAX - 1,
                    op: SignalOp::Set,
                },
            );
        }
        let f = w.fault_after(200);
        assert_eq!((f.code, f.pe), (error::OP_FAILED, Some(1)), "{f:?}");
        assert!(f.detail.contains("no tag can come back"), "{}", f.detail);
    }
}

/// Puts with signal, counted puts with their counted signal and plain signals take no round
/// trip for ordering on a tagged fabric (8 or 4 bytes of CQ data): no gate and no hold waits
/// (the count the trace reports as `gates` and `holds`); without CQ data they do.
#[test]
fn tagged_signals_wait_for_no_completion() {
    for (mode, fab) in modes(3) {
        let mut w = World::new(2, fab, cfg());
        for i in 0..8u64 {
            let at = 4096 + 4096 * i;
            w.push(
                0,
                Desc::PutSignal {
                    pe: Pe::new(1),
                    remote: at,
                    local: Local::Heap(256 * 1024 + at),
                    len: 2048,
                    sig: 512 * 1024 + 8 * i,
                    value: 1,
                    op: SignalOp::Add,
                },
            );
            w.push(
                0,
                Desc::PutCounted {
                    pe: Pe::new(1),
                    remote: at + 2048,
                    local: Local::Heap(256 * 1024 + at),
                    len: 1024,
                    sig: 600 * 1024,
                },
            );
            w.push(
                0,
                Desc::Signal {
                    pe: Pe::new(1),
                    remote: 640 * 1024 + 8 * i,
                    value: 7,
                    op: SignalOp::Set,
                },
            );
        }
        let last = w.push(
            0,
            Desc::SignalCounted {
                pe: Pe::new(1),
                remote: 600 * 1024,
                value: (-9i64) as u64,
                op: SignalOp::Set,
            },
        );
        w.run(|w| w.completed(0) >= last, |_| {});
        assert_eq!(
            w.word(1, 600 * 1024),
            (-9i64) as u64,
            "{mode:?}: the counted signal"
        );
        assert_eq!(
            w.word(1, 512 * 1024 + 8 * 7),
            1,
            "{mode:?}: the last put's signal"
        );
        let g = w.engines[0].init.gated;
        match mode {
            SignalMode::Tagged | SignalMode::Ordered => {
                assert_eq!((g.gates, g.holds), (0, 0), "{mode:?}: a round trip")
            }
            SignalMode::Gated => assert!(g.gates + g.holds > 0, "{mode:?}: {g:?}"),
        }
    }
}

/// A fabric without remote CQ data runs gated, and the warning it gets (once per process)
/// names the fabric and the cost.
#[test]
fn the_gated_fallback_says_what_it_costs() {
    let (mode, fab) = modes(1)[2].clone();
    let w = World::new(2, fab, cfg());
    assert_eq!(
        (mode, w.engines[0].init.mode),
        (SignalMode::Gated, SignalMode::Gated)
    );
    let text = super::super::gated_warning(w.engines[0].link.t.caps());
    assert!(text.contains(&w.engines[0].link.caps.name), "{text}");
    assert!(text.contains("round trip"), "{text}");
}
