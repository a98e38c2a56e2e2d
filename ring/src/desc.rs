//! Typed operations and their slot encoding (the table in `abi/include/pshmem/ring.h`),
//! shared by CPU producers and the proxy so that both sides agree by construction.

pub use pshmem_abi::{AMO_WIDE, AmoOp, Pe, SignalOp};

use crate::layout::{
    FLAG_RAW_LOCAL, RawSlot, ctrl_flags, ctrl_make, ctrl_nslots, ctrl_op, ctrl_sub, op,
};

/// The local side of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// A byte offset into this PE's symmetric heap.
    Heap(u64),
    /// An address in the producer's process, outside the heap (the proxy stages it).
    Raw(u64),
}

/// One operation as producers publish it and the proxy executes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desc {
    /// Copy `len` bytes from `local` to `remote` on `pe`.
    Put {
        /// Target PE.
        pe: Pe,
        /// Heap offset at the target.
        remote: u64,
        /// Source.
        local: Local,
        /// Bytes.
        len: u64,
    },
    /// Copy `len` bytes from `remote` on `pe` to `local`.
    Get {
        /// Source PE.
        pe: Pe,
        /// Heap offset at the source.
        remote: u64,
        /// Destination.
        local: Local,
        /// Bytes.
        len: u64,
    },
    /// Store a value of `width` bytes (1, 2, 4, 8) at `remote` on `pe`.
    P {
        /// Target PE.
        pe: Pe,
        /// Heap offset at the target.
        remote: u64,
        /// The value (low `width` bytes, little-endian).
        value: u64,
        /// Bytes.
        width: u8,
    },
    /// An atomic on a 32- or 64-bit word at `remote` on `pe`.
    Amo {
        /// Target PE.
        pe: Pe,
        /// Heap offset at the target (aligned to the width).
        remote: u64,
        /// The operation.
        op: AmoOp,
        /// 64-bit (else 32-bit).
        wide: bool,
        /// Operand.
        operand: u64,
        /// Comparand (compare-swap).
        compare: u64,
        /// Where to store the old value (8 bytes, in the producer's process); 0 for none.
        result: u64,
    },
    /// Update the 64-bit signal word at `remote` on `pe`.
    Signal {
        /// Target PE.
        pe: Pe,
        /// Heap offset of the signal word.
        remote: u64,
        /// Value.
        value: u64,
        /// Set or add.
        op: SignalOp,
    },
    /// A put, then a signal update that never becomes visible before the data.
    PutSignal {
        /// Target PE.
        pe: Pe,
        /// Heap offset of the destination.
        remote: u64,
        /// Source.
        local: Local,
        /// Bytes.
        len: u64,
        /// Heap offset of the signal word.
        sig: u64,
        /// Signal value.
        value: u64,
        /// Set or add.
        op: SignalOp,
    },
    /// Operations to a PE after the fence land after those before it.
    Fence,
    /// A put that counts towards the counted signal `sig` on `pe` (see
    /// [`Desc::SignalCounted`]); nothing orders it otherwise.
    PutCounted {
        /// Target PE.
        pe: Pe,
        /// Heap offset of the destination.
        remote: u64,
        /// Source.
        local: Local,
        /// Bytes.
        len: u64,
        /// Heap offset of the signal word it counts for.
        sig: u64,
    },
    /// Update the signal word at `remote` on `pe` once every [`Desc::PutCounted`] for it,
    /// published earlier on the same ring to the same PE (since the previous counted signal
    /// of that word), has landed: one signal covers many puts on any fabric, with no fence.
    SignalCounted {
        /// Target PE.
        pe: Pe,
        /// Heap offset of the signal word.
        remote: u64,
        /// Value.
        value: u64,
        /// Set or add.
        op: SignalOp,
    },
}

/// A set of slots that does not decode to an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable operation (ctrl {ctrl:#010x}): {why}")]
pub struct DecodeError {
    /// The first slot's ctrl word.
    pub ctrl: u32,
    /// What was wrong.
    pub why: &'static str,
}

/// The second slot of a two-slot operation.
fn continuation(pe: Pe, a: u64, b: u64) -> RawSlot {
    RawSlot {
        a,
        b,
        c: 0,
        pe: pe.get(),
        ctrl: ctrl_make(op::NOP, 0, 0, 1),
    }
}

