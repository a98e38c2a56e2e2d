//! The address vector: peers' endpoint names in, `fi_addr_t` indices out.

use std::{ptr, sync::Arc};

use pshmem_libfabric_sys as sys;

use super::{Domain, check, close};
use crate::error::{Result, TransportError};

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
