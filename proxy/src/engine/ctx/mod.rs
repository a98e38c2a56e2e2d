//! Every bit of the words the proxy packs: the **context** it gives the transport with each post
//! (and gets back with the completion), the **ids** its requests carry to a peer and back in the
//! acks, and the **remote CQ data** its writes carry to the target. No other file shifts or
//! masks these words; they are built and read through the types below.
//!
//! A context word: `kind` in the top [`KIND_BITS`] bits, a payload below, laid out per kind:
//!
//! | kind | payload (bit ranges) | what completes |
//! | --- | --- | --- |
//! | `Part(Tracked)` | slab key: index 0..32, generation 32..61 | a write or read of a part in the part slab |
//! | `Part(Fast)` | sequence (low 32 bits) 0..32, PE 32..52, ring 52..61 | the one part of a single-part operation |
//! | `Request(Tracked)`, `Request(Fast)` | as the part it belongs to | the send of a request (its ack finishes the part) |
//! | `Ack` | destination PE 0..32 | the send of a batch of acks |
//! | `Staged` | staging chunk 0..32, target PE 32..52, chunk generation 52..61 | a staged write (frees its chunk) |
//! | `Job` | the job's own bits, 0..61 | an exclusive job's write |
//!
//! PEs and ring indices travel as [`Pe`] and [`RingId`] everywhere else; here alone they are
//! narrowed into their fields (`Field::put_pe`, `Field::get_pe`), each narrowing bounded by the
//! field's width, which the engine checks the job against at start.
//!
//! Kind 0 is no kind at all, so a zeroed word never decodes. The widths are named, their
//! disjointness is checked at compile time, and `tests` round-trips every kind at the extreme
//! values of every field (the slab generation among them: its top bit once collided with a
//! staged write's tag, when bits were claimed in several files).

use pshmem_transport::Pe;

/// Bits of the kind field, at the top of a context word.
const KIND_BITS: u32 = 3;
/// Bits of a context word below its kind.
pub(crate) const PAYLOAD_BITS: u32 = 64 - KIND_BITS;

const KIND_PART: u64 = 1;
const KIND_FAST: u64 = 2;
const KIND_REQUEST_PART: u64 = 3;
const KIND_REQUEST_FAST: u64 = 4;
const KIND_ACK: u64 = 5;
const KIND_STAGED: u64 = 6;
const KIND_JOB: u64 = 7;
const _: () = assert!(KIND_JOB < 1 << KIND_BITS, "every kind fits the kind field");

/// One field of a packed word: `bits` wide, starting at bit `shift`.
#[derive(Clone, Copy)]
struct Field {
    shift: u32,
    bits: u32,
}

impl Field {
    #[inline]
    const fn mask(self) -> u64 {
        if self.bits == 64 {
            u64::MAX
        } else {
            (1 << self.bits) - 1
        }
    }
    #[inline]
    const fn end(self) -> u32 {
        self.shift + self.bits
    }
    #[inline]
    const fn get(self, word: u64) -> u64 {
        (word >> self.shift) & self.mask()
    }
    /// `value` placed in the field (callers keep it within the width: checked in debug builds).
    #[inline]
    fn put(self, value: u64) -> u64 {
        debug_assert!(
            value <= self.mask(),
            "{value:#x} exceeds a {}-bit field",
            self.bits
        );
        (value & self.mask()) << self.shift
    }
    /// A PE placed in the field (callers keep it within the width: the engine refuses jobs of
    /// more PEs than its fields name).
    #[inline]
    fn put_pe(self, pe: Pe) -> u64 {
        self.put(pe.get().into())
    }
    /// The PE in the field.
    #[inline]
    const fn get_pe(self, word: u64) -> Pe {
        // The field is at most 32 bits wide (checked below), so nothing is lost.
        Pe::new(self.get(word) as u32)
    }
    /// The fields are disjoint (one ends at or before the other starts).
    const fn before(self, next: Field) -> bool {
        self.end() <= next.shift
    }
}

