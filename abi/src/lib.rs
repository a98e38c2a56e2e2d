//! # pshmem-abi
//!
//! Owns the values that C, CUDA and Rust share, each written once here and in the C header
//! `abi/include/pshmem/abi.h`. The shared C headers live beside it in `abi/include/pshmem/`
//! (`abi.h`; `ring.h` and `state.h`, whose Rust mirrors live with the ring and the runtime;
//! `types.h`; `kernel_args.h`, the runtime kernels' arguments), and the tests compare every
//! value by name with the C compiler's view of them (`pshmem-abi-probe`, a dev-dependency):
//!
//! - [`AmoOp`]: the atomic operations (ring AMO sub-operations, proxy requests, the AMO kernel,
//!   native fabric atomics);
//! - [`SignalOp`]: what a signal does to its word, numbered as NVSHMEM 3.x numbers
//!   `NVSHMEM_SIGNAL_SET` (9) and `NVSHMEM_SIGNAL_ADD` (10);
//! - [`Cmp`]: the comparisons of waits, numbered as `NVSHMEM_CMP_*`;
//! - [`RedOp`], [`DType`]: the reduction operators and element types of the collectives;
//! - [`Pe`]: a PE's number, one type from the ring's slots through the proxy to the transport;
//! - [`error`]: the codes of the error words that rings and device calls raise.
#![forbid(unsafe_code)]

/// An atomic operation on a 32- or 64-bit word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AmoOp {
    /// Add, return the old value.
    FetchAdd = 1,
    /// Add.
    Add = 2,
    /// Store, return the old value.
    Swap = 3,
    /// Store the operand if the word equals the comparand; return the old value.
    CompareSwap = 4,
    /// Read.
    Fetch = 5,
    /// Store.
    Set = 6,
    /// Bitwise and, return the old value.
    FetchAnd = 7,
    /// Bitwise and.
    And = 8,
    /// Bitwise or, return the old value.
    FetchOr = 9,
    /// Bitwise or.
    Or = 10,
    /// Bitwise exclusive or, return the old value.
    FetchXor = 11,
    /// Bitwise exclusive or.
    Xor = 12,
}

/// Marks a 64-bit operand in an AMO's sub-operation byte (`PSHMEM_AMO_WIDE`).
pub const AMO_WIDE: u8 = 0x10;

impl AmoOp {
    /// Every operation.
    pub const ALL: [AmoOp; 12] = [
        AmoOp::FetchAdd,
        AmoOp::Add,
        AmoOp::Swap,
        AmoOp::CompareSwap,
        AmoOp::Fetch,
        AmoOp::Set,
        AmoOp::FetchAnd,
        AmoOp::And,
        AmoOp::FetchOr,
        AmoOp::Or,
        AmoOp::FetchXor,
        AmoOp::Xor,
    ];

    /// Its code (`PSHMEM_AMO_*`).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The operation of a code.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.code() == code)
    }

    /// Whether it returns the old value.
    pub fn fetches(self) -> bool {
        !matches!(
            self,
            AmoOp::Add | AmoOp::Set | AmoOp::And | AmoOp::Or | AmoOp::Xor
        )
    }

    /// Applies the operation to `old`, giving the new value (truncate it to the width).
    pub fn apply(self, old: u64, operand: u64, compare: u64) -> u64 {
        match self {
            AmoOp::FetchAdd | AmoOp::Add => old.wrapping_add(operand),
            AmoOp::Swap | AmoOp::Set => operand,
            AmoOp::CompareSwap if old == compare => operand,
            AmoOp::CompareSwap | AmoOp::Fetch => old,
            AmoOp::FetchAnd | AmoOp::And => old & operand,
            AmoOp::FetchOr | AmoOp::Or => old | operand,
            AmoOp::FetchXor | AmoOp::Xor => old ^ operand,
        }
    }
}

/// What a signal does to its 64-bit word (NVSHMEM 3.x codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SignalOp {
    /// Store the value.
    Set = 9,
    /// Add the value.
    Add = 10,
}

