//! Raw access to symmetric-heap memory in host mode: bounds-checked copies and atomics on a
//! mapping (this PE's heap, or a same-host peer's heap mapped through memfd). Every unsafe block
//! of the proxy's memory handling lives here.
//!
//! Atomics use the CPU's atomic instructions on the mapping itself, so an AMO applied here by a
//! target's proxy (for a remote initiator) and one applied by a same-host peer through its own
//! mapping (the direct path) are atomic with respect to each other: both are locked
//! instructions on the same physical memory.

use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

use pshmem_ring::AmoOp;

/// Why an access was refused.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// The range leaves the heap.
    #[error("bytes {offset}..{end} are outside the {len}-byte heap")]
    OutOfBounds {
        /// Start.
        offset: u64,
        /// End (saturated).
        end: u64,
        /// Heap length.
        len: u64,
    },
    /// The GPU failed a copy or an AMO on a GPU heap (the job is failing).
    #[error("the GPU failed: {source}")]
    Device {
        /// The device's error (the driver's, for CUDA).
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
    /// An atomic on an address not aligned to its width.
    #[error("offset {offset} is not aligned to the {width}-byte width of the atomic")]
    Misaligned {
        /// Offset.
        offset: u64,
        /// Width in bytes.
        width: u64,
    },
}

impl PartialEq for MemError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                MemError::OutOfBounds { offset, end, len },
                MemError::OutOfBounds {
                    offset: o,
                    end: e,
                    len: l,
                },
            ) => (offset, end, len) == (o, e, l),
            (
                MemError::Misaligned { offset, width },
                MemError::Misaligned {
                    offset: o,
                    width: w,
                },
            ) => (offset, width) == (o, w),
            // Device errors are equal when they say the same.
            (MemError::Device { source: a }, MemError::Device { source: b }) => {
                a.to_string() == b.to_string()
            }
            _ => false,
        }
    }
}

impl Eq for MemError {}

impl MemError {
    /// A device's failure.
    pub fn device(source: crate::DeviceError) -> Self {
        MemError::Device {
            source: source.into(),
        }
    }
}

/// A mapped heap: `len` bytes at `base`, shared with peers and the NIC.
#[derive(Debug, Clone, Copy)]
pub struct HeapMem {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory that every thread may access; this type only hands out
// bounds-checked copies and atomics, never references.
unsafe impl Send for HeapMem {}
// SAFETY: as above.
unsafe impl Sync for HeapMem {}

impl HeapMem {
    /// A view of `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped readable and writable for as long as any copy of
    /// the view is used.
    pub unsafe fn new(base: *mut u8, len: usize) -> Self {
        Self { base, len }
    }

