//! [`Transport`] for [`SimTransport`], and its shutdown on drop.

use std::{
    io::Write,
    os::{
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixStream},
    },
    sync::atomic::Ordering,
    thread,
};

use super::{Ev, Kind, Msg, Pending, Region, SimTransport, TOKEN_LEN, io_err, nic::answers};
use crate::{
    Caps, Event, LocalMem, LocalRef, MrId, Pe, PostError, RemoteMrId, RemoteRef, Result, Transport,
    TransportError,
};

impl Transport for SimTransport {
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
        [&self.shared.token[..], &self.name].concat()
    }

    fn connect(&mut self, addresses: &[Vec<u8>]) -> Result<()> {
        if addresses.len() != self.n {
            return Err(TransportError::InvalidArgument {
                op: "connect",
                reason: format!("{} addresses for {} PEs", addresses.len(), self.n),
            });
        }
        for (pe, address) in Pe::all(self.n).zip(addresses) {
            let Some((token, name)) = address.split_at_checked(TOKEN_LEN) else {
                return Err(TransportError::InvalidArgument {
                    op: "connect",
                    reason: format!("PE {pe}'s address has {} bytes", address.len()),
                });
            };
            let addr = SocketAddr::from_abstract_name(name).map_err(io_err("sim: peer name"))?;
            let mut conns = Vec::with_capacity(self.rail_bytes.len());
            for rail in 0..self.rail_bytes.len() {
                let mut conn =
                    UnixStream::connect_addr(&addr).map_err(|e| TransportError::PeerLost {
                        pe,
                        op: "connect",
                        reason: e.to_string(),
                    })?;
                // The hello names this PE and the rail (the peer's NIC of that rail serves it),
                // and carries the peer's token, which only the job's members learnt.
                let hello = Msg {
                    kind: Kind::Hello as u8,
                    id: u64::from(self.me.get()),
                    region: rail as u32,
                    payload: token.to_vec(),
                    ..Msg::default()
                };
                conn.write_all(&hello.encode())
                    .map_err(io_err("sim: hello"))?;
                let reader = conn.try_clone().map_err(io_err("sim: clone"))?;
                let shared = self.shared.clone();
                let outstanding = self.outstanding.clone();
                thread::Builder::new()
                    .name(format!("pshmem-sim-cq-{}.{rail}", self.me))
                    .spawn(move || answers(shared, pe, rail, reader, outstanding))
                    .map_err(io_err("sim: spawn"))?;
                conns.push(conn);
            }
            self.conns[pe.idx()] = conns;
        }
        Ok(())
    }

    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId> {
        let device = !matches!(mem.kind, crate::MemKind::Host);
        if device && self.shared.device.get().is_none() {
            return Err(TransportError::Unsupported {
                op: "registering GPU memory (without PSHMEM_SIM_GPU_MEMORY=1)",
                transport: self.caps.name.clone(),
            });
        }
        let mut regions = self
            .shared
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let id = regions
            .iter()
            .position(Option::is_none)
            .unwrap_or(regions.len());
        let entry = Some(Region {
            addr: mem.ptr as usize,
            len: mem.len,
            device,
        });
        if id == regions.len() {
            regions.push(entry);
        } else {
            regions[id] = entry;
        }
        Ok(MrId(id as u32))
    }

    fn mr_dereg(&mut self, mr: MrId) -> Result<()> {
        // Taking the write lock waits for any request being applied to this memory.
        let mut regions = self
            .shared
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        match regions.get_mut(mr.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(TransportError::InvalidArgument {
                op: "mr_dereg",
                reason: format!("unknown registration {mr:?}"),
            }),
        }
    }

    fn mr_export(&self, mr: MrId) -> Vec<u8> {
        let regions = self
            .shared
            .regions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let len = regions
            .get(mr.0 as usize)
            .copied()
            .flatten()
            .map_or(0, |r| r.len);
        let mut b = mr.0.to_le_bytes().to_vec();
        b.extend_from_slice(&(len as u64).to_le_bytes());
        b
    }

    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId> {
        if blob.len() != 12 {
            return Err(TransportError::InvalidArgument {
                op: "mr_import",
                reason: format!("malformed registration of PE {pe}"),
            });
        }
        let idx = u32::from_le_bytes(blob[..4].try_into().expect("4"));
        let len = u64::from_le_bytes(blob[4..].try_into().expect("8"));
        self.remotes.push((pe, idx, len));
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
        self.rma(Kind::Write, pe, local, remote, len, 0, ctx)
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
        self.rma(Kind::WriteData, pe, local, remote, len, data, ctx)
    }

    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        self.rma(Kind::Read, pe, local, remote, len, 0, ctx)
    }

    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError> {
        self.check_peer(pe, "send")?;
        if msg.len() > self.caps.max_send_size {
            return Err(TransportError::InvalidArgument {
                op: "send",
                reason: format!("{} bytes > max {}", msg.len(), self.caps.max_send_size),
            }
            .into());
        }
        if self.full(1) {
            return Err(PostError::Retry);
        }
        let m = Msg {
            kind: Kind::Send as u8,
            region: u32::MAX,
            payload: msg.to_vec(),
            ..Msg::default()
        };
        let p = Pending {
            ctx,
            pe,
            op: "send",
            read_into: None,
            group: 0,
        };
        self.post(pe, self.home_rail(pe), m, p)
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        let batch: Vec<Ev> = {
            let mut q = self.shared.events.lock().unwrap_or_else(|p| p.into_inner());
            let n = q.len().min(256);
            q.drain(..n).collect()
        };
        let n = batch.len();
        for e in batch {
            match e {
                Ev::Done(ctx) => on_event(Event::Done { ctx }),
                Ev::Failed(ctx, error) => on_event(Event::Failed { ctx, error }),
                Ev::RemoteWrite(data) => on_event(Event::RemoteWrite { data }),
                Ev::Recv(data) => on_event(Event::Recv { data: &data }),
            }
        }
        Ok(n)
    }

    fn attach_device_copy(&mut self, copy: std::sync::Arc<dyn crate::DeviceCopy>) -> bool {
        if !self.gpu_memory {
            return false;
        }
        // The first copy attached stays (one per process is all the runtime makes).
        let _ = self.shared.device.set(copy);
        // Served as a DMA-BUF registration would be: the heap is registered, not staged.
        self.caps.gpu_memory = true;
        self.caps.dmabuf = true;
        true
    }

    fn rail_bytes(&self) -> Vec<u64> {
        self.rail_bytes.clone()
    }

    fn fail_peer(&mut self, pe: Pe, reason: &str) {
        if pe.idx() < self.n {
            self.shared.lose(pe, reason);
        }
    }
}

impl Drop for SimTransport {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // No request may touch this PE's memory once the registrations are gone.
        self.shared
            .regions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        for c in self.conns.iter().flatten() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        // Wake the acceptor so it sees the shutdown flag.
        if let Ok(addr) = SocketAddr::from_abstract_name(&self.name) {
            let _ = UnixStream::connect_addr(&addr);
        }
    }
}
