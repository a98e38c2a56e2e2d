//! This host's placement: the topology (hwloc, or `PSHMEM_TOPOLOGY_XML`), the CUDA devices, the
//! NICs of the libfabric provider in use, and the plan `pshmem_topology::place` computes from
//! them. `pshmem-info` prints it; `Pshmem::init` pins its proxy threads (and, for RDMA
//! providers, opens its rails) from it.

use pshmem_topology::{DeviceKind, Machine, NicRef, PciAddr, Placement, PlacementInput, place};
use pshmem_transport::ofi::{DEFAULT_PROVIDERS, DomainInfo, list_domains};

use std::sync::{Mutex, OnceLock};

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

impl HostPlan {
    /// The domain names of NICs `idx` (indices into [`HostPlan::nics`]): a PE's rails.
    pub fn nic_names(&self, idx: impl IntoIterator<Item = usize>) -> Vec<String> {
        idx.into_iter().map(|i| self.nics[i].name.clone()).collect()
    }
}

/// What placement looks at besides the hardware: the topology file standing in for this host
/// and the provider named (`PSHMEM_TOPOLOGY_XML`, `PSHMEM_PROVIDER`; from the runtime's
/// [`crate::Config`], so that placement reads no environment of its own).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    /// A topology file describing the host, else hwloc's discovery of this one.
    pub topology_xml: Option<&'a str>,
    /// The provider named, else the preference order.
    pub provider: Option<&'a str>,
}

impl crate::Config {
    /// What placement reads of this configuration.
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            topology_xml: self.topology_xml.as_deref(),
            provider: self.transport.provider.as_deref(),
        }
    }
}

/// Providers that reach an RDMA NIC (their domains are NICs to place).
pub fn is_rdma(provider: &str) -> bool {
    provider.starts_with("efa") || provider.starts_with("verbs")
}

/// This machine's topology (hwloc), discovered once per process: init places the host proxies
/// with it and the GPU part its proxies' rails, and discovery with every I/O device costs a
/// quarter of a second on a GPU host (measured on the H100 machine). The hardware does not
/// change under a running process; a topology file (`PSHMEM_TOPOLOGY_XML`) is read each time.
pub fn this_machine() -> Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(|| Machine::discover(None)).clone()
}

/// [`this_machine`], or the topology file's host.
fn machine(xml: Option<&str>) -> Machine {
    match xml {
        Some(p) => Machine::discover(Some(std::path::Path::new(p))),
        None => this_machine(),
    }
}

/// The provider in force (`wanted`, else the preference order) and its domains (see
/// [`find_provider`]), asked of libfabric once per process and provider setting: each
/// `fi_getinfo` costs tens of milliseconds.
pub fn provider(wanted: Option<&str>) -> Option<(String, Vec<DomainInfo>)> {
    type Found = Option<(String, Vec<DomainInfo>)>;
    static FOUND: Mutex<Vec<(Option<String>, Found)>> = Mutex::new(Vec::new());
    let mut found = FOUND.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, f)) = found.iter().find(|(w, _)| w.as_deref() == wanted) {
        return f.clone();
    }
    let f = find_provider(wanted);
    found.push((wanted.map(str::to_string), f.clone()));
    f
}

