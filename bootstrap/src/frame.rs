//! Bootstrap wire format, version 1.
//!
//! Every frame starts with a 24-byte little-endian header:
//!
//! | offset | size | field                                                     |
//! |--------|------|-----------------------------------------------------------|
//! | 0      | 4    | magic `b"PSHM"`                                           |
//! | 4      | 2    | protocol version ([`VERSION`])                            |
//! | 6      | 1    | kind ([`Kind`])                                           |
//! | 7      | 1    | flags: bit 0 = more frames of this message follow         |
//! | 8      | 8    | job secret                                                |
//! | 16     | 4    | payload length, at most [`MAX_FRAME`] (or [`MAX_HELLO`])   |
//! | 20     | 4    | reserved, zero                                            |
//!
//! A message longer than [`MAX_FRAME`] is split into frames of the same kind, all but the last
//! with the MORE flag. A header is validated completely before any payload byte is read, and a
//! payload buffer grows with the bytes actually received, so a peer that claims a huge length
//! costs nothing. The job secret keeps processes of different jobs (or stray port scanners) from
//! joining; it is not a security measure against an attacker who can read the traffic.

/// `b"PSHM"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PSHM");
/// Protocol version spoken by this build.
pub const VERSION: u16 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 24;
/// Largest payload of one frame.
pub const MAX_FRAME: u32 = 1 << 22;
/// Largest payload of a frame sent before the peer is authenticated (the hello).
pub const MAX_HELLO: u32 = 1 << 16;
/// Flag: more frames of this message follow.
pub const FLAG_MORE: u8 = 1;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A rank introduces itself to rank 0.
    Hello = 1,
    /// Rank 0 accepts a rank and sends the world table.
    Welcome = 2,
    /// Rank 0 refuses a rank (payload: reason code + text).
    Reject = 3,
    /// A rank's contribution to a collective (rank → rank 0).
    Contrib = 4,
    /// A collective's result (rank 0 → rank).
    Result = 5,
    /// Liveness only.
    Heartbeat = 6,
    /// Rank 0 tells everyone the job is over (payload: dead rank + reason).
    Abort = 7,
    /// Orderly departure at finalize.
    Goodbye = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Hello,
            2 => Self::Welcome,
            3 => Self::Reject,
            4 => Self::Contrib,
            5 => Self::Result,
            6 => Self::Heartbeat,
            7 => Self::Abort,
            8 => Self::Goodbye,
            _ => return None,
        })
    }
}

/// A decoded, validated header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The kind.
    pub kind: Kind,
    /// Flags (only [`FLAG_MORE`] is defined).
    pub flags: u8,
    /// The sender's job secret.
    pub secret: u64,
    /// Payload length.
    pub len: u32,
}

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Not a proxyshmem bootstrap frame at all.
    #[error("bad magic {0:#010x} (not a proxyshmem bootstrap peer)")]
    BadMagic(u32),
    /// Another protocol version.
    #[error("protocol version {theirs}, expected {ours}")]
    Version {
        /// Theirs.
        theirs: u16,
        /// Ours.
        ours: u16,
    },
    /// Another job's secret.
    #[error("wrong job secret (a process of another job?)")]
    BadSecret,
    /// Unknown kind byte.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Undefined flag bits or a non-zero reserved field.
    #[error("malformed header: {0}")]
    Malformed(&'static str),
    /// Claimed payload longer than allowed.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Claimed length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// A payload that does not parse.
    #[error("bad {what} payload: {reason}")]
    BadPayload {
        /// Which message.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A frame of an unexpected kind at this point of the protocol.
    #[error("unexpected {got:?} frame (expected {expected})")]
    Unexpected {
        /// What came.
        got: Kind,
        /// What was expected.
        expected: &'static str,
    },
}

/// Encodes a header.
pub fn encode_header(kind: Kind, flags: u8, secret: u64, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[6] = kind as u8;
    h[7] = flags;
    h[8..16].copy_from_slice(&secret.to_le_bytes());
    h[16..20].copy_from_slice(&len.to_le_bytes());
    h
}

/// Decodes and validates a header: magic, version, secret, kind, flags and length (against
/// `max_len`), in that order, so that a stray peer is named as such before anything else.
pub fn decode_header(
    b: &[u8; HEADER_LEN],
    secret: u64,
    max_len: u32,
) -> Result<Header, FrameError> {
    let le32 = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let magic = le32(0);
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != VERSION {
        return Err(FrameError::Version {
            theirs: version,
            ours: VERSION,
        });
    }
    let their_secret = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    if their_secret != secret {
        return Err(FrameError::BadSecret);
    }
    let kind = Kind::from_u8(b[6]).ok_or(FrameError::UnknownKind(b[6]))?;
    let flags = b[7];
    if flags & !FLAG_MORE != 0 {
        return Err(FrameError::Malformed("undefined flag bits set"));
    }
    if le32(20) != 0 {
        return Err(FrameError::Malformed("reserved field is not zero"));
    }
    let len = le32(16);
    if len > max_len {
        return Err(FrameError::TooLarge { len, max: max_len });
    }
    Ok(Header {
        kind,
        flags,
        secret: their_secret,
        len,
    })
}

/// A little-endian payload writer.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// Appends a u8.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends length-prefixed bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }
    /// Appends a length-prefixed UTF-8 string.
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
}