impl SignalOp {
    /// Its code (`PSHMEM_SIGNAL_*`, equal to `NVSHMEM_SIGNAL_*`).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The operation of a code.
    pub fn from_code(code: u8) -> Option<Self> {
        [SignalOp::Set, SignalOp::Add]
            .into_iter()
            .find(|o| o.code() == code)
    }

    /// The AMO that applies this signal to a 64-bit word.
    pub fn as_amo(self) -> AmoOp {
        match self {
            SignalOp::Set => AmoOp::Set,
            SignalOp::Add => AmoOp::Add,
        }
    }
}

/// The comparison a wait ends on (`NVSHMEM_CMP_*` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cmp {
    /// Equal.
    Eq = 0,
    /// Not equal.
    Ne = 1,
    /// Greater than.
    Gt = 2,
    /// Less or equal.
    Le = 3,
    /// Less than.
    Lt = 4,
    /// Greater or equal.
    Ge = 5,
}

impl Cmp {
    /// Every comparison.
    pub const ALL: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Le, Cmp::Lt, Cmp::Ge];

    /// Its code (`PSHMEM_CMP_*`, equal to `NVSHMEM_CMP_*`).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The comparison of a code.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }

    /// Whether `value cmp target` holds.
    pub fn holds<T: PartialOrd>(self, value: T, target: T) -> bool {
        match self {
            Cmp::Eq => value == target,
            Cmp::Ne => value != target,
            Cmp::Gt => value > target,
            Cmp::Ge => value >= target,
            Cmp::Lt => value < target,
            Cmp::Le => value <= target,
        }
    }
}

/// A reduction operator of the collectives (`PSHMEM_RED_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RedOp {
    /// Sum.
    Sum = 0,
    /// Product.
    Prod = 1,
    /// Minimum.
    Min = 2,
    /// Maximum.
    Max = 3,
    /// Bitwise and (integer types).
    And = 4,
    /// Bitwise or (integer types).
    Or = 5,
    /// Bitwise exclusive or (integer types).
    Xor = 6,
}

impl RedOp {
    /// Every operator.
    pub const ALL: [RedOp; 7] = [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Min,
        RedOp::Max,
        RedOp::And,
        RedOp::Or,
        RedOp::Xor,
    ];

    /// Its code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The operator of a code.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.code() == code)
    }

    /// Whether it is bitwise (defined for the integer types only).
    pub const fn bitwise(self) -> bool {
        matches!(self, RedOp::And | RedOp::Or | RedOp::Xor)
    }

    /// Its name as NVSHMEM spells it in `nvshmem_TYPE_OP_reduce`.
    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::And => "and",
            RedOp::Or => "or",
            RedOp::Xor => "xor",
        }
    }
}

/// An element type of the reductions (`PSHMEM_DT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// `int32_t`.
    I32 = 0,
    /// `int64_t`.
    I64 = 1,
    /// `uint64_t`.
    U64 = 2,
    /// `float`.
    F32 = 3,
    /// `double`.
    F64 = 4,
    /// IEEE half (`__half`).
    F16 = 5,
    /// bfloat16 (`__nv_bfloat16`).
    BF16 = 6,
    /// `uint32_t`.
    U32 = 7,
}

impl DType {
    /// Every type.
    pub const ALL: [DType; 8] = [
        DType::I32,
        DType::I64,
        DType::U64,
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::U32,
    ];

    /// Its code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The type of a code.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.code() == code)
    }

    /// Bytes of one element.
    pub const fn size(self) -> usize {
        match self {
            DType::I32 | DType::F32 | DType::U32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Whether it is an integer type (the bitwise operators apply).
    pub const fn integer(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U64 | DType::U32)
    }
}

/// "PE 3", or "no particular PE": how messages name an optional PE (never `Some(3)`).
pub fn describe_pe<T: std::fmt::Display>(pe: Option<T>) -> String {
    match pe {
        Some(p) => format!("PE {p}"),
        None => "no particular PE".into(),
    }
}

/// A PE's number in its job: the `pe` field of a ring slot (`uint32_t` in `ring.h`), and the
/// one type a PE has from a decoded descriptor through the proxy to the transport, so that it
/// never changes integer type along one operation. Displayed as the bare number ("PE 3").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Pe(u32);