fn local_bits(l: Local) -> (u8, u64) {
    match l {
        Local::Heap(o) => (0, o),
        Local::Raw(a) => (FLAG_RAW_LOCAL, a),
    }
}

fn local_of(flags: u8, b: u64) -> Local {
    if flags & FLAG_RAW_LOCAL != 0 {
        Local::Raw(b)
    } else {
        Local::Heap(b)
    }
}

impl Desc {
    /// The target PE, if the operation has one.
    pub fn pe(&self) -> Option<Pe> {
        match *self {
            Desc::Put { pe, .. }
            | Desc::Get { pe, .. }
            | Desc::P { pe, .. }
            | Desc::Amo { pe, .. }
            | Desc::Signal { pe, .. }
            | Desc::PutSignal { pe, .. }
            | Desc::PutCounted { pe, .. }
            | Desc::SignalCounted { pe, .. } => Some(pe),
            Desc::Fence => None,
        }
    }

    /// Encodes into slots; returns them and how many are used.
    #[inline]
    pub fn encode(&self) -> ([RawSlot; 2], usize) {
        let mut s = [RawSlot::default(); 2];
        let mut set = |pe: Pe, a, b, c, op, flags, sub, n| {
            s[0] = RawSlot {
                a,
                b,
                c,
                pe: pe.get(),
                ctrl: ctrl_make(op, flags, sub, n),
            };
            n as usize
        };
        let n = match *self {
            Desc::Put {
                pe,
                remote,
                local,
                len,
            } => {
                let (f, b) = local_bits(local);
                set(pe, remote, b, len, op::PUT, f, 0, 1)
            }
            Desc::Get {
                pe,
                remote,
                local,
                len,
            } => {
                let (f, b) = local_bits(local);
                set(pe, remote, b, len, op::GET, f, 0, 1)
            }
            Desc::P {
                pe,
                remote,
                value,
                width,
            } => set(pe, remote, value, u64::from(width), op::P, 0, 0, 1),
            Desc::Amo {
                pe,
                remote,
                op: aop,
                wide,
                operand,
                compare,
                result,
            } => {
                let sub = aop.code() | if wide { AMO_WIDE } else { 0 };
                let n = set(pe, remote, operand, compare, op::AMO, 0, sub, 2);
                s[1] = continuation(pe, result, 0);
                n
            }
            Desc::Signal {
                pe,
                remote,
                value,
                op: sop,
            } => set(pe, remote, value, 0, op::SIGNAL, 0, sop.code(), 1),
            Desc::PutSignal {
                pe,
                remote,
                local,
                len,
                sig,
                value,
                op: sop,
            } => {
                let (f, b) = local_bits(local);
                let n = set(pe, remote, b, len, op::PUT_SIGNAL, f, sop.code(), 2);
                s[1] = continuation(pe, sig, value);
                n
            }
            Desc::Fence => set(Pe::new(0), 0, 0, 0, op::FENCE, 0, 0, 1),
            Desc::PutCounted {
                pe,
                remote,
                local,
                len,
                sig,
            } => {
                let (f, b) = local_bits(local);
                let n = set(pe, remote, b, len, op::PUT_COUNTED, f, 0, 2);
                s[1] = continuation(pe, sig, 0);
                n
            }
            Desc::SignalCounted {
                pe,
                remote,
                value,
                op: sop,
            } => set(pe, remote, value, 0, op::SIGNAL_COUNTED, 0, sop.code(), 1),
        };
        (s, n)
    }

