//! What talks to the fabric: the transport and its capabilities, this PE's registration and
//! every peer's, the layout of the remote CQ data, the events a poll hands over, and the
//! messages that met back-pressure. Both sides post through it; neither owns it.

use std::collections::VecDeque;

use pshmem_abi::error as code;
use pshmem_transport::{
    Caps, Event, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Transport,
};

use super::{
    ctx::{Ctx, ImmWidth, LandingData},
    io::{Faults, Tracer},
    staged::Landing,
    work::{Ev, Staging},
};
use crate::trace::Cost;

/// The fabric as one proxy thread uses it.
pub(super) struct Link {
    /// First field: dropped before anything it may still read (the engine's field order).
    pub t: Box<dyn Transport>,
    pub caps: Caps,
    pub me: Pe,
    pub n: usize,
    /// What is registered as this PE's heap: the host heap, the GPU heap (registered mode), or
    /// the landing area (host-staged path).
    pub region_mr: MrId,
    /// Every PE's registration, in PE order.
    pub remote: Vec<RemoteMrId>,
    /// The layout of tagged writes' remote CQ data (tagged mode).
    pub imm: ImmWidth,
    /// The host-staged path's landing areas (the same geometry at every PE), if this is it.
    pub landing: Option<Landing>,
    /// Events a poll (or a job's) handed over, for the engine to dispatch.
    pub inbox: Inbox,
    /// Messages that met back-pressure, in order: (PE, bytes, context).
    pub outbox: VecDeque<(Pe, Vec<u8>, u64)>,
}

/// Events copied out of the transport's poll callback.
#[derive(Debug, Default)]
pub(super) struct Inbox {
    pub events: Vec<Ev>,
    pub msgs: Vec<Vec<u8>>,
}

impl Inbox {
    /// Copies an event out of the transport's poll callback.
    pub(super) fn keep(&mut self, e: Event<'_>) {
        match e {
            Event::Recv { data } => self.msgs.push(data.to_vec()),
            Event::Done { ctx } => self.events.push(Ev::Done(ctx)),
            Event::Failed { ctx, error } => self.events.push(Ev::Failed(ctx, error)),
            Event::RemoteWrite { data } => self.events.push(Ev::RemoteData(data)),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.events.is_empty() && self.msgs.is_empty()
    }
}

impl Link {
    /// Where `offset` of `pe`'s registered heap is.
    #[inline]
    pub(super) fn remote_ref(&self, pe: Pe, offset: u64) -> RemoteRef {
        RemoteRef {
            mr: self.remote[pe.idx()],
            offset,
        }
    }

    /// Writes the low `width` bytes of `value` to `remote` on `pe`, from staging memory at
    /// `off` (the scratch area, copied at post, or a chunk the caller holds until completion;
    /// either holds at least 8 bytes), with remote CQ data `data` if given.
    #[inline]
    pub(super) fn write_value(
        &mut self,
        st: &mut Staging,
        pe: Pe,
        off: usize,
        (remote, value, width): (u64, u64, u8),
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        st.buf[off..off + 8].copy_from_slice(&value.to_le_bytes());
        let lref = LocalRef {
            mr: st.mr,
            offset: off,
        };
        let rref = self.remote_ref(pe, remote);
        // SAFETY: the value is in our staging memory: injected at post, or in a chunk held
        // until the write completes.
        unsafe { self.write(pe, lref, rref, width as usize, data, ctx) }
    }

    /// Writes `len` bytes from `lref` to `rref` on `pe`, with remote CQ data `data` if given.
    ///
    /// # Safety
    /// As [`Transport::write`]: the source stays registered and untouched until completion.
    #[inline]
    pub(super) unsafe fn write(
        &mut self,
        pe: Pe,
        lref: LocalRef,
        rref: RemoteRef,
        len: usize,
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded.
        unsafe {
            match data {
                Some(d) => self.t.write_data(pe, lref, rref, len, d, ctx),
                None => self.t.write(pe, lref, rref, len, ctx),
            }
        }
    }

    /// Writes staging chunk `chunk` (`len` bytes, header included) into slot `slot` of
    /// landing group `group` at `pe`, with remote data naming the slot.
    pub(super) fn write_chunk(
        &mut self,
        st: &Staging,
        tracer: &mut Tracer,
        (pe, chunk, group, slot, len): (Pe, u32, Pe, u32, usize),
    ) -> Result<(), PostError> {
        let landing = self.landing.as_ref().expect("the host-staged path");
        let lref = LocalRef {
            mr: st.mr,
            offset: st.chunk_offset(chunk),
        };
        let rref = self.remote_ref(pe, landing.offset(group, slot) as u64);
        let data = LandingData { group, slot }.encode();
        let era = st.generation(chunk);
        let ctx = Ctx::Staged { pe, chunk, era }.encode();
        let at = tracer.clock();
        // SAFETY: the chunk stays untouched until the write completes (its completion returns
        // it to the free list).
        let res = unsafe { self.t.write_data(pe, lref, rref, len, data, ctx) };
        tracer.charge_since(Cost::Post, at);
        res
    }

    /// Sends the messages waiting in the outbox, in order, until the transport pushes back;
    /// returns how many went.
    pub(super) fn flush_outbox(&mut self, tracer: &mut Tracer, faults: &mut Faults) -> usize {
        let mut sent = 0;
        while let Some((to, msg, ctx)) = self.outbox.pop_front() {
            let at = tracer.clock();
            let res = self.t.send(to, &msg, ctx);
            tracer.charge_since(Cost::Post, at);
            match res {
                Ok(()) => sent += 1,
                Err(PostError::Retry) => {
                    self.outbox.push_front((to, msg, ctx));
                    break;
                }
                Err(PostError::Failed(e)) => {
                    let detail = format!("PE {}: sending acks to PE {to} failed: {e}", self.me);
                    faults.raise_with(code::OP_FAILED, Some(to), detail, *e);
                    break;
                }
            }
        }
        sent
    }
}
