//! Registering the GPU heap with one proxy thread's transport (collective): the registrations
//! [`super::registration::plan`] lists are tried in turn on this PE, then every PE agrees —
//! the registered path only where every PE registered its heap, host staging otherwise.

use std::os::fd::{AsRawFd, OwnedFd};

use super::{
    registration::{Offer, Want, copies_in_software, plan},
    *,
};

/// The proxy's registration of this PE's heap: the GPU heap itself (DMA-BUF or by address) or
/// the landing area of the host-staged path.
pub(super) struct Registration {
    pub region: HeapMem,
    pub mr: MrId,
    pub landing: Option<HostAlloc>,
    pub dmabuf: Option<OwnedFd>,
    pub kind: HeapRegistration,
    /// Why this registration (shown at `PSHMEM_LOG=info` and by `Gpu::registration`).
    pub why: String,
}

/// This PE's vote: what it registered, or that it cannot have a forced registration.
const STAGED: u8 = 0;
const REGISTERED: u8 = 1;
const REFUSED: u8 = 2;

/// Registers `heap` (device `ordinal`) with `t` as `PSHMEM_GPU_REGISTRATION` and the offer of
/// transport and GPU allow, agreed with every PE (collective).
pub(super) fn register(
    s: &GpuSetup<'_>,
    ctx: &Arc<CudaContext>,
    (heap, ordinal): (&DevAlloc, usize),
    t: &mut dyn Transport,
) -> Result<Registration> {
    let me = s.me;
    super::sim_copy::offer(s, ctx, t)?;
    let offer = Offer {
        transport: t.caps().name.clone(),
        gpu_memory: t.caps().gpu_memory,
        dmabuf: t.caps().dmabuf,
        gpu_dmabuf: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
            .is_ok_and(|v| v == 1),
        software: copies_in_software(&t.caps().fabric),
    };
    let (mut got, refusal, mut why) = try_in_order(s, (heap, ordinal), &offer, t);
    let vote = match (&refusal, &got) {
        (Some(_), _) => REFUSED,
        (None, Some(_)) => REGISTERED,
        (None, None) => STAGED,
    };
    let votes = s.bs.allgather(&[vote])?;
    let pes_with = |v: u8| -> Vec<usize> {
        (0..votes.len())
            .filter(|&p| votes[p].first() == Some(&v))
            .collect()
    };
    let refused = pes_with(REFUSED);
    let staged = pes_with(STAGED);
    if !refused.is_empty() || !staged.is_empty() {
        if let Some((_, (mr, _))) = got.take() {
            t.mr_dereg(mr).map_err(crate::proxies::transport_error(
                me,
                "releasing the GPU heap's registration",
            ))?;
        }
    }
    if !refused.is_empty() {
        let detail = refusal.unwrap_or_else(|| {
            format!(
                "PE(s) {refused:?} cannot have {}",
                s.cfg.gpu.registration.setting()
            )
        });
        return Err(Error::Config { me, detail });
    }
    if let Some((kind, (mr, fd))) = got {
        tracing::info!("PE {me}: GPU heap registered ({}): {why}", kind.name());
        // SAFETY: a view of the GPU heap for the transport's bookkeeping; the proxy never
        // dereferences it in GPU mode (copies and AMOs go through the device), and the heap
        // outlives the proxy (finalize stops the proxy first).
        let region = unsafe { HeapMem::new(heap.ptr as *mut u8, s.heap_bytes()) };
        return Ok(Registration {
            region,
            mr,
            landing: None,
            dmabuf: fd,
            kind,
            why,
        });
    }
    if pes_with(REGISTERED).is_empty() {
        tracing::info!("PE {me}: GPU heap host-staged: {why}");
    } else {
        // Some PEs could take the registered path, yet every PE stages: say why, loudly (a
        // silent fallback costs an order of magnitude on the data path).
        why = if vote == STAGED {
            format!("{why} (and every PE stages with this one)")
        } else {
            format!("PE(s) {staged:?} cannot register their GPU heap, so every PE stages")
        };
        tracing::warn!("PE {me}: the GPU heap is not registered with the NIC: {why}");
    }
    staged_landing(s, ctx, t, why)
}

