//! The safe layer over `pshmem-libfabric-sys`: provider discovery ([`InfoList`]), and RAII
//! handles for fabric, domain, completion queue, address vector, endpoint and memory
//! registration. Children hold `Arc`s of their parents, so they are closed first whatever the
//! order of drops. Every call goes through [`check`] with the library's own error text.

use std::{
    ffi::{CStr, CString, c_void},
    ptr,
    sync::Arc,
};

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

/// Bits of `FI_*` constants, whatever integer type bindgen gave them.
macro_rules! bits {
    ($($c:ident)|+) => { 0u64 $(| (sys::$c as u64))+ };
}
pub(crate) use bits;

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
    info: &'a sys::fi_info,
}

fn cstr(p: *const std::os::raw::c_char) -> String {
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

/// An address vector (`FI_AV_TABLE`: addresses are indices in insertion order).
#[derive(Debug)]
pub struct Av {
    pub(crate) fid: *mut sys::fid_av,
    _domain: Arc<Domain>,
}
// SAFETY: as for Fabric.
unsafe impl Send for Av {}
// SAFETY: as for Fabric.
unsafe impl Sync for Av {}

impl Av {
    /// Opens an AV for `count` addresses.
    pub fn open(domain: &Arc<Domain>, count: usize) -> Result<Arc<Self>> {
        let mut attr = sys::fi_av_attr {
            type_: sys::fi_av_type_FI_AV_TABLE,
            count,
            ..Default::default()
        };
        let mut fid = ptr::null_mut();
        // SAFETY: domain is open; attr valid; fid out pointer.
        let rc = unsafe { sys::fi_av_open(domain.fid, &mut attr, &mut fid, ptr::null_mut()) };
        check(rc as isize, "fi_av_open")?;
        Ok(Arc::new(Self {
            fid,
            _domain: domain.clone(),
        }))
    }

    /// Inserts the endpoint names of PEs 0..n (this PE's own among them), returning their
    /// fabric addresses in the same order.
    ///
    /// A string format's names (`FI_ADDR_STR`, as shm's) may differ in length: shm's carry the
    /// creating pid (`<pid>:<uid>:<n>`), so one job's differ whenever its pids straddle a power
    /// of ten. A packed insert of several names is read with one stride, so each goes in by
    /// itself. Names of a fixed format must all have one length, since the provider reads
    /// that many bytes of each.
    pub fn insert(&self, names: &[Vec<u8>], string_format: bool) -> Result<Vec<sys::fi_addr_t>> {
        let Some(first) = names.first() else {
            return Ok(vec![]);
        };
        if !string_format && let Some(pe) = names.iter().position(|n| n.len() != first.len()) {
            return Err(TransportError::InvalidArgument {
                op: "fi_av_insert",
                reason: format!(
                    "PE {pe}'s endpoint name has {} bytes, PE 0's {} (mixed providers or \
                     address families?)",
                    names[pe].len(),
                    first.len()
                ),
            });
        }
        names
            .iter()
            .enumerate()
            .map(|(pe, name)| self.insert_one(name, pe))
            .collect()
    }

    fn insert_one(&self, name: &[u8], pe: usize) -> Result<sys::fi_addr_t> {
        if name.is_empty() {
            return Err(TransportError::InvalidArgument {
                op: "fi_av_insert",
                reason: format!("PE {pe}'s endpoint name is empty"),
            });
        }
        // A string is read up to its NUL: one after the name bounds the read even if the
        // peer's name lacked it (a fixed format reads its own length and never reaches it).
        let buf = [name, &[0]].concat();
        let mut out = sys::FI_ADDR_NOTAVAIL;
        // SAFETY: buf holds one endpoint name (of the length every name of a fixed format has)
        // and a NUL; out has room for one address.
        let rc = unsafe {
            sys::fi_av_insert(
                self.fid,
                buf.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        let n = check(rc as isize, "fi_av_insert")?;
        if n != 1 || out == sys::FI_ADDR_NOTAVAIL {
            return Err(TransportError::InvalidArgument {
                op: "fi_av_insert",
                reason: format!("PE {pe}'s endpoint name could not be inserted"),
            });
        }
        Ok(out)
    }
}

impl Drop for Av {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this AV hold Arcs of it.
        unsafe { close(&mut (*self.fid).fid, "av") }
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
                    mr_iov: (&iov as *const libc::iovec).cast(),
                    iov_count: 1,
                    access,
                    requested_key,
                    iface,
                    ..Default::default()
                };
                attr.device.cuda = device;
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
                let attr = sys::fi_mr_attr_v1_20 {
                    mr_iov_or_dmabuf: (&dmabuf as *const sys::fi_mr_dmabuf).cast(),
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
                };
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
            // SAFETY: mr and ep are open objects of the same domain.
            unsafe {
                check(
                    sys::fi_mr_bind(fid, &mut (*ep.fid).fid, 0) as isize,
                    "fi_mr_bind",
                )?;
                check(sys::fi_mr_enable(fid) as isize, "fi_mr_enable")?;
            }
            // The key of an endpoint-bound registration is final only once enabled.
            // SAFETY: fid is enabled.
            mr.key = unsafe { sys::fi_mr_key(fid) };
        }
        Ok(mr)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the registration is no longer referenced by posted operations (the owner
        // drains or abandons them before deregistering).
        unsafe { close(&mut (*self.fid).fid, "mr") }
    }
}
