//! Model checking of the ring protocol with loom (`RUSTFLAGS="--cfg loom"`): a CPU thread stands
//! in for the GPU producer. Every interleaving loom explores must deliver each operation exactly
//! once, whole, in reservation order, and quiet must see the completion counter reach its head.

#![cfg(loom)]

use loom::{sync::Arc, thread};
use pshmem_ring::{
    Completions, Consumer, Producer, RawSlot, Ring, WaitLimit,
    layout::{ctrl_make, op},
};

fn slot(p: u32, i: u64, nslots: u32) -> RawSlot {
    RawSlot {
        a: u64::from(p) << 32 | i,
        b: !(u64::from(p) << 32 | i),
        c: 7,
        pe: p,
        ctrl: ctrl_make(op::PUT, 0, 0, nslots),
    }
}

/// Consumes `ops` operations, checking each, and marks them complete as it goes.
fn consume(cons: &mut Consumer, ops: usize) -> Vec<(u32, u64)> {
    let mut got = Vec::new();
    let mut done = Completions::new();
    while got.len() < ops {
        let n = cons
            .poll(4, |idx, s| {
                assert_eq!(s[0].b, !s[0].a, "torn payload");
                assert_eq!(s[0].c, 7, "torn payload");
                got.push((s[0].pe, s[0].a & 0xffff_ffff));
                let id = done.push(idx + s.len() as u64);
                done.finish(id);
            })
            .unwrap();
        if let Some(c) = done.advance() {
            cons.set_completed(c);
        }
        if n == 0 {
            thread::yield_now();
        }
    }
    got
}

/// Spin loops (producers waiting for room, the consumer polling) make the state space
/// unbounded; a preemption bound keeps the search finite while still covering every
/// interleaving with up to that many preemptions (loom's recommended practice).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 100_000;
    b.check(f);
}

/// Runs producers (PE id, operation count) against one consumer on a ring of `capacity` and
/// checks that each producer's operations arrive once each, in order.
fn producers_and_consumer(capacity: usize, producers: &'static [(u32, u64)]) {
    let ring = Ring::new_host(capacity);
    let prod = Arc::new(Producer::new(ring.clone()));
    let handles: Vec<_> = producers
        .iter()
        .map(|&(p, count)| {
            let prod = prod.clone();
            thread::spawn(move || {
                let limit = WaitLimit::new(None);
                for i in 0..count {
                    prod.push(&[slot(p, i, 1)], &limit).unwrap();
                }
            })
        })
        .collect();
    let mut cons = Consumer::new(ring);
    let total = producers.iter().map(|p| p.1 as usize).sum();
    let got = consume(&mut cons, total);
    for h in handles {
        h.join().unwrap();
    }
    for &(p, count) in producers {
        let mine: Vec<u64> = got.iter().filter(|g| g.0 == p).map(|g| g.1).collect();
        assert_eq!(
            mine,
            (0..count).collect::<Vec<_>>(),
            "producer {p}: lost, duplicated or reordered"
        );
    }
}

/// Three operations through two slots: the producer must wait for the consumer to hand a slot
/// back (tail), and the commit bit must flip on the second lap.
#[test]
fn a_producer_wraps_a_two_slot_ring() {
    model(|| producers_and_consumer(2, &[(0, 3)]));
}

/// Two producers race for the head counter.
#[test]
fn two_producers_share_a_ring() {
    model(|| producers_and_consumer(2, &[(0, 1), (1, 1)]));
}

#[test]
fn two_slot_operation_and_quiet() {
    model(|| {
        let ring = Ring::new_host(2);
        let prod = Arc::new(Producer::new(ring.clone()));
        let p2 = prod.clone();
        let h = thread::spawn(move || {
            let limit = WaitLimit::new(None);
            let mut second = slot(0, 1, 1);
            second.ctrl = ctrl_make(op::NOP, 0, 0, 1);
            p2.push(&[slot(0, 0, 1)], &limit).unwrap();
            p2.push(&[slot(0, 1, 2), second], &limit).unwrap();
            p2.quiet(&limit).unwrap();
            assert!(p2.ring().completed() >= 3);
        });
        let mut cons = Consumer::new(ring);
        let got = consume(&mut cons, 2);
        h.join().unwrap();
        assert_eq!(got, vec![(0, 0), (0, 1)]);
    });
}

/// A batch of two operations published by one release, then a third operation on the next lap
/// of a two-slot ring: the consumer must see the batch whole and in order, and the producer
/// must wait for both slots to come back.
#[test]
fn a_batch_is_published_whole() {
    model(|| {
        let ring = Ring::new_host(2);
        let prod = Arc::new(Producer::new(ring.clone()));
        let p2 = prod.clone();
        let h = thread::spawn(move || {
            let limit = WaitLimit::new(None);
            p2.push_many(&[slot(0, 0, 1), slot(0, 1, 1)], &limit)
                .unwrap();
            p2.push(&[slot(0, 2, 1)], &limit).unwrap();
        });
        let mut cons = Consumer::new(ring);
        let got = consume(&mut cons, 3);
        h.join().unwrap();
        assert_eq!(got, vec![(0, 0), (0, 1), (0, 2)]);
    });
}
