//! This PE's own memory, as the engine touches it ([`Home`]): operations a ring sends to this
//! PE itself (applied at once, in order), peers' AMOs and signals, and copies between raw
//! addresses. A host heap is reached through its mapping (CPU copies and atomics); a GPU heap
//! through [`DeviceMem`] (CUDA copies on the proxy's own stream, AMOs by a one-thread kernel:
//! the CPU never touches GPU memory itself).

use std::collections::VecDeque;

use pshmem_ring::{AmoOp, Desc, Local};

use super::{io::Tracer, staged::AfterCopy, work::Dir};
use crate::{DeviceMem, HeapMem, mem::MemError, trace::Cost};

/// A GPU heap reached through its device.
pub(crate) struct DeviceHeap {
    dev: Box<dyn DeviceMem>,
    /// Device address and length of this PE's GPU heap.
    pub(super) base: u64,
    len: u64,
}

impl DeviceHeap {
    pub(super) fn new(dev: Box<dyn DeviceMem>) -> Self {
        let (base, len) = dev.heap();
        Self { dev, base, len }
    }

    /// The device address of `off..off + len` in the heap, or why not.
    pub(super) fn check(&self, off: u64, len: u64) -> Result<u64, MemError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.base + off),
            end => Err(MemError::OutOfBounds {
                offset: off,
                end: end.unwrap_or(u64::MAX),
                len: self.len,
            }),
        }
    }

    /// A descriptor's local side as a device or host address.
    fn addr(&self, l: Local, len: u64) -> Result<u64, MemError> {
        match l {
            Local::Heap(o) => self.check(o, len),
            Local::Raw(a) => Ok(a),
        }
    }

    /// An AMO at heap offset `off`, by the GPU (`idle` runs while it is pending).
    fn amo(
        &mut self,
        off: u64,
        (wide, op, operand, compare): (bool, AmoOp, u64, u64),
        idle: &mut dyn FnMut(),
    ) -> Result<u64, MemError> {
        let width = if wide { 8 } else { 4 };
        let at = self.check(off, width)?;
        if off % width != 0 {
            return Err(MemError::Misaligned { offset: off, width });
        }
        self.dev
            .amo(at, op, wide, operand, compare, idle)
            .map_err(MemError::device)
    }

    /// A copy between device or host addresses.
    ///
    /// # Safety
    /// As [`DeviceMem::copy`].
    pub(super) unsafe fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), MemError> {
        // SAFETY: forwarded.
        unsafe { self.dev.copy(dst, src, len) }.map_err(MemError::device)
    }

    /// Starts a copy between device or host addresses; returns its ticket.
    ///
    /// # Safety
    /// As [`DeviceMem::copy_start`].
    pub(super) unsafe fn copy_start(
        &mut self,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<u64, MemError> {
        // SAFETY: forwarded.
        unsafe { self.dev.copy_start(dst, src, len) }.map_err(MemError::device)
    }

    /// Starts a store of `width` bytes at heap offset `off` (see [`DeviceMem::store_start`]).
    pub(super) fn store_start(
        &mut self,
        off: u64,
        value: u64,
        width: u8,
    ) -> Result<Option<u64>, MemError> {
        let at = self.check(off, u64::from(width))?;
        self.dev
            .store_start(at, value, width)
            .map_err(MemError::device)
    }

    /// The ticket of the latest finished copy.
    pub(super) fn copies_done(&mut self) -> Result<u64, MemError> {
        self.dev.copies_done().map_err(MemError::device)
    }

    /// Page-locks host memory for faster copies.
    ///
    /// # Safety
    /// As [`DeviceMem::pin`].
    pub(super) unsafe fn pin(&mut self, ptr: *mut u8, len: usize) {
        // SAFETY: forwarded.
        unsafe { self.dev.pin(ptr, len) }
    }

    /// A descriptor's local side as a heap offset where it lies in the GPU heap (registered
    /// mode: RMA straight from the registration).
    fn localize(&self, l: Local, len: u64) -> Local {
        match l {
            Local::Raw(a) if a >= self.base && a.saturating_add(len) <= self.base + self.len => {
                Local::Heap(a - self.base)
            }
            other => other,
        }
    }
}

/// This PE's memory: the registered region's view, the GPU heap when there is one, and (host-
/// staged path) the copies under way on the device's stream with what follows each.
pub(super) struct Home {
    /// This PE's GPU heap, when it has one: reached through host staging, or registered with
    /// the transport (DMA-BUF). Dropped before the staging buffer it page-locked (the engine's
    /// field order).
    pub device: Option<DeviceHeap>,
    /// What is registered as this PE's heap: the host heap, the GPU heap (registered mode, a
    /// view never dereferenced), or the landing area (host-staged path).
    pub region: HeapMem,
    /// Copies under way (their tickets, in order) and what follows each.
    pub copying: VecDeque<(u64, AfterCopy)>,
}

