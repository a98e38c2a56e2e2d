//! The initiator's side of tagged signals (the tagged signal mode): which tags are in use
//! toward a target, which counted round or strong epoch holds which tag, how many writes each
//! tag has carried, and which signal request will give its tag back; one [`PeerTags`] per
//! destination. And the target's side of strong signals ([`Order`]).
//!
//! A tag names, at the target, the counter of the writes one signal waits for. Tags are
//! assigned here per target PE and recycled when the signal's ack comes back: by then the
//! target has applied the signal and forgotten the tag (it forgets it when it applies the
//! signal, and acks after that). So the immediate only tells apart the rounds in flight between
//! two PEs, whatever the heap size — which is what lets the whole scheme fit EFA's 32-bit
//! immediate data (see [`super::ctx::ImmWidth`] for the bits).

use std::collections::{HashMap, HashSet};

use pshmem_transport::Pe;

use super::ctx::RingId;

/// A tag's use on the initiator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tag {
    /// The tag carried by the writes (below 2^[`super::ctx::ImmWidth::tag_bits`]).
    pub id: u32,
    /// Shared by several operations (a counted round, or a strong epoch): the writes are
    /// counted per tag rather than per operation.
    pub shared: bool,
}

/// What a shared tag gathers: the counted puts to one signal word, or (strong signals) every
/// write from one ring to one PE since that ring's last signal to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Round {
    /// Counted puts to the signal word at this heap offset.
    Counted(u64),
    /// Everything since the last strong signal.
    Epoch,
}

/// The tags toward one target PE (an initiator's [`super::peer::Peer`] holds them).
#[derive(Debug)]
pub(crate) struct PeerTags {
    /// Tags per target (2^bits).
    per_pe: u64,
    /// The next tag to try.
    next: u32,
    /// Tags in use.
    live: HashSet<u32>,
    /// The open shared tag of each (ring, round).
    open: HashMap<(RingId, Round), u32>,
    /// Writes posted per shared tag so far: what its signal tells the target to wait for.
    writes: HashMap<u32, u32>,
    /// Tagged signal requests in flight by request id: the tag their ack gives back (acks come
    /// from the target the requests went to).
    signals: HashMap<u64, u32>,
    /// Strong signals sent (their sequence numbers, from 1).
    strong_seq: u32,
}

impl PeerTags {
    /// Tags of `bits` bits.
    pub(crate) fn new(bits: u32) -> Self {
        Self {
            per_pe: 1u64 << bits,
            next: 0,
            live: HashSet::new(),
            open: HashMap::new(),
            writes: HashMap::new(),
            signals: HashMap::new(),
            strong_seq: 0,
        }
    }

    /// Tags toward this target.
    pub(crate) fn capacity(&self) -> u64 {
        self.per_pe
    }

    /// A free tag; `None` when every tag is in use.
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        if self.live.len() >= self.per_pe as usize {
            return None;
        }
        // Bounded: at least one of the `per_pe` values is free.
        loop {
            let t = self.next;
            // Below `per_pe` (at most 2^32), so the sum cannot overflow in u64.
            self.next = ((u64::from(t) + 1) % self.per_pe) as u32;
            if self.live.insert(t) {
                return Some(t);
            }
        }
    }

    /// The open tag of `round` from ring `ring`, opened now if none is; `None` when no tag is
    /// free.
    pub(crate) fn shared(&mut self, ring: RingId, round: Round) -> Option<Tag> {
        let id = match self.open.get(&(ring, round)) {
            Some(&id) => id,
            None => {
                let id = self.alloc()?;
                self.open.insert((ring, round), id);
                id
            }
        };
        Some(Tag { id, shared: true })
    }

    /// Closes `round` from ring `ring` (its signal is being accepted): the tag its signal waits
    /// on, `None` if nothing was put in it (the signal waits for nothing).
    pub(crate) fn close(&mut self, ring: RingId, round: Round) -> Option<Tag> {
        self.open
            .remove(&(ring, round))
            .map(|id| Tag { id, shared: true })
    }

    /// A write carrying shared tag `id` was posted.
    pub(crate) fn wrote(&mut self, id: u32) {
        *self.writes.entry(id).or_default() += 1;
    }

    /// The writes posted with shared tag `id` (its signal is being issued).
    pub(crate) fn written(&self, id: u32) -> u32 {
        self.writes.get(&id).copied().unwrap_or(0)
    }

    /// The signal waiting on tag `id` was sent with request id `request`: its ack gives the tag
    /// back.
    pub(crate) fn sent(&mut self, id: u32, request: u64) {
        self.writes.remove(&id);
        self.signals.insert(request, id);
    }

    /// An ack for request `id` came back: frees the tag its signal held, if it held one.
    #[inline]
    pub(crate) fn acked(&mut self, request: u64) {
        if self.signals.is_empty() {
            return;
        }
        if let Some(id) = self.signals.remove(&request) {
            self.live.remove(&id);
        }
    }

    /// The next strong signal's sequence number (1, 2, … wrapping past 0, which means
    /// "unordered"), taken by [`PeerTags::take_seq`] once its request went out.
    pub(crate) fn peek_seq(&self) -> u32 {
        self.strong_seq.wrapping_add(1).max(1)
    }

    /// The strong signal numbered [`PeerTags::peek_seq`] went out.
    pub(crate) fn take_seq(&mut self) {
        self.strong_seq = self.peek_seq();
    }

    /// Whether ring `ring` has a counted round open: writes whose signal comes later, which a
    /// fence's mark cannot wait for.
    pub(crate) fn counting_on(&self, ring: RingId) -> bool {
        self.open
            .keys()
            .any(|(r, round)| *r == ring && matches!(round, Round::Counted(_)))
    }

    /// Whether every tag in use is held by a round or epoch that ring `ring` has open: no
    /// signal in flight or queued will give one back, and that ring (whose later operations
    /// would close them) is the one waiting for a tag.
    pub(crate) fn all_open_on(&self, ring: RingId) -> bool {
        let open = self.open.keys().filter(|(r, _)| *r == ring).count();
        open >= self.live.len()
    }

    /// Tags in use (tests).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.live.len()
    }

    /// Shrinks the tag space to `bits` bits (tests: exhaustion without 2^18 signals).
    #[cfg(test)]
    pub(crate) fn shrink(&mut self, bits: u32) {
        self.per_pe = 1u64 << bits;
        self.next = 0;
    }
}

