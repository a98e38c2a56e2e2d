//! [`Transport`] for [`OfiTransport`]: addresses and connection, registrations, the
//! operations, polling and waiting, and failing a lost peer.

use pshmem_libfabric_sys as sys;

use super::{
    OfiTransport, OpKind, OwnedEvent, Region, RemoteRegion,
    fabric::{self, Mr, MrSource, bits},
    keys::KEY_TAKEN,
    more::Held,
    shm,
};
use crate::{
    Caps, Event, LocalMem, LocalRef, MemKind, MrId, Pe, PostError, RemoteMrId, RemoteRef, Result,
    Transport, TransportError,
};

fn access_all() -> u64 {
    bits!(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
}

/// Registers `src` on `rail` for remote access under a fresh random key, drawn again while
/// the domain has it already (p ≈ n·2^-64).
///
/// # Safety
/// The memory must stay valid for as long as the registration lives.
unsafe fn reg_fresh_key(rail: &super::Rail, src: MrSource) -> Result<Mr> {
    let mut tries = 0;
    loop {
        // SAFETY: the caller keeps the memory valid while registered.
        let r = unsafe {
            Mr::reg(
                &rail.domain,
                src,
                access_all(),
                rail.keys.draw(),
                rail.ep_bind.then_some(&rail.ep),
            )
        };
        match r {
            Err(TransportError::Ofi { code, .. }) if code == KEY_TAKEN && tries < 3 => tries += 1,
            r => return r,
        }
    }
}

impl Transport for OfiTransport {
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
        let mut out = (self.rails.len() as u32).to_le_bytes().to_vec();
        for r in &self.rails {
            let name = r.ep.name().unwrap_or_default();
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(&name);
        }
        out
    }

    fn connect(&mut self, addresses: &[Vec<u8>]) -> Result<()> {
        if addresses.len() != self.n {
            return Err(TransportError::InvalidArgument {
                op: "connect",
                reason: format!("{} addresses for {} PEs", addresses.len(), self.n),
            });
        }
        let nr = self.rails.len();
        let mut per_rail: Vec<Vec<Vec<u8>>> = vec![Vec::with_capacity(self.n); nr];
        for (pe, a) in addresses.iter().enumerate() {
            let bad = || TransportError::InvalidArgument {
                op: "connect",
                reason: format!("malformed address of PE {pe}"),
            };
            let count =
                u32::from_le_bytes(a.get(..4).ok_or_else(bad)?.try_into().expect("4")) as usize;
            if count != nr {
                return Err(TransportError::InvalidArgument {
                    op: "connect",
                    reason: format!(
                        "PE {pe} has {count} rails, this PE {nr}: use the same PSHMEM_RAILS everywhere"
                    ),
                });
            }
            let mut off = 4;
            for names in per_rail.iter_mut() {
                let len =
                    u32::from_le_bytes(a.get(off..off + 4).ok_or_else(bad)?.try_into().expect("4"))
                        as usize;
                names.push(a.get(off + 4..off + 4 + len).ok_or_else(bad)?.to_vec());
                off += 4 + len;
            }
        }
        for (r, names) in per_rail.iter().enumerate() {
            let rail = &mut self.rails[r];
            let string_format = rail
                .info
                .iter()
                .next()
                .expect("non-empty")
                .raw()
                .addr_format
                == sys::FI_ADDR_STR;
            rail.peers = rail.av.insert(names, string_format)?;
        }
        Ok(())
    }

    fn all_connected(&mut self) {
        // Up to libfabric 1.x every peer mapped our shm regions when it inserted our address
        // (it has connected): the files are no longer needed, and a SIGKILL can no longer leave
        // them behind. From 2.0 the shm provider maps a peer's region at the first message to
        // it, so the files must stay (the provider unlinks them when the endpoint closes; the
        // next start on this host sweeps those of killed processes, `shm::sweep_stale`).
        if shm::mapped_at_insert(fabric::runtime_version()) {
            shm::unlink_own(&std::mem::take(&mut self.shm_regions));
        }
    }

    unsafe fn mr_reg(&mut self, mem: LocalMem) -> Result<MrId> {
        let (iface, device) = match mem.kind {
            MemKind::Host => (sys::fi_hmem_iface_FI_HMEM_SYSTEM, 0),
            MemKind::Cuda { device, .. } => {
                if !self.caps.gpu_memory {
                    return Err(TransportError::Unsupported {
                        op: "registering GPU memory",
                        transport: self.caps.name.clone(),
                    });
                }
                (sys::fi_hmem_iface_FI_HMEM_CUDA, device)
            }
        };
        let id = self
            .regions
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.regions.len());
        let mut mrs = Vec::with_capacity(self.rails.len());
        if matches!(
            mem.kind,
            MemKind::Cuda {
                dmabuf_fd: Some(_),
                ..
            }
        ) && !self.caps.dmabuf
        {
            tracing::warn!(
                "registering GPU memory by address, not by its DMA-BUF: DMA-BUF \
                 registration is not offered here (it needs libfabric 1.20 at run time, \
                 this is {:#x}, and a provider taking GPU memory); the NIC then needs the \
                 peer-memory kernel module",
                fabric::runtime_version()
            );
        }
        for rail in &self.rails {
            let src = match mem.kind {
                MemKind::Cuda {
                    device,
                    dmabuf_fd: Some(fd),
                    dmabuf_offset,
                } if self.caps.dmabuf => MrSource::DmaBuf {
                    fd,
                    offset: dmabuf_offset,
                    len: mem.len,
                    base: mem.ptr.cast(),
                    device,
                },
                _ => MrSource::Addr {
                    ptr: mem.ptr.cast(),
                    len: mem.len,
                    iface,
                    device,
                },
            };
            // SAFETY: the caller keeps the memory valid while registered.
            mrs.push(unsafe { reg_fresh_key(rail, src)? });
        }
        let region = Region {
            ptr: mem.ptr,
            len: mem.len,
            mrs,
        };
        if id == self.regions.len() {
            self.regions.push(Some(region));
        } else {
            self.regions[id] = Some(region);
        }
        Ok(MrId(id as u32))
    }

    fn mr_dereg(&mut self, mr: MrId) -> Result<()> {
        match self.regions.get_mut(mr.0 as usize).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(TransportError::InvalidArgument {
                op: "mr_dereg",
                reason: format!("unknown registration {mr:?}"),
            }),
        }
    }

    fn mr_export(&self, mr: MrId) -> Vec<u8> {
        let Some(Some(r)) = self.regions.get(mr.0 as usize) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(12 + 16 * r.mrs.len());
        out.extend_from_slice(&(r.len as u64).to_le_bytes());
        out.extend_from_slice(&(r.mrs.len() as u32).to_le_bytes());
        for m in &r.mrs {
            out.extend_from_slice(&(r.ptr as u64).to_le_bytes());
            out.extend_from_slice(&m.key.to_le_bytes());
        }
        out
    }

    fn mr_import(&mut self, pe: Pe, blob: &[u8]) -> Result<RemoteMrId> {
        let bad = |why: &str| TransportError::InvalidArgument {
            op: "mr_import",
            reason: format!("registration of PE {pe}: {why}"),
        };
        if blob.len() < 12 {
            return Err(bad("too short"));
        }
        let len = u64::from_le_bytes(blob[..8].try_into().expect("8"));
        let count = u32::from_le_bytes(blob[8..12].try_into().expect("4")) as usize;
        if count != self.rails.len() || blob.len() != 12 + 16 * count {
            return Err(bad("rail count differs"));
        }
        let rails = (0..count)
            .map(|i| {
                let o = 12 + 16 * i;
                (
                    u64::from_le_bytes(blob[o..o + 8].try_into().expect("8")),
                    u64::from_le_bytes(blob[o + 8..o + 16].try_into().expect("8")),
                )
            })
            .collect();
        self.remotes.push(RemoteRegion { pe, len, rails });
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
        // SAFETY: forwarded contract.
        unsafe { self.rma(true, pe, local, remote, len, None, ctx) }
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
        // SAFETY: forwarded contract.
        unsafe { self.rma(true, pe, local, remote, len, Some(data), ctx) }
    }

    unsafe fn read(
        &mut self,
        pe: Pe,
        local: LocalRef,
        remote: RemoteRef,
        len: usize,
        ctx: u64,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(false, pe, local, remote, len, None, ctx) }
    }

    fn send(&mut self, pe: Pe, msg: &[u8], ctx: u64) -> Result<(), PostError> {
        self.peer_ok(pe, "send")?;
        if msg.len() > self.cfg.max_send {
            return Err(TransportError::InvalidArgument {
                op: "send",
                reason: format!("{} bytes > max {}", msg.len(), self.cfg.max_send),
            }
            .into());
        }
        let rail = self.home_rail(pe);
        let slot = self.new_op(ctx, pe, OpKind::Send, 1)?;
        let off = self.send_off(slot);
        self.rails[rail].internal[off..off + msg.len()].copy_from_slice(msg);
        let held = Held::Send {
            rail,
            slot,
            pe,
            len: msg.len(),
        };
        self.post_or_hold(held)
    }

    fn poll(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<usize> {
        self.flush_held();
        let mut count = 0;
        for e in std::mem::take(&mut self.deferred) {
            e.deliver(on_event);
            count += 1;
        }
        for r in 0..self.rails.len() {
            count += self.poll_rail(r, on_event)?;
        }
        Ok(count)
    }

    fn flush(&mut self) {
        self.flush_held();
    }

    fn rail_bytes(&self) -> Vec<u64> {
        self.rails.iter().map(|r| r.bytes).collect()
    }

    /// Blocks on the rails' CQ wait descriptors (poll(2)) when every rail has one and
    /// `fi_trywait` says nothing is pending; otherwise sleeps. Incoming traffic makes the
    /// descriptor readable, so a target wakes at once; the next poll then progresses it.
    fn wait(&mut self, timeout: std::time::Duration) -> bool {
        self.flush_held();
        if !self.deferred.is_empty() || self.holding() {
            return true;
        }
        let fds: Option<Vec<libc::pollfd>> = self
            .rails
            .iter()
            .map(|r| {
                r.cq.wait_fd().map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
            })
            .collect();
        let Some(mut fds) = fds else {
            std::thread::sleep(timeout);
            return false;
        };
        if !self.rails.iter().all(|r| r.cq.trywait()) {
            // Completions or progress are already pending.
            return true;
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of pollfd for its length; no signal mask change.
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        ready > 0
    }

    fn fail_peer(&mut self, pe: Pe, reason: &str) {
        if pe.idx() >= self.n || self.dead[pe.idx()].is_some() {
            return;
        }
        self.dead[pe.idx()] = Some(reason.to_string());
        for slot in self.ops.indices_where(|r| r.pe == pe && !r.abandoned) {
            let rec = self.ops.get_mut(slot).expect("live");
            rec.abandoned = true;
            let error = TransportError::PeerLost {
                pe,
                op: rec.kind.name(),
                reason: reason.to_string(),
            };
            self.deferred.push(OwnedEvent::Failed(rec.ctx, error));
        }
    }
}
