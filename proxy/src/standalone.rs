//! A proxy thread on its own: the instant transport (every operation completes at once, no data
//! moves) and a scratch heap. It measures the ring and the proxy machinery alone — with CPU or GPU
//! producers — and serves tests that need a live consumer of a ring. [`drain_turns`] runs the
//! engine on the caller's thread instead, for instruction counts that do not depend on timing.

use std::sync::{Arc, atomic::AtomicBool};

use pshmem_ring::{Desc, Producer, Ring, WaitLimit};
use pshmem_transport::{LocalMem, MemKind, Pe, Transport, instant::InstantTransport};

use crate::{Health, HeapMem, Proxy, ProxyConfig, ProxyError, ProxySetup};

/// PE 0 of 2 on the instant transport, draining `rings`, over `heap` (which must outlive the
/// setup's transport).
fn instant_setup(rings: Vec<Arc<Ring>>, heap: &mut [u64]) -> Result<ProxySetup, ProxyError> {
    let mut t: Box<dyn Transport> = Box::new(InstantTransport::new(Pe::new(0), 2));
    // SAFETY: the caller keeps the heap alive longer than the transport.
    let mem = unsafe { HeapMem::new(heap.as_mut_ptr().cast(), heap.len() * 8) };
    let setup_err = |source| ProxyError::Setup {
        pe: 0,
        what: "the instant transport",
        source,
    };
    // SAFETY: as above; the instant transport never touches the memory.
    let heap_mr = unsafe {
        t.mr_reg(LocalMem {
            ptr: mem.base(),
            len: mem.len(),
            kind: MemKind::Host,
        })
    }
    .map_err(setup_err)?;
    let blob = t.mr_export(heap_mr);
    let remote_heaps = Pe::all(2)
        .map(|pe| t.mr_import(pe, &blob))
        .collect::<Result<Vec<_>, _>>()
        .map_err(setup_err)?;
    Ok(ProxySetup {
        transport: t,
        heap: mem,
        heap_mr,
        remote_heaps,
        rings,
        device: None,
        device_registered: false,
    })
}

/// The engine alone on this thread: fills each of `rings` rings of `slots` slots with 8-byte
/// `p` descriptors to PE 1, then turns the engine (no proxy thread, the instant transport)
/// until every ring's `completed` reached its head; `rounds` times. Returns the descriptors
/// drained. The work per descriptor is deterministic, so `valgrind --tool=callgrind` counts
/// the same instructions for the same binary (`datapath-bench turns`): the engine's cost
/// compared across versions without the noise of timing.
pub fn drain_turns(rings: usize, slots: usize, rounds: usize) -> Result<u64, ProxyError> {
    let rs: Vec<Arc<Ring>> = (0..rings.max(1)).map(|_| Ring::new_host(slots)).collect();
    let mut heap = vec![0u64; 4096];
    let setup = instant_setup(rs.clone(), &mut heap)?;
    let stop = Arc::new(AtomicBool::new(false));
    let jobs = Arc::new(crate::engine::exclusive::JobSlot::default());
    let health = Health::new();
    let mut engine = crate::engine::Engine::new(setup, ProxyConfig::default(), health, stop, jobs)?;
    let producers: Vec<Producer> = rs.iter().cloned().map(Producer::new).collect();
    let (slot, _) = Desc::P {
        pe: Pe::new(1),
        remote: 64,
        value: 7,
        width: 8,
    }
    .encode();
    let batch = vec![slot[0]; slots];
    let limit = WaitLimit::new(None);
    let mut drained = 0u64;
    for _ in 0..rounds {
        let mut heads = Vec::with_capacity(producers.len());
        for p in &producers {
            let head = p.push_many(&batch, &limit).map_err(|e| ProxyError::Job {
                pe: 0,
                detail: format!("filling a ring: {e}"),
            })?;
            heads.push(head);
        }
        while producers
            .iter()
            .zip(&heads)
            .any(|(p, &h)| p.ring().completed() < h)
        {
            engine.turn();
        }
        drained += (slots * producers.len()) as u64;
    }
    drop(engine);
    Ok(drained)
}

/// A running standalone proxy (PE 0 of 2 on the instant transport) and the heap it owns.
#[derive(Debug)]
pub struct InstantProxy {
    /// The proxy thread (stop it before dropping, to see its outcome).
    pub proxy: Proxy,
    /// Faults it raised.
    pub health: Arc<Health>,
    // Dropped after `proxy` (field order): the proxy's transport registered it.
    _heap: Vec<u64>,
}

