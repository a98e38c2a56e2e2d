//! Messages between proxies (sent with the transport's `send`): requests that the target's
//! proxy applies to its heap (AMOs, signal updates, stores, fence marks; on GPU heaps reached
//! through staging also gets), and the acknowledgements it returns.
//!
//! Little-endian, fixed layout, versioned: `magic u16 | version u8 | kind u8 | src_pe u32`, then
//! the body. A request's `id` is the initiator's context for the operation; the ack carries it
//! back with the old value (fetching AMOs) and a status. AMO and signal operations carry the
//! ABI's own codes (`pshmem-abi`: `PSHMEM_AMO_*`, `PSHMEM_SIGNAL_SET` 9 and `_ADD` 10).

use pshmem_transport::Pe;

/// Header magic ("PX").
pub const MAGIC: u16 = 0x5850;
/// Wire version (2: signal operations carry the ABI's codes, 9 and 10, where version 1 had
/// numbers of its own; 3: fence marks, and stores on registered heaps).
pub const VERSION: u8 = 3;
const HEADER: usize = 8;
const KIND_REQUEST: u8 = 1;
const KIND_ACKS: u8 = 2;
const REQUEST_BODY: usize = 48;
const ACK_ENTRY: usize = 17;

/// What a request asks the target to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// An AMO; the ack carries the old value.
    Amo {
        /// The AMO (ring encoding).
        op: pshmem_ring::AmoOp,
        /// 64-bit.
        wide: bool,
    },
    /// A signal update (64-bit), applied once `expect` tagged writes with `tag` have landed.
    Signal {
        /// Set or add.
        op: pshmem_ring::SignalOp,
        /// Tagged writes to wait for (0: apply at once).
        expect: u32,
    },
    /// Store the low `width` bytes of `operand`: the staged path's `p` (on a GPU heap), or in
    /// tagged mode a `p` after a fence, applied in its source's order.
    Store {
        /// 1, 2, 4 or 8.
        width: u8,
    },
    /// Staged get (GPU heaps): copy `operand` bytes at `offset` into the initiator's landing
    /// slot `slot` (a remote-data write whose header carries `id` and `compare`, the
    /// initiator's destination address).
    GetData {
        /// Landing slot of the initiator's own group.
        slot: u32,
    },
    /// A fence's mark (tagged mode): changes nothing; acked once `expect` tagged writes with
    /// `tag` have landed and every earlier sequenced request from the source was applied, so
    /// the sequenced requests after it apply after the writes before the fence.
    Fence {
        /// Tagged writes to wait for (0: none).
        expect: u32,
    },
}

impl RequestKind {
    /// The tagged writes a signal or fence waits for (0 for the other kinds).
    pub fn expect(&self) -> u32 {
        match *self {
            RequestKind::Signal { expect, .. } | RequestKind::Fence { expect } => expect,
            _ => 0,
        }
    }
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The initiator's context (returned in the ack).
    pub id: u64,
    /// Heap offset at the target.
    pub offset: u64,
    /// Operand (AMO) or value (signal).
    pub operand: u64,
    /// Comparand (compare-swap).
    pub compare: u64,
    /// Tag of the writes a signal or fence waits for, and the request's place in its source's
    /// order (the engine's `SignalTag` packs both).
    pub tag: u64,
    /// What to do.
    pub kind: RequestKind,
}

impl Request {
    /// A request at heap offset `offset` (its id and tag are filled in when it is sent).
    pub fn new(offset: u64, operand: u64, compare: u64, kind: RequestKind) -> Self {
        Self {
            id: 0,
            offset,
            operand,
            compare,
            tag: 0,
            kind,
        }
    }
}

/// Outcome of a request at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Applied.
    Ok = 0,
    /// The offset is outside the target's heap.
    OutOfBounds = 1,
    /// The offset is not aligned to the width.
    Misaligned = 2,
}

/// One acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The request's id.
    pub id: u64,
    /// Old value (fetching AMOs; 0 otherwise).
    pub value: u64,
    /// Outcome.
    pub status: Status,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A request from `src`.
    Request {
        /// The initiating PE.
        src: Pe,
        /// The request.
        req: Request,
    },
    /// Acknowledgements from `src`.
    Acks {
        /// The acknowledging PE.
        src: Pe,
        /// The acks.
        acks: Vec<Ack>,
    },
}