impl Pe {
    /// PE `n`.
    #[inline]
    pub const fn new(n: u32) -> Self {
        Self(n)
    }

    /// The number, as the ring's slots and the wire carry it.
    #[inline]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The number as an index (of per-PE tables; a zero extension).
    #[inline]
    pub const fn idx(self) -> usize {
        self.0 as usize
    }

    /// PE `i` of a table; panics past `u32::MAX`, which no job reaches (the bootstrap and the
    /// ring name PEs in 32 bits).
    #[inline]
    pub fn from_idx(i: usize) -> Self {
        Self(u32::try_from(i).expect("a PE number fits 32 bits"))
    }

    /// Every PE of a job of `n`, in order.
    pub fn all(n: usize) -> impl DoubleEndedIterator<Item = Pe> + Clone {
        (0..n).map(Pe::from_idx)
    }
}

impl From<u32> for Pe {
    fn from(n: u32) -> Self {
        Self(n)
    }
}

impl std::fmt::Display for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Error words: 0 while healthy, else `code << 32 | PE` (`PSHMEM_ERROR_*`). Rings carry the
/// proxy's codes (below 16); device calls record theirs (16 and up) beside them.
pub mod error {
    /// A peer died.
    pub const PEER_DEAD: u32 = 1;
    /// An operation failed at the transport.
    pub const OP_FAILED: u32 = 2;
    /// The proxy failed or shut down.
    pub const PROXY: u32 = 3;
    /// A device call used an address outside the symmetric heap.
    pub const BAD_ADDRESS: u32 = 16;
    /// No free result cell for a ring get or fetching AMO.
    pub const NO_CELLS: u32 = 17;
    /// A device wait outlasted `PSHMEM_OP_TIMEOUT`.
    pub const TIMEOUT: u32 = 18;
    /// The PE field when no PE is concerned.
    pub const NO_PE: u32 = u32::MAX;

    /// The error word of `code` for `pe`.
    pub const fn word(code: u32, pe: Option<u32>) -> u64 {
        let pe = match pe {
            Some(p) => p,
            None => NO_PE,
        };
        (code as u64) << 32 | pe as u64
    }

