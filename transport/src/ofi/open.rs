//! Opening the transport: the provider preference walk, one [`Rail`] per configured domain, and
//! the capabilities read from the first rail's provider entry.

use std::sync::Arc;

use pshmem_env as env;
use pshmem_libfabric_sys as sys;

use super::{
    EFA_DIRECT, OfiConfig, OfiTransport, Rail, RawHandles, cq_entries,
    discover::{api_version, discover},
    fabric::{self, Av, Cq, Domain, Endpoint, Fabric, InfoList, InfoRef, Mr, MrSource, bits},
    is_efa, keys, over_sockets, pick_entry, shm,
};
use crate::{Caps, Job, MrId, Pe, RemoteMrId, Result, TransportError, slab::Slab};

impl OfiTransport {
    /// Opens the transport for this PE of `job` (not yet connected: see [`crate::establish`]).
    pub fn open(job: Job, cfg: &OfiConfig) -> Result<Self> {
        let mut cfg = cfg.clone();
        if cfg.node.is_none() && (job.local_size == job.n_pes || job.same_machine) {
            // Every PE on this machine (emulated hosts included): bind loopback, so that no
            // external interface is needed and nothing listens beyond this machine.
            cfg.node = Some("127.0.0.1".into());
        }
        Self::open_raw(job.rank, job.n_pes, &cfg)
    }

    /// The libfabric objects behind a write from `local` to PE `pe`'s `remote` on rail 0, so
    /// that a baseline written against the C API can post on the very endpoint, connection and
    /// registrations this layer uses (fabric-bench: the two then differ only in the code that
    /// posts and polls). Completions of operations posted through these handles arrive on this
    /// transport's CQ: the caller reads them all itself before it polls the transport again.
    pub fn raw_handles(&self, pe: Pe, local: MrId, remote: RemoteMrId) -> Result<RawHandles> {
        let bad = |reason: String| TransportError::InvalidArgument {
            op: "raw_handles",
            reason,
        };
        let region = self
            .regions
            .get(local.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad(format!("unknown local registration {local:?}")))?;
        let rr = self
            .remotes
            .get(remote.0 as usize)
            .filter(|r| r.pe == pe)
            .ok_or_else(|| bad(format!("no registration {remote:?} of PE {pe}")))?;
        let rail = &self.rails[0];
        let (base, key) = rr.rails[0];
        let mut flags = bits!(FI_COMPLETION);
        if self.caps.delivery_complete {
            flags |= bits!(FI_DELIVERY_COMPLETE);
        }
        Ok(RawHandles {
            ep: rail.ep.raw(),
            cq: rail.cq.fid,
            peer: rail.peers[pe.idx()],
            local: region.ptr,
            local_len: region.len,
            local_desc: region.mrs[0].desc,
            remote_addr: if rail.virt_addr { base } else { 0 },
            remote_len: rr.len,
            remote_key: key,
            inject: self.caps.inject_size,
            flags,
        })
    }

    /// The first of `cfg`'s providers that `fi_getinfo` offers here, without opening anything
    /// (no fabric, domain or endpoint): a job that needs no transport still refuses a provider
    /// that does not exist, as its open would have.
    pub fn check(cfg: &OfiConfig) -> Result<String> {
        let version = api_version();
        let mut errors = Vec::new();
        for prov in &cfg.providers {
            match discover(prov, None, version, &[false]) {
                Ok(_) => return Ok(prov.clone()),
                Err(e) => errors.push(format!("{prov}: {e}")),
            }
        }
        Err(TransportError::NoProvider {
            wanted: cfg.providers.join(" > "),
            reason: errors.join("; "),
        })
    }

    /// Opens with explicit rank and world size.
    pub fn open_raw(me: Pe, n: usize, cfg: &OfiConfig) -> Result<Self> {
        let version = api_version();
        let mut errors = Vec::new();
        for prov in &cfg.providers {
            // shm binds by name, not address: a node would give every process the same name.
            let node = if prov == "shm" {
                None
            } else {
                cfg.node.as_deref()
            };
            match Self::open_provider(me, n, cfg, prov, node, version) {
                Ok(t) => return Ok(t),
                Err(TransportError::NoProvider { reason, .. }) => {
                    errors.push(format!("{prov}: {reason}"))
                }
                Err(e) => errors.push(format!("{prov}: {e}")),
            }
        }
        Err(TransportError::NoProvider {
            wanted: cfg.providers.join(" > "),
            reason: errors.join("; "),
        })
    }

