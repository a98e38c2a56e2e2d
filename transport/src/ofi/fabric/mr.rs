//! Memory registration: by address (host, or device memory with FI_HMEM) or by DMA-BUF.

use std::{ffi::c_void, ptr, sync::Arc};

use pshmem_libfabric_sys as sys;

use super::{Domain, Endpoint, check, close};
use crate::error::Result;

/// A memory registration.
#[derive(Debug)]
pub struct Mr {
    fid: *mut sys::fid_mr,
    /// Local descriptor for posting.
    pub desc: *mut c_void,
    /// Remote key.
    pub key: u64,
    _domain: Arc<Domain>,
}
// SAFETY: as for Fabric.
unsafe impl Send for Mr {}

/// How to register.
#[derive(Debug, Clone, Copy)]
pub enum MrSource {
    /// Host memory (or device memory reached by virtual address with FI_HMEM).
    Addr {
        /// Start.
        ptr: *const c_void,
        /// Length.
        len: usize,
        /// Memory interface (`FI_HMEM_SYSTEM`, `FI_HMEM_CUDA`).
        iface: sys::fi_hmem_iface,
        /// Device ordinal.
        device: i32,
    },
    /// GPU memory by DMA-BUF fd (libfabric ≥ 1.20 at run time, domain opened at 1.20).
    DmaBuf {
        /// The fd.
        fd: i32,
        /// Offset within it.
        offset: u64,
        /// Length.
        len: usize,
        /// Virtual address the region is known by.
        base: *mut c_void,
        /// Device ordinal.
        device: i32,
    },
}

impl Mr {
    /// Registers memory with `access` rights and `requested_key` (ignored by FI_MR_PROV_KEY
    /// providers), binding it to `ep` when the provider needs FI_MR_ENDPOINT.
    ///
    /// # Safety
    /// The memory must stay valid for as long as the registration lives.
    pub unsafe fn reg(
        domain: &Arc<Domain>,
        src: MrSource,
        access: u64,
        requested_key: u64,
        bind_ep: Option<&Endpoint>,
    ) -> Result<Self> {
        let mut fid = ptr::null_mut();
        let rc = match src {
            MrSource::Addr {
                ptr: p,
                len,
                iface,
                device,
            } => {
                let iov = libc::iovec {
                    iov_base: p as *mut c_void,
                    iov_len: len,
                };
                let mut attr = sys::fi_mr_attr {
                    iov_count: 1,
                    access,
                    requested_key,
                    iface,
                    ..Default::default()
                };
                attr.device.cuda = device;
                sys::fi_mr_attr_set_iov(&mut attr, (&iov as *const libc::iovec).cast());
                // SAFETY: attr and iov are valid for the call; the caller keeps the memory alive.
                unsafe { sys::fi_mr_regattr(domain.fid, &attr, 0, &mut fid) }
            }
            MrSource::DmaBuf {
                fd,
                offset,
                len,
                base,
                device,
            } => {
                let dmabuf = sys::fi_mr_dmabuf {
                    fd,
                    offset,
                    len,
                    base_addr: base,
                };
                let attr = dmabuf_attr(&dmabuf, access, requested_key, device);
                // SAFETY: a domain opened at API ≥ 1.20 reads the 1.20 layout given here; the
                // caller checked the run-time version and keeps the fd and memory alive.
                unsafe {
                    sys::fi_mr_regattr(
                        domain.fid,
                        (&attr as *const sys::fi_mr_attr_v1_20).cast(),
                        sys::FI_MR_DMABUF,
                        &mut fid,
                    )
                }
            }
        };
        check(rc as isize, "fi_mr_regattr")?;
        // SAFETY: fid is a fresh registration.
        let (desc, key) = unsafe { (sys::fi_mr_desc(fid), sys::fi_mr_key(fid)) };
        let mut mr = Self {
            fid,
            desc,
            key,
            _domain: domain.clone(),
        };
        if let Some(ep) = bind_ep {
            mr.ep_bind(ep)?;
        }
        Ok(mr)
    }

    /// Binds the registration to `ep` and enables it (providers with FI_MR_ENDPOINT), then
    /// reads its key again.
    fn ep_bind(&mut self, ep: &Endpoint) -> Result<()> {
        // SAFETY: mr and ep are open objects of the same domain.
        unsafe {
            check(
                sys::fi_mr_bind(self.fid, &mut (*ep.fid).fid, 0) as isize,
                "fi_mr_bind",
            )?;
            check(sys::fi_mr_enable(self.fid) as isize, "fi_mr_enable")?;
        }
        // The key of an endpoint-bound registration is final only once enabled.
        // SAFETY: fid is enabled.
        self.key = unsafe { sys::fi_mr_key(self.fid) };
        Ok(())
    }
}

/// The libfabric 1.20 registration attributes of the GPU memory behind `dmabuf` (read by a
/// domain opened at API ≥ 1.20 with FI_MR_DMABUF). Points at `dmabuf`: keep it alive while used.
fn dmabuf_attr(
    dmabuf: &sys::fi_mr_dmabuf,
    access: u64,
    requested_key: u64,
    device: i32,
) -> sys::fi_mr_attr_v1_20 {
    sys::fi_mr_attr_v1_20 {
        mr_iov_or_dmabuf: (dmabuf as *const sys::fi_mr_dmabuf).cast(),
        iov_count: 1,
        access,
        offset: 0,
        requested_key,
        context: ptr::null_mut(),
        auth_key_size: 0,
        auth_key: ptr::null_mut(),
        iface: sys::fi_hmem_iface_FI_HMEM_CUDA,
        device: device as u64,
        hmem_data: ptr::null_mut(),
        page_size: 0,
        base_mr: ptr::null(),
        sub_mr_cnt: 0,
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the registration is no longer referenced by posted operations (the owner
        // drains or abandons them before deregistering).
        unsafe { close(&mut (*self.fid).fid, "mr") }
    }
}
