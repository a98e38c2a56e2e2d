//! Unit tests of the engine: whole proxies of several PEs in one thread, over the deterministic
//! in-process fabric ([`pshmem_transport::inproc`]), stepped turn by turn. Each test checks its
//! invariant after every turn, for several seeds of the fabric's reordering and delays; a
//! failure names its seed.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use pshmem_abi::error;
use pshmem_ring::{AmoOp, Desc, Local, Producer, Ring, SignalOp, WaitLimit};
use pshmem_transport::{
    LocalMem, MemKind, Pe, Transport,
    inproc::{InProcConfig, InProcFabric},
};

use super::{
    Engine, SignalMode,
    ctx::{Ctx, PartRef},
    exclusive::JobSlot,
};
use crate::{Health, HeapMem, ProxyConfig, ProxySetup, slab::GenSlab};

const HEAP: usize = 1 << 20;

mod counted;
mod fence;
mod stash;
mod strong;
mod tags;

/// PEs with their engines, rings and heaps, on one in-process fabric.
struct World {
    fabric: InProcFabric,
    engines: Vec<Engine>,
    producers: Vec<Producer>,
    health: Vec<Arc<Health>>,
    heaps: Vec<HeapMem>,
    /// Heap memory (freed after the engines: field order).
    _mem: Vec<Vec<u64>>,
    seed: u64,
}

impl World {
    fn new(n: usize, fab: InProcConfig, cfg: ProxyConfig) -> Self {
        let seed = fab.seed;
        let fabric = InProcFabric::new(n, fab);
        let mut mem: Vec<Vec<u64>> = (0..n).map(|_| vec![0u64; HEAP / 8]).collect();
        let heaps: Vec<HeapMem> = mem
            .iter_mut()
            // SAFETY: the memory outlives every use of the view (field order of World).
            .map(|m| unsafe { HeapMem::new(m.as_mut_ptr().cast(), HEAP) })
            .collect();
        let mut ts: Vec<Box<dyn Transport>> = (0..n)
            .map(|pe| Box::new(fabric.endpoint(Pe::from_idx(pe))) as Box<dyn Transport>)
            .collect();
        let mrs: Vec<_> = ts
            .iter_mut()
            .zip(&heaps)
            .map(|(t, h)| {
                let mem = LocalMem {
                    ptr: h.base(),
                    len: h.len(),
                    kind: MemKind::Host,
                };
                // SAFETY: the heap outlives the transport (field order of World).
                unsafe { t.mr_reg(mem) }.expect("register the heap")
            })
            .collect();
        let blobs: Vec<Vec<u8>> = ts.iter().zip(&mrs).map(|(t, &m)| t.mr_export(m)).collect();
        let (mut engines, mut producers, mut health) = (Vec::new(), Vec::new(), Vec::new());
        for (pe, mut t) in ts.into_iter().enumerate() {
            let remote_heaps = blobs
                .iter()
                .enumerate()
                .map(|(q, b)| t.mr_import(Pe::from_idx(q), b).expect("import"))
                .collect();
            let ring = Ring::new_host(256);
            let h = Health::new();
            h.watch([ring.clone()]);
            let setup = ProxySetup {
                transport: t,
                heap: heaps[pe],
                heap_mr: mrs[pe],
                remote_heaps,
                rings: vec![ring.clone()],
                device: None,
                device_registered: false,
            };
            let stop = Arc::new(AtomicBool::new(false));
            let jobs = Arc::new(JobSlot::default());
            let e = Engine::new(setup, cfg.clone(), h.clone(), stop, jobs).expect("engine");
            engines.push(e);
            producers.push(Producer::new(ring));
            health.push(h);
        }
        Self {
            fabric,
            engines,
            producers,
            health,
            heaps,
            _mem: mem,
            seed,
        }
    }

    /// Publishes `d` on `pe`'s ring; returns the index past it (finished once `completed`
    /// reaches it).
    fn push(&self, pe: usize, d: Desc) -> u64 {
        let (slots, n) = d.encode();
        let limit = WaitLimit::new(Some(Duration::from_secs(1)));
        self.producers[pe]
            .push(&slots[..n], &limit)
            .expect("room in the ring")
    }

