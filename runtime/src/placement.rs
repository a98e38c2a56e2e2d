//! This host's placement: the topology (hwloc, or `PSHMEM_TOPOLOGY_XML`), the CUDA devices, the
//! NICs of the libfabric provider in use, and the plan `pshmem_topology::place` computes from
//! them. `pshmem-info` prints it; `Pshmem::init` pins its proxy threads (and, for RDMA
//! providers, opens its rails) from it.

use pshmem_env as env;
use pshmem_topology::{DeviceKind, Machine, NicRef, PciAddr, Placement, PlacementInput, place};
use pshmem_transport::ofi::{DEFAULT_PROVIDERS, DomainInfo, list_domains};

use crate::cuda::{self, CudaDevice, CudaError};

/// Everything placement looked at, and the plan.
#[derive(Debug)]
pub struct HostPlan {
    /// The host.
    pub machine: Machine,
    /// CUDA devices, or why there are none.
    pub cuda: Result<Vec<CudaDevice>, CudaError>,
    /// The provider whose NICs were placed (None: no libfabric provider, or sim/instant).
    pub provider: Option<String>,
    /// Its domains.
    pub domains: Vec<DomainInfo>,
    /// The NICs placed (domains matched to PCI devices).
    pub nics: Vec<NicRef>,
    /// GPUs placed, in the order their plans use (CUDA ordinal order, or the XML's PCI order).
    pub gpus: Vec<PciAddr>,
    /// The plan.
    pub placement: Placement,
    /// Notes for the user beyond the plan's own warnings.
    pub warnings: Vec<String>,
}

/// Providers that reach an RDMA NIC (their domains are NICs to place).
pub fn is_rdma(provider: &str) -> bool {
    provider.starts_with("efa") || provider.starts_with("verbs")
}

/// The provider in force: PSHMEM_PROVIDER / FI_PROVIDER, else the first of the preference
/// order that has domains here.
fn provider() -> Option<(String, Vec<DomainInfo>)> {
    let wanted = env::PROVIDER.raw().or_else(|| env::fallback("FI_PROVIDER"));
    match wanted.as_deref() {
        Some("sim" | "instant") => None,
        Some(p) => {
            let p = if p == "tcp" { "tcp;ofi_rxm" } else { p };
            Some((p.to_string(), list_domains(p).unwrap_or_default()))
        }
        None => DEFAULT_PROVIDERS.iter().find_map(|p| {
            list_domains(p)
                .ok()
                .filter(|d| !d.is_empty())
                .map(|d| (p.to_string(), d))
        }),
    }
}

/// The PCI device behind a libfabric domain: the provider's own answer, else the OS device of
/// that name (network interfaces; verbs/EFA devices, whose domains add "-rdm"/"-dgrm").
fn nic_of(m: &Machine, d: &DomainInfo) -> NicRef {
    let addr = d.pci.as_deref().and_then(|p| p.parse().ok()).or_else(|| {
        let base = d.domain.trim_end_matches("-rdm").trim_end_matches("-dgrm");
        m.device_of_os_name(&d.domain)
            .or_else(|| m.device_of_os_name(base))
            .map(|x| x.addr)
    });
    NicRef {
        name: d.domain.clone(),
        addr,
    }
}

/// The cores this process may run on, if fewer than the machine has.
fn app_cpus(m: &Machine) -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    let total: usize = m.numa.iter().map(|n| n.cores.len()).sum();
    let mine: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    if mine.len() < total { mine } else { Vec::new() }
}

/// The plan for `local_size` PEs with `proxy_threads` each. `gpus`: place GPUs (CUDA devices,
/// or a topology file's) rather than host-mode PEs.
pub fn host_plan(local_size: usize, proxy_threads: usize, gpus: bool) -> HostPlan {
    let xml = env::TOPOLOGY_XML.raw();
    let machine = Machine::discover(xml.as_deref().map(std::path::Path::new));
    let mut warnings = Vec::new();
    // cuInit costs up to a second on a GPU machine: only probe when GPUs are placed.
    let cuda = if gpus {
        cuda::devices()
    } else {
        Err(CudaError::Unusable(
            "not probed (host-mode placement)".into(),
        ))
    };
    let gpu_addrs: Vec<PciAddr> = if !gpus {
        Vec::new()
    } else if xml.is_some() {
        // A topology file describes another machine: place its GPUs, in PCI order.
        machine.gpus().map(|g| g.addr).collect()
    } else {
        match &cuda {
            Ok(devs) => devs.iter().map(|d| d.pci).collect(),
            Err(_) => Vec::new(),
        }
    };
    let (provider, domains) = match provider() {
        Some((p, d)) => (Some(p), d),
        None => (None, Vec::new()),
    };
    let rdma = provider.as_deref().is_some_and(is_rdma);
    // Sockets over virtual interfaces (lo, bridges) have no NIC to place; RDMA domains always
    // are NICs, and one without PCI information is reported.
    let mut nics: Vec<NicRef> = domains
        .iter()
        .map(|d| nic_of(&machine, d))
        .filter(|n| rdma || n.addr.is_some())
        .collect();
    if xml.is_some() && !rdma {
        // Place the file's RDMA NICs as if its provider were here.
        nics = machine
            .nics()
            .filter(|d| d.kind == DeviceKind::Nic { rdma: true })
            .map(|d| NicRef {
                name: d
                    .os_names
                    .first()
                    .cloned()
                    .unwrap_or_else(|| d.addr.to_string()),
                addr: Some(d.addr),
            })
            .collect();
        warnings.push(format!(
            "placing the RDMA NICs of {} (this machine's provider is {})",
            machine.source,
            provider.as_deref().unwrap_or("none")
        ));
    } else if !rdma {
        warnings.push(format!(
            "no RDMA NIC: the {} provider is used{}",
            provider.as_deref().unwrap_or("(none)"),
            if provider.as_deref() == Some("tcp;ofi_rxm") {
                " (sockets; expect tens of microseconds per message)"
            } else {
                ""
            }
        ));
    }
    let placement = place(&PlacementInput {
        machine: &machine,
        gpus: gpu_addrs.clone(),
        nics: nics.clone(),
        local_size,
        proxy_threads,
        app_cpus: app_cpus(&machine),
    });
    HostPlan {
        machine,
        cuda,
        provider,
        domains,
        nics,
        gpus: gpu_addrs,
        placement,
        warnings,
    }
}
