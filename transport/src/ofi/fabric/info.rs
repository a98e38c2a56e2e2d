//! Provider discovery: the hints given to `fi_getinfo`, the list it returns and one entry of it.

use std::{
    ffi::{CStr, CString},
    ptr,
};

use pshmem_libfabric_sys as sys;

use super::{bits, check};
use crate::error::{Result, TransportError};

/// What to ask `fi_getinfo` for.
#[derive(Debug, Clone, Default)]
pub struct Hints {
    /// Provider name (`prov_name`), e.g. "tcp;ofi_rxm".
    pub provider: Option<String>,
    /// Node (address/host) to bind, with `FI_SOURCE`.
    pub node: Option<String>,
    /// Required capabilities.
    pub caps: u64,
    /// Requested default transmit op flags (e.g. FI_DELIVERY_COMPLETE).
    pub tx_op_flags: u64,
    /// API version to ask for.
    pub version: u32,
}

/// A list of matching providers (owns the `fi_info` chain).
#[derive(Debug)]
pub struct InfoList {
    head: *mut sys::fi_info,
}

// SAFETY: the fi_info chain is plain heap data owned exclusively by this value.
unsafe impl Send for InfoList {}
// SAFETY: shared access only reads the chain.
unsafe impl Sync for InfoList {}

fn dup_cstr(s: &str) -> Result<*mut std::os::raw::c_char> {
    let c = CString::new(s).map_err(|_| TransportError::InvalidArgument {
        op: "fi_getinfo",
        reason: format!("NUL byte in {s:?}"),
    })?;
    // SAFETY: strdup copies the NUL-terminated string into malloc'd memory, which fi_freeinfo
    // frees along with the hints (libfabric requires heap-allocated strings there).
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(TransportError::Io {
            op: "strdup",
            message: "out of memory".into(),
        });
    }
    Ok(p)
}

impl InfoList {
    /// Calls `fi_getinfo` for RDM endpoints with the given hints.
    pub fn get(h: &Hints) -> Result<Self> {
        // SAFETY: fi_allocinfo (fi_dupinfo(NULL)) returns a zeroed fi_info with every attribute
        // struct allocated, or NULL.
        let hints = unsafe { sys::fi_allocinfo() };
        if hints.is_null() {
            return Err(TransportError::Io {
                op: "fi_allocinfo",
                message: "out of memory".into(),
            });
        }
        let guard = InfoList { head: hints };
        // SAFETY: every attribute pointer of a fresh fi_allocinfo is valid and writable.
        unsafe {
            (*hints).caps = h.caps;
            (*hints).mode = bits!(FI_CONTEXT | FI_CONTEXT2);
            (*(*hints).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
            let d = &mut *(*hints).domain_attr;
            d.mr_mode = bits!(
                FI_MR_LOCAL
                    | FI_MR_VIRT_ADDR
                    | FI_MR_ALLOCATED
                    | FI_MR_PROV_KEY
                    | FI_MR_HMEM
                    | FI_MR_ENDPOINT
            ) as i32;
            d.threading = sys::fi_threading_FI_THREAD_DOMAIN;
            d.av_type = sys::fi_av_type_FI_AV_TABLE;
            (*(*hints).tx_attr).op_flags = h.tx_op_flags;
            if let Some(p) = &h.provider {
                (*(*hints).fabric_attr).prov_name = dup_cstr(p)?;
            }
        }
        let node = h
            .node
            .as_deref()
            .map(CString::new)
            .transpose()
            .map_err(|_| TransportError::InvalidArgument {
                op: "fi_getinfo",
                reason: "NUL byte in node".into(),
            })?;
        let flags = if node.is_some() { bits!(FI_SOURCE) } else { 0 };
        let mut info = ptr::null_mut();
        // SAFETY: hints is a valid fi_info; node is NULL or a valid C string; info is an out
        // pointer that receives a chain we own and free with fi_freeinfo.
        let rc = unsafe {
            sys::fi_getinfo(
                h.version,
                node.as_ref().map_or(ptr::null(), |n| n.as_ptr()),
                ptr::null(),
                flags,
                hints,
                &mut info,
            )
        };
        drop(guard);
        // A provider initialised by this call may have installed its own fatal-signal handlers
        // (libinfinipath's SIGTERM handler calls exit(), which can deadlock): put them back.
        // SAFETY: takes no arguments; only reads and resets signal dispositions.
        unsafe { sys::pshmem_fabric_reset_provider_signals() };
        check(rc as isize, "fi_getinfo")?;
        Ok(Self { head: info })
    }

    /// Every provider this libfabric has, with its version, whether or not it has a device
    /// (`fi_getinfo` with `FI_PROV_ATTR_ONLY`, as `fi_info -l`).
    pub fn providers(version: u32) -> Result<Vec<(String, u32)>> {
        let mut info = ptr::null_mut();
        // SAFETY: no node, service or hints; info is an out pointer that receives a chain we
        // own and free with fi_freeinfo (through the InfoList below).
        let rc = unsafe {
            sys::fi_getinfo(
                version,
                ptr::null(),
                ptr::null(),
                bits!(FI_PROV_ATTR_ONLY),
                ptr::null(),
                &mut info,
            )
        };
        // SAFETY: as in `get`.
        unsafe { sys::pshmem_fabric_reset_provider_signals() };
        check(rc as isize, "fi_getinfo")?;
        let list = Self { head: info };
        let mut out: Vec<(String, u32)> = Vec::new();
        for e in list.iter() {
            // SAFETY: a FI_PROV_ATTR_ONLY entry has its fabric attributes allocated.
            let fa = unsafe { &*e.info.fabric_attr };
            if fa.prov_name.is_null() {
                continue;
            }
            // SAFETY: prov_name is a NUL-terminated string owned by the chain.
            let name = unsafe { CStr::from_ptr(fa.prov_name) }
                .to_string_lossy()
                .into_owned();
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, fa.prov_version));
            }
        }
        Ok(out)
    }

    /// The entries.
    pub fn iter(&self) -> impl Iterator<Item = InfoRef<'_>> {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            // SAFETY: cur is a node of the chain owned by self, alive for 'self.
            let r = unsafe { &*cur };
            cur = r.next;
            Some(InfoRef { info: r })
        })
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: head is a chain from fi_getinfo/fi_allocinfo, freed exactly once here.
            unsafe { sys::fi_freeinfo(self.head) }
        }
    }
}

