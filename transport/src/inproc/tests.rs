//! Unit tests: landings and contexts, seeded reproducibility, faults and back-pressure.

use super::*;
use crate::{Event, LocalMem, LocalRef, PostError, RemoteRef, Transport};

fn pair(cfg: InProcConfig) -> (InProcFabric, Vec<InProcTransport>) {
    let fab = InProcFabric::new(2, cfg);
    let ts = Pe::all(2).map(|pe| fab.endpoint(pe)).collect();
    (fab, ts)
}

fn drain(ts: &mut [InProcTransport], fab: &InProcFabric) -> Vec<(usize, u64)> {
    let mut seen = Vec::new();
    for _ in 0..100 {
        for (pe, t) in ts.iter_mut().enumerate() {
            t.poll(&mut |e| {
                if let Event::Done { ctx } = e {
                    seen.push((pe, ctx));
                }
            })
            .unwrap();
        }
        if fab.pending() == 0 {
            break;
        }
    }
    seen
}

#[test]
fn writes_land_and_complete_with_their_contexts() {
    let (fab, mut ts) = pair(InProcConfig::default());
    let mut a = vec![7u8; 256];
    let mut b = vec![0u8; 256];
    // SAFETY: both buffers outlive the transports' use of them (drained below).
    let (ma, mb) = unsafe {
        (
            ts[0].mr_reg(LocalMem {
                ptr: a.as_mut_ptr(),
                len: 256,
                kind: crate::MemKind::Host,
            }),
            ts[1].mr_reg(LocalMem {
                ptr: b.as_mut_ptr(),
                len: 256,
                kind: crate::MemKind::Host,
            }),
        )
    };
    let blob = ts[1].mr_export(mb.unwrap());
    let rb = ts[0].mr_import(Pe::new(1), &blob).unwrap();
    for i in 0..4u64 {
        let l = LocalRef {
            mr: ma.as_ref().copied().unwrap(),
            offset: (i * 64) as usize,
        };
        let r = RemoteRef {
            mr: rb,
            offset: i * 64,
        };
        // SAFETY: `a` is registered and unchanged until completion.
        unsafe { ts[0].write(Pe::new(1), l, r, 64, 100 + i) }.unwrap();
    }
    let mut seen = drain(&mut ts, &fab);
    seen.sort_unstable();
    assert_eq!(seen, (0..4).map(|i| (0, 100 + i)).collect::<Vec<_>>());
    assert_eq!(b, a);
}

#[test]
fn the_same_seed_gives_the_same_order() {
    let order = |seed| {
        let (fab, mut ts) = pair(InProcConfig {
            seed,
            ..InProcConfig::default()
        });
        for i in 0..16 {
            ts[0].send(Pe::new(1), &[i], u64::from(i)).unwrap();
        }
        drain(&mut ts, &fab)
    };
    assert_eq!(order(7), order(7));
    assert_ne!(order(7), order(8), "another seed, another order");
}

#[test]
fn dead_peers_and_injected_failures_fail() {
    let (fab, mut ts) = pair(InProcConfig::default());
    fab.fail_next(Pe::new(0), Pe::new(1));
    ts[0].send(Pe::new(1), b"x", 1).unwrap();
    let mut failed = Vec::new();
    for _ in 0..20 {
        ts[0]
            .poll(&mut |e| {
                if let Event::Failed { ctx, error } = e {
                    failed.push((ctx, error.pe()));
                }
            })
            .unwrap();
    }
    assert_eq!(failed, vec![(1, Some(Pe::new(1)))]);
    ts[0].fail_peer(Pe::new(1), "test");
    assert!(matches!(
        ts[0].send(Pe::new(1), b"x", 2),
        Err(PostError::Failed(_))
    ));
}

#[test]
fn back_pressure_past_the_outstanding_limit() {
    let (_fab, mut ts) = pair(InProcConfig {
        max_outstanding: 2,
        ..InProcConfig::default()
    });
    ts[0].send(Pe::new(1), b"a", 1).unwrap();
    ts[0].send(Pe::new(1), b"b", 2).unwrap();
    assert!(matches!(
        ts[0].send(Pe::new(1), b"c", 3),
        Err(PostError::Retry)
    ));
}
