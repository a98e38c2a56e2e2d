//! A discrete-event model of MoE dispatch and combine (low-latency and normal modes) over AWS
//! EFA, for systems whose GPUs hand messages to CPU proxy threads (no GPU-initiated RDMA on
//! EFA).
//!
//! Nothing here ran on EFA hardware. The model (structure from the project's research notes on
//! proxy-based MoE on EFA, kept outside this repository) replays the message streams of a
//! decode step (a prefill step in the normal mode) —
//! which GPU sends how many bytes to which, when each message is ready — through FIFO
//! servers: the sender's proxy threads (a post cost each), the sender's NICs and the receiver's NICs (a per-packet cost that grows with the
//! number of remote nodes, a cross-rail factor, and the NIC's bandwidth), the wire latency,
//! then the receiver's completion and signal path and its receive kernel. An operation takes
//! as long as its slowest receiver. The network is feed-forward, so serving every queue in
//! arrival order is an exact discrete-event simulation of it (no flow-control feedback: the
//! model is open-loop, as the research note's).
//!
//! [`fabric`] holds the machines and their parameters, [`stream`] the systems and the streams
//! they produce, [`sim`] the queues, [`calib`] the published anchors, the fit and the
//! projection.

pub mod calib;
pub mod fabric;
pub mod sim;
pub mod stream;

pub use fabric::Fabric;
pub use sim::{Outcome, simulate};
pub use stream::{Op, Pattern, Rings, Shape, Signalling, System};
