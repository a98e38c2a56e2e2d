//! Finding providers: the API version and capabilities asked of `fi_getinfo`, the cache of
//! providers absent from this host, and the domains the info tool and placement list.

use std::sync::Mutex;

use pshmem_libfabric_sys as sys;

use super::fabric::{self, Hints, InfoList, bits};
use crate::{Result, TransportError};

/// The libfabric API version asked for: 1.20 (which DMA-BUF registration needs) where the
/// library has it, else 1.17.
pub(super) fn api_version() -> u32 {
    if fabric::runtime_version() >= sys::FI_VERSION(1, 20) {
        sys::FI_VERSION(1, 20)
    } else {
        sys::FI_VERSION(1, 17)
    }
}

fn required_caps() -> u64 {
    bits!(
        FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV
    )
}

/// Providers (with the API version asked) that offered no endpoint of the required
/// capabilities at any address: the answer cannot change within a process (libfabric reads its
/// providers and their devices once), and each `fi_getinfo` for an absent provider costs
/// milliseconds, several per process start (placement's probe, then each transport's open
/// walking the preference order).
static ABSENT: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

/// What `fi_getinfo` answered for a provider, and with which of the optional asks.
pub(super) struct Found {
    pub list: InfoList,
    /// Delivery complete was accepted.
    pub dc: bool,
    /// FI_HMEM (GPU memory) was asked and accepted.
    pub hmem: bool,
}

/// Finds providers: for each of `hmem` in turn (FI_HMEM asked or not: a GPU heap asks for it
/// first, as providers leave it out of their answer unless asked), with delivery complete
/// first, then without.
pub(super) fn discover(
    provider: &str,
    node: Option<&str>,
    version: u32,
    hmem: &[bool],
) -> Result<Found> {
    let absent = |a: &Vec<(String, u32)>| a.iter().any(|(p, v)| p == provider && *v == version);
    if absent(&ABSENT.lock().unwrap_or_else(|p| p.into_inner())) {
        return Err(TransportError::NoProvider {
            wanted: provider.to_string(),
            reason: "no matching endpoint on this host (found by an earlier probe)".into(),
        });
    }
    let mut last = None;
    for &h in hmem {
        for dc in [true, false] {
            let hints = Hints {
                provider: Some(provider.to_string()),
                node: node.map(str::to_string),
                caps: required_caps() | if h { bits!(FI_HMEM) } else { 0 },
                tx_op_flags: if dc { bits!(FI_DELIVERY_COMPLETE) } else { 0 },
                version,
            };
            match InfoList::get(&hints) {
                Ok(list) if list.iter().next().is_some() => {
                    return Ok(Found { list, dc, hmem: h });
                }
                Ok(_) => {}
                Err(e) => last = Some(e),
            }
        }
    }
    // The loosest hints (no address, no delivery-complete, no FI_HMEM) found nothing: no
    // narrower question can find anything either.
    if node.is_none() && hmem.contains(&false) {
        let mut a = ABSENT.lock().unwrap_or_else(|p| p.into_inner());
        if !absent(&a) {
            a.push((provider.to_string(), version));
        }
    }
    Err(TransportError::NoProvider {
        wanted: provider.to_string(),
        reason: last
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no matching endpoint".into()),
    })
}

/// Whether `provider` takes GPU memory here (answers FI_HMEM when asked), and by DMA-BUF too
/// (libfabric ≥ 1.20 at run time): what the GPU path chooses its heap registration from (as
/// the transport's capabilities say once open).
pub fn gpu_memory_offer(provider: &str) -> (bool, bool) {
    let version = api_version();
    let hmem = discover(provider, None, version, &[true]).is_ok_and(|f| {
        f.list
            .iter()
            .next()
            .is_some_and(|i| i.caps() & bits!(FI_HMEM) != 0)
    });
    (hmem, hmem && version >= sys::FI_VERSION(1, 20))
}

/// A libfabric domain (NIC or interface) that offers what proxyshmem needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainInfo {
    /// Provider ("efa", "tcp;ofi_rxm").
    pub provider: String,
    /// Fabric name.
    pub fabric: String,
    /// Domain name (a NIC such as "rdmap16s27-rdm", or an interface such as "eth0").
    pub domain: String,
    /// The NIC's PCI address, when the provider reports it.
    pub pci: Option<String>,
}

/// The domains of `provider` that offer FI_EP_RDM with RMA and messages, in the provider's
/// order (one entry per domain; the same domain may be offered several times by fi_getinfo).
pub fn list_domains(provider: &str) -> Result<Vec<DomainInfo>> {
    let version = api_version();
    let list = discover(provider, None, version, &[false])?.list;
    let mut out: Vec<DomainInfo> = Vec::new();
    for i in list.iter() {
        let d = DomainInfo {
            provider: i.provider(),
            fabric: i.fabric(),
            domain: i.domain(),
            pci: i.pci_address(),
        };
        if !out
            .iter()
            .any(|o| o.domain == d.domain && o.provider == d.provider)
        {
            out.push(d);
        }
    }
    Ok(out)
}

/// The fabric names `provider` offers for what proxyshmem needs (for EFA: "efa" and, from
/// libfabric 2.x with a device, "efa-direct"), each once, in the provider's order.
pub fn fabrics_of(provider: &str) -> Result<Vec<String>> {
    let list = discover(provider, None, api_version(), &[false])?.list;
    let mut out: Vec<String> = Vec::new();
    for i in list.iter() {
        let f = i.fabric();
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

/// Every provider the loaded libfabric has, with its version, devices or not (`fi_info -l`).
pub fn providers() -> Result<Vec<(String, u32)>> {
    InfoList::providers(api_version())
}
