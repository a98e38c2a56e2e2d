//! The completion queue: opening it (with a wait descriptor where offered), waiting on it, and
//! reading entries and error entries.

use std::{ffi::c_void, ptr, sync::Arc};

use pshmem_libfabric_sys as sys;

use super::{Domain, check, close, info::cstr, strerror};
use crate::error::Result;

/// A completion queue (`FI_CQ_FORMAT_DATA`, no wait object: it is polled).
#[derive(Debug)]
pub struct Cq {
    pub(crate) fid: *mut sys::fid_cq,
    /// The wait file descriptor (FI_WAIT_FD), when the provider gave one.
    wait_fd: Option<std::os::raw::c_int>,
    _domain: Arc<Domain>,
}
// SAFETY: as for Fabric.
unsafe impl Send for Cq {}
// SAFETY: as for Fabric.
unsafe impl Sync for Cq {}

/// A completion-queue error, decoded.
#[derive(Debug, Clone)]
pub struct CqError {
    /// The operation's context pointer.
    pub op_context: *mut c_void,
    /// libfabric error (positive).
    pub err: i32,
    /// Provider error.
    pub prov_errno: i32,
    /// Text from `fi_cq_strerror`.
    pub text: String,
}

/// Outcome of one CQ read.
#[derive(Debug)]
pub enum CqRead {
    /// This many entries were filled.
    Entries(usize),
    /// An error entry was at the head.
    Error(CqError),
}

impl Cq {
    /// Opens a CQ of `size` entries, with a wait file descriptor where the provider offers one
    /// (so that an idle proxy can block until traffic arrives), else without a wait object.
    pub fn open(domain: &Arc<Domain>, size: usize) -> Result<Arc<Self>> {
        let try_open = |wait_obj| {
            let mut attr = sys::fi_cq_attr {
                size,
                format: sys::fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj,
                ..Default::default()
            };
            let mut fid = ptr::null_mut();
            // SAFETY: domain is open; attr is valid; fid is an out pointer.
            let rc = unsafe { sys::fi_cq_open(domain.fid, &mut attr, &mut fid, ptr::null_mut()) };
            check(rc as isize, "fi_cq_open").map(|_| fid)
        };
        if let Ok(fid) = try_open(sys::fi_wait_obj_FI_WAIT_FD) {
            let mut fd: std::os::raw::c_int = -1;
            // SAFETY: the CQ is open; FI_GETWAIT writes an int file descriptor for FI_WAIT_FD.
            let rc = unsafe {
                sys::fi_control(
                    &mut (*fid).fid,
                    sys::FI_GETWAIT as i32,
                    (&mut fd as *mut std::os::raw::c_int).cast(),
                )
            };
            if rc == 0 && fd >= 0 {
                return Ok(Arc::new(Self {
                    fid,
                    wait_fd: Some(fd),
                    _domain: domain.clone(),
                }));
            }
            // SAFETY: opened just above and not shared.
            unsafe { close(&mut (*fid).fid, "cq") };
        }
        let fid = try_open(sys::fi_wait_obj_FI_WAIT_NONE)?;
        Ok(Arc::new(Self {
            fid,
            wait_fd: None,
            _domain: domain.clone(),
        }))
    }

    /// The CQ's wait file descriptor, if it has one.
    pub fn wait_fd(&self) -> Option<std::os::raw::c_int> {
        self.wait_fd
    }

    /// Whether it is safe to block on the wait fd now (`fi_trywait`): false if completions or
    /// progress are already pending.
    pub fn trywait(&self) -> bool {
        // SAFETY: the CQ and the fabric it was opened under are open; one fid in the array.
        let rc = unsafe {
            let mut f: *mut sys::fid = &mut (*self.fid).fid;
            sys::fi_trywait(self._domain._fabric.fid, &mut f, 1)
        };
        rc == 0
    }

    /// Reads completions into `out` (also progresses manual-progress providers).
    pub fn read(&self, out: &mut [sys::fi_cq_data_entry]) -> Result<CqRead> {
        // SAFETY: out is writable for out.len() entries of the format the CQ was opened with.
        let rc = unsafe { sys::fi_cq_read(self.fid, out.as_mut_ptr().cast(), out.len()) };
        if rc >= 0 {
            return Ok(CqRead::Entries(rc as usize));
        }
        if rc == -(sys::FI_EAGAIN as isize) {
            return Ok(CqRead::Entries(0));
        }
        if rc == -(sys::FI_EAVAIL as isize) {
            let mut e = sys::fi_cq_err_entry::default();
            // SAFETY: e is a valid error entry; flags 0.
            let rc = unsafe { sys::fi_cq_readerr(self.fid, &mut e, 0) };
            check(rc, "fi_cq_readerr")?;
            let mut buf = [0 as std::os::raw::c_char; 256];
            // SAFETY: prov_errno and err_data come from the entry just read; buf is writable.
            let text = unsafe {
                let p = sys::fi_cq_strerror(
                    self.fid,
                    e.prov_errno,
                    e.err_data,
                    buf.as_mut_ptr(),
                    buf.len(),
                );
                if p.is_null() {
                    strerror(e.err)
                } else {
                    cstr(p)
                }
            };
            return Ok(CqRead::Error(CqError {
                op_context: e.op_context,
                err: e.err,
                prov_errno: e.prov_errno,
                text,
            }));
        }
        check(rc, "fi_cq_read").map(CqRead::Entries)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this CQ hold Arcs of it.
        unsafe { close(&mut (*self.fid).fid, "cq") }
    }
}
