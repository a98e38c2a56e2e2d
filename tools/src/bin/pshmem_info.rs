//! `pshmem-info`: what proxyshmem sees on this host and what it would do with it — the topology
//! (NUMA nodes, cores, GPUs, NICs), CUDA devices, libfabric providers and domains, the
//! GPU → NIC(s) → proxy core mapping, the environment variables in force, and warnings.
//!
//! `PSHMEM_TOPOLOGY_XML=file.xml pshmem-info` shows the mapping for another host's topology.

use clap::Parser;
use pshmem::gpu::registration::{Offer, Want, copies_in_software, plan};
use pshmem::placement::{HostPlan, Sources, host_plan};
use pshmem_env as env;
use pshmem_topology::{DeviceKind, Machine};
use pshmem_transport::ofi::{
    DEFAULT_PROVIDERS, EFA_DIRECT, fabric, fabrics_of, gpu_memory_offer, list_domains, providers,
};

#[derive(Parser)]
#[command(about = "Topology, devices, providers and placement as proxyshmem sees them")]
struct Args {
    /// PEs on this host (default: PSHMEM_LOCAL_SIZE / LOCAL_WORLD_SIZE, else one per GPU, else 1).
    #[arg(long)]
    local_size: Option<usize>,
    /// Proxy threads per PE (default: PSHMEM_PROXY_THREADS).
    #[arg(long)]
    proxy_threads: Option<usize>,
    /// Place host-mode PEs (no GPU) even where GPUs exist.
    #[arg(long)]
    host_mode: bool,
}