    /// The code and PE of an error word (`None` for 0, the healthy word).
    pub const fn split(word: u64) -> Option<(u32, Option<u32>)> {
        if word == 0 {
            return None;
        }
        let pe = word as u32;
        Some((
            (word >> 32) as u32,
            if pe == NO_PE { None } else { Some(pe) },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pshmem_abi_probe as probe;

    #[test]
    fn codes_round_trip() {
        for o in AmoOp::ALL {
            assert_eq!(AmoOp::from_code(o.code()), Some(o));
            assert_eq!(o.code() & AMO_WIDE, 0, "the width bit is free");
        }
        for s in [SignalOp::Set, SignalOp::Add] {
            assert_eq!(SignalOp::from_code(s.code()), Some(s));
        }
        for c in Cmp::ALL {
            assert_eq!(Cmp::from_code(c.code()), Some(c));
        }
        assert_eq!(AmoOp::from_code(0), None);
        assert_eq!(SignalOp::from_code(0), None);
        assert_eq!(Cmp::from_code(6), None);
    }

    #[test]
    fn error_words_round_trip() {
        assert_eq!(error::split(0), None);
        let w = error::word(error::OP_FAILED, Some(7));
        assert_eq!(error::split(w), Some((error::OP_FAILED, Some(7))));
        let w = error::word(error::PROXY, None);
        assert_eq!(error::split(w), Some((error::PROXY, None)));
    }

    #[test]
    fn comparisons_and_amos_compute() {
        assert!(Cmp::Lt.holds(-1i64, 0));
        assert!(Cmp::Ge.holds(3u32, 3));
        assert!(!Cmp::Ne.holds(7u8, 7));
        assert_eq!(AmoOp::CompareSwap.apply(5, 9, 5), 9);
        assert_eq!(AmoOp::CompareSwap.apply(5, 9, 4), 5);
        assert_eq!(AmoOp::FetchAdd.apply(u64::MAX, 2, 0), 1);
    }

    /// Every value above equals the C header's.
    #[test]
    fn rust_and_c_agree() {
        let amo = [
            ("PSHMEM_AMO_FETCH_ADD", AmoOp::FetchAdd),
            ("PSHMEM_AMO_ADD", AmoOp::Add),
            ("PSHMEM_AMO_SWAP", AmoOp::Swap),
            ("PSHMEM_AMO_COMPARE_SWAP", AmoOp::CompareSwap),
            ("PSHMEM_AMO_FETCH", AmoOp::Fetch),
            ("PSHMEM_AMO_SET", AmoOp::Set),
            ("PSHMEM_AMO_FETCH_AND", AmoOp::FetchAnd),
            ("PSHMEM_AMO_AND", AmoOp::And),
            ("PSHMEM_AMO_FETCH_OR", AmoOp::FetchOr),
            ("PSHMEM_AMO_OR", AmoOp::Or),
            ("PSHMEM_AMO_FETCH_XOR", AmoOp::FetchXor),
            ("PSHMEM_AMO_XOR", AmoOp::Xor),
        ];
        for (name, o) in amo {
            assert_eq!(probe::value(name), u64::from(o.code()), "{name}");
        }
        assert_eq!(probe::value("PSHMEM_AMO_WIDE"), u64::from(AMO_WIDE));
        assert_eq!(
            probe::value("PSHMEM_SIGNAL_SET"),
            u64::from(SignalOp::Set.code())
        );
        assert_eq!(
            probe::value("PSHMEM_SIGNAL_ADD"),
            u64::from(SignalOp::Add.code())
        );
        let cmp = [
            ("PSHMEM_CMP_EQ", Cmp::Eq),
            ("PSHMEM_CMP_NE", Cmp::Ne),
            ("PSHMEM_CMP_GT", Cmp::Gt),
            ("PSHMEM_CMP_LE", Cmp::Le),
            ("PSHMEM_CMP_LT", Cmp::Lt),
            ("PSHMEM_CMP_GE", Cmp::Ge),
        ];
        for (name, c) in cmp {
            assert_eq!(probe::value(name), u64::from(c.code()), "{name}");
        }
        for o in RedOp::ALL {
            let name = format!("PSHMEM_RED_{}", o.name().to_uppercase());
            assert_eq!(probe::value(&name), u64::from(o.code()), "{name}");
            assert_eq!(RedOp::from_code(o.code()), Some(o));
        }
        let dtypes = [
            ("PSHMEM_DT_INT32", DType::I32),
            ("PSHMEM_DT_INT64", DType::I64),
            ("PSHMEM_DT_UINT64", DType::U64),
            ("PSHMEM_DT_FLOAT", DType::F32),
            ("PSHMEM_DT_DOUBLE", DType::F64),
            ("PSHMEM_DT_HALF", DType::F16),
            ("PSHMEM_DT_BFLOAT16", DType::BF16),
            ("PSHMEM_DT_UINT32", DType::U32),
        ];
        assert_eq!(dtypes.len(), DType::ALL.len());
        for (name, d) in dtypes {
            assert_eq!(probe::value(name), u64::from(d.code()), "{name}");
            assert_eq!(DType::from_code(d.code()), Some(d));
        }
        let errors = [
            ("PSHMEM_ERROR_PEER_DEAD", error::PEER_DEAD),
            ("PSHMEM_ERROR_OP_FAILED", error::OP_FAILED),
            ("PSHMEM_ERROR_PROXY", error::PROXY),
            ("PSHMEM_ERROR_BAD_ADDRESS", error::BAD_ADDRESS),
            ("PSHMEM_ERROR_NO_CELLS", error::NO_CELLS),
            ("PSHMEM_ERROR_TIMEOUT", error::TIMEOUT),
            ("PSHMEM_ERROR_NO_PE", error::NO_PE),
        ];
        for (name, e) in errors {
            assert_eq!(probe::value(name), u64::from(e), "{name}");
        }
        assert_eq!(
            probe::value("PSHMEM_ERROR_WORD(PSHMEM_ERROR_OP_FAILED, 7)"),
            error::word(error::OP_FAILED, Some(7))
        );
    }
}
