//! One PE's endpoint: checking and posting flights, and [`Transport`] over the shared fabric.

use super::{Fabric, Flight, InProcTransport, Kind, Payload, Pending, Region, fabric::lost};
use crate::{
    Caps, Event, LocalMem, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Result, Transport,
    TransportError, check_bounds,
};

impl InProcTransport {
    fn local(&self, f: &Fabric, l: LocalRef, len: usize, op: &'static str) -> Result<usize> {
        let r = f.regions[self.me.idx()]
            .get(l.mr.0 as usize)
            .ok_or_else(|| TransportError::InvalidArgument {
                op,
                reason: format!("no local region {}", l.mr.0),
            })?;
        check_bounds(self.me, op, "local", l.offset as u64, len, r.len as u64)?;
        Ok(r.ptr + l.offset)
    }

    fn post(&mut self, pe: Pe, kind: Kind, ctx: u64, op: &'static str) -> Result<(), PostError> {
        let mut f = self.fabric.lock();
        if pe.idx() >= self.fabric.n {
            return Err(TransportError::InvalidArgument {
                op,
                reason: format!("PE {pe} of {}", self.fabric.n),
            }
            .into());
        }
        if f.dead[self.me.idx()][pe.idx()] {
            return Err(lost(pe, op).into());
        }
        if f.in_air[self.me.idx()] >= f.cfg.max_outstanding {
            return Err(PostError::Retry);
        }
        let fail = match f.fail_next.iter().position(|&p| p == (self.me, pe)) {
            Some(i) => {
                f.fail_next.remove(i);
                true
            }
            None => false,
        };
        let max = f.cfg.land_delay;
        let ticks = f.delay(max);
        f.in_air[self.me.idx()] += 1;
        f.flights.push_back(Flight {
            from: self.me,
            to: pe,
            kind,
            ctx,
            ticks,
            fail,
        });
        Ok(())
    }

    fn remote(&self, r: RemoteRef, pe: Pe, op: &'static str) -> Result<(u32, u64), PostError> {
        match self.remotes.get(r.mr.0 as usize) {
            Some(&(owner, mr)) if owner == pe => Ok((mr, r.offset)),
            _ => Err(TransportError::InvalidArgument {
                op,
                reason: format!("remote registration {} is not PE {pe}'s", r.mr.0),
            }
            .into()),
        }
    }

    /// A write's payload: copied now (inject size) or read when it lands.
    fn payload(&self, l: LocalRef, len: usize, op: &'static str) -> Result<Payload, PostError> {
        let f = self.fabric.lock();
        let ptr = self.local(&f, l, len, op)?;
        Ok(if len <= self.caps.inject_size {
            // SAFETY: a registered local range (checked), valid for `len` bytes.
            Payload::Bytes(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec())
        } else {
            Payload::Source { ptr }
        })
    }
}

impl Transport for InProcTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }
    fn my_pe(&self) -> Pe {
        self.me
    }
    fn n_pes(&self) -> usize {
        self.fabric.n
    }
    fn address(&self) -> Vec<u8> {
        self.me.get().to_le_bytes().to_vec()
    }
    fn connect(&mut self, _addresses: &[Vec<u8>]) -> Result<()> {
        Ok(())
    }
    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId> {
        let mut f = self.fabric.lock();
        let regions = &mut f.regions[self.me.idx()];
        regions.push(Region {
            ptr: mem.ptr as usize,
            len: mem.len,
        });
        Ok(MrId(regions.len() as u32 - 1))
    }
    fn mr_dereg(&mut self, mr: MrId) -> Result<()> {
        let mut f = self.fabric.lock();
        if let Some(r) = f.regions[self.me.idx()].get_mut(mr.0 as usize) {
            r.len = 0;
        }
        Ok(())
    }
    fn mr_export(&self, mr: MrId) -> Vec<u8> {
        mr.0.to_le_bytes().to_vec()
    }
    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId> {
        let id = blob.try_into().map(u32::from_le_bytes).map_err(|_| {
            TransportError::InvalidArgument {
                op: "mr_import",
                reason: format!("a {}-byte registration blob", blob.len()),
            }
        })?;
        self.remotes.push((pe, id));
        Ok(RemoteMrId(self.remotes.len() as u32 - 1))
    }
    unsafe fn write(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded (no remote CQ data).
        unsafe { self.write_inner(pe, local, remote, len, None, ctx) }
    }
    unsafe fn write_data(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: u64,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.caps.check_cq_data(data)?;
        // SAFETY: forwarded.
        unsafe { self.write_inner(pe, local, remote, len, Some(data), ctx) }
    }
    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        let dst = self.local(&self.fabric.lock(), local, len, "read")?;
        let src = self.remote(remote, pe, "read")?;
        self.post(pe, Kind::Read { dst, src, len }, ctx, "read")
    }
    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError> {
        if msg.len() > self.caps.max_send_size {
            return Err(TransportError::InvalidArgument {
                op: "send",
                reason: format!("{} bytes > {}", msg.len(), self.caps.max_send_size),
            }
            .into());
        }
        self.post(pe, Kind::Send(msg.to_vec()), ctx, "send")
    }
    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let due = {
            let mut f = self.fabric.lock();
            f.tick();
            let mut due = Vec::new();
            f.events[self.me.idx()].retain_mut(|(ticks, ev)| {
                if *ticks > 0 {
                    *ticks -= 1;
                    return true;
                }
                due.push(std::mem::replace(ev, Pending::Done(0)));
                false
            });
            due
        };
        let n = due.len();
        for ev in due {
            match ev {
                Pending::Done(ctx) => on_event(Event::Done { ctx }),
                Pending::Failed(ctx, error) => on_event(Event::Failed { ctx, error }),
                Pending::RemoteWrite(data) => on_event(Event::RemoteWrite { data }),
                Pending::Recv(msg) => on_event(Event::Recv { data: &msg }),
            }
        }
        Ok(n)
    }
    fn fail_peer(&mut self, pe: Pe, _reason: &str) {
        let mut f = self.fabric.lock();
        f.dead[self.me.idx()][pe.idx()] = true;
    }
}

impl InProcTransport {
    /// # Safety
    /// As [`Transport::write`].
    unsafe fn write_inner(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        data: Option<u64>,
        ctx: u64,
    ) -> Result<(), PostError> {
        let payload = self.payload(local, len, "write")?;
        let dst = self.remote(remote, pe, "write")?;
        let kind = Kind::Write {
            payload,
            dst,
            len,
            data,
        };
        self.post(pe, kind, ctx, "write")
    }
}