/// A registration of the heap and its DMA-BUF, if any.
type Made = (HeapRegistration, (MrId, Option<OwnedFd>));

/// Tries the registrations [`plan`] lists, in turn: the one made (none: staged), why a forced
/// one cannot be had, and why this choice.
fn try_in_order(
    s: &GpuSetup<'_>,
    (heap, ordinal): (&DevAlloc, usize),
    offer: &Offer,
    t: &mut dyn Transport,
) -> (Option<Made>, Option<String>, String) {
    let me = s.me;
    let forced = s.cfg.gpu.registration != Want::Auto;
    let (order, mut why) = match plan(s.cfg.gpu.registration, offer) {
        Ok(p) => p,
        Err(e) => return (None, Some(e), String::new()),
    };
    for kind in order.into_iter().filter(|k| k.registered()) {
        match register_heap(s, heap, ordinal, kind, t) {
            Ok(r) => return (Some((kind, r)), None, why),
            Err(e) if forced => {
                let refusal = format!("registering the GPU heap ({}): {e}", kind.name());
                return (None, Some(refusal), why);
            }
            Err(e) => {
                tracing::warn!(
                    "PE {me}: registering the GPU heap ({}) failed, trying the next way: {e}",
                    kind.name()
                );
                why = format!("{why}; {} registration failed: {e}", kind.name());
            }
        }
    }
    (None, None, why)
}

/// Registers the GPU heap itself, by a DMA-BUF fd or by address.
fn register_heap(
    s: &GpuSetup<'_>,
    heap: &DevAlloc,
    ordinal: usize,
    kind: HeapRegistration,
    t: &mut dyn Transport,
) -> std::result::Result<(MrId, Option<OwnedFd>), String> {
    // The provider may copy into the heap with CUDA itself: such copies must have landed when
    // it reports them done (see set_sync_memops).
    set_sync_memops(heap.ptr).map_err(|e| e.to_string())?;
    let fd = match kind {
        HeapRegistration::DmaBuf => Some(
            export_dmabuf(heap.ptr, s.heap_bytes())
                .map_err(|e| format!("exporting its DMA-BUF: {e}"))?,
        ),
        _ => None,
    };
    let mem = LocalMem {
        ptr: heap.ptr as *mut u8,
        len: s.heap_bytes(),
        kind: MemKind::Cuda {
            device: ordinal as i32,
            dmabuf_fd: fd.as_ref().map(AsRawFd::as_raw_fd),
            dmabuf_offset: 0,
        },
    };
    // SAFETY: the heap outlives the transport, owned by the proxy (stopped first).
    let mr = unsafe { t.mr_reg(mem) }.map_err(|e| e.to_string())?;
    Ok((mr, fd))
}

/// Registers a pinned landing area for the host-staged path.
fn staged_landing(
    s: &GpuSetup<'_>,
    ctx: &Arc<CudaContext>,
    t: &mut dyn Transport,
    why: String,
) -> Result<Registration> {
    let me = s.me;
    let slot = pshmem_proxy::landing_slot_bytes(s.cfg.proxy.staging_chunk);
    let landing = HostAlloc::pinned(ctx, s.n * s.cfg.gpu.landing_slots.max(1) * slot)
        .map_err(cu(me, "allocating the landing area"))?;
    // SAFETY: a view of the landing area, which outlives the proxy (stopped first).
    let region = unsafe { HeapMem::new(landing.ptr.cast(), landing.len) };
    let mem = LocalMem {
        ptr: landing.ptr.cast(),
        len: landing.len,
        kind: MemKind::Host,
    };
    // SAFETY: as above: registered memory outlives the transport, owned by the proxy.
    let mr = unsafe { t.mr_reg(mem) }.map_err(crate::proxies::transport_error(
        me,
        "registering the GPU landing area",
    ))?;
    Ok(Registration {
        region,
        mr,
        landing: Some(landing),
        dmabuf: None,
        kind: HeapRegistration::Staged,
        why,
    })
}
