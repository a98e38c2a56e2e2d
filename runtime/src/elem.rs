//! Element types of `p`/`g`, atomics and waits, and the comparisons of `wait_until`.

/// A value `p` and `g` move (1, 2, 4 or 8 bytes).
pub trait Elem: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// Size in bytes.
    const SIZE: u8;
    /// The value's bytes, little-endian, in the low bits.
    fn to_bits(self) -> u64;
    /// The value from its bits.
    fn from_bits(b: u64) -> Self;
}

/// A type atomics and waits work on (32 or 64 bits).
pub trait AmoElem: Elem {
    /// 64-bit.
    const WIDE: bool;
}

macro_rules! elem_int {
    ($($t:ty: $u:ty),*) => {$(
        impl Elem for $t {
            const SIZE: u8 = std::mem::size_of::<$t>() as u8;
            fn to_bits(self) -> u64 {
                u64::from(self as $u)
            }
            fn from_bits(b: u64) -> Self {
                b as $u as $t
            }
        }
    )*};
}
elem_int!(u8: u8, i8: u8, u16: u16, i16: u16, u32: u32, i32: u32, u64: u64, i64: u64);

impl Elem for f32 {
    const SIZE: u8 = 4;
    fn to_bits(self) -> u64 {
        u64::from(f32::to_bits(self))
    }
    fn from_bits(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}

impl Elem for f64 {
    const SIZE: u8 = 8;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(b: u64) -> Self {
        f64::from_bits(b)
    }
}

impl AmoElem for u32 {
    const WIDE: bool = false;
}
impl AmoElem for i32 {
    const WIDE: bool = false;
}
impl AmoElem for u64 {
    const WIDE: bool = true;
}
impl AmoElem for i64 {
    const WIDE: bool = true;
}

/// The comparison a wait ends on (`NVSHMEM_CMP_*` codes): the shared table of `pshmem-abi`.
pub use pshmem_abi::Cmp;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_and_signed_compare() {
        assert_eq!(i32::from_bits((-5i32).to_bits()), -5);
        assert_eq!((-1i16).to_bits(), 0xffff);
        assert_eq!(f64::from_bits(2.5f64.to_bits()), 2.5);
        assert!(Cmp::Lt.holds(-1i64, 0));
        assert!(Cmp::Ge.holds(3u32, 3));
        assert!(!Cmp::Ne.holds(7u8, 7));
    }
}
