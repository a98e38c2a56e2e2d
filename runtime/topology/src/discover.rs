//! Building a [`Machine`] with hwloc: from the running machine, or from an XML file.

use std::path::Path;

use hwlocality::{
    Topology,
    object::{
        TopologyObject,
        attributes::ObjectAttributes,
        types::{BridgeType, OSDeviceType, ObjectType},
    },
    topology::builder::TypeFilter,
};

use crate::{Device, DeviceKind, Hop, Machine, Numa, PciAddr};

/// PCI vendor ids.
const NVIDIA: u16 = 0x10de;
const AMAZON: u16 = 0x1d0f;

impl Machine {
    /// Discovers the host with hwloc — from `xml` when given, else the running machine — with
    /// every I/O object kept. Any failure (missing or malformed file, hwloc error) gives the
    /// [`Machine::flat`] fallback with the reason as a warning.
    pub fn discover(xml: Option<&Path>) -> Self {
        match load(xml) {
            Ok(m) => m,
            Err(why) => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                let what = xml.map_or_else(
                    || "this machine".to_string(),
                    |p| format!("{}", p.display()),
                );
                tracing::warn!("topology of {what} unavailable ({why}); placement falls back");
                Machine::flat(
                    cpus,
                    format!(
                        "could not read the topology of {what}: {why}; no placement (proxies unpinned, NICs in provider order)"
                    ),
                )
            }
        }
    }
}

fn load(xml: Option<&Path>) -> Result<Machine, String> {
    let mut b = Topology::builder();
    if let Some(p) = xml {
        if !p.exists() {
            return Err("no such file".into());
        }
        b = b.from_xml_file(p).map_err(|e| e.to_string())?;
    }
    let topo = b
        .with_io_type_filter(TypeFilter::KeepAll)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let mut warnings = Vec::new();
    let mut numa: Vec<Numa> = topo
        .objects_with_type(ObjectType::NUMANode)
        .filter_map(|n| {
            let id = n.os_index()?;
            let set = n.cpuset()?;
            let cores = topo
                .objects_with_type(ObjectType::Core)
                .filter_map(|c| {
                    let cs = c.cpuset()?;
                    let first = cs.first_set()?;
                    set.is_set(first).then_some(usize::from(first))
                })
                .collect();
            Some(Numa { id, cores })
        })
        .collect();
    numa.sort_by_key(|n| n.id);
    if numa.is_empty() {
        return Err("the topology has no NUMA node".into());
    }
    let mut devices = Vec::new();
    for obj in topo.objects_with_type(ObjectType::PCIDevice) {
        let Some(ObjectAttributes::PCIDevice(a)) = obj.attributes() else {
            warnings.push(format!(
                "a PCI device without PCI attributes (hwloc id {}) is ignored",
                obj.global_persistent_index()
            ));
            continue;
        };
        let addr = PciAddr {
            domain: u32::from(a.domain()),
            bus: a.bus_id(),
            dev: a.bus_device(),
            func: a.function(),
        };
        let os: Vec<&TopologyObject> = obj
            .io_children()
            .filter(|c| c.object_type() == ObjectType::OSDevice)
            .collect();
        let os_names = os
            .iter()
            .filter_map(|c| c.name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let verbs = os.iter().any(|c| {
            matches!(
                c.attributes(),
                Some(ObjectAttributes::OSDevice(o)) if o.device_type() == OSDeviceType::OpenFabrics
            )
        });
        let class = a.class_id();
        let kind = match (a.vendor_id(), class >> 8) {
            (NVIDIA, 0x03) => DeviceKind::Gpu,
            // EFA devices are 1d0f:efa0..efaf; ENA (1d0f:ec20, ...) is plain Ethernet.
            (AMAZON, 0x02) if a.device_id() >> 8 == 0xef => DeviceKind::Nic { rdma: true },
            (_, 0x02) => DeviceKind::Nic { rdma: verbs },
            _ => DeviceKind::Other,
        };
        let path = obj
            .ancestors()
            .take_while(|p| p.object_type() == ObjectType::Bridge)
            .map(|p| Hop {
                id: p.global_persistent_index(),
                host: matches!(
                    p.attributes(),
                    Some(ObjectAttributes::Bridge(b)) if b.upstream_type() == BridgeType::Host
                ),
            })
            .collect();
        let numa = obj.first_non_io_ancestor().and_then(|anc| {
            let ns = anc.nodeset()?;
            (ns.weight() == Some(1))
                .then(|| ns.first_set().map(usize::from))
                .flatten()
        });
        devices.push(Device {
            addr,
            kind,
            vendor: a.vendor_id(),
            device: a.device_id(),
            class,
            os_names,
            numa,
            path,
        });
    }
    devices.sort_by_key(|d| d.addr);
    Ok(Machine {
        source: xml.map_or_else(
            || "this machine (hwloc)".to_string(),
            |p| format!("{} (hwloc XML)", p.display()),
        ),
        numa,
        devices,
        warnings,
        fallback: false,
    })
}
