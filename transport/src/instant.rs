//! A transport that completes every operation at once and moves no data: the proxy machinery
//! (ring, batching, translation, completion accounting) measured alone.

use crate::{
    Caps, Event, LocalMem, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Result, Transport,
};

/// Completes everything immediately.
#[derive(Debug)]
pub struct InstantTransport {
    me: Pe,
    n: usize,
    caps: Caps,
    /// Completions in posting order (a Vec: cheaper than a deque, drained whole by `poll`).
    done: Vec<u64>,
    regions: u32,
    remotes: u32,
}

impl InstantTransport {
    /// One for `me` of `n` PEs.
    pub fn new(me: Pe, n: usize) -> Self {
        let caps = Caps {
            name: "instant (no data movement)".into(),
            fabric: "instant".into(),
            ordered: true,
            delivery_complete: true,
            gpu_memory: true,
            dmabuf: false,
            cq_data_size: 8,
            inject_size: 64,
            max_msg_size: usize::MAX,
            max_send_size: 4096,
            max_outstanding: 1 << 16,
            manual_progress: false,
            rails: 1,
            stripe_min: usize::MAX,
        };
        Self {
            me,
            n,
            caps,
            done: Vec::new(),
            regions: 0,
            remotes: 0,
        }
    }

    fn complete(&mut self, ctx: u64) -> Result<(), PostError> {
        if self.done.len() >= self.caps.max_outstanding {
            return Err(PostError::Retry);
        }
        self.done.push(ctx);
        Ok(())
    }
}

impl Transport for InstantTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }
    fn my_pe(&self) -> Pe {
        self.me
    }
    fn n_pes(&self) -> usize {
        self.n
    }
    fn address(&self) -> Vec<u8> {
        Vec::new()
    }
    fn connect(&mut self, _addresses: &[Vec<u8>]) -> Result<()> {
        Ok(())
    }
    unsafe fn mr_reg(&mut self, _mem: LocalMem) -> Result<MrId> {
        self.regions += 1;
        Ok(MrId(self.regions - 1))
    }
    fn mr_dereg(&mut self, _mr: MrId) -> Result<()> {
        Ok(())
    }
    fn mr_export(&self, _mr: MrId) -> Vec<u8> {
        Vec::new()
    }
    fn mr_import(&mut self, _pe: Pe, _blob: &[u8]) -> Result<RemoteMrId> {
        self.remotes += 1;
        Ok(RemoteMrId(self.remotes - 1))
    }
    unsafe fn write(
        &mut self,
        _pe: Pe,
        _l: LocalRef,
        _r: RemoteRef,
        _len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.complete(ctx)
    }
    unsafe fn write_data(
        &mut self,
        _pe: Pe,
        _l: LocalRef,
        _r: RemoteRef,
        _len: usize,
        _data: u64,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.complete(ctx)
    }
    unsafe fn read(
        &mut self,
        _pe: Pe,
        _l: LocalRef,
        _r: RemoteRef,
        _len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.complete(ctx)
    }
    fn send(&mut self, _pe: Pe, _msg: &[u8], ctx: u64) -> Result<(), PostError> {
        self.complete(ctx)
    }
    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let n = self.done.len();
        for ctx in self.done.drain(..) {
            on_event(Event::Done { ctx });
        }
        Ok(n)
    }
    fn fail_peer(&mut self, _pe: Pe, _reason: &str) {}
}