/// One provider entry, borrowed from an [`InfoList`].
#[derive(Debug, Clone, Copy)]
pub struct InfoRef<'a> {
    pub(super) info: &'a sys::fi_info,
}

pub(super) fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric strings in fi_info are NUL-terminated and live as long as the info.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl<'a> InfoRef<'a> {
    /// The raw entry.
    pub fn raw(&self) -> &'a sys::fi_info {
        self.info
    }
    /// Provider name ("tcp;ofi_rxm").
    pub fn provider(&self) -> String {
        // SAFETY: fabric_attr is valid for a provider-returned entry.
        cstr(unsafe { (*self.info.fabric_attr).prov_name })
    }
    /// Domain name (NIC or interface).
    pub fn domain(&self) -> String {
        // SAFETY: domain_attr is valid for a provider-returned entry.
        cstr(unsafe { (*self.info.domain_attr).name })
    }
    /// Fabric name.
    pub fn fabric(&self) -> String {
        // SAFETY: as above.
        cstr(unsafe { (*self.info.fabric_attr).name })
    }
    /// Capabilities.
    pub fn caps(&self) -> u64 {
        self.info.caps
    }
    /// Mode bits the application must honour.
    pub fn mode(&self) -> u64 {
        self.info.mode
    }
    /// Domain attributes.
    pub fn domain_attr(&self) -> &'a sys::fi_domain_attr {
        // SAFETY: as above.
        unsafe { &*self.info.domain_attr }
    }
    /// Transmit attributes.
    pub fn tx_attr(&self) -> &'a sys::fi_tx_attr {
        // SAFETY: as above.
        unsafe { &*self.info.tx_attr }
    }
    /// Receive attributes.
    pub fn rx_attr(&self) -> &'a sys::fi_rx_attr {
        // SAFETY: as above.
        unsafe { &*self.info.rx_attr }
    }
    /// Endpoint attributes.
    pub fn ep_attr(&self) -> &'a sys::fi_ep_attr {
        // SAFETY: as above.
        unsafe { &*self.info.ep_attr }
    }
    /// PCI address of the NIC behind the domain ("0000:3b:00.0"), when the provider says.
    pub fn pci_address(&self) -> Option<String> {
        let nic = self.info.nic;
        if nic.is_null() {
            return None;
        }
        // SAFETY: nic and its bus_attr, when non-null, are valid for the entry's lifetime.
        unsafe {
            let bus = (*nic).bus_attr;
            if bus.is_null() || (*bus).bus_type != sys::fi_bus_type_FI_BUS_PCI {
                return None;
            }
            let p = (*bus).attr.pci;
            Some(format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                p.domain_id, p.bus_id, p.device_id, p.function_id
            ))
        }
    }
}