impl Home {
    /// Applies an operation to this PE's own heap, at once and in order (`idle` runs while a
    /// GPU AMO is pending).
    pub(super) fn apply_self(&mut self, d: &Desc, idle: &mut dyn FnMut()) -> Result<(), MemError> {
        match *d {
            Desc::Put {
                remote, local, len, ..
            }
            | Desc::PutCounted {
                remote, local, len, ..
            } => self.copy_heap(Dir::Put, remote, local, len),
            Desc::Get {
                remote, local, len, ..
            } => self.copy_heap(Dir::Get, remote, local, len),
            Desc::P {
                remote,
                value,
                width,
                ..
            } => self.store(remote, value, width),
            Desc::Amo {
                remote,
                op,
                wide,
                operand,
                compare,
                result,
                ..
            } => {
                let old = self.amo(remote, (wide, op, operand, compare), idle)?;
                if result == 0 {
                    return Ok(());
                }
                let b = old.to_le_bytes();
                // SAFETY: the producer keeps the result cell valid until the operation
                // completes (API contract), which is after this write.
                unsafe { self.copy_raw(result, b.as_ptr() as u64, 8) }
            }
            Desc::Signal {
                remote, value, op, ..
            }
            | Desc::SignalCounted {
                remote, value, op, ..
            } => self
                .amo(remote, (true, op.as_amo(), value, 0), idle)
                .map(drop),
            Desc::PutSignal {
                remote,
                local,
                len,
                sig,
                value,
                op,
                ..
            } => {
                self.copy_heap(Dir::Put, remote, local, len)?;
                self.amo(sig, (true, op.as_amo(), value, 0), idle).map(drop)
            }
            Desc::Fence => Ok(()),
        }
    }

    /// Copies `len` bytes between this PE's heap at `at` and a local side: into the heap
    /// (`Put`) or out of it (`Get`).
    fn copy_heap(&mut self, dir: Dir, at: u64, local: Local, len: u64) -> Result<(), MemError> {
        match &mut self.device {
            Some(d) => {
                let (heap, other) = (d.check(at, len)?, d.addr(local, len)?);
                let (to, from) = match dir {
                    Dir::Put => (heap, other),
                    Dir::Get => (other, heap),
                };
                // SAFETY: the heap side is inside the heap (checked); the producer keeps the
                // local side valid until the operation completes.
                unsafe { d.copy(to, from, len as usize) }
            }
            None => {
                let (h, n) = (self.region, len as usize);
                match (local, dir) {
                    (Local::Heap(off), Dir::Put) => h.copy_from(at, &h, off, len),
                    (Local::Heap(off), Dir::Get) => h.copy_from(off, &h, at, len),
                    // SAFETY: the producer keeps raw sources and destinations valid until the
                    // operation completes.
                    (Local::Raw(a), Dir::Put) => unsafe { h.write_from_raw(at, a as *const u8, n) },
                    // SAFETY: as above.
                    (Local::Raw(a), Dir::Get) => unsafe { h.read_to_raw(at, a as *mut u8, n) },
                }
            }
        }
    }

    /// Stores the low `width` bytes of `value` at heap offset `off`.
    pub(super) fn store(&mut self, off: u64, value: u64, width: u8) -> Result<(), MemError> {
        match &mut self.device {
            Some(d) => {
                let at = d.check(off, u64::from(width))?;
                let v = value.to_le_bytes();
                // SAFETY: the destination is inside the heap (checked); `v` is live.
                unsafe { d.copy(at, v.as_ptr() as u64, width as usize) }
            }
            None => self.region.store(off, value, width),
        }
    }

    /// An AMO on this PE's heap: CPU atomics on a host heap, the GPU's own atomics (a kernel)
    /// on a GPU heap, while `idle` runs (the rings' new operations are stashed meanwhile).
    pub(super) fn amo(
        &mut self,
        off: u64,
        (wide, op, operand, compare): (bool, AmoOp, u64, u64),
        idle: &mut dyn FnMut(),
    ) -> Result<u64, MemError> {
        match self.device.as_mut() {
            Some(d) => d.amo(off, (wide, op, operand, compare), idle),
            None => self.region.amo(off, wide, op, operand, compare),
        }
    }

    /// Copies between process (or, with a GPU heap, device) addresses.
    ///
    /// # Safety
    /// Both ranges must be valid and not in use by anything else meanwhile.
    pub(super) unsafe fn copy_raw(
        &mut self,
        dst: u64,
        src: u64,
        len: usize,
    ) -> Result<(), MemError> {
        match self.device.as_mut() {
            // SAFETY: forwarded.
            Some(d) => unsafe { d.copy(dst, src, len) },
            None => {
                // SAFETY: forwarded; the ranges are distinct (staging memory is the proxy's).
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
                Ok(())
            }
        }
    }

    /// In registered GPU mode (not `staged`), local sides inside the GPU heap become heap
    /// offsets (RMA from the registration instead of staging through chunks).
    pub(super) fn localize(&self, mut d: Desc, staged: bool) -> Desc {
        if let (Some(dev), false) = (&self.device, staged) {
            match &mut d {
                Desc::Put { local, len, .. }
                | Desc::Get { local, len, .. }
                | Desc::PutSignal { local, len, .. }
                | Desc::PutCounted { local, len, .. } => *local = dev.localize(*local, *len),
                _ => {}
            }
        }
        d
    }

    /// The device or host address of a descriptor's local side.
    pub(super) fn staged_addr(&self, l: Local) -> u64 {
        match l {
            Local::Heap(off) => self.device.as_ref().map_or(0, |d| d.base) + off,
            Local::Raw(a) => a,
        }
    }

    /// Starts a copy of the host-staged path: on the device's stream, or at once without a
    /// device (ticket 0, always finished).
    ///
    /// # Safety
    /// As [`crate::DeviceMem::copy_start`].
    pub(super) unsafe fn copy_start(
        &mut self,
        tracer: &mut Tracer,
        dst: u64,
        src: u64,
        n: usize,
    ) -> Result<u64, MemError> {
        let at = tracer.clock();
        let r = match self.device.as_mut() {
            // SAFETY: forwarded.
            Some(d) => unsafe { d.copy_start(dst, src, n) },
            None => {
                // SAFETY: forwarded; staging memory is the proxy's own, distinct from `src`.
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n) };
                Ok(0)
            }
        };
        tracer.charge_since(Cost::CopyStart, at);
        r
    }
}
