//! Registration keys the program chooses (providers without FI_MR_PROV_KEY, tcp;ofi_rxm and shm
//! among them). These providers check nothing but the key and the range: an endpoint that
//! knows a PE's address could reach its heap with a key it can guess. So every key is drawn
//! at random over all the bits the provider takes, and travels only through the job's
//! authenticated bootstrap (the registration exchange); a guess succeeds with probability
//! 2^-64 per attempt (8-byte keys, every provider we know).

use pshmem_libfabric_sys as sys;
use rand::Rng;

use super::fabric::bits;

/// `FI_ENOKEY`: the key asked for is taken in this domain.
pub(super) const KEY_TAKEN: i32 = sys::FI_ENOKEY as i32;

/// Draws the keys of one domain's registrations.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keys {
    /// The bits of a key the provider keeps (`mr_key_size` bytes).
    mask: u64,
    /// The provider chooses keys itself (FI_MR_PROV_KEY): ours are ignored.
    provider_keys: bool,
}

impl Keys {
    /// Keys for a domain with `mr_mode` and keys of `key_size` bytes.
    pub(super) fn new(mr_mode: u64, key_size: usize) -> Self {
        let provider_keys = mr_mode & bits!(FI_MR_PROV_KEY) != 0;
        let mask = match key_size {
            0 | 8.. => u64::MAX,
            n => (1u64 << (8 * n)) - 1,
        };
        if !provider_keys && mask != u64::MAX {
            tracing::warn!(
                "the provider takes registration keys of {key_size} bytes only: a local \
                 program that can reach this PE's endpoint guesses one with probability \
                 2^-{} per attempt",
                8 * key_size
            );
        }
        Self {
            mask,
            provider_keys,
        }
    }

    /// A fresh key (the provider's own where it chooses them: then this value is ignored).
    pub(super) fn draw(&self) -> u64 {
        if self.provider_keys {
            return 0;
        }
        rand::rng().random::<u64>() & self.mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_over_the_bits_the_provider_keeps() {
        let full = Keys::new(0, 8);
        let a: Vec<u64> = (0..64).map(|_| full.draw()).collect();
        // 64 draws of 64 random bits: all distinct, and some above 2^32 (fails with p ≈ 2^-64).
        let mut d = a.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), a.len());
        assert!(a.iter().any(|k| *k > u64::from(u32::MAX)));
        let short = Keys::new(0, 2);
        assert!((0..256).all(|_| short.draw() <= 0xffff));
        assert_eq!(Keys::new(bits!(FI_MR_PROV_KEY), 8).draw(), 0);
    }
}