/// Bytes that are not a proxy message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed proxy message ({len} bytes): {why}")]
pub struct WireError {
    /// Message length.
    pub len: usize,
    /// What was wrong.
    pub why: &'static str,
}

fn header(kind: u8, src: Pe) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.push(VERSION);
    b.push(kind);
    b.extend_from_slice(&src.get().to_le_bytes());
    b
}

/// Encodes a request from `src`.
pub fn encode_request(src: Pe, r: &Request) -> Vec<u8> {
    let mut b = header(KIND_REQUEST, src);
    for w in [r.id, r.offset, r.operand, r.compare, r.tag] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    let (code, flags, expect) = match r.kind {
        RequestKind::Amo { op, wide } => (op.code(), u8::from(wide), 0u32),
        RequestKind::Signal { op, expect } => (op.code(), 2, expect),
        RequestKind::Store { width } => (width, 4, 0),
        RequestKind::GetData { slot } => (0, 8, slot),
        RequestKind::Fence { expect } => (0, 16, expect),
    };
    b.push(code);
    b.push(flags);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&expect.to_le_bytes());
    debug_assert_eq!(b.len(), HEADER + REQUEST_BODY);
    b
}

/// Most acks that fit one message of `max` bytes.
pub fn acks_per_message(max: usize) -> usize {
    (max.saturating_sub(HEADER + 2) / ACK_ENTRY).max(1)
}

/// Encodes acks from `src` (at most [`acks_per_message`] of them).
pub fn encode_acks(src: Pe, acks: &[Ack]) -> Vec<u8> {
    let mut b = header(KIND_ACKS, src);
    b.extend_from_slice(&(acks.len() as u16).to_le_bytes());
    for a in acks {
        b.extend_from_slice(&a.id.to_le_bytes());
        b.extend_from_slice(&a.value.to_le_bytes());
        b.push(a.status as u8);
    }
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A request's kind from its code, flags and `expect` word (the flag bits tested in turn).
fn decode_kind(code: u8, flags: u8, expect: u32) -> Result<RequestKind, &'static str> {
    Ok(if flags & 4 != 0 {
        if !matches!(code, 1 | 2 | 4 | 8) {
            return Err("bad store width");
        }
        RequestKind::Store { width: code }
    } else if flags & 8 != 0 {
        RequestKind::GetData { slot: expect }
    } else if flags & 16 != 0 {
        RequestKind::Fence { expect }
    } else if flags & 2 != 0 {
        let op = pshmem_ring::SignalOp::from_code(code).ok_or("unknown signal op")?;
        RequestKind::Signal { op, expect }
    } else {
        RequestKind::Amo {
            op: pshmem_ring::AmoOp::from_code(code).ok_or("unknown AMO")?,
            wide: flags & 1 != 0,
        }
    })
}

