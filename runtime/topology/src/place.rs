//! Placement: GPU → NICs, PE → GPU and rails, proxy threads → cores.
//!
//! Rules:
//! - every GPU takes `max(1, NICs / GPUs)` NICs, the closest first ([`Distance`]), and no NIC is
//!   given to more than `ceil(GPUs × that / NICs)` GPUs while another NIC is below that load:
//!   NICs are shared evenly, and a GPU never takes a far NIC while a close one is free;
//! - a PE uses the GPU `local_rank % GPUs`; PEs that share a GPU start on different NICs of
//!   its list (rotated), so the PEs of a host never all begin on one NIC;
//! - in host mode (no GPU) each PE is anchored to a NUMA node (local ranks in blocks) and takes
//!   NICs the same way, by distance to its node;
//! - a PE's proxy threads get cores of its GPU's (or first NIC's, or anchor) NUMA node, from the
//!   top of the node's core list down (applications and launchers bind from the bottom), skipping
//!   the cores the application is bound to; sharing is reported as a warning.

use crate::{Device, DeviceKind, Distance, Machine, PciAddr};

/// A NIC the transport can use (a libfabric domain), and its PCI address when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicRef {
    /// The domain (or interface) name.
    pub name: String,
    /// Its PCI address.
    pub addr: Option<PciAddr>,
}

/// What placement needs to know.
#[derive(Debug, Clone)]
pub struct PlacementInput<'a> {
    /// The host.
    pub machine: &'a Machine,
    /// Local GPUs in CUDA ordinal order; empty in host mode.
    pub gpus: Vec<PciAddr>,
    /// The NICs of the provider in use, in its order.
    pub nics: Vec<NicRef>,
    /// PEs on this host.
    pub local_size: usize,
    /// Proxy threads per PE.
    pub proxy_threads: usize,
    /// Cores the application is bound to, when it is bound to a subset of the machine.
    pub app_cpus: Vec<usize>,
}

/// The NICs of one GPU (or, in host mode, of one PE's NUMA anchor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// Index into [`PlacementInput::gpus`].
    pub gpu: usize,
    /// Its NICs (indices into [`PlacementInput::nics`]) with their distance, closest first.
    pub nics: Vec<(usize, Distance)>,
    /// Its NUMA node.
    pub numa: Option<usize>,
}

/// What one local PE uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PePlan {
    /// Local rank.
    pub local_rank: usize,
    /// GPU index, if any.
    pub gpu: Option<usize>,
    /// Rails: NIC indices, in the order this PE uses them.
    pub nics: Vec<usize>,
    /// NUMA node the PE is placed on.
    pub numa: Option<usize>,
    /// A core per proxy thread (empty: leave unpinned).
    pub proxy_cpus: Vec<usize>,
}

/// The plan for a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Per GPU (host mode: per PE anchor).
    pub gpus: Vec<GpuPlan>,
    /// Per local PE.
    pub pes: Vec<PePlan>,
    /// Problems worth telling the user (far NICs, shared cores, missing information).
    pub warnings: Vec<String>,
}

/// Distances from a device to every NIC (`Unknown` where either side is not in the topology).
fn distances(m: &Machine, from: &Device, nics: &[NicRef]) -> Vec<Distance> {
    nics.iter()
        .map(|n| match n.addr.and_then(|a| m.device(a)) {
            Some(d) => Machine::distance(from, d),
            None => Distance::Unknown,
        })
        .collect()
}

/// Picks `k` NICs for an anchor, closest first, keeping NIC loads under `cap` where possible.
fn pick(dist: &[Distance], load: &mut [usize], k: usize, cap: usize) -> Vec<(usize, Distance)> {
    let mut out: Vec<(usize, Distance)> = Vec::new();
    for _ in 0..k.min(dist.len()) {
        let best = (0..dist.len())
            .filter(|i| !out.iter().any(|(j, _)| j == i))
            .min_by_key(|&i| (load[i] >= cap, dist[i], load[i], i))
            .expect("a NIC left");
        load[best] += 1;
        out.push((best, dist[best]));
    }
    out.sort_by_key(|&(i, d)| (d, i));
    out
}

