//! Every kind of context word round-trips at the extremes of its fields, and the remote CQ
//! data layouts fit their widths.

use super::*;

fn keys() -> Vec<SlabKey> {
    let mut v = Vec::new();
    for index in [0, 1, u32::MAX] {
        for generation in [0, 1, 1 << 27, 1 << 28, SlabKey::MAX_GENERATION] {
            v.push(SlabKey::new(index, generation));
        }
    }
    v
}

fn fasts() -> Vec<FastOp> {
    let mut v = Vec::new();
    for ring in [0, 1, MAX_RINGS - 1].map(RingId::new) {
        for pe in [0, 1, MAX_PES - 1].map(Pe::from_idx) {
            for seq in [0, 1, u64::from(u32::MAX), u64::MAX] {
                v.push(FastOp::new(ring, pe, seq));
            }
        }
    }
    v
}

fn every_ctx() -> Vec<Ctx> {
    let parts: Vec<PartRef> = keys()
        .into_iter()
        .map(PartRef::Tracked)
        .chain(fasts().into_iter().map(PartRef::Fast))
        .collect();
    let mut v: Vec<Ctx> = parts.iter().map(|&p| Ctx::Part(p)).collect();
    v.extend(parts.iter().map(|&p| Ctx::Request(p)));
    for pe in [0, 1, MAX_PES as u32 - 1, u32::MAX].map(Pe::new) {
        v.push(Ctx::Ack { pe });
    }
    for pe in [0, 1, MAX_PES - 1].map(Pe::from_idx) {
        for chunk in [0, 1, u32::MAX] {
            for era in [0, 1, super::STAGED_GENERATIONS - 1] {
                v.push(Ctx::Staged { pe, chunk, era });
            }
        }
    }
    for bits in [0, 1, (1 << PAYLOAD_BITS) - 1] {
        v.push(Ctx::Job(bits));
    }
    v
}

#[test]
fn every_kind_round_trips_at_the_extremes() {
    let all = every_ctx();
    for &c in &all {
        let w = c.encode();
        assert_eq!(Ctx::decode(w), Some(c), "{c:?} as {w:#x}");
        assert_eq!(
            fast_part(w),
            matches!(c, Ctx::Part(PartRef::Fast(_))).then(|| {
                let Ctx::Part(PartRef::Fast(f)) = c else {
                    unreachable!()
                };
                f
            })
        );
        assert_eq!(job(w), if let Ctx::Job(b) = c { Some(b) } else { None });
    }
    // Distinct contexts give distinct words (no two kinds or fields share a word).
    let distinct: std::collections::HashSet<Ctx> = all.iter().copied().collect();
    let words: std::collections::HashSet<u64> = distinct.iter().map(|c| c.encode()).collect();
    assert_eq!(words.len(), distinct.len());
}

#[test]
fn fast_ops_keep_the_low_sequence_bits() {
    let f = FastOp::new(RingId::new(3), Pe::new(7), 0x1234_5678_9abc_def0);
    assert_eq!(f.seq_low, 0x9abc_def0);
}

#[test]
fn zero_and_foreign_words_do_not_decode() {
    assert_eq!(Ctx::decode(0), None);
    assert_eq!(Ctx::decode(0x1234), None);
    assert_eq!(fast_part(0), None);
    assert_eq!(job(0), None);
}

#[test]
fn generations_wrap_within_their_field() {
    assert_eq!(SlabKey::next_generation(SlabKey::MAX_GENERATION), 0);
    assert_eq!(SlabKey::next_generation(5), 6);
}

#[test]
fn remote_data_round_trips() {
    for w in [ImmWidth::Four, ImmWidth::Eight] {
        // The widest tag field has 32 bits: its largest tag is u32::MAX.
        let (pes, top) = (w.max_pes(), ((1u64 << w.tag_bits()) - 1) as u32);
        for src in [0, 1, pes - 1].map(Pe::from_idx) {
            for tag in [0, 1, top] {
                let d = TagData { src, tag };
                let word = d.encode(w);
                assert_eq!(TagData::decode(word, w), d);
                if w == ImmWidth::Four {
                    assert!(word <= u64::from(u32::MAX), "{d:?} fits 32 bits");
                }
            }
        }
    }
    assert_eq!(ImmWidth::Four.max_pes(), 16384);
    assert_eq!(ImmWidth::Eight.max_pes(), MAX_PES);
    assert_eq!(ImmWidth::of(0), None);
    assert_eq!(ImmWidth::of(4), Some(ImmWidth::Four));
    assert_eq!(ImmWidth::of(8), Some(ImmWidth::Eight));
    for slot in [0, 1, u32::MAX] {
        for group in [0, 1, MAX_PES - 1].map(Pe::from_idx) {
            let d = LandingData { group, slot };
            assert_eq!(LandingData::decode(d.encode()), d);
        }
    }
    for (tag, seq) in [(0, 0), (1, 1), (u32::MAX, u32::MAX), (5, 0)] {
        let s = SignalTag { tag, seq };
        assert_eq!(SignalTag::decode(s.encode()), s);
    }
}