/// Decodes a message.
pub fn decode(b: &[u8]) -> Result<Message, WireError> {
    let bad = |why| WireError { len: b.len(), why };
    if b.len() < HEADER {
        return Err(bad("shorter than the header"));
    }
    if u16::from_le_bytes([b[0], b[1]]) != MAGIC {
        return Err(bad("bad magic"));
    }
    if b[2] != VERSION {
        return Err(bad("unknown version"));
    }
    let src = Pe::new(u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")));
    let body = &b[HEADER..];
    match b[3] {
        KIND_REQUEST => {
            if body.len() != REQUEST_BODY {
                return Err(bad("request of the wrong length"));
            }
            let expect = u32::from_le_bytes(body[44..48].try_into().expect("4 bytes"));
            let kind = decode_kind(body[40], body[41], expect).map_err(bad)?;
            Ok(Message::Request {
                src,
                req: Request {
                    id: u64_at(body, 0),
                    offset: u64_at(body, 8),
                    operand: u64_at(body, 16),
                    compare: u64_at(body, 24),
                    tag: u64_at(body, 32),
                    kind,
                },
            })
        }
        KIND_ACKS => {
            if body.len() < 2 {
                return Err(bad("acks without a count"));
            }
            let n = u16::from_le_bytes([body[0], body[1]]) as usize;
            let entries = &body[2..];
            if entries.len() != n * ACK_ENTRY {
                return Err(bad("ack count differs from the length"));
            }
            let acks = entries
                .chunks_exact(ACK_ENTRY)
                .map(|e| {
                    let status = match e[16] {
                        0 => Status::Ok,
                        1 => Status::OutOfBounds,
                        2 => Status::Misaligned,
                        _ => return Err(bad("unknown ack status")),
                    };
                    Ok(Ack {
                        id: u64_at(e, 0),
                        value: u64_at(e, 8),
                        status,
                    })
                })
                .collect::<Result<_, _>>()?;
            Ok(Message::Acks { src, acks })
        }
        _ => Err(bad("unknown kind")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pshmem_ring::{AmoOp, SignalOp};

    #[test]
    fn round_trips_and_rejections() {
        let reqs = [
            Request {
                id: 1 << 40,
                offset: 4096,
                operand: 7,
                compare: 9,
                tag: 0,
                kind: RequestKind::Amo {
                    op: AmoOp::CompareSwap,
                    wide: false,
                },
            },
            Request {
                id: 3,
                offset: 8,
                operand: u64::MAX,
                compare: 0,
                tag: 77,
                kind: RequestKind::Signal {
                    op: SignalOp::Add,
                    expect: 12,
                },
            },
            Request {
                id: 4,
                offset: 16,
                operand: 0xabcd,
                compare: 0,
                tag: 0,
                kind: RequestKind::Store { width: 2 },
            },
            Request {
                id: 5,
                offset: 1 << 30,
                operand: 1 << 20,
                compare: 0xdead_beef,
                tag: 0,
                kind: RequestKind::GetData { slot: 7 },
            },
        ];
        for r in reqs {
            assert_eq!(
                decode(&encode_request(Pe::new(5), &r)),
                Ok(Message::Request {
                    src: Pe::new(5),
                    req: r
                })
            );
        }
        let acks: Vec<Ack> = (0..acks_per_message(4096) as u64)
            .map(|i| Ack {
                id: i,
                value: !i,
                status: if i % 2 == 0 {
                    Status::Ok
                } else {
                    Status::Misaligned
                },
            })
            .collect();
        let m = encode_acks(Pe::new(2), &acks);
        assert!(m.len() <= 4096);
        assert_eq!(
            decode(&m),
            Ok(Message::Acks {
                src: Pe::new(2),
                acks
            })
        );
        assert!(decode(&m[..m.len() - 1]).is_err());
        assert!(decode(&[0u8; 4]).is_err());
        let mut x = encode_request(Pe::new(1), &reqs[0]);
        x[0] ^= 1;
        assert!(decode(&x).is_err());
    }

    /// A fence's mark (version 3) keeps its tag word and count.
    #[test]
    fn a_fence_mark_round_trips() {
        let r = Request {
            id: 6,
            offset: 0,
            operand: 0,
            compare: 0,
            tag: 3 << 32,
            kind: RequestKind::Fence { expect: 40 },
        };
        let m = decode(&encode_request(Pe::new(5), &r));
        assert_eq!(
            m,
            Ok(Message::Request {
                src: Pe::new(5),
                req: r
            })
        );
        assert_eq!(r.kind.expect(), 40);
    }

    /// Operations travel under the ABI's codes (one numbering for AMOs and signals, C to wire).
    #[test]
    fn operations_carry_the_abi_codes() {
        let r = Request {
            id: 1,
            offset: 8,
            operand: 1,
            compare: 0,
            tag: 0,
            kind: RequestKind::Signal {
                op: SignalOp::Add,
                expect: 0,
            },
        };
        let b = encode_request(Pe::new(0), &r);
        assert_eq!(b[HEADER + 40], pshmem_abi::SignalOp::Add.code());
        assert_eq!(pshmem_abi::SignalOp::Add.code(), 10);
        let mut old = b.clone();
        old[2] = 1;
        assert!(
            decode(&old).is_err(),
            "version 1 numbered signals otherwise"
        );
    }
}