const KIND: Field = Field {
    shift: PAYLOAD_BITS,
    bits: KIND_BITS,
};
const KEY_INDEX: Field = Field { shift: 0, bits: 32 };
const KEY_GENERATION: Field = Field {
    shift: 32,
    bits: 29,
};
const FAST_SEQ: Field = Field { shift: 0, bits: 32 };
const FAST_PE: Field = Field {
    shift: 32,
    bits: 20,
};
const FAST_RING: Field = Field { shift: 52, bits: 9 };
const ACK_PE: Field = Field { shift: 0, bits: 32 };
const STAGED_CHUNK: Field = Field { shift: 0, bits: 32 };
const STAGED_PE: Field = Field {
    shift: 32,
    bits: 20,
};
const STAGED_GEN: Field = Field { shift: 52, bits: 9 };
/// Generations of a staging chunk that a staged write's context tells apart (a completion of
/// an older use of the chunk is a duplicate).
pub(crate) const STAGED_GENERATIONS: u16 = 1 << STAGED_GEN.bits;
const JOB: Field = Field {
    shift: 0,
    bits: PAYLOAD_BITS,
};

const _: () = {
    assert!(KIND.end() == 64);
    assert!(KEY_INDEX.before(KEY_GENERATION) && KEY_GENERATION.end() <= PAYLOAD_BITS);
    assert!(FAST_SEQ.before(FAST_PE) && FAST_PE.before(FAST_RING));
    assert!(FAST_RING.end() <= PAYLOAD_BITS);
    assert!(ACK_PE.end() <= PAYLOAD_BITS);
    assert!(STAGED_CHUNK.before(STAGED_PE) && STAGED_PE.before(STAGED_GEN));
    assert!(STAGED_GEN.end() <= PAYLOAD_BITS);
    assert!(JOB.end() == PAYLOAD_BITS);
    // A fast part names any PE a staged write or an ack can name, and the reverse.
    assert!(FAST_PE.bits == STAGED_PE.bits && ACK_PE.bits >= FAST_PE.bits);
    // A PE field never needs more than the 32 bits of a PE number.
    assert!(FAST_PE.bits <= 32 && ACK_PE.bits <= 32 && STAGED_PE.bits <= 32);
};

/// Most rings one proxy thread can drain (a fast part names its ring).
pub(crate) const MAX_RINGS: usize = 1 << FAST_RING.bits;

/// A ring of one proxy thread: its index among the thread's rings (below [`MAX_RINGS`]). A
/// type of its own, so that it is never swapped with the PE it travels beside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RingId(u16);

impl RingId {
    /// Ring `i` of the thread (below [`MAX_RINGS`], which the engine checks at start).
    #[inline]
    pub(crate) fn new(i: usize) -> Self {
        debug_assert!(i < MAX_RINGS);
        Self(i as u16)
    }
    /// As an index of the thread's rings.
    #[inline]
    pub(crate) const fn idx(self) -> usize {
        self.0 as usize
    }
    /// The number, as the trace records it.
    #[inline]
    pub(crate) const fn get(self) -> u16 {
        self.0
    }
}
/// Most PEs a job can have (a fast part and a staged write name their PE).
pub(crate) const MAX_PES: usize = 1 << FAST_PE.bits;

/// The key of a slab entry: its index and the generation of that slot, so that a late
/// completion for a freed entry never reaches the entry that reused its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SlabKey {
    index: u32,
    generation: u32,
}

impl SlabKey {
    /// The largest generation; the next one after it is 0.
    pub(crate) const MAX_GENERATION: u32 = KEY_GENERATION.mask() as u32;