/// "0-3,8" for a sorted list.
fn ranges(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn numa_text(n: Option<usize>) -> String {
    n.map_or_else(|| "?".into(), |n| n.to_string())
}

fn topology(m: &Machine) {
    println!("== Topology: {}", m.source);
    for n in &m.numa {
        let mut c = n.cores.clone();
        c.sort_unstable();
        println!("NUMA node {}: {} cores ({})", n.id, c.len(), ranges(&c));
    }
    let gpus: Vec<_> = m.gpus().collect();
    println!("GPUs: {}", gpus.len());
    for g in gpus {
        println!(
            "  {} [{:04x}:{:04x}] NUMA {}",
            g.addr,
            g.vendor,
            g.device,
            numa_text(g.numa)
        );
    }
    let nics: Vec<_> = m.nics().collect();
    println!("NICs: {}", nics.len());
    for n in nics {
        println!(
            "  {} [{:04x}:{:04x}] {} NUMA {} {}",
            n.addr,
            n.vendor,
            n.device,
            if n.kind == (DeviceKind::Nic { rdma: true }) {
                "RDMA"
            } else {
                "Ethernet"
            },
            numa_text(n.numa),
            n.os_names.join(" ")
        );
    }
}

fn devices(p: &HostPlan) {
    println!("\n== CUDA");
    match &p.cuda {
        Ok(d) if d.is_empty() => println!("driver present, no device"),
        Ok(d) => {
            for x in d {
                let numa = p.machine.device(x.pci).and_then(|g| g.numa);
                println!(
                    "  device {}: {} at {} (NUMA {})",
                    x.ordinal,
                    x.name,
                    x.pci,
                    numa_text(numa)
                );
            }
        }
        Err(why) => println!("no CUDA devices: {why}"),
    }
    println!("CUDA MPS: {}", pshmem::gpu::mps::status().describe());
    libfabric();
    for prov in DEFAULT_PROVIDERS {
        match list_domains(prov) {
            Ok(d) if !d.is_empty() => {
                let names: Vec<String> = d
                    .iter()
                    .map(|x| match &x.pci {
                        Some(a) => format!("{} ({a})", x.domain),
                        None => x.domain.clone(),
                    })
                    .collect();
                println!("  {prov}: {}", names.join(", "));
            }
            Ok(_) => println!("  {prov}: no domain"),
            Err(e) => println!("  {prov}: unavailable ({e})"),
        }
    }
    println!(
        "in use: {}",
        p.provider
            .as_deref()
            .unwrap_or("none (sim, instant, or no provider)")
    );
}

/// "1.17" for `FI_VERSION(1, 17)`.
fn version(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

/// The libfabric in use: its version and file, the headers this build used, its providers, and
/// whether EFA (and its efa-direct fabric) is there, and if not why.
fn libfabric() {
    let (run, built) = (fabric::runtime_version(), fabric::built_version());
    let file = fabric::library_path().unwrap_or_else(|| "file unknown".into());
    println!(
        "\n== libfabric {} ({file}; built against {})",
        version(run),
        version(built)
    );
    if run < built {
        println!("warning: older than the headers this build used (LD_LIBRARY_PATH?)");
    }
    let provs = match providers() {
        Ok(p) => p,
        Err(e) => {
            println!("providers: unknown ({e})");
            Vec::new()
        }
    };
    let names: Vec<String> = provs
        .iter()
        .map(|(n, v)| format!("{n} {}", version(*v)))
        .collect();
    println!("providers: {}", names.join(", "));
    let efa = if !provs.iter().any(|(n, _)| n == "efa") {
        "not in this libfabric (built without the efa provider)".to_string()
    } else {
        match fabrics_of("efa") {
            Ok(f) if f.iter().any(|x| x == EFA_DIRECT) => {
                format!("present, with a device; fabrics {}", f.join(", "))
            }
            Ok(f) if !f.is_empty() => format!(
                "present, with a device; fabrics {} (no {EFA_DIRECT}: libfabric before 2.x)",
                f.join(", ")
            ),
            Ok(_) => "present, no EFA device on this host".into(),
            Err(_) => "present, no EFA device on this host".into(),
        }
    };
    println!("efa: {efa}");
}

fn mapping(p: &HostPlan, threads: usize) {
    let pl = &p.placement;
    let rdma = p
        .provider
        .as_deref()
        .is_some_and(pshmem::placement::is_rdma)
        || std::env::var_os("PSHMEM_TOPOLOGY_XML").is_some();
    println!(
        "\n== Placement: {} local PE(s), {threads} proxy thread(s) each, {} NIC(s) placed",
        pl.pes.len(),
        p.nics.len()
    );
    for g in &pl.gpus {
        let nics: Vec<String> = g
            .nics
            .iter()
            .map(|&(i, d)| format!("{} ({d})", p.nics[i].name))
            .collect();
        let what = match p.gpus.get(g.gpu) {
            Some(a) => format!("GPU {} ({a})", g.gpu),
            None => format!("local PE {}", g.gpu),
        };
        println!(
            "{what}, NUMA {}: {}",
            numa_text(g.numa),
            if nics.is_empty() {
                "no NIC".into()
            } else {
                nics.join(", ")
            }
        );
    }
    for pe in &pl.pes {
        let rails: Vec<&str> = pe.nics.iter().map(|&i| p.nics[i].name.as_str()).collect();
        println!(
            "local PE {}: {}{} [{}] -> proxy cores [{}]",
            pe.local_rank,
            pe.gpu.map_or_else(String::new, |g| format!("GPU {g}, ")),
            if rdma {
                "rails"
            } else {
                "NICs (rails only on RDMA providers)"
            },
            rails.join(", "),
            if pe.proxy_cpus.is_empty() {
                "unpinned".to_string()
            } else {
                pe.proxy_cpus
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
    }
}

/// How each local PE's GPU heap would be registered with the proxy's transport
/// (`PSHMEM_GPU_REGISTRATION`; the first choice of `gpu_init`'s order) and why.
fn registration(p: &HostPlan, provider: Option<&str>) {
    println!(
        "\n== GPU heap registration ({}={})",
        env::GPU_REGISTRATION.name,
        env::GPU_REGISTRATION.value()
    );
    let devs = match &p.cuda {
        Ok(d) if !d.is_empty() => d,
        _ => {
            println!("no GPU: host mode (the host heap is registered)");
            return;
        }
    };
    let want = match Want::from_env() {
        Ok(w) => w,
        Err(e) => {
            println!("{e}");
            return;
        }
    };
    let (transport, (gpu_memory, dmabuf)) = match provider.or(p.provider.as_deref()) {
        Some("sim") => {
            let on = env::SIM_GPU_MEMORY.bool().unwrap_or(false);
            ("the simulated fabric".to_string(), (on, on))
        }
        Some("instant") | None => ("no libfabric provider".to_string(), (false, false)),
        Some(prov) => (format!("libfabric {prov}"), gpu_memory_offer(prov)),
    };
    for pe in &p.placement.pes {
        let Some(g) = pe.gpu else { continue };
        let offer = Offer {
            transport: transport.clone(),
            gpu_memory,
            dmabuf,
            gpu_dmabuf: devs.get(g).is_some_and(|d| d.dmabuf),
            software: copies_in_software(&transport),
        };
        match plan(want, &offer) {
            Ok((order, why)) => println!(
                "local PE {}: GPU {g}: {} ({why})",
                pe.local_rank,
                order[0].name()
            ),
            Err(e) => println!("local PE {}: GPU {g}: gpu_init fails: {e}", pe.local_rank),
        }
    }
    println!(
        "(for PEs reached through the proxy; a registration that fails falls to the next, and \
         where one PE of the job stages, every PE does)"
    );
}

pshmem_transport::hold_signals_through_load!();

fn main() {
    pshmem_env::init_logging();
    let a = Args::parse();
    let threads = a
        .proxy_threads
        .or_else(|| env::PROXY_THREADS.usize().ok())
        .unwrap_or(1)
        .max(1);
    // What placement reads besides the hardware: a topology file and the provider.
    let xml = env::TOPOLOGY_XML.raw();
    let provider = env::PROVIDER.raw().or_else(|| env::fallback("FI_PROVIDER"));
    let src = Sources {
        topology_xml: xml.as_deref(),
        provider: provider.as_deref(),
    };
    let probe = host_plan(src, 1, threads, !a.host_mode);
    let local = a
        .local_size
        .or_else(|| env::LOCAL_SIZE.opt_usize().ok().flatten())
        .or_else(|| env::fallback("LOCAL_WORLD_SIZE").and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| probe.gpus.len().max(1));
    let plan = if local == 1 {
        probe
    } else {
        host_plan(src, local, threads, !a.host_mode)
    };
    topology(&plan.machine);
    devices(&plan);
    mapping(&plan, threads);
    if !a.host_mode {
        registration(&plan, provider.as_deref());
    }
    println!("\n== Environment (the table in docs/ENVIRONMENT.md)");
    print!("{}", env::render_table());
    let gpus = plan.cuda.as_ref().map_or(0, Vec::len);
    let mps = pshmem::gpu::mps::status();
    let shared_gpu = (gpus > 0 && local > gpus && !a.host_mode && !mps.running()).then(|| {
        format!(
            "{local} PEs on {gpus} GPU(s) share GPUs, but CUDA MPS is {}: device operations \
             between PEs on one GPU would run about 2000x slower; {}",
            mps.describe(),
            pshmem::gpu::mps::HOW_TO_START
        )
    });
    let warnings: Vec<&String> = plan
        .machine
        .warnings
        .iter()
        .chain(&plan.warnings)
        .chain(&plan.placement.warnings)
        .chain(&shared_gpu)
        .collect();
    println!("\n== Warnings: {}", warnings.len());
    for w in warnings {
        println!("warning: {w}");
    }
}
