//! How the proxy's transport reaches this PE's GPU heap — the choice alone, without a GPU, so
//! that `pshmem-info` shows the same decision `gpu_init` makes:
//! - **DMA-BUF**: the heap is registered with the provider through a DMA-BUF fd the GPU
//!   exports (libfabric ≥ 1.20 at run time, a provider taking GPU memory, the GPU's DMA-BUF
//!   support); RMA goes straight from and to GPU memory.
//! - **HMEM**: the heap is registered by address as CUDA memory (`FI_HMEM_CUDA`); the same
//!   data path. On an RDMA NIC this needs the peer-memory kernel module, which is why the
//!   provider answers FI_HMEM only where it can reach GPU memory; shm and tcp copy with CUDA
//!   themselves.
//! - **Host staging**: a pinned landing area is registered instead and the proxies copy
//!   between it and the heap (`pshmem_proxy::engine::staged`).
//!
//! `PSHMEM_GPU_REGISTRATION` picks: `auto` takes the first the provider and GPU offer, in the
//! order above — where a NIC reaches GPU memory itself (efa, verbs); a provider that copies GPU
//! memory with CUDA in software (shm, tcp) is staged unless forced, as measured on an H100
//! host with libfabric 2.1's shm: 10x slower than staging and wrong for MoE's flag protocols
//! (see docs/LIBFABRIC2.md). `dmabuf`, `hmem` or `staged` forces one, and a forced registration
//! that this PE cannot make fails `gpu_init` on every PE, naming why. Every PE must take the
//! registered path for any to (the protocols differ): where one cannot, every PE stages, with a
//! warning.

use pshmem_env as env;

/// How this PE's GPU heap is reached by the proxy's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapRegistration {
    /// Registered through a DMA-BUF fd.
    DmaBuf,
    /// Registered by address as CUDA memory (FI_HMEM).
    Hmem,
    /// Reached through a registered host landing area.
    Staged,
}

impl HeapRegistration {
    /// "dmabuf", "hmem" or "host-staged" (as `Gpu::remote_path` and the benchmarks name it).
    pub fn name(self) -> &'static str {
        match self {
            Self::DmaBuf => "dmabuf",
            Self::Hmem => "hmem",
            Self::Staged => "host-staged",
        }
    }

    /// Whether the GPU heap itself is registered (RMA into it).
    pub fn registered(self) -> bool {
        self != Self::Staged
    }
}

/// `PSHMEM_GPU_REGISTRATION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The first of DMA-BUF, HMEM and host staging that this PE can have.
    Auto,
    /// This registration or an error.
    Only(HeapRegistration),
}

impl Want {
    /// The variable's spelling of it (`auto`, `dmabuf`, `hmem`, `staged`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Only(HeapRegistration::DmaBuf) => "dmabuf",
            Self::Only(HeapRegistration::Hmem) => "hmem",
            Self::Only(HeapRegistration::Staged) => "staged",
        }
    }

    /// `PSHMEM_GPU_REGISTRATION=<name>`, for messages.
    pub fn setting(self) -> String {
        format!("{}={}", env::GPU_REGISTRATION.name, self.name())
    }

    /// From `PSHMEM_GPU_REGISTRATION`.
    pub fn from_env() -> Result<Self, env::EnvError> {
        let v = env::GPU_REGISTRATION.checked()?;
        match v.as_str() {
            "auto" | "" => Ok(Self::Auto),
            "dmabuf" => Ok(Self::Only(HeapRegistration::DmaBuf)),
            "hmem" => Ok(Self::Only(HeapRegistration::Hmem)),
            "staged" => Ok(Self::Only(HeapRegistration::Staged)),
            other => Err(env::GPU_REGISTRATION.bad(other, "auto, dmabuf, hmem or staged")),
        }
    }
}

/// What this PE's transport and GPU offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The transport ("libfabric shm (shm) x1 rail(s)").
    pub transport: String,
    /// The provider takes GPU memory (FI_HMEM).
    pub gpu_memory: bool,
    /// ... by DMA-BUF too (libfabric ≥ 1.20 at run time).
    pub dmabuf: bool,
    /// The GPU exports DMA-BUFs (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub gpu_dmabuf: bool,
    /// The provider takes GPU memory by copying it with CUDA in software, not by a NIC's DMA
    /// ([`copies_in_software`]).
    pub software: bool,
}

/// Whether a transport of this fabric name ("libfabric shm", `Caps::fabric`) takes GPU
/// memory by CUDA copies of its own: every libfabric provider but the RDMA NICs' (efa, verbs).
/// The simulated fabric's device copies are its model of a NIC, not such a provider.
pub fn copies_in_software(fabric: &str) -> bool {
    fabric
        .strip_prefix("libfabric ")
        .is_some_and(|prov| !(prov.starts_with("efa") || prov.starts_with("verbs")))
}