    /// The key of slot `index` at `generation` (at most [`SlabKey::MAX_GENERATION`]).
    #[inline]
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        debug_assert!(generation <= Self::MAX_GENERATION);
        Self {
            index,
            generation: generation & Self::MAX_GENERATION,
        }
    }

    /// The generation that follows `g`, wrapping within the field.
    #[inline]
    pub(crate) fn next_generation(g: u32) -> u32 {
        g.wrapping_add(1) & Self::MAX_GENERATION
    }

    /// The slot.
    pub(crate) fn index(self) -> u32 {
        self.index
    }

    /// The slot's generation.
    pub(crate) fn generation(self) -> u32 {
        self.generation
    }

    #[inline]
    fn pack(self) -> u64 {
        KEY_INDEX.put(self.index.into()) | KEY_GENERATION.put(self.generation.into())
    }

    #[inline]
    fn unpack(payload: u64) -> Self {
        Self {
            index: KEY_INDEX.get(payload) as u32,
            generation: KEY_GENERATION.get(payload) as u32,
        }
    }
}

/// A single-part operation without a result: it needs no bookkeeping entry, because its
/// context names where it came from (its ring, its target PE, the low bits of its sequence
/// number in that ring's completion tracker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FastOp {
    /// The ring it was drained from.
    pub ring: RingId,
    /// Its target PE.
    pub pe: Pe,
    /// The low 32 bits of its sequence number.
    pub seq_low: u32,
}

impl FastOp {
    /// The fast operation `seq` of `ring` to `pe` (ring and PE within [`MAX_RINGS`] and
    /// [`MAX_PES`], which the engine checks at start).
    #[inline]
    pub(crate) fn new(ring: RingId, pe: Pe, seq: u64) -> Self {
        Self {
            ring,
            pe,
            seq_low: seq as u32,
        }
    }

    #[inline]
    fn pack(self) -> u64 {
        FAST_SEQ.put(self.seq_low.into())
            | FAST_PE.put_pe(self.pe)
            | FAST_RING.put(self.ring.0.into())
    }

    #[inline(always)]
    fn unpack(payload: u64) -> Self {
        Self {
            ring: RingId(FAST_RING.get(payload) as u16),
            pe: FAST_PE.get_pe(payload),
            seq_low: FAST_SEQ.get(payload) as u32,
        }
    }
}

/// One transport operation of an operation: tracked in the part slab, or a fast operation's
/// only part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PartRef {
    /// An entry of the part slab.
    Tracked(SlabKey),
    /// The one part of a fast operation.
    Fast(FastOp),
}

/// What a transport context (or a request id) stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ctx {
    /// A write or read of a part: its completion completes the part. Also the id a request
    /// carries, which the peer's ack (or a staged write's header) returns.
    Part(PartRef),
    /// The send of a request for a part: nothing to do when it completes (the ack does).
    Request(PartRef),
    /// The send of acks to `pe`.
    Ack {
        /// The destination.
        pe: Pe,
    },
    /// A staged write to `pe` from staging chunk `chunk`, which its completion frees.
    Staged {
        /// The target PE.
        pe: Pe,
        /// The staging chunk.
        chunk: u32,
        /// The chunk's use (below [`STAGED_GENERATIONS`]): a completion of an older one is
        /// a duplicate.
        era: u16,
    },
    /// An exclusive job's write, with the job's own context (below 2^[`PAYLOAD_BITS`]).
    Job(u64),
}

impl Ctx {
    /// The word given to the transport.
    #[inline]
    pub(crate) fn encode(self) -> u64 {
        let (kind, payload) = match self {
            Ctx::Part(PartRef::Tracked(k)) => (KIND_PART, k.pack()),
            Ctx::Part(PartRef::Fast(f)) => (KIND_FAST, f.pack()),
            Ctx::Request(PartRef::Tracked(k)) => (KIND_REQUEST_PART, k.pack()),
            Ctx::Request(PartRef::Fast(f)) => (KIND_REQUEST_FAST, f.pack()),
            Ctx::Ack { pe } => (KIND_ACK, ACK_PE.put_pe(pe)),
            Ctx::Staged { pe, chunk, era } => (
                KIND_STAGED,
                STAGED_CHUNK.put(chunk.into()) | STAGED_PE.put_pe(pe) | STAGED_GEN.put(era.into()),
            ),
            Ctx::Job(bits) => (KIND_JOB, JOB.put(bits)),
        };
        KIND.put(kind) | payload
    }