impl InstantProxy {
    /// Starts a proxy draining `rings` (operations may target PE 0 or 1).
    pub fn spawn(rings: Vec<Arc<Ring>>, cfg: ProxyConfig) -> Result<Self, ProxyError> {
        // The heap lives in this struct and is dropped after the proxy (field order).
        let mut heap = vec![0u64; 4096];
        let health = Health::new();
        health.watch(rings.iter().cloned());
        let setup = instant_setup(rings, &mut heap)?;
        let proxy = Proxy::spawn("pshmem-proxy-instant".into(), setup, cfg, health.clone())?;
        Ok(Self {
            proxy,
            health,
            _heap: heap,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pshmem_ring::{Desc, Producer, WaitLimit};

    use super::*;
    use crate::ExclusiveError;

    fn limit() -> WaitLimit {
        WaitLimit::new(Some(Duration::from_secs(10)))
    }

    #[test]
    fn a_job_has_the_transport_and_the_rings_resume_after_it() {
        let ring = Ring::new_host(64);
        let p = InstantProxy::spawn(vec![ring.clone()], ProxyConfig::default()).unwrap();
        let prod = Producer::new(ring.clone());
        // Work before the job completes as usual.
        let put = |i: u64| Desc::P {
            pe: Pe::new(1),
            remote: 8 * i,
            value: i,
            width: 8,
        };
        let (slots, n) = put(1).encode();
        prod.push(&slots[..n], &limit()).unwrap();
        prod.quiet(&limit()).unwrap();
        let (posted, seen) = p
            .proxy
            .exclusive(Duration::from_secs(10), |x| {
                assert_eq!(x.my_pe(), Pe::new(0));
                for ctx in [7, 9, 11] {
                    assert!(x.write(Pe::new(1), 0, 64, 8, ctx).unwrap());
                }
                assert_eq!(x.outstanding(), 3);
                let mut seen = Vec::new();
                while x.outstanding() > 0 {
                    x.poll(&mut |ctx, err| {
                        assert!(err.is_none());
                        seen.push(ctx);
                    })
                    .unwrap();
                }
                x.store(8, 42).unwrap();
                assert_eq!(x.load(8).unwrap(), 42);
                (3, seen)
            })
            .unwrap();
        assert_eq!(posted, 3);
        assert_eq!(seen, vec![7, 9, 11], "the job's own contexts, each once");
        let (slots, n) = put(2).encode();
        prod.push(&slots[..n], &limit()).unwrap();
        prod.quiet(&limit()).unwrap();
        p.proxy.stop().unwrap();
        assert!(p.health.fault().is_none());
    }

    #[test]
    fn bad_jobs_fail_with_errors_and_the_proxy_goes_on() {
        let ring = Ring::new_host(64);
        let p = InstantProxy::spawn(vec![ring.clone()], ProxyConfig::default()).unwrap();
        let t = Duration::from_secs(10);
        let r = p
            .proxy
            .exclusive(t, |x| {
                let ctx = matches!(
                    x.write(Pe::new(1), 0, 0, 8, 1 << 60),
                    Err(ExclusiveError::Context(_))
                );
                let heap = matches!(
                    x.write(Pe::new(1), 1 << 40, 0, 8, 1),
                    Err(ExclusiveError::Mem(_))
                );
                let pe = matches!(
                    x.write(Pe::new(5), 0, 0, 8, 1),
                    Err(ExclusiveError::Transport(_))
                );
                (ctx, heap, pe)
            })
            .unwrap();
        assert_eq!(r, (true, true, true));
        let e = p
            .proxy
            .exclusive(t, |_| -> u32 { panic!("on purpose") })
            .unwrap_err();
        assert!(e.to_string().contains("on purpose"), "{e}");
        // Still serving rings and jobs.
        assert_eq!(p.proxy.exclusive(t, |x| x.my_pe()).unwrap(), Pe::new(0));
        let prod = Producer::new(ring);
        let (slots, n) = Desc::Fence.encode();
        prod.push(&slots[..n], &limit()).unwrap();
        prod.quiet(&limit()).unwrap();
        p.proxy.stop().unwrap();
    }
}
