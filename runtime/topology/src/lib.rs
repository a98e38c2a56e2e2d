//! # pshmem-topology
//!
//! Owns where things go on a host: discovery of NUMA nodes, cores, GPUs and NICs with hwloc
//! (the system libhwloc, through hwlocality), the PCIe distance between each GPU and each NIC,
//! and the placement computed from it — which NICs (rails) each local PE uses, and which cores
//! its proxy threads are pinned to.
//!
//! - [`Machine`]: the host as a plain model, built by [`Machine::discover`] from the running
//!   machine or an hwloc XML file (`PSHMEM_TOPOLOGY_XML`), or [`Machine::flat`] when discovery
//!   fails (with the reason kept as a warning: never a crash);
//! - [`Distance`]: same PCIe switch > same host bridge > same NUMA node > across NUMA nodes;
//! - [`place`]: GPU → NICs balanced so that NICs are shared evenly and each GPU takes the closest
//!   ones, PE → GPU, NICs as rails, and proxy cores on the GPU's (or NIC's) NUMA node that the
//!   application does not use.
//!
//! The placement logic is pure (model in, plan out), so it is tested on synthetic topologies of
//! AWS p5, p5en and p4d hosts checked into `tests/topologies/`.

mod discover;
mod place;

use std::{fmt, str::FromStr};

pub use place::{GpuPlan, NicRef, PePlan, Placement, PlacementInput, place};

/// A PCI address (`domain:bus:device.function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddr {
    /// PCI domain.
    pub domain: u32,
    /// Bus.
    pub bus: u8,
    /// Device.
    pub dev: u8,
    /// Function.
    pub func: u8,
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.dev, self.func
        )
    }
}

impl FromStr for PciAddr {
    type Err = String;

    /// Parses `0000:05:00.0` (and CUDA's `00000000:05:00.0`); case-insensitive.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not a PCI address: {s:?}");
        let s = s.trim();
        let (rest, func) = s.rsplit_once('.').ok_or_else(bad)?;
        let mut parts = rest.split(':');
        let (d, b, dev) = (parts.next(), parts.next(), parts.next());
        if parts.next().is_some() {
            return Err(bad());
        }
        let (domain, bus, dev) = match (d, b, dev) {
            (Some(d), Some(b), Some(dev)) => (d, b, dev),
            (Some(b), Some(dev), None) => ("0", b, dev),
            _ => return Err(bad()),
        };
        Ok(Self {
            domain: u32::from_str_radix(domain, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
            dev: u8::from_str_radix(dev, 16).map_err(|_| bad())?,
            func: u8::from_str_radix(func, 16).map_err(|_| bad())?,
        })
    }
}

/// What a PCI device is, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// An NVIDIA GPU (vendor 0x10de, display or 3D controller class).
    Gpu,
    /// A network adapter (Ethernet or InfiniBand class); `rdma` when it is an EFA device or has
    /// an OpenFabrics (verbs) OS device.
    Nic {
        /// Reachable through an RDMA provider (efa, verbs).
        rdma: bool,
    },
    /// Anything else.
    Other,
}

/// One link of the chain from a PCI device up to the CPU side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// hwloc's persistent id of the bridge.
    pub id: u64,
    /// A host bridge (root of a PCI hierarchy) rather than a PCI-to-PCI bridge (a switch port).
    pub host: bool,
}

/// A PCI device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its address.
    pub addr: PciAddr,
    /// GPU, NIC or other.
    pub kind: DeviceKind,
    /// PCI vendor id.
    pub vendor: u16,
    /// PCI device id.
    pub device: u16,
    /// PCI class id.
    pub class: u16,
    /// Names of its OS devices (network interfaces, verbs devices, ...).
    pub os_names: Vec<String>,
    /// The NUMA node it is attached to, when one node holds it.
    pub numa: Option<usize>,
    /// The bridges above it, nearest first.
    pub path: Vec<Hop>,
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numa {
    /// OS index.
    pub id: usize,
    /// One PU (the first hardware thread) of each of its cores, in order.
    pub cores: Vec<usize>,
}