    /// What a word stands for; `None` for a word no context of this module produces.
    #[inline]
    pub(crate) fn decode(word: u64) -> Option<Self> {
        let p = word & JOB.mask();
        Some(match KIND.get(word) {
            KIND_PART => Ctx::Part(PartRef::Tracked(SlabKey::unpack(p))),
            KIND_FAST => Ctx::Part(PartRef::Fast(FastOp::unpack(p))),
            KIND_REQUEST_PART => Ctx::Request(PartRef::Tracked(SlabKey::unpack(p))),
            KIND_REQUEST_FAST => Ctx::Request(PartRef::Fast(FastOp::unpack(p))),
            KIND_ACK => Ctx::Ack {
                pe: ACK_PE.get_pe(p),
            },
            KIND_STAGED => Ctx::Staged {
                pe: STAGED_PE.get_pe(p),
                chunk: STAGED_CHUNK.get(p) as u32,
                era: STAGED_GEN.get(p) as u16,
            },
            KIND_JOB => Ctx::Job(JOB.get(p)),
            _ => return None,
        })
    }

    /// The PE this context concerns, where it names one without the slab (a tracked part's PE
    /// is in its slab entry).
    pub(crate) fn pe(self) -> Option<Pe> {
        match self {
            Ctx::Part(PartRef::Fast(f)) | Ctx::Request(PartRef::Fast(f)) => Some(f.pe),
            Ctx::Ack { pe } | Ctx::Staged { pe, .. } => Some(pe),
            Ctx::Part(PartRef::Tracked(_)) | Ctx::Request(PartRef::Tracked(_)) | Ctx::Job(_) => {
                None
            }
        }
    }
}

/// The completion of a fast part, decoded without going through [`Ctx::decode`] (the hottest
/// event of the proxy: checked inside the transport's poll callback).
#[inline(always)]
pub(crate) fn fast_part(word: u64) -> Option<FastOp> {
    if KIND.get(word) == KIND_FAST {
        Some(FastOp::unpack(word))
    } else {
        None
    }
}

/// A job's context, if `word` is one.
#[inline]
pub(crate) fn job(word: u64) -> Option<u64> {
    (KIND.get(word) == KIND_JOB).then(|| JOB.get(word))
}

// ---- remote CQ data ---------------------------------------------------------------------------

/// How much remote CQ data a transport's writes carry: the layout of a tagged write's word.
///
/// | width | source PE | tag |
/// | --- | --- | --- |
/// | 8 bytes (verbs, tcp, the default simulated fabric) | bits 32..52 | bits 0..32 |
/// | 4 bytes (EFA, the simulated `efa` profile) | bits 18..32 | bits 0..18 |
///
/// The tag names a counter at the target (the writes a signal waits for). It is assigned by
/// the initiator from a per-target pool and recycled when the signal's ack comes back, so it
/// only has to tell apart the rounds in flight between one pair of PEs (2^18 on EFA), not
/// name a heap word; the count the target waits for, and the signal's sequence number, travel
/// in the signal's request, never in the immediate. A job of more PEs than the source field
/// holds (16384 on EFA) is refused at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImmWidth {
    /// 32-bit immediate data (EFA).
    Four,
    /// 64-bit remote CQ data.
    Eight,
}

