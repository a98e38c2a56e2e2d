//! A slab whose keys carry a generation, so that a late completion for a freed entry can never
//! be mistaken for the entry that reused its slot. Keys fit in 63 bits (the transport context's
//! top three bits mark the proxy's own kinds of context).

/// Generations use 29 bits, so keys leave the top three bits of a context free.
const GEN_MASK: u32 = 0x1fff_ffff;

/// A generational slab.
#[derive(Debug)]
pub(crate) struct GenSlab<T> {
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

    fn key(generation: u32, idx: u32) -> u64 {
        (u64::from(generation & GEN_MASK) << 32) | u64::from(idx)
    }

    pub(crate) fn insert(&mut self, v: T) -> u64 {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            let e = &mut self.entries[i as usize];
            e.0 = e.0.wrapping_add(1) & GEN_MASK;
            e.1 = Some(v);
            Self::key(e.0, i)
        } else {
            self.entries.push((0, Some(v)));
            Self::key(0, self.entries.len() as u32 - 1)
        }
    }

    fn slot(&self, key: u64) -> Option<usize> {
        let (generation, idx) = ((key >> 32) as u32, key as u32 as usize);
        self.entries
            .get(idx)
            .filter(|e| e.0 == generation && e.1.is_some())
            .map(|_| idx)
    }

    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        let i = self.slot(key)?;
        self.entries[i].1.as_mut()
    }

    pub(crate) fn remove(&mut self, key: u64) -> Option<T> {
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
        assert_eq!(s.len(), 1);
        assert!(b >> 61 == 0);
    }
}
