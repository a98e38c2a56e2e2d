//! A slab whose keys carry a generation, so that a late completion for a freed entry can never
//! be mistaken for the entry that reused its slot. The key's layout (and the generation's width)
//! belongs to [`crate::engine::ctx::SlabKey`].

use crate::engine::ctx::SlabKey;

/// A generational slab.
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
    /// Each slot's current generation and entry.
    entries: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    len: usize,
}

impl<T> GenSlab<T> {
    pub(crate) fn new() -> Self {
        Self {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn insert(&mut self, v: T) -> SlabKey {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            let e = &mut self.entries[i as usize];
            e.0 = SlabKey::next_generation(e.0);
            e.1 = Some(v);
            SlabKey::new(i, e.0)
        } else {
            self.entries.push((0, Some(v)));
            SlabKey::new(self.entries.len() as u32 - 1, 0)
        }
    }

    fn slot(&self, key: SlabKey) -> Option<usize> {
        let idx = key.index() as usize;
        self.entries
            .get(idx)
            .filter(|e| e.0 == key.generation() && e.1.is_some())
            .map(|_| idx)
    }

    pub(crate) fn get(&self, key: SlabKey) -> Option<&T> {
        self.entries[self.slot(key)?].1.as_ref()
    }

    pub(crate) fn get_mut(&mut self, key: SlabKey) -> Option<&mut T> {
        let i = self.slot(key)?;
        self.entries[i].1.as_mut()
    }

    pub(crate) fn remove(&mut self, key: SlabKey) -> Option<T> {
        let i = self.slot(key)?;
        self.len -= 1;
        self.free.push(i as u32);
        self.entries[i].1.take()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut s = GenSlab::new();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_ne!(a, b);
        assert_eq!(s.get_mut(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get_mut(b), Some(&mut 2));
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_slot_wraps_to_generation_zero() {
        let mut s = GenSlab::new();
        let mut k = s.insert(0u8);
        let mut reused = 0u64;
        while k.generation() != SlabKey::MAX_GENERATION {
            s.remove(k);
            k = s.insert(0);
            reused += 1;
        }
        assert_eq!(reused, u64::from(SlabKey::MAX_GENERATION));
        s.remove(k);
        let wrapped = s.insert(1);
        assert_eq!((wrapped.index(), wrapped.generation()), (k.index(), 0));
    }
}
