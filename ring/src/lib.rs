//! # pshmem-ring
//!
//! Owns the GPU→CPU command ring that carries one-sided operations from their producers (GPU
//! threads, or CPU threads in host mode) to the proxy:
//!
//! - [`layout`]: the slot and control-block layout, a mirror of `abi/include/pshmem/ring.h`
//!   (asserted at compile time here and against the C compiler in `tests/layout.rs`);
//! - [`ring`]: the ring's memory, the CPU [`Producer`] (the same protocol a GPU producer
//!   follows) and the proxy-side [`Consumer`], with the memory-ordering argument;
//! - [`desc`]: typed operations ([`Desc`]) and their slot encoding;
//! - [`tracker`]: in-order completion accounting ([`Completions`]) for the `completed` counter
//!   that quiet waits on.
//!
//! Under `--cfg loom` the atomics are loom's, so `tests/loom.rs` model-checks the protocol.

pub mod desc;
pub mod layout;
pub mod ring;
mod sync;
pub mod tracker;

pub use desc::{AmoOp, DecodeError, Desc, Local, Pe, SignalOp};
pub use layout::RawSlot;
pub use ring::{Consumer, Producer, Ring, RingError, WaitLimit, decode_error};
pub use tracker::Completions;
