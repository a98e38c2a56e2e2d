//! The safe layer over `pshmem-libfabric-sys`: provider discovery ([`InfoList`]), and RAII
//! handles for fabric, domain, completion queue, address vector, endpoint and memory
//! registration. Children hold `Arc`s of their parents, so they are closed first whatever the
//! order of drops. Every call goes through [`check`] with the library's own error text.
//!
//! One file per object family: `info` (discovery), `cq`, `av` and `mr`; fabric, domain and
//! endpoint are here.

mod av;
mod cq;
mod info;
mod mr;

pub use self::{
    av::Av,
    cq::{Cq, CqError, CqRead},
    info::{Hints, InfoList, InfoRef},
    mr::{Mr, MrSource},
};

use std::{ffi::CStr, ptr, sync::Arc};

use pshmem_libfabric_sys as sys;

use crate::error::{Result, TransportError};

/// `fi_strerror` text for a (positive) libfabric error code.
pub fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any input.
    unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// Turns a libfabric return code into a result, with the library's text.
pub fn check(rc: isize, op: &'static str) -> Result<usize> {
    if rc >= 0 {
        Ok(rc as usize)
    } else {
        let code = (-rc) as i32;
        Err(TransportError::Ofi {
            op,
            code,
            text: strerror(code),
        })
    }
}

/// The run-time libfabric version (`fi_version()`), e.g. `FI_VERSION(1, 17)`.
pub fn runtime_version() -> u32 {
    // SAFETY: fi_version has no preconditions.
    unsafe { sys::fi_version() }
}

/// The libfabric version whose headers this build was compiled against.
pub fn built_version() -> u32 {
    sys::FI_VERSION(sys::FI_MAJOR_VERSION, sys::FI_MINOR_VERSION)
}

/// The file of the libfabric library loaded at run time (the loader's choice: a libfabric built
/// elsewhere runs only if LD_LIBRARY_PATH or the cache finds it first); `None` if unknown.
pub fn library_path() -> Option<String> {
    // SAFETY: Dl_info is plain data (pointers and integers): all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for the address of a libfabric function;
    // `info` is a valid out structure.
    let found = unsafe { libc::dladdr(sys::fi_version as *const std::ffi::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(path.to_string_lossy().into_owned())
}

/// Bits of `FI_*` constants, whatever integer type bindgen gave them.
macro_rules! bits {
    ($($c:ident)|+) => { 0u64 $(| (sys::$c as u64))+ };
}
pub(crate) use bits;

/// An open fabric.
#[derive(Debug)]
pub struct Fabric {
    fid: *mut sys::fid_fabric,
}
// SAFETY: libfabric objects may be used from any thread; this handle is only closed once.
unsafe impl Send for Fabric {}
// SAFETY: shared use only passes the handle to libfabric calls that are thread-safe for it.
unsafe impl Sync for Fabric {}

/// `fi_close` on any fid.
///
/// # Safety
/// `fid` must be a live libfabric object that nothing uses afterwards.
unsafe fn close(fid: *mut sys::fid, what: &str) {
    // SAFETY: per this function's contract.
    let rc = unsafe { sys::fi_close(fid) };
    if rc != 0 {
        tracing::warn!("fi_close({what}) failed: {}", strerror(-rc));
    }
}

impl Fabric {
    /// Opens the fabric of an info entry.
    pub fn open(info: InfoRef<'_>) -> Result<Arc<Self>> {
        let mut fid = ptr::null_mut();
        // SAFETY: fabric_attr is valid; fid is an out pointer.
        let rc = unsafe { sys::fi_fabric(info.info.fabric_attr, &mut fid, ptr::null_mut()) };
        check(rc as isize, "fi_fabric")?;
        Ok(Arc::new(Self { fid }))
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc of this fabric, so none is alive now.
        unsafe { close(&mut (*self.fid).fid, "fabric") }
    }
}

/// An open domain (one NIC or interface).
#[derive(Debug)]
pub struct Domain {
    pub(crate) fid: *mut sys::fid_domain,
    _fabric: Arc<Fabric>,
}
// SAFETY: as for Fabric.
unsafe impl Send for Domain {}
// SAFETY: as for Fabric.
unsafe impl Sync for Domain {}

impl Domain {
    /// Opens the domain of an info entry.
    pub fn open(fabric: &Arc<Fabric>, info: InfoRef<'_>) -> Result<Arc<Self>> {
        let mut fid = ptr::null_mut();
        let raw = info.info as *const sys::fi_info as *mut sys::fi_info;
        // SAFETY: fabric is open; info is a provider entry; fid is an out pointer.
        let rc = unsafe { sys::fi_domain(fabric.fid, raw, &mut fid, ptr::null_mut()) };
        check(rc as isize, "fi_domain")?;
        Ok(Arc::new(Self {
            fid,
            _fabric: fabric.clone(),
        }))
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: children (cq, av, ep, mr) hold Arcs of the domain: none is alive.
        unsafe { close(&mut (*self.fid).fid, "domain") }
    }
}

/// An enabled RDM endpoint bound to one CQ (transmit and receive) and one AV.
#[derive(Debug)]
pub struct Endpoint {
    pub(crate) fid: *mut sys::fid_ep,
    _cq: Arc<Cq>,
    _av: Arc<Av>,
    _domain: Arc<Domain>,
}
// SAFETY: as for Fabric.
unsafe impl Send for Endpoint {}

impl Endpoint {
    /// Opens, binds and enables an endpoint.
    pub fn open(
        domain: &Arc<Domain>,
        info: InfoRef<'_>,
        cq: &Arc<Cq>,
        av: &Arc<Av>,
    ) -> Result<Self> {
        let mut fid = ptr::null_mut();
        let raw = info.info as *const sys::fi_info as *mut sys::fi_info;
        // SAFETY: domain open; info a provider entry; fid out pointer.
        let rc = unsafe { sys::fi_endpoint(domain.fid, raw, &mut fid, ptr::null_mut()) };
        check(rc as isize, "fi_endpoint")?;
        let ep = Self {
            fid,
            _cq: cq.clone(),
            _av: av.clone(),
            _domain: domain.clone(),
        };
        // SAFETY: ep, cq and av are open objects of the same domain.
        unsafe {
            let rc = sys::fi_ep_bind(ep.fid, &mut (*cq.fid).fid, bits!(FI_TRANSMIT | FI_RECV));
            check(rc as isize, "fi_ep_bind(cq)")?;
            let rc = sys::fi_ep_bind(ep.fid, &mut (*av.fid).fid, 0);
            check(rc as isize, "fi_ep_bind(av)")?;
            let rc = sys::fi_enable(ep.fid);
            check(rc as isize, "fi_enable")?;
        }
        Ok(ep)
    }

    /// This endpoint's address.
    pub fn name(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf is writable for len bytes; len is updated with the name's length.
        let rc =
            unsafe { sys::fi_getname(&mut (*self.fid).fid, buf.as_mut_ptr().cast(), &mut len) };
        check(rc as isize, "fi_getname")?;
        buf.truncate(len);
        Ok(buf)
    }

    /// The raw endpoint, for posting.
    pub fn raw(&self) -> *mut sys::fid_ep {
        self.fid
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: the owner drops endpoints only after its registrations bound to them.
        unsafe { close(&mut (*self.fid).fid, "endpoint") }
    }
}
