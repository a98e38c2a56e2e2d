//! One way to start a proxy thread, for the host heap and the GPU heap alike: open its
//! transport (on this PE's rails), register the memory it serves, exchange the registrations
//! with every PE, spawn the thread on its share of the rings. The heaps differ only in what
//! they register and how the proxy reaches their memory, which the caller says.

use std::sync::Arc;

use pshmem_bootstrap::Bootstrap;
use pshmem_proxy::{DeviceMem, Health, HeapMem, Proxy, ProxyConfig, ProxySetup};
use pshmem_ring::Ring;
use pshmem_transport::{MrId, Transport, TransportConfig, TransportError};

use crate::{Error, Result, net};

/// The memory one proxy thread serves, registered with its transport.
pub(crate) struct Served {
    /// Where peers' writes land: the heap, or a landing area of the host-staged path.
    pub region: HeapMem,
    /// Its registration.
    pub mr: MrId,
    /// How the proxy reaches a GPU heap (copies, atomics); `None`: the heap is host memory.
    pub device: Option<Box<dyn DeviceMem>>,
    /// Whether the GPU heap itself is registered (data moves by RMA, not through a landing
    /// area).
    pub registered: bool,
}

/// What every proxy thread of one heap shares.
pub(crate) struct Start<'a> {
    pub bs: &'a Bootstrap,
    pub transport: &'a TransportConfig,
    /// This PE's NICs from placement (empty: the provider's choice).
    pub rails: &'a [String],
    pub proxy: &'a ProxyConfig,
    /// Cores for the threads: thread t on entry t mod len; empty: unpinned.
    pub cpus: &'a [usize],
    pub health: &'a Arc<Health>,
    /// Thread names: `{name}-{pe}.{thread}`.
    pub name: &'static str,
    /// The heap, for errors ("the symmetric heap", "the GPU heap").
    pub heap: &'static str,
}

impl Start<'_> {
    /// Starts proxy thread `thread` of `threads` on its share of `rings` (ring i goes to thread
    /// i mod threads), serving what `serve` registers on the thread's new transport.
    /// Collective: every PE starts its threads in the same order.
    pub fn thread(
        &self,
        thread: usize,
        threads: usize,
        rings: &[Arc<Ring>],
        serve: impl FnOnce(&mut dyn Transport) -> Result<Served>,
    ) -> Result<Proxy> {
        let me = self.bs.rank();
        let mut t = net::open_transport(self.bs, self.transport, self.rails)
            .map_err(transport_error(me, "opening the transport"))?;
        let served = serve(t.as_mut())?;
        let remote_heaps = net::exchange_mr(t.as_mut(), self.bs, served.mr)
            .map_err(transport_error(me, "exchanging heap registrations"))?;
        tracing::debug!(
            "PE {me}: proxy thread {thread} serves {} over {}",
            self.heap,
            t.caps().name
        );
        let mut cfg = self.proxy.clone();
        cfg.cpu = (!self.cpus.is_empty()).then(|| self.cpus[thread % self.cpus.len()]);
        Ok(Proxy::spawn(
            format!("{}-{me}.{thread}", self.name),
            ProxySetup {
                transport: t,
                heap: served.region,
                heap_mr: served.mr,
                remote_heaps,
                rings: rings
                    .iter()
                    .skip(thread)
                    .step_by(threads)
                    .cloned()
                    .collect(),
                device: served.device,
                device_registered: served.registered,
            },
            cfg,
            self.health.clone(),
        )?)
    }
}

/// A transport error of PE `me` while doing `what`.
pub(crate) fn transport_error(me: usize, what: &'static str) -> impl Fn(TransportError) -> Error {
    move |source| Error::Transport {
        me,
        what,
        source: Box::new(source),
    }
}
