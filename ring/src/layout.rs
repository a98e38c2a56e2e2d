//! The ring's memory layout, mirroring `abi/include/pshmem/ring.h` field for field (read the
//! header's comment for the protocol). Sizes and offsets are asserted here at compile time and
//! compared with the C compiler's view of the header (`pshmem_abi::probe`) by `tests/layout.rs`.
//! The AMO, signal and error codes the slots and the error word carry are `pshmem-abi`'s.
//!
//! Every field is an atomic: the slot's payload words are written and read with `Relaxed`
//! (plain moves on x86-64, as the GPU's weak stores are), and only `ctrl` carries ordering.

use crate::sync::{AtomicU32, AtomicU64};

/// Operation codes (ctrl bits 0..7).
pub mod op {
    /// No operation (never published by a producer; zeroed memory reads as this).
    pub const NOP: u8 = 0;
    /// a = remote offset, b = local source, c = bytes.
    pub const PUT: u8 = 1;
    /// a = remote offset, b = local destination, c = bytes.
    pub const GET: u8 = 2;
    /// a = remote offset, b = value inline, c = bytes (1, 2, 4 or 8).
    pub const P: u8 = 3;
    /// a = remote offset, b = operand, c = compare; slot 2: a = result address (0: none).
    pub const AMO: u8 = 4;
    /// a = signal offset, b = value; sub = signal op.
    pub const SIGNAL: u8 = 5;
    /// As PUT; slot 2: a = signal offset, b = value; sub = signal op.
    pub const PUT_SIGNAL: u8 = 6;
    /// Later operations to a PE land after earlier ones to that PE.
    pub const FENCE: u8 = 7;
    /// As PUT; slot 2: a = offset of the signal word this write counts for.
    pub const PUT_COUNTED: u8 = 8;
    /// As SIGNAL, applied once every earlier PUT_COUNTED for that word (same ring and PE)
    /// has landed.
    pub const SIGNAL_COUNTED: u8 = 9;
}

/// `b` is an address in the producer's process, not a heap offset.
pub const FLAG_RAW_LOCAL: u8 = 0x01;
/// The commit bit of `ctrl`.
pub const CTRL_COMMIT: u32 = 0x8000_0000;
/// Most slots one operation takes.
pub const MAX_SLOTS: u32 = 2;

/// Packs a ctrl word without the commit bit.
pub const fn ctrl_make(op: u8, flags: u8, sub: u8, nslots: u32) -> u32 {
    op as u32 | (flags as u32) << 8 | (sub as u32) << 16 | (nslots - 1) << 24
}

/// The commit bit that marks index `index` as written on its lap (set on even laps).
#[inline]
pub const fn commit_bit(index: u64, capacity: u64) -> u32 {
    // `capacity` is a power of two: its bit in `index` is the lap's parity (no division on the
    // consumer's hot path).
    if index & capacity != 0 {
        0
    } else {
        CTRL_COMMIT
    }
}

/// Fields of a ctrl word.
#[inline]
pub const fn ctrl_op(ctrl: u32) -> u8 {
    ctrl as u8
}
/// Flags of a ctrl word.
#[inline]
pub const fn ctrl_flags(ctrl: u32) -> u8 {
    (ctrl >> 8) as u8
}
/// Sub-operation of a ctrl word.
#[inline]
pub const fn ctrl_sub(ctrl: u32) -> u8 {
    (ctrl >> 16) as u8
}
/// Slots of the operation a ctrl word starts.
#[inline]
pub const fn ctrl_nslots(ctrl: u32) -> u32 {
    ((ctrl >> 24) & 0xf) + 1
}

/// One 32-byte slot (`pshmem_slot_t`).
#[repr(C)]
#[derive(Debug, Default)]
pub struct Slot {
    /// Operation word a (see [`op`]).
    pub a: AtomicU64,
    /// Operation word b.
    pub b: AtomicU64,
    /// Operation word c.
    pub c: AtomicU64,
    /// Target PE.
    pub pe: AtomicU32,
    /// Op, flags, sub, slot count and commit bit. The first slot's is stored last, with
    /// `Release`, by the producer; the consumer loads it with `Acquire`.
    pub ctrl: AtomicU32,
}

/// The control block (`pshmem_ring_ctrl_t`): four words, each on its own cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct RingCtrl {
    /// CPU producers' reservation counter (fetch-add). GPU producers keep theirs on the GPU.
    pub head: AtomicU64,
    _pad0: [u64; 7],
    /// Slots below this index were copied out by the consumer and may be overwritten.
    /// Consumer: `Release` store after the copies; producers: `Acquire` load before reuse.
    pub tail: AtomicU64,
    _pad1: [u64; 7],
    /// Operations below this index have finished. Consumer: `Release` store after every
    /// effect of those operations (results, copied-out data); waiters: `Acquire` load.
    pub completed: AtomicU64,
    _pad2: [u64; 7],
    /// Sticky error word: 0, or `code << 32 | pe` (see [`error`]). Written once (`Release`)
    /// by the proxy; every CPU producer wait reads it (`Acquire`), and a GPU producer reads it
    /// (relaxed, system scope) on each refresh of its tail cache, so that no spin is endless.
    pub error: AtomicU64,
    _pad3: [u64; 7],
}

#[cfg(not(loom))]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Slot>() == 32);
    assert!(offset_of!(Slot, pe) == 24);
    assert!(offset_of!(Slot, ctrl) == 28);
    assert!(size_of::<RingCtrl>() == 256);
    assert!(offset_of!(RingCtrl, tail) == 64);
    assert!(offset_of!(RingCtrl, completed) == 128);
    assert!(offset_of!(RingCtrl, error) == 192);
};

/// A slot's contents, copied out of the ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawSlot {
    /// Word a.
    pub a: u64,
    /// Word b.
    pub b: u64,
    /// Word c.
    pub c: u64,
    /// Target PE.
    pub pe: u32,
    /// ctrl (without meaning for the commit bit once copied).
    pub ctrl: u32,
}
