//! A proxy thread on its own: the instant transport (every operation completes at once, no data
//! moves) and a scratch heap. It measures the ring and the proxy machinery alone — with CPU or GPU
//! producers — and serves tests that need a live consumer of a ring.

use std::sync::Arc;

use pshmem_gpu_queue::Ring;
use pshmem_transport::{LocalMem, MemKind, Transport, instant::InstantTransport};

use crate::{Health, HeapMem, Proxy, ProxyConfig, ProxyError, ProxySetup};

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
    /// Starts a proxy draining `channels` (operations may target PE 0 or 1).
    pub fn spawn(channels: Vec<Arc<Ring>>, cfg: ProxyConfig) -> Result<Self, ProxyError> {
        let mut t: Box<dyn Transport> = Box::new(InstantTransport::new(0, 2));
        let mut heap = vec![0u64; 4096];
        // SAFETY: the heap lives in this struct and is dropped after the proxy (field order).
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
        let remote_heaps = (0..2)
            .map(|pe| t.mr_import(pe, &blob))
            .collect::<Result<Vec<_>, _>>()
            .map_err(setup_err)?;
        let health = Health::new();
        health.watch(channels.iter().cloned());
        let proxy = Proxy::spawn(
            "pshmem-proxy-instant".into(),
            ProxySetup {
                transport: t,
                heap: mem,
                heap_mr,
                remote_heaps,
                channels,
                device: None,
                device_registered: false,
            },
            cfg,
            health.clone(),
        )?;
        Ok(Self {
            proxy,
            health,
            _heap: heap,
        })
    }
}
