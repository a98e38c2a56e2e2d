//! Stress: ≥ 10^8 descriptors (PSHMEM_STRESS_DESCRIPTORS overrides) from concurrent producers
//! through a 64-slot ring, one- and two-slot operations mixed so that operations straddle the
//! wrap. The consumer proves that none is lost, duplicated or torn: each producer's sequence
//! numbers arrive consecutively, and every payload word matches what its sequence number
//! implies. Producers also quiet now and then, which exercises the completion counter; one of
//! them publishes batches (`push_many`).

#![cfg(not(loom))]

use std::{sync::Arc, thread, time::Instant};

use pshmem_ring::{
    Completions, Consumer, Producer, RawSlot, Ring, WaitLimit,
    layout::{ctrl_make, op},
};

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn slots_for(p: u64, seq: u64) -> ([RawSlot; 2], usize) {
    let key = (p << 48) | seq;
    let two = mix(key) % 8 == 0;
    let n = if two { 2 } else { 1 };
    let first = RawSlot {
        a: key,
        b: mix(key),
        c: !key,
        pe: p as u32,
        ctrl: ctrl_make(op::PUT, 0, 0, n as u32),
    };
    let second = RawSlot {
        a: mix(key ^ 1),
        b: mix(key ^ 2),
        c: 0,
        pe: p as u32,
        ctrl: ctrl_make(op::NOP, 0, 0, 1),
    };
    ([first, second], n)
}

#[test]
fn no_descriptor_is_lost_duplicated_or_torn() {
    let total: u64 = std::env::var("PSHMEM_STRESS_DESCRIPTORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000_000);
    let producers = 3u64;
    let per = total / producers;
    let ring = Ring::new_host(64);
    let prod = Arc::new(Producer::new(ring.clone()));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let prod = prod.clone();
            thread::spawn(move || {
                let limit = WaitLimit::new(Some(std::time::Duration::from_secs(120)));
                // The last producer publishes batches of 1..=8 operations with one release.
                let batching = p == producers - 1;
                let mut batch = Vec::new();
                let mut ops = 0;
                for seq in 0..per {
                    let (s, n) = slots_for(p, seq);
                    if !batching {
                        prod.push(&s[..n], &limit).expect("push");
                    } else {
                        batch.extend_from_slice(&s[..n]);
                        ops += 1;
                        if ops > mix(seq ^ 0x5a5a) % 8 || seq + 1 == per {
                            prod.push_many(&batch, &limit).expect("push_many");
                            batch.clear();
                            ops = 0;
                        }
                    }
                    if seq % 1_000_003 == 0 {
                        prod.quiet(&limit).expect("quiet");
                    }
                }
            })
        })
        .collect();
    let mut cons = Consumer::new(ring.clone());
    let mut next = vec![0u64; producers as usize];
    let mut done = Completions::new();
    let mut seen = 0u64;
    let mut bad: Option<String> = None;
    while seen < per * producers {
        let got = cons
            .poll(256, |idx, s| {
                let key = s[0].a;
                let (p, seq) = (key >> 48, key & ((1 << 48) - 1));
                let (want, n) = slots_for(p, seq);
                let ok = p < producers
                    && seq == next[p as usize]
                    && s.len() == n
                    && s.iter().zip(&want).all(|(g, w)| {
                        g.a == w.a && g.b == w.b && g.c == w.c && g.pe == w.pe && g.ctrl == w.ctrl
                    });
                if !ok && bad.is_none() {
                    bad = Some(format!(
                        "at index {idx}: producer {p} seq {seq}, expected seq {:?}: {s:?}",
                        next.get(p as usize)
                    ));
                }
                if let Some(x) = next.get_mut(p as usize) {
                    *x = seq + 1;
                }
                let id = done.push(idx + s.len() as u64);
                done.finish(id);
            })
            .expect("poll");
        if let Some(b) = &bad {
            panic!("{b}");
        }
        if let Some(c) = done.advance() {
            cons.set_completed(c);
        }
        seen += got as u64;
        if got == 0 {
            std::thread::yield_now();
        }
    }
    for h in handles {
        h.join().expect("producer");
    }
    assert_eq!(
        next,
        vec![per; producers as usize],
        "every sequence number arrived once"
    );
    let mut extra = 0;
    cons.poll(16, |_, _| extra += 1).expect("poll");
    assert_eq!(extra, 0, "nothing beyond what was pushed");
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "stress: {} descriptors in {secs:.2} s ({:.1} M/s)",
        per * producers,
        (per * producers) as f64 / secs / 1e6
    );
}

#[test]
fn a_raised_error_ends_a_producer_waiting_for_room() {
    let ring = Ring::new_host(4);
    let prod = Producer::new(ring.clone());
    let limit = WaitLimit::new(Some(std::time::Duration::from_secs(30)));
    let (s, _) = slots_for(0, 0);
    for _ in 0..4 {
        prod.push(&s[..1], &limit).unwrap();
    }
    let r2 = ring.clone();
    let t = thread::spawn(move || {
        thread::sleep(std::time::Duration::from_millis(50));
        r2.raise(pshmem_abi::error::PEER_DEAD, Some(3));
    });
    let err = prod.push(&s[..1], &limit).unwrap_err();
    t.join().unwrap();
    assert_eq!(
        err,
        pshmem_ring::RingError::Raised {
            code: pshmem_abi::error::PEER_DEAD,
            pe: Some(3)
        }
    );
    assert!(ring.wait_completed(4, &limit).is_err());
}

#[test]
fn a_stalled_consumer_times_out_the_producer() {
    let ring = Ring::new_host(2);
    let prod = Producer::new(ring);
    let (s, _) = slots_for(0, 0);
    let limit = WaitLimit::new(Some(std::time::Duration::from_millis(100)));
    prod.push(&s[..1], &limit).unwrap();
    prod.push(&s[..1], &limit).unwrap();
    let t = Instant::now();
    let err = prod.push(&s[..1], &limit).unwrap_err();
    assert!(
        matches!(err, pshmem_ring::RingError::Timeout { .. }),
        "{err}"
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn malformed_or_oversized_batches_are_refused() {
    let ring = Ring::new_host(4);
    let prod = Producer::new(ring);
    let limit = WaitLimit::new(Some(std::time::Duration::from_secs(5)));
    let (s, _) = slots_for(0, 0);
    let one = s[0];
    let mut one = one;
    one.ctrl = ctrl_make(op::PUT, 0, 0, 1);
    let err = prod.push_many(&[one; 5], &limit).unwrap_err();
    assert!(
        matches!(
            err,
            pshmem_ring::RingError::BatchTooLarge {
                slots: 5,
                capacity: 4
            }
        ),
        "{err}"
    );
    // A two-slot operation cut off at the end of the batch.
    let mut two = one;
    two.ctrl = ctrl_make(op::PUT, 0, 0, 2);
    let err = prod.push_many(&[one, two], &limit).unwrap_err();
    assert!(
        matches!(err, pshmem_ring::RingError::BadSlotCount { nslots: 2 }),
        "{err}"
    );
    // Nothing was reserved by the refused batches.
    assert_eq!(prod.head(), 0);
    assert_eq!(prod.push_many(&[one, one], &limit).unwrap(), 2);
}