    fn open_provider(
        me: Pe,
        n: usize,
        cfg: &OfiConfig,
        prov: &str,
        node: Option<&str>,
        version: u32,
    ) -> Result<Self> {
        // A GPU heap asks for FI_HMEM first; the rails then ask what the probe was given.
        let hmem: &[bool] = if cfg.gpu_memory {
            &[true, false]
        } else {
            &[false]
        };
        let probe = discover(prov, node, version, hmem)?;
        let rails = Self::rails_open(n, cfg, prov, (node, version, probe.hmem), &probe.list)?;
        let i = rails[0].info.iter().next().expect("non-empty");
        let caps = Self::provider_caps(i, cfg, probe.dc, version);
        let socket_errnos = over_sockets(&i.provider());
        let nrails = rails.len();
        let mut t = Self {
            me,
            n,
            cfg: cfg.clone(),
            caps,
            rails,
            ops: Slab::new(cfg.max_outstanding),
            regions: Vec::new(),
            remotes: Vec::new(),
            dead: vec![None; n],
            deferred: Vec::new(),
            held: vec![None; nrails],
            chain: vec![0; nrails],
            entries: vec![sys::fi_cq_data_entry::default(); 64],
            next_data_rail: 0,
            shm_regions: Vec::new(),
            socket_errnos,
        };
        if prov == "shm" {
            t.shm_regions = t
                .rails
                .iter()
                .filter_map(|r| shm::region_of(&r.ep.name().ok()?))
                .collect();
        }
        for r in 0..t.rails.len() {
            for b in 0..t.cfg.recv_buffers {
                t.post_recv(r, b)?;
            }
        }
        Ok(t)
    }

    /// Opens `cfg.rails` rails of `prov`, on the configured domains in turn (or all on the
    /// first domain of `probe`, the provider's answer).
    fn rails_open(
        n: usize,
        cfg: &OfiConfig,
        prov: &str,
        (node, version, hmem): (Option<&str>, u32, bool),
        probe: &InfoList,
    ) -> Result<Vec<Rail>> {
        let first = probe.iter().next().expect("non-empty");
        let domain_names: Vec<String> = if cfg.domains.is_empty() {
            vec![first.domain()]
        } else {
            cfg.domains.clone()
        };
        let cap = cfg.max_outstanding;
        // Every peer may have its in-flight limit of writes with immediate data outstanding to
        // this PE, each needing a completion entry here.
        let incoming = n.saturating_sub(1) * cfg.incoming_per_peer;
        let mut rails = Vec::with_capacity(cfg.rails);
        for r in 0..cfg.rails {
            let want = &domain_names[r % domain_names.len()];
            let info = discover(prov, node, version, &[hmem])?.list;
            let rail = match Rail::open(info, want, cfg, cap, incoming) {
                // shm names a region by pid, and pids are reused: a region file left by a
                // killed process whose pid this one now has is refused with EBUSY, after
                // libfabric has unlinked it (its check of the region's owner sees a live pid,
                // ours). The name is free for a second try.
                Err(TransportError::Ofi { code, .. }) if prov == "shm" && code == libc::EBUSY => {
                    tracing::info!(
                        "shm: this pid's region name was taken by a file a dead process left \
                         (libfabric removed it); opening the endpoint again"
                    );
                    let info = discover(prov, node, version, &[hmem])?.list;
                    Rail::open(info, want, cfg, cap, incoming)?
                }
                r => r?,
            };
            rails.push(rail);
        }
        Ok(rails)
    }

    /// The capabilities of a transport over `cfg.rails` rails of provider entry `i`; `dc`:
    /// delivery complete was accepted.
    fn provider_caps(i: InfoRef<'_>, cfg: &OfiConfig, dc: bool, version: u32) -> Caps {
        let tx = i.tx_attr();
        let rx = i.rx_attr();
        let order = tx.msg_order & rx.msg_order;
        let need = bits!(FI_ORDER_WAW | FI_ORDER_SAW | FI_ORDER_SAS | FI_ORDER_WAS);
        let gpu_memory = i.caps() & bits!(FI_HMEM) != 0;
        Caps {
            name: format!(
                "libfabric {} ({}) x{} rail(s)",
                i.provider(),
                i.domain(),
                cfg.rails
            ),
            // EFA's two fabrics speak different protocols: every PE must use the same one.
            fabric: if is_efa(&i.provider()) {
                format!("libfabric {} ({})", i.provider(), i.fabric())
            } else {
                format!("libfabric {}", i.provider())
            },
            ordered: order & need == need && cfg.rails == 1,
            delivery_complete: dc,
            gpu_memory,
            dmabuf: gpu_memory && version >= sys::FI_VERSION(1, 20),
            cq_data_size: i.domain_attr().cq_data_size.min(8),
            inject_size: tx.inject_size,
            max_msg_size: i.ep_attr().max_msg_size,
            max_send_size: cfg.max_send,
            max_outstanding: cfg.max_outstanding,
            manual_progress: sys::fi_domain_attr_data_progress(i.domain_attr())
                == sys::fi_progress_FI_PROGRESS_MANUAL,
            rails: cfg.rails,
            stripe_min: cfg.stripe_min,
        }
    }
}