    /// Decodes the slots of one operation (as [`crate::Consumer::poll`] hands them out).
    #[inline]
    pub fn decode(s: &[RawSlot]) -> Result<Self, DecodeError> {
        let ctrl = s[0].ctrl;
        let bad = |why| DecodeError { ctrl, why };
        if ctrl_nslots(ctrl) as usize != s.len() {
            return Err(bad("slot count differs from the slots given"));
        }
        let (f, sub, pe) = (ctrl_flags(ctrl), ctrl_sub(ctrl), Pe::new(s[0].pe));
        let need = |n: usize| {
            if s.len() == n {
                Ok(())
            } else {
                Err(bad("wrong slot count for the operation"))
            }
        };
        Ok(match ctrl_op(ctrl) {
            op::PUT => {
                need(1)?;
                Desc::Put {
                    pe,
                    remote: s[0].a,
                    local: local_of(f, s[0].b),
                    len: s[0].c,
                }
            }
            op::GET => {
                need(1)?;
                Desc::Get {
                    pe,
                    remote: s[0].a,
                    local: local_of(f, s[0].b),
                    len: s[0].c,
                }
            }
            op::P => {
                need(1)?;
                let width = s[0].c;
                if !matches!(width, 1 | 2 | 4 | 8) {
                    return Err(bad("p width is not 1, 2, 4 or 8"));
                }
                Desc::P {
                    pe,
                    remote: s[0].a,
                    value: s[0].b,
                    width: width as u8,
                }
            }
            op::AMO => {
                need(2)?;
                Desc::Amo {
                    pe,
                    remote: s[0].a,
                    op: AmoOp::from_code(sub & !AMO_WIDE).ok_or_else(|| bad("unknown AMO"))?,
                    wide: sub & AMO_WIDE != 0,
                    operand: s[0].b,
                    compare: s[0].c,
                    result: s[1].a,
                }
            }
            op::SIGNAL => {
                need(1)?;
                Desc::Signal {
                    pe,
                    remote: s[0].a,
                    value: s[0].b,
                    op: SignalOp::from_code(sub).ok_or_else(|| bad("unknown signal op"))?,
                }
            }
            op::PUT_SIGNAL => {
                need(2)?;
                Desc::PutSignal {
                    pe,
                    remote: s[0].a,
                    local: local_of(f, s[0].b),
                    len: s[0].c,
                    sig: s[1].a,
                    value: s[1].b,
                    op: SignalOp::from_code(sub).ok_or_else(|| bad("unknown signal op"))?,
                }
            }
            op::FENCE => Desc::Fence,
            op::PUT_COUNTED => {
                need(2)?;
                Desc::PutCounted {
                    pe,
                    remote: s[0].a,
                    local: local_of(f, s[0].b),
                    len: s[0].c,
                    sig: s[1].a,
                }
            }
            op::SIGNAL_COUNTED => {
                need(1)?;
                Desc::SignalCounted {
                    pe,
                    remote: s[0].a,
                    value: s[0].b,
                    op: SignalOp::from_code(sub).ok_or_else(|| bad("unknown signal op"))?,
                }
            }
            _ => return Err(bad("unknown operation")),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_operation_round_trips() {
        let all = [
            Desc::Put {
                pe: Pe::new(3),
                remote: 64,
                local: Local::Heap(128),
                len: 1 << 40,
            },
            Desc::Get {
                pe: Pe::new(1),
                remote: 8,
                local: Local::Raw(0xdead_beef),
                len: 7,
            },
            Desc::P {
                pe: Pe::new(2),
                remote: 16,
                value: u64::MAX,
                width: 8,
            },
            Desc::Amo {
                pe: Pe::new(0),
                remote: 24,
                op: AmoOp::CompareSwap,
                wide: true,
                operand: 5,
                compare: 6,
                result: 0x1000,
            },
            Desc::Signal {
                pe: Pe::new(9),
                remote: 32,
                value: 77,
                op: SignalOp::Add,
            },
            Desc::PutSignal {
                pe: Pe::new(4),
                remote: 40,
                local: Local::Raw(1),
                len: 99,
                sig: 48,
                value: 2,
                op: SignalOp::Set,
            },
            Desc::Fence,
            Desc::PutCounted {
                pe: Pe::new(5),
                remote: 56,
                local: Local::Heap(64),
                len: 7408,
                sig: 72,
            },
            Desc::SignalCounted {
                pe: Pe::new(6),
                remote: 72,
                value: (-3i64) as u64,
                op: SignalOp::Set,
            },
        ];
        for d in all {
            let (slots, n) = d.encode();
            assert_eq!(Desc::decode(&slots[..n]), Ok(d));
        }
    }

    #[test]
    fn garbage_is_rejected() {
        let s = RawSlot {
            ctrl: ctrl_make(99, 0, 0, 1),
            ..RawSlot::default()
        };
        assert!(Desc::decode(&[s]).is_err());
        let s = RawSlot {
            ctrl: ctrl_make(op::AMO, 0, 0x0f, 1),
            ..RawSlot::default()
        };
        assert!(Desc::decode(&[s]).is_err());
        let s = RawSlot {
            ctrl: ctrl_make(op::P, 0, 0, 1),
            c: 3,
            ..RawSlot::default()
        };
        assert!(Desc::decode(&[s]).is_err());
    }
}