/// Computes the placement of a host.
pub fn place(input: &PlacementInput<'_>) -> Placement {
    let m = input.machine;
    let mut warnings = Vec::new();
    let (n_n, local) = (input.nics.len(), input.local_size.max(1));
    for n in &input.nics {
        match n.addr {
            None => warnings.push(format!(
                "NIC {} has no PCI information: its distance to GPUs and cores is unknown",
                n.name
            )),
            Some(a) if m.device(a).is_none() => warnings.push(format!(
                "NIC {} ({a}) is not in the topology ({})",
                n.name, m.source
            )),
            _ => {}
        }
    }
    if n_n == 0 {
        warnings.push("no NIC of the chosen provider was found: nothing to place on".into());
    }
    // Anchors: GPUs, or in host mode one pseudo-device per PE on its NUMA node.
    let host_mode = input.gpus.is_empty();
    let anchors: Vec<Device> = if host_mode {
        let nodes = m.numa.len().max(1);
        (0..local)
            .map(|r| Device {
                addr: PciAddr {
                    domain: u32::MAX,
                    bus: 0,
                    dev: 0,
                    func: 0,
                },
                kind: DeviceKind::Other,
                vendor: 0,
                device: 0,
                class: 0,
                os_names: Vec::new(),
                numa: m.numa.get(r * nodes / local).map(|n| n.id),
                path: Vec::new(),
            })
            .collect()
    } else {
        input
            .gpus
            .iter()
            .map(|&a| {
                m.device(a).cloned().unwrap_or_else(|| {
                    warnings.push(format!(
                        "GPU {a} is not in the topology ({}): its NICs are chosen blindly",
                        m.source
                    ));
                    Device {
                        addr: a,
                        kind: DeviceKind::Gpu,
                        vendor: 0,
                        device: 0,
                        class: 0,
                        os_names: Vec::new(),
                        numa: None,
                        path: Vec::new(),
                    }
                })
            })
            .collect()
    };
    let n_a = anchors.len();
    let k = if n_n == 0 { 0 } else { (n_n / n_a).max(1) };
    let cap = if n_n == 0 { 0 } else { (n_a * k).div_ceil(n_n) };
    let mut load = vec![0usize; n_n];
    let gpus: Vec<GpuPlan> = anchors
        .iter()
        .enumerate()
        .map(|(g, a)| {
            let dist = distances(m, a, &input.nics);
            let nics = pick(&dist, &mut load, k, cap);
            let what = if host_mode {
                format!("local PE {g}")
            } else {
                format!("GPU {g} ({})", a.addr)
            };
            if let Some(&(_, d)) = nics.first()
                && d >= Distance::CrossNuma
            {
                warnings.push(format!(
                    "{what} has no NIC on its NUMA node (closest: {}, {d})",
                    input.nics[nics[0].0].name
                ));
            }
            let numa = a.numa.or_else(|| {
                nics.first()
                    .and_then(|&(i, _)| input.nics[i].addr)
                    .and_then(|x| m.device(x))
                    .and_then(|d| d.numa)
            });
            GpuPlan { gpu: g, nics, numa }
        })
        .collect();
    // PEs: GPU (or anchor) and rails.
    let mut pes: Vec<PePlan> = (0..local)
        .map(|r| {
            let g = if host_mode { r } else { r % n_a };
            let mut nics: Vec<usize> = gpus[g].nics.iter().map(|&(i, _)| i).collect();
            if !host_mode && !nics.is_empty() {
                let shift = (r / n_a) % nics.len();
                nics.rotate_left(shift);
            }
            PePlan {
                local_rank: r,
                gpu: (!host_mode).then_some(g),
                nics,
                numa: gpus[g].numa,
                proxy_cpus: Vec::new(),
            }
        })
        .collect();
    let shared_start = {
        let firsts: Vec<usize> = pes.iter().filter_map(|p| p.nics.first().copied()).collect();
        firsts.len() > 1 && n_n > 1 && firsts.iter().all(|f| *f == firsts[0])
    };
    if shared_start {
        warnings.push("every PE begins on the same NIC".into());
    }
    // Proxy cores (none when the topology is unknown: pinning blindly could hurt).
    let threads = if m.fallback {
        0
    } else {
        input.proxy_threads.max(1)
    };
    let mut on_node: std::collections::HashMap<usize, usize> = Default::default();
    for p in &mut pes {
        let node = p
            .numa
            .unwrap_or_else(|| m.numa[p.local_rank % m.numa.len()].id);
        let all = m.cores_of(node);
        let free: Vec<usize> = all
            .iter()
            .copied()
            .filter(|c| !input.app_cpus.contains(c))
            .collect();
        let cand = if free.is_empty() { all.to_vec() } else { free };
        if threads == 0 {
            continue;
        }
        if cand.is_empty() {
            warnings.push(format!(
                "PE {} (local): NUMA node {node} has no cores: proxies unpinned",
                p.local_rank
            ));
            continue;
        }
        let j = on_node.entry(node).or_insert(0);
        for t in 0..threads {
            let slot = *j * threads + t;
            let core = cand[cand.len() - 1 - slot % cand.len()];
            if slot >= cand.len() {
                warnings.push(format!(
                    "proxy thread {t} of local PE {} shares core {core} with another proxy (NUMA node {node} has {} free cores)",
                    p.local_rank,
                    cand.len()
                ));
            }
            if input.app_cpus.contains(&core) {
                warnings.push(format!(
                    "proxy thread {t} of local PE {} shares core {core} with the application",
                    p.local_rank
                ));
            }
            p.proxy_cpus.push(core);
        }
        *j += 1;
    }
    Placement {
        gpus,
        pes,
        warnings,
    }
}