impl Rail {
    fn open(
        info: InfoList,
        want_domain: &str,
        cfg: &OfiConfig,
        cap: usize,
        incoming: usize,
    ) -> Result<Self> {
        let all: Vec<InfoRef<'_>> = info.iter().collect();
        let keys: Vec<(String, String, String)> = all
            .iter()
            .map(|i| (i.provider(), i.fabric(), i.domain()))
            .collect();
        let entry = all[pick_entry(&keys, want_domain)];
        efa_setup_warn(entry);
        let mr_mode = entry.domain_attr().mr_mode as u64;
        let keys = keys::Keys::new(mr_mode, entry.domain_attr().mr_key_size);
        let fab = Fabric::open(entry)?;
        let domain = Domain::open(&fab, entry)?;
        let cq = cq_open(&domain, cap, cfg.recv_buffers, incoming)?;
        let av = Av::open(&domain, 64)?;
        let ep = Endpoint::open(&domain, entry, &cq, &av)?;
        let internal_len = (cap + cfg.recv_buffers) * cfg.max_send;
        let mut internal = vec![0u8; internal_len];
        let ep_bind = mr_mode & bits!(FI_MR_ENDPOINT) != 0;
        // Local access only: sends, receives and the local side of reads, writes and atomics;
        // no peer reaches these buffers.
        // SAFETY: `internal` is moved into the rail (its heap buffer does not move) and is
        // dropped after the registration (field order of Rail).
        let internal_mr = unsafe {
            Mr::reg(
                &domain,
                MrSource::Addr {
                    ptr: internal.as_mut_ptr().cast(),
                    len: internal_len,
                    iface: sys::fi_hmem_iface_FI_HMEM_SYSTEM,
                    device: 0,
                },
                bits!(FI_SEND | FI_RECV | FI_READ | FI_WRITE),
                keys.draw(),
                ep_bind.then_some(&ep),
            )?
        };
        let ctxs = vec![sys::fi_context2::default(); cap + cfg.recv_buffers].into_boxed_slice();
        let virt_addr = mr_mode & bits!(FI_MR_VIRT_ADDR) != 0;
        Ok(Self {
            ep,
            internal_mr,
            internal,
            ctxs,
            cq,
            av,
            domain,
            _fabric: fab,
            info,
            virt_addr,
            ep_bind,
            peers: Vec::new(),
            keys,
            bytes: 0,
        })
    }
}

/// Warns when an EFA entry will not give what proxyshmem expects: the NIC reaching GPU memory
/// (`FI_EFA_USE_DEVICE_RDMA`) and the efa-direct fabric.
fn efa_setup_warn(entry: InfoRef<'_>) {
    let efa = is_efa(&entry.provider());
    if efa && std::env::var(env::EFA_DEVICE_RDMA).ok().as_deref() != Some("1") {
        tracing::warn!(
            "efa: {} is not 1: the NIC may not read or write GPU memory (GPU heaps then \
             fail to register or go through host staging); pshmrun sets it, other launchers \
             should export {}=1",
            env::EFA_DEVICE_RDMA,
            env::EFA_DEVICE_RDMA
        );
    }
    if efa && entry.fabric() != EFA_DIRECT {
        tracing::warn!(
            "efa: the {EFA_DIRECT} fabric is not offered (libfabric {:#x}; it needs 1.22 and \
             a device with RDMA write): using fabric {:?}, with the efa provider's own \
             protocol on the data path",
            fabric::runtime_version(),
            entry.fabric()
        );
    }
}

/// A rail's completion queue, with room for `incoming` writes with immediate data where the
/// provider allows it (see [`cq_entries`]), else for the rail's own operations only.
fn cq_open(
    domain: &Arc<Domain>,
    cap: usize,
    recv_buffers: usize,
    incoming: usize,
) -> Result<Arc<Cq>> {
    match Cq::open(domain, cq_entries(cap, recv_buffers, incoming)) {
        Err(e) if incoming > 0 => {
            tracing::warn!(
                "a completion queue of {} entries (room for {incoming} incoming writes with \
                 immediate data) was refused ({e}); using {}: with more writes in flight to \
                 this PE than that, completions can be lost",
                cq_entries(cap, recv_buffers, incoming),
                cq_entries(cap, recv_buffers, 0)
            );
            Cq::open(domain, cq_entries(cap, recv_buffers, 0))
        }
        r => r,
    }
}