/// The provider in force: `wanted` (PSHMEM_PROVIDER / FI_PROVIDER), else the first of the
/// preference order that has domains here.
fn find_provider(wanted: Option<&str>) -> Option<(String, Vec<DomainInfo>)> {
    match wanted {
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
pub fn host_plan(
    src: Sources<'_>,
    local_size: usize,
    proxy_threads: usize,
    gpus: bool,
) -> HostPlan {
    let xml = src.topology_xml;
    let machine = machine(xml);
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
    let (provider, domains) = match provider(src.provider) {
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

/// The NIC domains (rails) for local rank `local_rank` driving GPU `gpu` (an index into
/// [`HostPlan::gpus`]; the CUDA ordinal when no topology file is in force): the rails placement
/// gave that PE when it placed it on this GPU (PEs sharing a GPU start on different NICs), else
/// every NIC of that GPU at its closest distance. Empty when the GPU is unknown to the plan.
pub fn gpu_rails(plan: &HostPlan, local_rank: usize, gpu: usize) -> Vec<String> {
    if let Some(pe) = plan.placement.pes.get(local_rank)
        && pe.gpu == Some(gpu)
        && !pe.nics.is_empty()
    {
        return plan.nic_names(pe.nics.iter().copied());
    }
    let Some(g) = plan.placement.gpus.iter().find(|g| g.gpu == gpu) else {
        return Vec::new();
    };
    let best = g.nics.first().map(|&(_, d)| d);
    let closest = g.nics.iter().filter(|&&(_, d)| Some(d) == best);
    plan.nic_names(closest.map(|&(i, _)| i))
}

/// The rails of a GPU proxy: [`gpu_rails`] of this host's plan when the provider in force is an
/// RDMA one (its domains are NICs); otherwise none (the provider's default domain).
pub fn gpu_proxy_rails(
    src: Sources<'_>,
    (local_size, local_rank): (usize, usize),
    gpu: usize,
    me: usize,
) -> Vec<String> {
    // A named provider that is not an RDMA one has no NICs to place: skip the topology.
    if src.provider.is_some_and(|p| !is_rdma(p)) {
        return Vec::new();
    }
    let plan = host_plan(src, local_size, 1, true);
    match plan.provider.as_deref() {
        Some(p) if is_rdma(p) => {
            let rails = gpu_rails(&plan, local_rank, gpu);
            if rails.is_empty() {
                tracing::warn!(
                    "PE {me}: placement found no NIC for GPU {gpu}: its proxy uses the \
                     provider's first domain"
                );
            } else {
                tracing::info!("PE {me}: GPU {gpu}'s proxy stripes over {rails:?}");
            }
            rails
        }
        _ => Vec::new(),
    }
}

/// How many command rings and proxy threads a GPU's path has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyShape {
    /// Rings (ring 0: the device API's; the MoE kernels spread over all of them).
    pub rings: usize,
    /// Proxy threads (ring r drained by thread r mod threads; each stripes over the rails).
    pub threads: usize,
}

impl ProxyShape {
    /// One ring, one thread: enough where the proxy carries little (peers on this host are
    /// reached through NVLink, and a socket provider is slower than one thread).
    pub const ONE: Self = Self {
        rings: 1,
        threads: 1,
    };
    /// Most threads a default gives a GPU (UCCL-EP runs 4 per GPU on p5en).
    pub const MAX_THREADS: usize = 4;
    /// Rings per thread a default gives (UCCL-EP's 8 FIFOs per proxy thread).
    pub const RINGS_PER_THREAD: usize = 8;
}

/// The GPU proxy's shape when the user names neither `PSHMEM_GPU_RINGS` nor
/// `PSHMEM_GPU_PROXY_THREADS`, and why: [`ProxyShape::ONE`] unless some peer is reached
/// through an RDMA provider (`network`); then one thread per 3 cores of the GPU's share of its
/// NUMA node (cores of the node / GPUs on it; the rest stay the application's), at most
/// [`ProxyShape::MAX_THREADS`], each with [`ProxyShape::RINGS_PER_THREAD`] rings. p5en and p5
/// (12 cores per GPU): 4 threads × 8 rings, UCCL-EP's shape — modelled on it, not measured on
/// EFA.
pub fn default_gpu_proxy_shape(plan: &HostPlan, gpu: usize, network: bool) -> (ProxyShape, String) {
    if !network {
        return (
            ProxyShape::ONE,
            "no peer is reached through the network".into(),
        );
    }
    if !plan.provider.as_deref().is_some_and(is_rdma) {
        return (ProxyShape::ONE, "the provider is not an RDMA one".into());
    }
    let Some(numa) = plan
        .placement
        .gpus
        .iter()
        .find(|g| g.gpu == gpu)
        .and_then(|g| g.numa)
    else {
        return (ProxyShape::ONE, format!("GPU {gpu}'s NUMA node is unknown"));
    };
    let gpus = plan
        .placement
        .gpus
        .iter()
        .filter(|g| g.numa == Some(numa))
        .count()
        .max(1);
    let cores = plan.machine.cores_of(numa).len() / gpus;
    let threads = (cores / 3).clamp(1, ProxyShape::MAX_THREADS);
    let shape = ProxyShape {
        rings: threads * ProxyShape::RINGS_PER_THREAD,
        threads,
    };
    let why = format!("{cores} cores per GPU on NUMA node {numa}, peers through the network");
    (shape, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of a topology file's host, as `host_plan` makes it there: its GPUs and RDMA NICs.
    fn plan_of(file: &str, local_size: usize) -> HostPlan {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("topology/tests/topologies")
            .join(file);
        let machine = Machine::discover(Some(&path));
        assert!(!machine.fallback, "{file}: {:?}", machine.warnings);
        let gpus: Vec<PciAddr> = machine.gpus().map(|g| g.addr).collect();
        let nics: Vec<NicRef> = machine
            .nics()
            .filter(|d| d.kind == DeviceKind::Nic { rdma: true })
            .map(|d| NicRef {
                name: d.os_names[0].clone(),
                addr: Some(d.addr),
            })
            .collect();
        let placement = place(&PlacementInput {
            machine: &machine,
            gpus: gpus.clone(),
            nics: nics.clone(),
            local_size,
            proxy_threads: 1,
            app_cpus: Vec::new(),
        });
        HostPlan {
            machine,
            cuda: Err(CudaError::Unusable("test".into())),
            provider: Some("efa".into()),
            domains: Vec::new(),
            nics,
            gpus,
            placement,
            warnings: Vec::new(),
        }
    }

    /// p5en: each GPU's proxy stripes over the 2 EFA NICs below its switch; p5: over 4. No NIC
    /// serves two GPUs.
    #[test]
    fn gpu_proxies_stripe_over_their_gpus_nics() {
        for (file, per) in [("p5en.48xlarge.xml", 2), ("p5.48xlarge.xml", 4)] {
            let plan = plan_of(file, 8);
            let mut seen = std::collections::HashSet::new();
            for gpu in 0..8 {
                let rails = gpu_rails(&plan, gpu, gpu);
                assert_eq!(rails.len(), per, "{file}: GPU {gpu}: {rails:?}");
                for r in rails {
                    assert!(seen.insert(r.clone()), "{file}: {r} on two GPUs");
                }
            }
        }
    }

    /// The default GPU proxy shape: UCCL-EP's 4 × 8 on p5en and p5 when peers are reached
    /// through the network; one ring and thread without such peers or without an RDMA
    /// provider; p4d's smaller share of cores gets fewer threads.
    #[test]
    fn gpu_proxies_take_their_shape_from_the_topology() {
        let four = ProxyShape {
            rings: 32,
            threads: 4,
        };
        for file in ["p5en.48xlarge.xml", "p5.48xlarge.xml"] {
            let plan = plan_of(file, 8);
            for gpu in 0..8 {
                assert_eq!(default_gpu_proxy_shape(&plan, gpu, true).0, four, "{file}");
                assert_eq!(
                    default_gpu_proxy_shape(&plan, gpu, false).0,
                    ProxyShape::ONE
                );
            }
            let mut tcp = plan_of(file, 8);
            tcp.provider = Some("tcp;ofi_rxm".into());
            let (shape, why) = default_gpu_proxy_shape(&tcp, 0, true);
            assert_eq!(shape, ProxyShape::ONE);
            assert!(why.contains("not an RDMA"), "{why}");
        }
        let p4d = plan_of("p4d.24xlarge.xml", 8);
        let (shape, why) = default_gpu_proxy_shape(&p4d, 0, true);
        assert!(shape.threads >= 1 && shape.threads < 4, "{shape:?}: {why}");
        assert_eq!(shape.rings, shape.threads * ProxyShape::RINGS_PER_THREAD);
        let (shape, _) = default_gpu_proxy_shape(&p4d, 99, true);
        assert_eq!(shape, ProxyShape::ONE, "an unknown GPU");
    }

    /// Two PEs per GPU (16 on 8 GPUs) start on different NICs of their GPU; a PE whose device
    /// differs from what placement assumed (PSHMEM_CUDA_DEVICE) gets that GPU's NICs.
    #[test]
    fn pes_sharing_a_gpu_use_its_nics_in_different_orders() {
        let plan = plan_of("p5en.48xlarge.xml", 16);
        let (a, b) = (gpu_rails(&plan, 3, 3), gpu_rails(&plan, 11, 3));
        assert_eq!(a.len(), 2);
        let (mut sa, mut sb) = (a.clone(), b.clone());
        sa.sort();
        sb.sort();
        assert_eq!(sa, sb, "the same GPU's NICs");
        assert_ne!(a[0], b[0], "the two PEs start on different NICs");
        let other = gpu_rails(&plan, 3, 5);
        assert_eq!(other.len(), 2);
        assert!(
            other.iter().all(|r| !a.contains(r)),
            "GPU 5's NICs, not GPU 3's"
        );
        assert!(gpu_rails(&plan, 0, 99).is_empty(), "an unknown GPU");
    }
}