/// The registrations to try, in order (each failing one falls to the next), and why; or why the
/// forced one cannot be had.
pub fn plan(want: Want, o: &Offer) -> Result<(Vec<HeapRegistration>, String), String> {
    use HeapRegistration::*;
    let no_hmem = || format!("{} does not take GPU memory (no FI_HMEM)", o.transport);
    let no_dmabuf = || match (o.dmabuf, o.gpu_dmabuf) {
        (false, _) => "DMA-BUF registration is not offered (it needs libfabric 1.20 at run time)",
        (true, false) => "the GPU does not export DMA-BUFs (driver or kernel too old)",
        (true, true) => "",
    };
    let forced = |r: HeapRegistration| Want::Only(r).setting();
    match want {
        Want::Only(Staged) => Ok((vec![Staged], forced(Staged))),
        Want::Only(r) if !o.gpu_memory => {
            Err(format!("{} is impossible: {}", forced(r), no_hmem()))
        }
        Want::Only(DmaBuf) if !(o.dmabuf && o.gpu_dmabuf) => {
            Err(format!("{} is impossible: {}", forced(DmaBuf), no_dmabuf()))
        }
        Want::Only(r) => Ok((vec![r], forced(r))),
        Want::Auto if !o.gpu_memory => Ok((vec![Staged], no_hmem())),
        Want::Auto if o.software => Ok((
            vec![Staged],
            format!(
                "{} takes GPU memory by CUDA copies of its own, slower than staging and unsafe \
                 for signals: staged ({}=hmem forces it)",
                o.transport,
                env::GPU_REGISTRATION.name
            ),
        )),
        Want::Auto if o.dmabuf && o.gpu_dmabuf => Ok((
            vec![DmaBuf, Hmem, Staged],
            format!("{} takes GPU memory by DMA-BUF", o.transport),
        )),
        Want::Auto => Ok((
            vec![Hmem, Staged],
            format!(
                "{} takes GPU memory (FI_HMEM), by address: {}",
                o.transport,
                no_dmabuf()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{HeapRegistration::*, *};

    fn offer(gpu_memory: bool, dmabuf: bool, gpu_dmabuf: bool) -> Offer {
        Offer {
            transport: "libfabric efa".into(),
            gpu_memory,
            dmabuf,
            gpu_dmabuf,
            software: false,
        }
    }

    #[test]
    fn software_copies_are_staged_unless_forced() {
        assert!(copies_in_software("libfabric shm"));
        assert!(copies_in_software("libfabric tcp;ofi_rxm"));
        assert!(!copies_in_software("libfabric efa (efa-direct)"));
        assert!(!copies_in_software("libfabric verbs;ofi_rxm"));
        assert!(!copies_in_software("sim"));
        let shm = Offer {
            software: true,
            ..offer(true, true, true)
        };
        let (order, why) = plan(Want::Auto, &shm).unwrap();
        assert_eq!(order, [Staged]);
        assert!(why.contains("PSHMEM_GPU_REGISTRATION=hmem"), "{why}");
        assert_eq!(plan(Want::Only(Hmem), &shm).unwrap().0, [Hmem]);
    }

    #[test]
    fn auto_takes_the_best_offered_and_falls_back_in_order() {
        let order = |o| plan(Want::Auto, &o).unwrap().0;
        assert_eq!(order(offer(true, true, true)), [DmaBuf, Hmem, Staged]);
        assert_eq!(order(offer(true, true, false)), [Hmem, Staged]);
        assert_eq!(order(offer(true, false, true)), [Hmem, Staged]);
        assert_eq!(order(offer(false, true, true)), [Staged]);
        let why = plan(Want::Auto, &offer(true, false, true)).unwrap().1;
        assert!(why.contains("libfabric 1.20"), "{why}");
        let why = plan(Want::Auto, &offer(false, false, false)).unwrap().1;
        assert!(why.contains("no FI_HMEM"), "{why}");
    }

    #[test]
    fn a_forced_registration_is_that_one_or_an_error_saying_why() {
        let only = |r| Want::Only(r);
        assert_eq!(
            plan(only(Staged), &offer(true, true, true)).unwrap().0,
            [Staged]
        );
        assert_eq!(
            plan(only(Hmem), &offer(true, true, true)).unwrap().0,
            [Hmem]
        );
        assert_eq!(
            plan(only(DmaBuf), &offer(true, true, true)).unwrap().0,
            [DmaBuf]
        );
        let e = plan(only(DmaBuf), &offer(true, true, false)).unwrap_err();
        assert!(
            e.contains("PSHMEM_GPU_REGISTRATION=dmabuf") && e.contains("GPU"),
            "{e}"
        );
        let e = plan(only(Hmem), &offer(false, false, false)).unwrap_err();
        assert!(e.contains("no FI_HMEM"), "{e}");
    }
}