const TAG8_ID: Field = Field { shift: 0, bits: 32 };
const TAG8_SRC: Field = Field {
    shift: 32,
    bits: FAST_PE.bits,
};
const TAG4_ID: Field = Field { shift: 0, bits: 18 };
const TAG4_SRC: Field = Field {
    shift: 18,
    bits: 14,
};
const LANDING_SLOT: Field = Field { shift: 0, bits: 32 };
const LANDING_GROUP: Field = Field {
    shift: 32,
    bits: FAST_PE.bits,
};
/// A request's `tag` word: the tag of the writes it waits for, and (tagged mode) its sequence
/// number among the sequenced requests from its PE (0: applied in any order).
const SIGNAL_TAG: Field = Field { shift: 0, bits: 32 };
const SIGNAL_SEQ: Field = Field {
    shift: 32,
    bits: 32,
};
const _: () = {
    assert!(TAG8_ID.before(TAG8_SRC) && TAG8_SRC.end() <= 64);
    assert!(TAG4_ID.before(TAG4_SRC) && TAG4_SRC.end() == 32);
    assert!(TAG8_ID.bits >= TAG4_ID.bits && TAG8_ID.bits <= SIGNAL_TAG.bits);
    assert!(LANDING_SLOT.before(LANDING_GROUP) && LANDING_GROUP.end() <= 64);
    assert!(SIGNAL_TAG.before(SIGNAL_SEQ) && SIGNAL_SEQ.end() == 64);
};

impl ImmWidth {
    /// The width of a transport offering `bytes` of remote CQ data; `None` below 4.
    pub(crate) fn of(bytes: usize) -> Option<Self> {
        match bytes {
            0..4 => None,
            4..8 => Some(Self::Four),
            _ => Some(Self::Eight),
        }
    }

    fn fields(self) -> (Field, Field) {
        match self {
            Self::Four => (TAG4_SRC, TAG4_ID),
            Self::Eight => (TAG8_SRC, TAG8_ID),
        }
    }

    /// Bits of a tag.
    pub(crate) fn tag_bits(self) -> u32 {
        self.fields().1.bits
    }

    /// Most PEs whose writes a target can tell apart.
    pub(crate) fn max_pes(self) -> usize {
        1 << self.fields().0.bits
    }
}

/// The remote CQ data of a tagged write: the initiator and its tag (the target counts these
/// writes per (source, tag) before it applies the signal waiting for them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TagData {
    /// The initiating PE (below [`ImmWidth::max_pes`]).
    pub src: Pe,
    /// The tag (below 2^[`ImmWidth::tag_bits`]).
    pub tag: u32,
}

impl TagData {
    pub(crate) fn encode(self, w: ImmWidth) -> u64 {
        let (src, id) = w.fields();
        src.put_pe(self.src) | id.put(self.tag.into())
    }

    pub(crate) fn decode(data: u64, w: ImmWidth) -> Self {
        let (src, id) = w.fields();
        Self {
            src: src.get_pe(data),
            tag: id.get(data) as u32,
        }
    }
}

/// A request's `tag` word: the writes it waits for (a signal or fence mark) and its place in
/// its source's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SignalTag {
    /// The tag of the writes it waits for.
    pub tag: u32,
    /// Its sequence number among the sequenced requests (tagged mode: signals, AMOs, fence
    /// marks, stores after a fence) from its PE's proxy thread to this one, from 1; 0 for a
    /// request applied as soon as it (and its writes) arrived.
    pub seq: u32,
}

impl SignalTag {
    pub(crate) fn encode(self) -> u64 {
        SIGNAL_TAG.put(self.tag.into()) | SIGNAL_SEQ.put(self.seq.into())
    }

    pub(crate) fn decode(word: u64) -> Self {
        Self {
            tag: SIGNAL_TAG.get(word) as u32,
            seq: SIGNAL_SEQ.get(word) as u32,
        }
    }
}

/// The remote CQ data of a host-staged write: which landing slot it filled (group = the
/// initiator of the transfer, whose slots those are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LandingData {
    /// The slot group (an initiating PE).
    pub group: Pe,
    /// The slot within the group.
    pub slot: u32,
}

impl LandingData {
    pub(crate) fn encode(self) -> u64 {
        LANDING_GROUP.put_pe(self.group) | LANDING_SLOT.put(self.slot.into())
    }

    pub(crate) fn decode(data: u64) -> Self {
        Self {
            group: LANDING_GROUP.get_pe(data),
            slot: LANDING_SLOT.get(data) as u32,
        }
    }
}

#[cfg(test)]
mod tests;