/// A bounds-checked little-endian payload reader.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// Reads `buf`, naming errors after `what`.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::BadPayload {
                what: self.what,
                reason: "truncated",
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    /// Reads a u8.
    pub fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    /// Reads a u32.
    pub fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    /// Reads a u64.
    pub fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Reads length-prefixed bytes (the length is checked against what is left).
    pub fn bytes(&mut self) -> Result<&'a [u8], FrameError> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| FrameError::BadPayload {
            what: self.what,
            reason: "length overflow",
        })?;
        self.take(n)
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, FrameError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| FrameError::BadPayload {
            what: self.what,
            reason: "invalid UTF-8",
        })
    }
    /// The unread rest.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    /// Fails unless everything was read.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::BadPayload {
                what: self.what,
                reason: "trailing bytes",
            })
        }
    }
}

/// What a rank tells rank 0 when it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The rank.
    pub rank: u32,
    /// The world size it was given.
    pub world_size: u32,
    /// Its host identity.
    pub host_id: String,
    /// Its host name (for messages).
    pub hostname: String,
    /// Its process id.
    pub pid: u32,
}

impl Hello {
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(self.rank)
            .u32(self.world_size)
            .str(&self.host_id)
            .str(&self.hostname)
            .u32(self.pid);
        w.0
    }
    /// Decodes.
    pub fn decode(b: &[u8]) -> Result<Self, FrameError> {
        let mut r = Reader::new(b, "hello");
        let h = Self {
            rank: r.u32()?,
            world_size: r.u32()?,
            host_id: r.str()?.to_string(),
            hostname: r.str()?.to_string(),
            pid: r.u32()?,
        };
        r.finish()?;
        Ok(h)
    }
}

/// Reasons rank 0 gives when it rejects a rank or aborts the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RejectCode {
    /// Wrong job secret.
    BadSecret = 1,
    /// Protocol version differs.
    Version = 2,
    /// The rank is already taken.
    DuplicateRank = 3,
    /// World sizes differ.
    WorldSize = 4,
    /// Rank out of range.
    RankRange = 5,
    /// The join failed for the whole job (text says why; payload lists missing ranks).
    JoinFailed = 6,
}

impl RejectCode {
    /// Decodes.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::BadSecret,
            2 => Self::Version,
            3 => Self::DuplicateRank,
            4 => Self::WorldSize,
            5 => Self::RankRange,
            6 => Self::JoinFailed,
            _ => return None,
        })
    }
}

/// Collective operation codes carried by `Contrib`/`Result` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CollOp {
    /// Allgather of variable-size blocks.
    Allgather = 1,
    /// Personalised all-to-all of variable-size blocks.
    Alltoall = 2,
    /// Broadcast from a root.
    Broadcast = 3,
    /// Barrier.
    Barrier = 4,
}

impl CollOp {
    /// Decodes.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Allgather,
            2 => Self::Alltoall,
            3 => Self::Broadcast,
            4 => Self::Barrier,
            _ => return None,
        })
    }
}

/// The prefix of every `Contrib` and `Result` payload: which collective, which step, which root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollTag {
    /// The collective.
    pub op: CollOp,
    /// Its sequence number (the n-th collective of the job).
    pub seq: u64,
    /// The root argument (broadcast), else 0.
    pub root: u32,
}

impl CollTag {
    /// Encoded size.
    pub const LEN: usize = 13;

    /// Encodes into a writer.
    pub fn write(&self, w: &mut Writer) {
        w.u8(self.op as u8).u64(self.seq).u32(self.root);
    }

    /// Decodes from a reader.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, FrameError> {
        let op = r.u8()?;
        let op = CollOp::from_u8(op).ok_or(FrameError::BadPayload {
            what: "collective",
            reason: "unknown operation",
        })?;
        Ok(Self {
            op,
            seq: r.u64()?,
            root: r.u32()?,
        })
    }
}

impl std::fmt::Display for CollTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op {
            CollOp::Broadcast => write!(f, "broadcast(root={}) #{}", self.root, self.seq),
            op => write!(f, "{op:?} #{}", self.seq).map(|_| ()),
        }
    }
}