    fn completed(&self, pe: usize) -> u64 {
        self.producers[pe].ring().completed()
    }

    /// One turn of every engine.
    fn step(&mut self) {
        for e in &mut self.engines {
            e.turn();
        }
    }

    /// Steps until `done` holds, checking `invariant` after every turn.
    /// Steps every engine `turns` times, then the fault PE 0's job raised (the test fails if
    /// none: a fault, not a hang).
    fn fault_after(&mut self, turns: usize) -> crate::Fault {
        for _ in 0..turns {
            self.step();
        }
        self.health[0].fault().expect("a fault, not a hang")
    }

    fn run(&mut self, mut done: impl FnMut(&World) -> bool, mut invariant: impl FnMut(&World)) {
        for _ in 0..20_000 {
            self.step();
            invariant(self);
            if done(self) {
                return;
            }
        }
        panic!(
            "seed {}: not done after 20000 turns (faults: {:?})",
            self.seed,
            self.health.iter().map(|h| h.fault()).collect::<Vec<_>>()
        );
    }

    fn bytes(&self, pe: usize, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        // SAFETY: `v` is a live buffer of `len` bytes; the view checks the range.
        unsafe { self.heaps[pe].read_to_raw(off, v.as_mut_ptr(), len) }.expect("in the heap");
        v
    }

    fn word(&self, pe: usize, off: u64) -> u64 {
        self.heaps[pe].load(off, true).expect("in the heap")
    }

    /// A put's source on PE 0: `data` copied into the heap at `at` (`heap`), or the raw buffer
    /// itself (which the proxy stages).
    fn source(&self, heap: bool, at: u64, data: &[u8]) -> Local {
        if heap {
            self.fill(0, at, data);
            Local::Heap(at)
        } else {
            Local::Raw(data.as_ptr() as u64)
        }
    }

    fn fill(&self, pe: usize, off: u64, data: &[u8]) {
        // SAFETY: `data` is live; the view checks the range.
        unsafe { self.heaps[pe].write_from_raw(off, data.as_ptr(), data.len()) }
            .expect("in the heap");
    }
}

fn cfg() -> ProxyConfig {
    ProxyConfig {
        staging_chunk: 4096,
        staging_chunks: 4,
        max_inflight: 16,
        ..ProxyConfig::default()
    }
}

fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 131 + j * 7 + 1) as u8).collect()
}

/// The fabric in each signal mode: unordered with 8 bytes of remote CQ data (tagged signals),
/// with EFA's 4 (tagged, the 32-bit layout), without (gates), ordered.
fn modes(seed: u64) -> [(SignalMode, InProcConfig); 4] {
    let base = InProcConfig {
        seed,
        ..InProcConfig::default()
    };
    [
        (SignalMode::Tagged, base.clone()),
        (SignalMode::Tagged, efa_width(seed)),
        (
            SignalMode::Gated,
            InProcConfig {
                cq_data_size: 0,
                ..base.clone()
            },
        ),
        (
            SignalMode::Ordered,
            InProcConfig {
                reorder: false,
                land_delay: 0,
                ..base
            },
        ),
    ]
}

/// The unordered fabric with 4 bytes of remote CQ data, as EFA's.
fn efa_width(seed: u64) -> InProcConfig {
    InProcConfig {
        seed,
        cq_data_size: 4,
        ..InProcConfig::default()
    }
}

/// A part's slab slot reused 2^28 times gets a generation with bit 28 set. The send of a
/// request (an AMO, a signal, a staged get) carries that part in its context; its completion
/// must still be read as a request's send, never as the completion of a staged write (whose
/// chunk it would free a second time: on the old layout, generation bit 28 was context bit 60,
/// the staged path's tag).
#[test]
fn reused_slab_slot_is_never_read_as_staged_write() {
    let mut parts = GenSlab::new();
    let mut key = parts.insert(());
    for _ in 0..1u64 << 28 {
        parts.remove(key);
        key = parts.insert(());
    }
    assert_eq!(key.generation(), 1 << 28);
    let send = Ctx::Request(PartRef::Tracked(key));
    assert_eq!(
        Ctx::decode(send.encode()),
        Some(send),
        "the send of request {key:?} is read as something else"
    );
    let part = Ctx::Part(PartRef::Tracked(key));
    assert_eq!(Ctx::decode(part.encode()), Some(part));
}

