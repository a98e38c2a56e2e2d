//! One destination PE as this initiator sees it: what is in flight to it, the work queued for
//! it from each ring, the tags of its signals, and (host-staged path) this PE's free landing
//! slots there. Everything the initiator keeps per destination lives here, so a post or a
//! completion touches one `Peer`.

use super::{ctx::RingId, tags::PeerTags, work::PeQueue};

/// One destination PE.
#[derive(Debug)]
pub(super) struct Peer {
    /// Parts in flight to it, from every ring (bounded by `ProxyConfig::max_inflight_per_pe`).
    pub inflight: u32,
    /// The work for it, per ring of this thread.
    pub queues: Box<[PeQueue]>,
    /// The tags of tagged signals to it (tagged mode).
    pub tags: PeerTags,
    /// Host-staged path: the free slots of this PE's landing group at it (at this PE itself:
    /// the reply slots of its own gets).
    pub slots: Vec<u32>,
}

impl Peer {
    /// A destination served by `rings` rings, with tags of `tag_bits` bits and `slots` free
    /// landing slots.
    pub(super) fn new(rings: usize, tag_bits: u32, slots: u32) -> Self {
        Self {
            inflight: 0,
            queues: (0..rings).map(|_| PeQueue::default()).collect(),
            tags: PeerTags::new(tag_bits),
            slots: (0..slots).rev().collect(),
        }
    }

    /// The queue of ring `r`.
    #[inline]
    pub(super) fn queue(&mut self, r: RingId) -> &mut PeQueue {
        &mut self.queues[r.idx()]
    }
}