/// Encodes a list of byte blocks (count, then length-prefixed blocks).
pub fn encode_blocks<B: AsRef<[u8]>>(w: &mut Writer, blocks: &[B]) {
    w.u32(blocks.len() as u32);
    for b in blocks {
        w.bytes(b.as_ref());
    }
}

/// Decodes a list of byte blocks, expecting exactly `n`.
pub fn decode_blocks(r: &mut Reader<'_>, n: usize) -> Result<Vec<Vec<u8>>, FrameError> {
    let count = r.u32()? as usize;
    if count != n {
        return Err(FrameError::BadPayload {
            what: "collective",
            reason: "wrong block count",
        });
    }
    (0..count).map(|_| r.bytes().map(<[u8]>::to_vec)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_round_trip() {
        let h = encode_header(Kind::Contrib, FLAG_MORE, 0xdead_beef, 77);
        let d = decode_header(&h, 0xdead_beef, MAX_FRAME).unwrap();
        assert_eq!(
            d,
            Header {
                kind: Kind::Contrib,
                flags: FLAG_MORE,
                secret: 0xdead_beef,
                len: 77
            }
        );
    }

    #[test]
    fn header_rejections_are_specific() {
        let good = encode_header(Kind::Hello, 0, 7, 10);
        assert_eq!(
            decode_header(&good, 8, MAX_FRAME),
            Err(FrameError::BadSecret)
        );
        assert_eq!(
            decode_header(&good, 7, 9),
            Err(FrameError::TooLarge { len: 10, max: 9 })
        );
        let mut b = good;
        b[0] = b'X';
        assert!(matches!(
            decode_header(&b, 7, MAX_FRAME),
            Err(FrameError::BadMagic(_))
        ));
        let mut b = good;
        b[4] = 9;
        assert_eq!(
            decode_header(&b, 7, MAX_FRAME),
            Err(FrameError::Version {
                theirs: 9,
                ours: VERSION
            })
        );
        let mut b = good;
        b[6] = 200;
        assert_eq!(
            decode_header(&b, 7, MAX_FRAME),
            Err(FrameError::UnknownKind(200))
        );
        let mut b = good;
        b[7] = 0x80;
        assert!(matches!(
            decode_header(&b, 7, MAX_FRAME),
            Err(FrameError::Malformed(_))
        ));
        let mut b = good;
        b[21] = 1;
        assert!(matches!(
            decode_header(&b, 7, MAX_FRAME),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn hello_round_trip_and_truncation() {
        let h = Hello {
            rank: 3,
            world_size: 8,
            host_id: "h:1".into(),
            hostname: "h".into(),
            pid: 42,
        };
        let b = h.encode();
        assert_eq!(Hello::decode(&b).unwrap(), h);
        for cut in 0..b.len() {
            assert!(
                Hello::decode(&b[..cut]).is_err(),
                "truncated at {cut} decoded"
            );
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(Hello::decode(&longer).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Any 24 bytes either decode to a header that re-encodes to the same bytes, or are
        /// rejected; decoding never panics and never accepts a length above the limit.
        #[test]
        fn arbitrary_headers(bytes in proptest::array::uniform24(any::<u8>()), secret: u64, max in 0u32..=MAX_FRAME) {
            if let Ok(h) = decode_header(&bytes, secret, max) {
                prop_assert!(h.len <= max);
                prop_assert_eq!(encode_header(h.kind, h.flags, h.secret, h.len), bytes);
            }
        }

        /// Mutating one byte of a valid header is either caught or yields a consistent header.
        #[test]
        fn mutated_headers(kind in 1u8..=8, len in 0u32..=MAX_FRAME, secret: u64, pos in 0usize..HEADER_LEN, val: u8) {
            let kind = Kind::from_u8(kind).unwrap();
            let mut b = encode_header(kind, 0, secret, len);
            b[pos] = val;
            if let Ok(h) = decode_header(&b, secret, MAX_FRAME) {
                prop_assert_eq!(encode_header(h.kind, h.flags, h.secret, h.len), b);
            }
        }

        /// Payload decoders never panic on arbitrary bytes, and never read past the buffer.
        #[test]
        fn arbitrary_payloads(bytes in proptest::collection::vec(any::<u8>(), 0..256), n in 0usize..5) {
            let _ = Hello::decode(&bytes);
            let mut r = Reader::new(&bytes, "fuzz");
            if CollTag::read(&mut r).is_ok() {
                let _ = decode_blocks(&mut r, n);
            }
        }

        /// Blocks round-trip.
        #[test]
        fn blocks_round_trip(blocks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let mut w = Writer::default();
            encode_blocks(&mut w, &blocks);
            let mut r = Reader::new(&w.0, "blocks");
            prop_assert_eq!(decode_blocks(&mut r, blocks.len()).unwrap(), blocks);
            prop_assert!(r.finish().is_ok());
        }
    }
}
