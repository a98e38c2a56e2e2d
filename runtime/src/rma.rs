//! Puts, gets, `p` and `g`: the direct path's copies or a descriptor on the ring.

use super::*;

impl Pshmem {
    /// Publishes `d`, and waits for it when `blocking`.
    pub(crate) fn submit(&self, op: &'static str, d: Desc, blocking: bool) -> Result<()> {
        if blocking {
            self.push_wait(op, d)
        } else {
            self.push(op, d).map(|_| ())
        }
    }

    /// Every put: a copy on the direct path, or a descriptor (waited for when `blocking`).
    ///
    /// # Safety
    /// `src..src + len` must be readable, and unchanged until the operation completes.
    pub(crate) unsafe fn put_at(
        &self,
        op: &'static str,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        pe: usize,
        blocking: bool,
    ) -> Result<()> {
        match self.check(op, pe, dest, len)? {
            Route::Direct(h) => {
                // SAFETY: forwarded from the caller.
                unsafe { h.write_from_raw(dest.0, src, len) }.map_err(|e| self.mem_err(op, pe, e))
            }
            Route::Ring => {
                let d = Desc::Put {
                    pe: Pe::from_idx(pe),
                    remote: dest.0,
                    local: self.local_ref(src, len),
                    len: len as u64,
                };
                self.submit(op, d, blocking)
            }
        }
    }

    /// Every get: a copy on the direct path, or a descriptor (waited for when `blocking`).
    ///
    /// # Safety
    /// `dest..dest + len` must be writable and untouched by others until the operation
    /// completes.
    pub(crate) unsafe fn get_at(
        &self,
        op: &'static str,
        dest: *mut u8,
        src: SymPtr,
        len: usize,
        pe: usize,
        blocking: bool,
    ) -> Result<()> {
        match self.check(op, pe, src, len)? {
            Route::Direct(h) => {
                // SAFETY: forwarded from the caller.
                unsafe { h.read_to_raw(src.0, dest, len) }.map_err(|e| self.mem_err(op, pe, e))
            }
            Route::Ring => {
                let d = Desc::Get {
                    pe: Pe::from_idx(pe),
                    remote: src.0,
                    local: self.local_ref(dest, len),
                    len: len as u64,
                };
                self.submit(op, d, blocking)
            }
        }
    }

    /// Copies `src` to `dest` on `pe`; returns when `src` may be reused (the data is then
    /// delivered as well).
    pub fn put(&self, dest: SymPtr, src: &[u8], pe: usize) -> Result<()> {
        // SAFETY: `src` is a live slice, and the put has completed when this returns.
        unsafe { self.put_at("put", dest, src.as_ptr(), src.len(), pe, true) }
    }

    /// Starts copying `len` bytes at `src` to `dest` on `pe`; complete after [`Pshmem::quiet`].
    ///
    /// # Safety
    /// `src..src + len` must stay valid and unchanged until the next `quiet` (or a blocking
    /// operation) on this thread returns.
    pub unsafe fn put_nbi(
        &self,
        dest: SymPtr,
        src: *const u8,
        len: usize,
        pe: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.put_at("put_nbi", dest, src, len, pe, false) }
    }

    /// Starts copying `len` bytes of this PE's `src` (symmetric) to `dest` on `pe`.
    pub fn put_nbi_sym(&self, dest: SymPtr, src: SymPtr, len: usize, pe: usize) -> Result<()> {
        self.check_range("put_nbi", src, len)?;
        // SAFETY: `src` lies in this PE's heap (checked), which stays mapped while `self` lives.
        unsafe { self.put_nbi(dest, self.ptr(src), len, pe) }
    }

    /// Copies `dest.len()` bytes from `src` on `pe` into `dest`.
    pub fn get(&self, dest: &mut [u8], src: SymPtr, pe: usize) -> Result<()> {
        // SAFETY: `dest` is a live exclusive slice, and the get has completed when this returns.
        unsafe { self.get_at("get", dest.as_mut_ptr(), src, dest.len(), pe, true) }
    }

    /// Starts copying `len` bytes from `src` on `pe` to `dest`; complete after `quiet`.
    ///
    /// # Safety
    /// `dest..dest + len` must stay valid, and unread and unwritten by anyone else, until the
    /// next `quiet` (or a blocking operation) on this thread returns.
    pub unsafe fn get_nbi(&self, dest: *mut u8, src: SymPtr, len: usize, pe: usize) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.get_at("get_nbi", dest, src, len, pe, false) }
    }

    /// Starts copying `len` bytes from `src` on `pe` into this PE's `dest` (symmetric).
    pub fn get_nbi_sym(&self, dest: SymPtr, src: SymPtr, len: usize, pe: usize) -> Result<()> {
        self.check_range("get_nbi", dest, len)?;
        // SAFETY: `dest` lies in this PE's heap (checked), mapped while `self` lives.
        unsafe { self.get_nbi(self.ptr(dest), src, len, pe) }
    }

    /// Stores `value` at `dest` on `pe` (complete after `quiet`).
    pub fn p<T: Elem>(&self, dest: SymPtr, value: T, pe: usize) -> Result<()> {
        match self.check("p", pe, dest, T::SIZE as usize)? {
            Route::Direct(h) => h
                .store(dest.0, value.to_bits(), T::SIZE)
                .map_err(|e| self.mem_err("p", pe, e)),
            Route::Ring => self
                .push(
                    "p",
                    Desc::P {
                        pe: Pe::from_idx(pe),
                        remote: dest.0,
                        value: value.to_bits(),
                        width: T::SIZE,
                    },
                )
                .map(|_| ()),
        }
    }

    /// Reads the value at `src` on `pe`.
    pub fn g<T: Elem>(&self, src: SymPtr, pe: usize) -> Result<T> {
        let mut bits = [0u8; 8];
        self.get(&mut bits[..T::SIZE as usize], src, pe)?;
        Ok(T::from_bits(u64::from_le_bytes(bits)))
    }
}