/// The target's side of strong signals: the next sequence number expected from each source,
/// and the signals that are ready (their writes landed) but wait for an earlier one.
#[derive(Debug)]
pub(crate) struct Order<T> {
    next: HashMap<Pe, u32>,
    held: HashMap<(Pe, u32), T>,
}

impl<T> Default for Order<T> {
    fn default() -> Self {
        Self {
            next: HashMap::new(),
            held: HashMap::new(),
        }
    }
}

impl<T> Order<T> {
    /// Signal `seq` from `src` is ready: returns the signals to apply now, in order (it and
    /// those held behind it), or nothing if an earlier one has not been applied yet.
    pub(crate) fn ready(&mut self, src: Pe, seq: u32, signal: T, out: &mut Vec<T>) {
        let next = self.next.entry(src).or_insert(1);
        if seq != *next {
            self.held.insert((src, seq), signal);
            return;
        }
        out.push(signal);
        let mut s = seq;
        loop {
            s = s.wrapping_add(1).max(1);
            match self.held.remove(&(src, s)) {
                Some(t) => out.push(t),
                None => break,
            }
        }
        *next = s;
    }

    /// Signals held for an earlier one.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_recycled_only_after_their_ack() {
        let (mut t, mut other) = (PeerTags::new(2), PeerTags::new(2));
        let a: Vec<u32> = (0..4).map(|_| t.alloc().expect("free")).collect();
        assert_eq!(a, [0, 1, 2, 3]);
        assert_eq!(t.alloc(), None, "all four in use");
        assert_eq!(other.alloc(), Some(0), "another PE's tags are separate");
        t.sent(2, 99);
        assert_eq!(t.alloc(), None, "sent but not acked");
        t.acked(98);
        assert_eq!(t.alloc(), None, "another request's ack frees nothing");
        t.acked(99);
        assert_eq!(t.alloc(), Some(2));
        assert_eq!(t.in_use(), 4);
    }

    #[test]
    fn rounds_share_a_tag_until_closed() {
        let mut t = PeerTags::new(4);
        let (r0, r1) = (RingId::new(0), RingId::new(1));
        let r = Round::Counted(64);
        let a = t.shared(r0, r).expect("free");
        assert_eq!(t.shared(r0, r), Some(a));
        assert_ne!(t.shared(r1, r), Some(a), "another ring's round");
        assert_ne!(t.shared(r0, Round::Epoch), Some(a));
        t.wrote(a.id);
        t.wrote(a.id);
        assert_eq!(t.close(r0, r), Some(a));
        assert_eq!(t.written(a.id), 2);
        assert_eq!(t.close(r0, r), None, "closed");
        let b = t.shared(r0, r).expect("free");
        assert_ne!(
            a, b,
            "the next round's tag differs while the first is in use"
        );
        t.sent(a.id, 7);
        assert_eq!(t.written(a.id), 0, "its count went with the signal");
    }

    #[test]
    fn strong_signals_apply_in_sequence() {
        let mut o = Order::default();
        let mut out = Vec::new();
        let (p3, p4) = (Pe::new(3), Pe::new(4));
        o.ready(p3, 2, 'b', &mut out);
        o.ready(p3, 3, 'c', &mut out);
        assert!(out.is_empty());
        assert_eq!(o.held(), 2);
        o.ready(p4, 1, 'x', &mut out);
        assert_eq!(out, ['x'], "sources are independent");
        out.clear();
        o.ready(p3, 1, 'a', &mut out);
        assert_eq!(out, ['a', 'b', 'c']);
        assert_eq!(o.held(), 0);
        let mut t = PeerTags::new(1);
        assert_eq!(t.peek_seq(), 1);
        assert_eq!(t.peek_seq(), 1, "peeking takes nothing");
        t.take_seq();
        assert_eq!(t.peek_seq(), 2);
        t.strong_seq = u32::MAX;
        assert_eq!(t.peek_seq(), 1, "wraps past 0");
    }
}
