//! The CUDA driver, loaded at run time through cudarc: nothing CUDA is needed to build, and a
//! machine without a driver simply has no CUDA devices (the library's presence is checked before
//! anything is called, so nothing panics).

use pshmem_topology::PciAddr;

/// A CUDA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaDevice {
    /// Ordinal.
    pub ordinal: i32,
    /// Name ("NVIDIA H200").
    pub name: String,
    /// PCI address (matches the topology's GPU).
    pub pci: PciAddr,
}

/// The CUDA devices of this machine in ordinal order, or why there are none.
pub fn devices() -> Result<Vec<CudaDevice>, String> {
    if pshmem_bootstrap::env::DISABLE_CUDA.bool().unwrap_or(false) {
        return Err("CUDA disabled (PSHMEM_DISABLE_CUDA=1)".into());
    }
    // SAFETY: only probes whether the driver library can be loaded.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver (libcuda.so) on this machine".into());
    }
    use cudarc::driver::{result, sys::CUdevice_attribute as A};
    result::init().map_err(|e| format!("cuInit failed: {e}"))?;
    let n = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    (0..n)
        .map(|i| {
            let dev = result::device::get(i).map_err(|e| format!("cuDeviceGet({i}): {e}"))?;
            // SAFETY: `dev` came from cuDeviceGet.
            let attr = |a| unsafe { result::device::get_attribute(dev, a) };
            let (domain, bus, device) = (
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
            );
            let (domain, bus, device) = match (domain, bus, device) {
                (Ok(d), Ok(b), Ok(v)) => (d, b, v),
                _ => return Err(format!("device {i}: its PCI address is unavailable")),
            };
            Ok(CudaDevice {
                ordinal: i,
                name: result::device::get_name(dev).unwrap_or_else(|_| "?".into()),
                pci: PciAddr {
                    domain: domain as u32,
                    bus: bus as u8,
                    dev: device as u8,
                    func: 0,
                },
            })
        })
        .collect()
}