    /// The mapping's start.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Checks that `offset..offset + len` lies inside.
    pub fn check(&self, offset: u64, len: u64) -> Result<(), MemError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(()),
            end => Err(MemError::OutOfBounds {
                offset,
                end: end.unwrap_or(u64::MAX),
                len: self.len as u64,
            }),
        }
    }

    fn check_aligned(&self, offset: u64, width: u64) -> Result<(), MemError> {
        self.check(offset, width)?;
        if offset % width != 0 {
            return Err(MemError::Misaligned { offset, width });
        }
        Ok(())
    }

    /// Whether `addr..addr + len` lies inside; gives the heap offset.
    pub fn offset_of(&self, addr: *const u8, len: usize) -> Option<u64> {
        let a = addr as usize;
        let b = self.base as usize;
        (a >= b && a.checked_add(len)? <= b + self.len).then(|| (a - b) as u64)
    }

    /// Copies `len` bytes from `src` (another view, or this one) at `src_off` to `dst_off`.
    pub fn copy_from(
        &self,
        dst_off: u64,
        src: &HeapMem,
        src_off: u64,
        len: u64,
    ) -> Result<(), MemError> {
        self.check(dst_off, len)?;
        src.check(src_off, len)?;
        // SAFETY: both ranges are inside their mappings (checked); `copy` allows overlap.
        unsafe {
            std::ptr::copy(
                src.base.add(src_off as usize),
                self.base.add(dst_off as usize),
                len as usize,
            )
        };
        Ok(())
    }

    /// Copies `len` bytes from the process address `src` into the heap at `off`.
    ///
    /// # Safety
    /// `src..src + len` must be readable for the duration of the call.
    pub unsafe fn write_from_raw(
        &self,
        off: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemError> {
        self.check(off, len as u64)?;
        // SAFETY: the heap range is checked; the caller vouches for the source.
        unsafe { std::ptr::copy(src, self.base.add(off as usize), len) };
        Ok(())
    }

    /// Copies `len` bytes of the heap at `off` to the process address `dst`.
    ///
    /// # Safety
    /// `dst..dst + len` must be writable for the duration of the call.
    pub unsafe fn read_to_raw(&self, off: u64, dst: *mut u8, len: usize) -> Result<(), MemError> {
        self.check(off, len as u64)?;
        // SAFETY: the heap range is checked; the caller vouches for the destination.
        unsafe { std::ptr::copy(self.base.add(off as usize), dst, len) };
        Ok(())
    }

    /// Stores the low `width` bytes (1, 2, 4 or 8) of `value` at `off`, atomically when the
    /// offset is aligned to the width (as a waiter's atomic load expects), `Release`.
    pub fn store(&self, off: u64, value: u64, width: u8) -> Result<(), MemError> {
        let w = u64::from(width);
        self.check(off, w)?;
        if off % w != 0 {
            let bytes = value.to_le_bytes();
            // SAFETY: the range is checked; an unaligned store cannot be atomic anyway.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.base.add(off as usize),
                    width as usize,
                )
            };
            return Ok(());
        }
        // SAFETY: the address is inside the mapping and aligned to the width, and every
        // concurrent access to it is atomic or a plain copy of the shared-memory model.
        let p = unsafe { self.base.add(off as usize) };
        // Release: data written before this store (by the same thread) is visible to a waiter
        // that acquires the stored value.
        unsafe {
            // SAFETY: as above, for each width.
            match width {
                1 => AtomicU8::from_ptr(p).store(value as u8, Ordering::Release),
                2 => AtomicU16::from_ptr(p.cast()).store(value as u16, Ordering::Release),
                4 => AtomicU32::from_ptr(p.cast()).store(value as u32, Ordering::Release),
                _ => AtomicU64::from_ptr(p.cast()).store(value, Ordering::Release),
            }
        }
        Ok(())
    }

    /// Loads `width` (4 or 8) bytes at an aligned `off` with `Acquire`.
    pub fn load(&self, off: u64, wide: bool) -> Result<u64, MemError> {
        let w = if wide { 8 } else { 4 };
        self.check_aligned(off, w)?;
        // SAFETY: inside the mapping and aligned (checked).
        let p = unsafe { self.base.add(off as usize) };
        // Acquire: a waiter that sees a value also sees the data written before it.
        // SAFETY: as above.
        Ok(unsafe {
            if wide {
                AtomicU64::from_ptr(p.cast()).load(Ordering::Acquire)
            } else {
                u64::from(AtomicU32::from_ptr(p.cast()).load(Ordering::Acquire))
            }
        })
    }

    /// Applies an atomic at `off` (32- or 64-bit) and returns the old value.
    ///
    /// `AcqRel`: a signal or AMO applied after data (put-with-signal) releases that data to
    /// whoever acquires the word, and a fetching AMO observes what was released before it.
    pub fn amo(
        &self,
        off: u64,
        wide: bool,
        op: AmoOp,
        operand: u64,
        compare: u64,
    ) -> Result<u64, MemError> {
        let w = if wide { 8 } else { 4 };
        self.check_aligned(off, w)?;
        // SAFETY: inside the mapping and aligned (checked).
        let p = unsafe { self.base.add(off as usize) };
        let o = Ordering::AcqRel;
        if wide {
            // SAFETY: aligned 8-byte word inside the mapping; all access to it is atomic.
            let a = unsafe { AtomicU64::from_ptr(p.cast()) };
            Ok(match op {
                AmoOp::FetchAdd | AmoOp::Add => a.fetch_add(operand, o),
                AmoOp::Swap | AmoOp::Set => a.swap(operand, o),
                AmoOp::CompareSwap => {
                    match a.compare_exchange(compare, operand, o, Ordering::Acquire) {
                        Ok(v) | Err(v) => v,
                    }
                }
                AmoOp::Fetch => a.load(Ordering::Acquire),
                AmoOp::FetchAnd | AmoOp::And => a.fetch_and(operand, o),
                AmoOp::FetchOr | AmoOp::Or => a.fetch_or(operand, o),
                AmoOp::FetchXor | AmoOp::Xor => a.fetch_xor(operand, o),
            })
        } else {
            // SAFETY: aligned 4-byte word inside the mapping; all access to it is atomic.
            let a = unsafe { AtomicU32::from_ptr(p.cast()) };
            let (x, c) = (operand as u32, compare as u32);
            Ok(u64::from(match op {
                AmoOp::FetchAdd | AmoOp::Add => a.fetch_add(x, o),
                AmoOp::Swap | AmoOp::Set => a.swap(x, o),
                AmoOp::CompareSwap => match a.compare_exchange(c, x, o, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                },
                AmoOp::Fetch => a.load(Ordering::Acquire),
                AmoOp::FetchAnd | AmoOp::And => a.fetch_and(x, o),
                AmoOp::FetchOr | AmoOp::Or => a.fetch_or(x, o),
                AmoOp::FetchXor | AmoOp::Xor => a.fetch_xor(x, o),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_alignment_and_atomics() {
        let mut buf = vec![0u64; 8];
        // SAFETY: the buffer outlives the view.
        let h = unsafe { HeapMem::new(buf.as_mut_ptr().cast(), 64) };
        assert!(h.check(60, 4).is_ok());
        assert!(matches!(h.check(60, 5), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(
            h.check(u64::MAX, 2),
            Err(MemError::OutOfBounds { .. })
        ));
        assert!(matches!(
            h.amo(4, true, AmoOp::Add, 1, 0),
            Err(MemError::Misaligned { .. })
        ));
        assert_eq!(h.amo(8, true, AmoOp::FetchAdd, 5, 0), Ok(0));
        assert_eq!(h.amo(8, true, AmoOp::CompareSwap, 9, 5), Ok(5));
        assert_eq!(h.load(8, true), Ok(9));
        assert_eq!(
            h.amo(16, false, AmoOp::FetchAdd, u64::from(u32::MAX), 0),
            Ok(0)
        );
        assert_eq!(
            h.amo(16, false, AmoOp::FetchAdd, 2, 0),
            Ok(u64::from(u32::MAX))
        );
        assert_eq!(h.load(16, false), Ok(1), "32-bit atomics wrap at 32 bits");
        h.store(3, 0xabcd, 2).unwrap();
        h.store(24, 7, 8).unwrap();
        assert_eq!(h.load(24, true), Ok(7));
        assert_eq!(buf[0].to_le_bytes()[3..5], [0xcd, 0xab]);
    }
}

/// A host-memory heap standing in for a GPU heap, so that the host-staged GPU path's protocol
/// (`engine::staged`) runs — and is tested — on machines without a GPU
/// (`PSHMEM_EMULATE_GPU_HEAP=1`). Copies are memcpy, AMOs CPU atomics.
#[derive(Debug)]
pub struct HostDevice {
    heap: HeapMem,
    /// Started copies and stores not yet made (ticket, what), oldest first. Like a stream, one
    /// is made late: when `copies_done` is called the second time after it started, or before
    /// any later synchronous copy or AMO. So an engine that acted on a copy before it was
    /// reported finished would see stale bytes in CI, as it would on a GPU.
    pending: std::collections::VecDeque<(u64, Late)>,
    started: u64,
    /// Copies up to this ticket are made at the next `copies_done`.
    due: u64,
}

/// A copy or store of [`HostDevice`] not made yet.
#[derive(Debug, Clone, Copy)]
enum Late {
    Copy { dst: u64, src: u64, len: usize },
    Store { dst: u64, value: u64, width: u8 },
}

impl HostDevice {
    /// Emulates a device heap on `heap`.
    pub fn new(heap: HeapMem) -> Self {
        Self {
            heap,
            pending: std::collections::VecDeque::new(),
            started: 0,
            due: 0,
        }
    }

    /// Makes the started copies up to ticket `upto`, in order.
    fn make(&mut self, upto: u64) {
        while let Some(&(t, late)) = self.pending.front() {
            if t > upto {
                break;
            }
            match late {
                // SAFETY: `copy_start`'s caller keeps both ranges valid until the copy is
                // reported finished, which is after this.
                Late::Copy { dst, src, len } => unsafe {
                    std::ptr::copy(src as *const u8, dst as *mut u8, len)
                },
                // SAFETY: the engine checked the destination against the heap; the low
                // `width` bytes of a little-endian word are its value.
                Late::Store { dst, value, width } => unsafe {
                    std::ptr::copy(
                        value.to_le_bytes().as_ptr(),
                        dst as *mut u8,
                        usize::from(width),
                    )
                },
            }
            self.pending.pop_front();
        }
    }
}

impl crate::DeviceMem for HostDevice {
    fn heap(&self) -> (u64, u64) {
        (self.heap.base() as u64, self.heap.len() as u64)
    }

    unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), crate::DeviceError> {
        self.make(self.started);
        // SAFETY: the caller guarantees both ranges (process addresses here); `copy` allows
        // overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    }

    unsafe fn copy_start(
        &mut self,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<u64, crate::DeviceError> {
        self.started += 1;
        self.pending
            .push_back((self.started, Late::Copy { dst, src, len }));
        Ok(self.started)
    }

    fn store_start(
        &mut self,
        addr: u64,
        value: u64,
        width: u8,
    ) -> Result<Option<u64>, crate::DeviceError> {
        self.started += 1;
        let late = Late::Store {
            dst: addr,
            value,
            width: width.min(8),
        };
        self.pending.push_back((self.started, late));
        Ok(Some(self.started))
    }

    fn copies_done(&mut self) -> Result<u64, crate::DeviceError> {
        let due = self.due;
        self.make(due);
        self.due = self.started;
        Ok(self.pending.front().map_or(self.started, |p| p.0 - 1))
    }

    fn amo(
        &mut self,
        addr: u64,
        op: AmoOp,
        wide: bool,
        operand: u64,
        compare: u64,
        _idle: &mut dyn FnMut(),
    ) -> Result<u64, crate::DeviceError> {
        self.make(self.started);
        let off = addr.wrapping_sub(self.heap.base() as u64);
        Ok(self.heap.amo(off, wide, op, operand, compare)?)
    }

    unsafe fn pin(&mut self, _ptr: *mut u8, _len: usize) {}
}
