//! Unit tests of the engine.

use super::ctx::{Ctx, PartRef};
use crate::slab::GenSlab;

/// A part's slab slot reused 2^28 times gets a generation with bit 28 set. The send of a
/// request (an AMO, a signal, a staged get) carries that part in its context; its completion
/// must still be read as a request's send, never as the completion of a staged write (whose
/// chunk it would free a second time: on the old layout, generation bit 28 was context bit 60,
/// the staged path's tag).
#[test]
fn reused_slab_slot_is_never_read_as_staged_write() {
    let mut parts = GenSlab::new();
    let mut key = parts.insert(());
    for _ in 0..1u64 << 28 {
        parts.remove(key);
        key = parts.insert(());
    }
    assert_eq!(key.generation(), 1 << 28);
    let send = Ctx::Request(PartRef::Tracked(key));
    assert_eq!(
        Ctx::decode(send.encode()),
        Some(send),
        "the send of request {key:?} is read as something else"
    );
    let part = Ctx::Part(PartRef::Tracked(key));
    assert_eq!(Ctx::decode(part.encode()), Some(part));
}
