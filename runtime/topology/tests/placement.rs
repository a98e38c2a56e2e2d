//! Placement on synthetic topologies of AWS-like hosts (tests/topologies/*.xml, made by gen.py),
//! on bad input, and on the machine the tests run on.

use std::{collections::HashMap, path::PathBuf};

use pshmem_topology::{DeviceKind, Distance, Machine, NicRef, Placement, PlacementInput, place};

fn xml(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/topologies")
        .join(name)
}

fn load(name: &str) -> Machine {
    let m = Machine::discover(Some(&xml(name)));
    assert!(!m.fallback, "{name}: {:?}", m.warnings);
    m
}

/// The RDMA NICs of a machine, named by their OS device as libfabric names EFA domains.
fn rdma_nics(m: &Machine) -> Vec<NicRef> {
    m.nics()
        .filter(|d| d.kind == DeviceKind::Nic { rdma: true })
        .map(|d| NicRef {
            name: d.os_names[0].clone(),
            addr: Some(d.addr),
        })
        .collect()
}

fn plan(m: &Machine, nics: Vec<NicRef>, local: usize, threads: usize) -> Placement {
    place(&PlacementInput {
        machine: m,
        gpus: m.gpus().map(|g| g.addr).collect(),
        nics,
        local_size: local,
        proxy_threads: threads,
        app_cpus: Vec::new(),
    })
}

/// Every GPU gets `per` NICs below its own switch, no NIC is used twice, proxies sit on the
/// GPU's NUMA node on distinct cores, and nothing is worth a warning.
fn one_switch_per_gpu(name: &str, nics: usize, per: usize) {
    let m = load(name);
    assert_eq!(m.gpus().count(), 8);
    assert_eq!(m.numa.len(), 2);
    let n = rdma_nics(&m);
    assert_eq!(n.len(), nics);
    let p = plan(&m, n, 8, 2);
    assert!(p.warnings.is_empty(), "{name}: {:?}", p.warnings);
    let mut used = HashMap::new();
    for g in &p.gpus {
        assert_eq!(g.nics.len(), per, "{name}: GPU {}", g.gpu);
        for &(i, d) in &g.nics {
            assert_eq!(d, Distance::SameSwitch, "{name}: GPU {} NIC {i}", g.gpu);
            assert!(
                used.insert(i, g.gpu).is_none(),
                "{name}: NIC {i} given twice"
            );
        }
        assert_eq!(g.numa, Some(g.gpu / 4), "{name}: GPU {} NUMA node", g.gpu);
    }
    let mut cores = HashMap::new();
    for pe in &p.pes {
        assert_eq!(pe.gpu, Some(pe.local_rank));
        assert_eq!(pe.proxy_cpus.len(), 2);
        for &c in &pe.proxy_cpus {
            assert!(
                m.cores_of(pe.numa.unwrap()).contains(&c),
                "{name}: proxy core {c} not on NUMA node {:?}",
                pe.numa
            );
            assert!(
                cores.insert(c, pe.local_rank).is_none(),
                "{name}: core {c} twice"
            );
        }
    }
}

#[test]
fn p5_each_gpu_gets_its_four_efa_nics() {
    one_switch_per_gpu("p5.48xlarge.xml", 32, 4);
}

#[test]
fn p5en_each_gpu_gets_its_two_efa_nics() {
    one_switch_per_gpu("p5en.48xlarge.xml", 16, 2);
}

#[test]
fn p4d_gpus_share_the_nic_of_their_switch_two_by_two() {
    let m = load("p4d.24xlarge.xml");
    let n = rdma_nics(&m);
    assert_eq!(n.len(), 4, "fewer NICs than GPUs");
    let p = plan(&m, n, 8, 1);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let mut per_nic = HashMap::new();
    for g in &p.gpus {
        assert_eq!(g.nics.len(), 1);
        let (nic, d) = g.nics[0];
        assert_eq!(d, Distance::SameSwitch, "GPU {}", g.gpu);
        assert_eq!(nic, g.gpu / 2, "GPUs 2k and 2k+1 share NIC k");
        *per_nic.entry(nic).or_insert(0) += 1;
    }
    assert!(per_nic.values().all(|&c| c == 2), "{per_nic:?}");
}

#[test]
fn fewer_nics_than_gpus_are_shared_evenly() {
    let m = load("p5.48xlarge.xml");
    // Only three NICs, all below GPU 0's switch: everyone must share them, evenly.
    let n: Vec<NicRef> = rdma_nics(&m).into_iter().take(3).collect();
    let p = plan(&m, n, 8, 1);
    let mut per_nic = HashMap::new();
    for g in &p.gpus {
        assert_eq!(g.nics.len(), 1);
        *per_nic.entry(g.nics[0].0).or_insert(0) += 1;
    }
    assert_eq!(per_nic.len(), 3, "{per_nic:?}");
    assert!(per_nic.values().all(|&c| c <= 3), "{per_nic:?}");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("no NIC on its NUMA node")),
        "GPUs of the other socket must be warned about: {:?}",
        p.warnings
    );
    assert!(!p.warnings.iter().any(|w| w.contains("same NIC")));
}

#[test]
fn pes_sharing_a_gpu_begin_on_different_nics() {
    let m = load("p5.48xlarge.xml");
    let p = plan(&m, rdma_nics(&m), 16, 1);
    for r in 0..8 {
        let (a, b) = (&p.pes[r], &p.pes[r + 8]);
        assert_eq!(a.gpu, b.gpu);
        assert_ne!(a.nics[0], b.nics[0], "local PEs {r} and {}", r + 8);
        let mut x = a.nics.clone();
        let mut y = b.nics.clone();
        x.sort_unstable();
        y.sort_unstable();
        assert_eq!(x, y, "same rails, another order");
    }
}

