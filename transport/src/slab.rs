//! A fixed-capacity slab of in-flight operation records. Its storage never moves, so the
//! address of a record can be handed to the fabric as the operation context (providers with
//! `FI_CONTEXT`/`FI_CONTEXT2` mode write into that memory) and mapped back to its index.

/// Fixed-capacity storage with O(1) insert and remove.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Box<[Option<T>]>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    /// A slab of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        let slots: Vec<Option<T>> = (0..capacity).map(|_| None).collect();
        Self {
            slots: slots.into_boxed_slice(),
            free: (0..capacity as u32).rev().collect(),
        }
    }

    /// Stores `v`, or returns it back when full.
    pub fn insert(&mut self, v: T) -> Result<u32, T> {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(v);
                Ok(i)
            }
            None => Err(v),
        }
    }

    /// Removes and returns slot `i`.
    pub fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.slots.get_mut(i as usize)?.take();
        if v.is_some() {
            self.free.push(i);
        }
        v
    }

    /// Slot `i`.
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.as_mut()
    }

    /// Indices of occupied slots matching `f`.
    pub fn indices_where(&self, mut f: impl FnMut(&T) -> bool) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(&mut f))
            .map(|(i, _)| i as u32)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_frees_and_reuses() {
        let mut s = Slab::new(3);
        let a = s.insert('a').unwrap();
        let b = s.insert('b').unwrap();
        let c = s.insert('c').unwrap();
        assert_eq!(s.insert('d'), Err('d'));
        assert_eq!(s.remove(b), Some('b'));
        assert_eq!(s.remove(b), None);
        assert_eq!(s.insert('e'), Ok(b));
        assert_eq!(s.indices_where(|v| *v != 'e'), vec![a, c]);
        assert_eq!(s.get_mut(c), Some(&mut 'c'));
        assert_eq!(s.remove(99), None);
    }
}