/// The host, as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Where the model came from ("this machine", an XML path, or a fallback).
    pub source: String,
    /// NUMA nodes.
    pub numa: Vec<Numa>,
    /// PCI devices.
    pub devices: Vec<Device>,
    /// Why discovery fell back, and other problems with the input.
    pub warnings: Vec<String>,
    /// Discovery failed: this is [`Machine::flat`], and nothing is pinned.
    pub fallback: bool,
}

/// How far apart two PCI devices are, closest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Distance {
    /// Below one PCIe switch (peer-to-peer traffic never reaches the CPU).
    SameSwitch,
    /// Below one host bridge (root complex), different switches.
    SameHostBridge,
    /// Different host bridges of one NUMA node.
    SameNuma,
    /// On different NUMA nodes (traffic crosses the inter-socket link).
    CrossNuma,
    /// Not known (a device without PCI information).
    Unknown,
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Distance::SameSwitch => "same PCIe switch",
            Distance::SameHostBridge => "same host bridge",
            Distance::SameNuma => "same NUMA node",
            Distance::CrossNuma => "across NUMA nodes",
            Distance::Unknown => "unknown",
        })
    }
}

impl Machine {
    /// A model with no devices and one NUMA node of `cpus` cores: what placement uses when the
    /// topology cannot be read (`why` becomes a warning).
    pub fn flat(cpus: usize, why: String) -> Self {
        Self {
            source: "fallback (no topology)".into(),
            numa: vec![Numa {
                id: 0,
                cores: (0..cpus.max(1)).collect(),
            }],
            devices: Vec::new(),
            warnings: vec![why],
            fallback: true,
        }
    }

    /// The device at `addr`.
    pub fn device(&self, addr: PciAddr) -> Option<&Device> {
        self.devices.iter().find(|d| d.addr == addr)
    }

    /// GPUs in PCI order.
    pub fn gpus(&self) -> impl Iterator<Item = &Device> {
        self.devices.iter().filter(|d| d.kind == DeviceKind::Gpu)
    }

    /// NICs in PCI order.
    pub fn nics(&self) -> impl Iterator<Item = &Device> {
        self.devices
            .iter()
            .filter(|d| matches!(d.kind, DeviceKind::Nic { .. }))
    }

    /// The device that owns the OS device (network interface, verbs device) `name`.
    pub fn device_of_os_name(&self, name: &str) -> Option<&Device> {
        self.devices
            .iter()
            .find(|d| d.os_names.iter().any(|n| n == name))
    }

    /// The PCIe distance between two devices.
    pub fn distance(a: &Device, b: &Device) -> Distance {
        for hop in &a.path {
            if b.path.contains(hop) {
                return if hop.host {
                    Distance::SameHostBridge
                } else {
                    Distance::SameSwitch
                };
            }
        }
        match (a.numa, b.numa) {
            (Some(x), Some(y)) if x == y => Distance::SameNuma,
            (Some(_), Some(_)) => Distance::CrossNuma,
            _ => Distance::Unknown,
        }
    }

    /// The cores of NUMA node `id`.
    pub fn cores_of(&self, id: usize) -> &[usize] {
        self.numa
            .iter()
            .find(|n| n.id == id)
            .map_or(&[][..], |n| &n.cores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_parse_and_print() {
        let a: PciAddr = "0000:5a:00.1".parse().unwrap();
        assert_eq!(a.to_string(), "0000:5a:00.1");
        let b: PciAddr = "00000000:5A:00.1".parse().unwrap();
        assert_eq!(a, b);
        let c: PciAddr = "05:00.0".parse().unwrap();
        assert_eq!(c.to_string(), "0000:05:00.0");
        assert!("zz:00.0".parse::<PciAddr>().is_err());
        assert!("0000:05:00".parse::<PciAddr>().is_err());
        assert!("0:0:0:0.0".parse::<PciAddr>().is_err());
    }
}