#[test]
fn host_mode_anchors_pes_on_numa_nodes() {
    let m = load("p5.48xlarge.xml");
    let p = place(&PlacementInput {
        machine: &m,
        gpus: Vec::new(),
        nics: rdma_nics(&m),
        local_size: 4,
        proxy_threads: 1,
        app_cpus: Vec::new(),
    });
    let nodes: Vec<Option<usize>> = p.pes.iter().map(|pe| pe.numa).collect();
    assert_eq!(nodes, vec![Some(0), Some(0), Some(1), Some(1)]);
    let mut seen = HashMap::new();
    for pe in &p.pes {
        assert_eq!(pe.nics.len(), 8, "32 NICs over 4 PEs");
        for &i in &pe.nics {
            assert!(seen.insert(i, pe.local_rank).is_none());
            let nic = m.device(rdma_nics(&m)[i].addr.unwrap()).unwrap();
            assert_eq!(nic.numa, pe.numa, "a NIC on the PE's own node");
        }
    }
}

#[test]
fn single_numa_box_without_nics() {
    let m = load("single-numa.xml");
    assert_eq!(m.numa.len(), 1);
    assert_eq!(m.gpus().count(), 2);
    assert_eq!(m.nics().count(), 0);
    let p = plan(&m, Vec::new(), 2, 1);
    assert!(
        p.warnings.iter().any(|w| w.contains("no NIC")),
        "{:?}",
        p.warnings
    );
    assert!(p.pes.iter().all(|pe| pe.nics.is_empty()));
    assert_ne!(p.pes[0].proxy_cpus, p.pes[1].proxy_cpus);
    assert!(p.pes.iter().all(|pe| pe.numa == Some(0)));
}

#[test]
fn over_tcp_the_ethernet_interface_is_found_by_name() {
    let m = load("p4d.24xlarge.xml");
    let eth = m.device_of_os_name("ens32").expect("ens32");
    assert_eq!(eth.kind, DeviceKind::Nic { rdma: false });
    let p = plan(
        &m,
        vec![NicRef {
            name: "ens32".into(),
            addr: Some(eth.addr),
        }],
        8,
        1,
    );
    assert!(p.pes.iter().all(|pe| pe.nics == vec![0]));
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("GPU 4") && w.contains("no NIC on its NUMA node")),
        "GPUs of the second socket are far from the only NIC: {:?}",
        p.warnings
    );
}

#[test]
fn proxies_avoid_the_cores_the_application_is_bound_to() {
    let m = load("single-numa.xml");
    let app: Vec<usize> = vec![4, 5, 6, 7];
    let p = place(&PlacementInput {
        machine: &m,
        gpus: m.gpus().map(|g| g.addr).collect(),
        nics: Vec::new(),
        local_size: 2,
        proxy_threads: 2,
        app_cpus: app.clone(),
    });
    for pe in &p.pes {
        for c in &pe.proxy_cpus {
            assert!(!app.contains(c), "proxy on application core {c}");
        }
    }
    assert!(
        !p.warnings.iter().any(|w| w.contains("shares core")),
        "{:?}",
        p.warnings
    );
    // More proxies than free cores: they share, and it is said.
    let p = place(&PlacementInput {
        machine: &m,
        gpus: Vec::new(),
        nics: Vec::new(),
        local_size: 4,
        proxy_threads: 2,
        app_cpus: app,
    });
    assert!(
        p.warnings.iter().any(|w| w.contains("shares core")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn missing_or_malformed_topology_falls_back_with_a_warning() {
    let m = Machine::discover(Some(&xml("does-not-exist.xml")));
    assert!(m.fallback);
    assert!(
        m.warnings[0].contains("does-not-exist.xml"),
        "{:?}",
        m.warnings
    );
    let p = plan(&m, Vec::new(), 2, 1);
    assert!(
        p.pes.iter().all(|pe| pe.proxy_cpus.is_empty()),
        "no blind pinning"
    );
    let bad = std::env::temp_dir().join(format!("pshmem-bad-topology-{}.xml", std::process::id()));
    std::fs::write(&bad, "<topology version=\"2.0\"><object type=\"Machine\"").unwrap();
    let m = Machine::discover(Some(&bad));
    let _ = std::fs::remove_file(&bad);
    assert!(m.fallback);
    assert!(!m.warnings.is_empty());
}

#[test]
fn a_nic_without_pci_information_is_placed_last_with_a_warning() {
    let m = load("p4d.24xlarge.xml");
    let mut n = rdma_nics(&m);
    n.push(NicRef {
        name: "mystery0".into(),
        addr: None,
    });
    let p = plan(&m, n, 8, 1);
    assert!(
        p.warnings.iter().any(|w| w.contains("mystery0")),
        "{:?}",
        p.warnings
    );
    assert!(p.gpus.iter().all(|g| g.nics[0].1 == Distance::SameSwitch));
}

#[test]
fn this_machine() {
    let m = Machine::discover(None);
    assert!(
        !m.fallback,
        "hwloc could not read this machine: {:?}",
        m.warnings
    );
    assert!(!m.numa.is_empty() && m.numa.iter().all(|n| !n.cores.is_empty()));
    let cores: usize = m.numa.iter().map(|n| n.cores.len()).sum();
    assert!(cores >= 1);
    // Every network interface backed by a PCI device is found by name.
    for entry in std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().join("device").exists()
            && std::fs::read_link(entry.path().join("device"))
                .is_ok_and(|l| l.to_string_lossy().contains(':'))
        {
            assert!(
                m.device_of_os_name(&name).is_some(),
                "interface {name} not found in {m:?}"
            );
        }
    }
}