/// Put-with-signal, from the heap and from raw buffers split into several parts: at every turn,
/// a signal that is visible at the target has all of its data there, in every signal mode.
#[test]
fn put_with_signal_never_shows_the_signal_before_its_data() {
    for seed in 1..=6 {
        for (mode, fab) in modes(seed) {
            let mut w = World::new(2, fab, cfg());
            assert_eq!(w.engines[0].init.mode, mode);
            let len = 10_000;
            let bufs: Vec<Vec<u8>> = (0..12).map(|i| pattern(i, len)).collect();
            let sig = |i: usize| 512 * 1024 + 8 * i as u64;
            let dst = |i: usize| (16 * 1024 * i) as u64 + 4096;
            let mut last = 0;
            for (i, b) in bufs.iter().enumerate() {
                // Half from the heap (one RMA part), half from raw memory (staged, 3 parts).
                let local = w.source(i % 2 == 0, 256 * 1024 + dst(i), b);
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
            let check = |w: &World| {
                for (i, b) in bufs.iter().enumerate() {
                    if w.word(1, sig(i)) != 0 {
                        assert_eq!(
                            &w.bytes(1, dst(i), len),
                            b,
                            "seed {seed}, {mode:?}: signal {i} before its data"
                        );
                    }
                }
            };
            w.run(|w| w.completed(0) >= last, check);
            for i in 0..bufs.len() {
                assert_eq!(w.word(1, sig(i)), i as u64 + 1, "seed {seed}, {mode:?}");
            }
            // Every signal was acked: every tag went back.
            assert_eq!(
                w.engines[0].init.peers[Pe::new(1)].tags.in_use(),
                0,
                "seed {seed}, {mode:?}"
            );
        }
    }
}

/// A fence orders the operations to one PE and stalls no other: with PE 1's link held, work
/// after the fence still reaches PE 2, and the flag after the fence never lands at PE 1 before
/// the data before it.
#[test]
fn fence_orders_one_destination_and_stalls_no_other() {
    for seed in 1..=6 {
        let mut w = World::new(3, modes(seed)[0].1.clone(), cfg());
        let data = pattern(seed as usize, 20_000);
        w.fill(0, 8192, &data);
        w.fabric.hold(Pe::new(1), true);
        // Four parts in flight to PE 1 before the fence: one from the heap, three staged.
        w.push(
            0,
            Desc::Put {
                pe: Pe::new(1),
                remote: 8192,
                local: Local::Heap(8192),
                len: 8192,
            },
        );
        w.push(
            0,
            Desc::Put {
                pe: Pe::new(1),
                remote: 8192 + 8192,
                local: Local::Raw(data[8192..].as_ptr() as u64),
                len: (data.len() - 8192) as u64,
            },
        );
        w.push(0, Desc::Fence);
        let p = |pe: u32, value| Desc::P {
            pe: Pe::new(pe),
            remote: 64,
            value,
            width: 8,
        };
        w.push(0, p(1, 7));
        let last = w.push(0, p(2, 9));
        for _ in 0..200 {
            w.step();
        }
        assert_eq!(w.word(2, 64), 9, "seed {seed}: the fence stalled PE 2");
        assert_eq!(w.word(1, 64), 0, "seed {seed}: PE 1's link is held");
        w.fabric.hold(Pe::new(1), false);
        let check = |w: &World| {
            if w.word(1, 64) == 7 {
                assert_eq!(w.bytes(1, 8192, data.len()), data, "seed {seed}");
            }
        };
        w.run(|w| w.completed(0) >= last, check);
        assert_eq!(w.word(1, 64), 7);
    }
}

/// Multi-part puts and gets to several PEs complete out of order at the transport; the ring's
/// `completed` counter only passes an operation once its effect is visible.
#[test]
fn parts_completing_out_of_order_finish_in_ring_order() {
    for seed in 1..=6 {
        let mut w = World::new(4, modes(seed)[0].1.clone(), cfg());
        let len = 9_000;
        for pe in 1..4 {
            w.fill(pe, 4096, &pattern(pe, len));
        }
        let mut gets: Vec<Vec<u8>> = (0..9).map(|_| vec![0u8; len]).collect();
        let sources: Vec<Vec<u8>> = (0..9).map(|i| pattern(100 + i, len)).collect();
        let mut ops = Vec::new();
        for i in 0..9 {
            let pe = Pe::new(1 + (i % 3) as u32);
            let put = Desc::Put {
                pe,
                remote: 65536 + (i * 16384) as u64,
                local: Local::Raw(sources[i].as_ptr() as u64),
                len: len as u64,
            };
            let get = Desc::Get {
                pe,
                remote: 4096,
                local: Local::Raw(gets[i].as_mut_ptr() as u64),
                len: len as u64,
            };
            ops.push((w.push(0, put), i, pe, true));
            ops.push((w.push(0, get), i, pe, false));
        }
        let gets_at: Vec<u64> = gets.iter().map(|g| g.as_ptr() as u64).collect();
        let check = |w: &World| {
            let done = w.completed(0);
            for &(end, i, pe, put) in &ops {
                if end > done {
                    continue;
                }
                if put {
                    let got = w.bytes(pe.idx(), 65536 + (i * 16384) as u64, len);
                    assert_eq!(got, sources[i], "seed {seed}: put {i} completed early");
                } else {
                    // SAFETY: the get finished (completed passed it): nothing writes the
                    // buffer any more, and it is live.
                    let got = unsafe { std::slice::from_raw_parts(gets_at[i] as *const u8, len) };
                    assert_eq!(got, &pattern(pe.idx(), len)[..], "seed {seed}: get {i}");
                }
            }
        };
        let last = ops.last().expect("ops").0;
        w.run(|w| w.completed(0) >= last, check);
        drop(gets);
    }
}

/// AMOs from two PEs on one word are atomic with respect to each other, and fetching ones
/// return distinct old values to their result cells.
#[test]
fn amos_from_several_pes_are_atomic_and_fetch() {
    for seed in 1..=4 {
        let mut w = World::new(3, modes(seed)[0].1.clone(), cfg());
        let mut cells = vec![[0u64; 20]; 2];
        let mut last = [0u64; 2];
        for (k, row) in cells.iter_mut().enumerate() {
            for c in row.iter_mut() {
                let d = Desc::Amo {
                    pe: Pe::new(2),
                    remote: 128,
                    op: AmoOp::FetchAdd,
                    wide: true,
                    operand: 1,
                    compare: 0,
                    result: c as *mut u64 as u64,
                };
                last[k] = w.push(k, d);
            }
        }
        w.run(
            |w| w.completed(0) >= last[0] && w.completed(1) >= last[1],
            |_| {},
        );
        assert_eq!(w.word(2, 128), 40, "seed {seed}");
        let mut olds: Vec<u64> = cells.iter().flatten().copied().collect();
        olds.sort_unstable();
        assert_eq!(olds, (0..40).collect::<Vec<_>>(), "seed {seed}");
    }
}

/// A tight transport (two flights at a time), little flow control and two staging chunks:
/// everything is retried and lands, nothing is lost or doubled.
#[test]
fn back_pressure_loses_nothing() {
    let fab = InProcConfig {
        max_outstanding: 2,
        ..InProcConfig::default()
    };
    let pcfg = ProxyConfig {
        staging_chunks: 2,
        max_inflight: 3,
        ..cfg()
    };
    let mut w = World::new(2, fab, pcfg);
    let srcs: Vec<Vec<u8>> = (0..8).map(|i| pattern(i, 9_000)).collect();
    let mut last = 0;
    for (i, s) in srcs.iter().enumerate() {
        let put = Desc::Put {
            pe: Pe::new(1),
            remote: (i * 16384) as u64 + 4096,
            local: Local::Raw(s.as_ptr() as u64),
            len: s.len() as u64,
        };
        w.push(0, put);
        let add = Desc::Amo {
            pe: Pe::new(1),
            remote: 256,
            op: AmoOp::Add,
            wide: false,
            operand: 1,
            compare: 0,
            result: 0,
        };
        last = w.push(0, add);
    }
    w.run(|w| w.completed(0) >= last, |_| {});
    for (i, s) in srcs.iter().enumerate() {
        assert_eq!(&w.bytes(1, (i * 16384) as u64 + 4096, s.len()), s);
    }
    assert_eq!(w.heaps[1].load(256, false).unwrap(), 8);
}

/// Operations on the PE itself apply at once, and empty transfers finish without a part.
#[test]
fn own_and_empty_operations_finish_at_once() {
    let mut w = World::new(2, InProcConfig::default(), cfg());
    let src = pattern(3, 100);
    w.push(
        0,
        Desc::Put {
            pe: Pe::new(0),
            remote: 4096,
            local: Local::Raw(src.as_ptr() as u64),
            len: 100,
        },
    );
    let empty = Desc::Get {
        pe: Pe::new(1),
        remote: 4096,
        local: Local::Heap(8192),
        len: 0,
    };
    let last = w.push(0, empty);
    w.step();
    assert_eq!(w.completed(0), last, "finished in the first turn");
    assert_eq!(w.bytes(0, 4096, 100), src);
    assert_eq!(w.fabric.pending(), 0, "nothing went on the wire");
}

/// A failed transfer fails the job naming the PE it went to, and raises the ring.
#[test]
fn a_failed_transfer_names_its_pe() {
    let mut w = World::new(3, InProcConfig::default(), cfg());
    w.fabric.fail_next(Pe::new(0), Pe::new(2));
    w.push(
        0,
        Desc::Put {
            pe: Pe::new(2),
            remote: 4096,
            local: Local::Heap(8192),
            len: 4096,
        },
    );
    let f = w.fault_after(50);
    assert_eq!((f.code, f.pe), (error::OP_FAILED, Some(2)), "{f:?}");
    assert!(f.detail.contains("PE 2"), "{}", f.detail);
    assert!(!f.detail.contains("Some("), "{}", f.detail);
    assert!(
        w.producers[0].ring().error().is_some(),
        "the ring is raised"
    );
}

/// A request the target refuses (an AMO outside its heap) fails the initiator's job, naming the
/// target.
#[test]
fn a_refused_request_names_the_target() {
    let mut w = World::new(2, InProcConfig::default(), cfg());
    w.push(
        0,
        Desc::Amo {
            pe: Pe::new(1),
            remote: HEAP as u64,
            op: AmoOp::Add,
            wide: true,
            operand: 1,
            compare: 0,
            result: 0,
        },
    );
    let f = w.fault_after(50);
    assert_eq!((f.code, f.pe), (error::OP_FAILED, Some(1)), "{f:?}");
    assert!(f.detail.contains("refused"), "{}", f.detail);
}

/// A peer declared dead while an operation to it is in flight: the operation never lands,
/// and the job fails naming the dead PE.
#[test]
fn a_dead_peer_fails_what_goes_to_it() {
    let mut w = World::new(2, InProcConfig::default(), cfg());
    w.fabric.hold(Pe::new(1), true);
    w.push(
        0,
        Desc::P {
            pe: Pe::new(1),
            remote: 64,
            value: 1,
            width: 8,
        },
    );
    w.step();
    assert_eq!(w.fabric.pending(), 1, "the p is on the wire");
    w.health[0].peer_dead(1, "killed by the test".into());
    w.fabric.hold(Pe::new(1), false);
    let f = w.fault_after(20);
    assert_eq!((f.code, f.pe), (error::PEER_DEAD, Some(1)), "{f:?}");
    assert_eq!(w.word(1, 64), 0, "nothing reached the dead peer");
    assert!(w.engines[0].faults.failed, "the lost p failed the engine");
}
