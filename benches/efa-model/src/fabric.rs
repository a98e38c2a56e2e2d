//! The machines: NICs per GPU, their bandwidth and per-packet cost, the wire, and the host-side
//! costs of a proxy design's completion and signal path.

use serde::Serialize;

/// One EFA machine type and the fabric between such machines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fabric {
    /// "p5en" or "p5".
    pub name: &'static str,
    /// GPUs per node (NVLink domain): traffic inside a node is not modelled (NVLink, overlapped).
    pub gpus_per_node: usize,
    /// EFA NICs per GPU; a GPU's messages are striped over them.
    pub nics_per_gpu: usize,
    /// Bandwidth of one NIC, GB/s.
    pub nic_gbps: f64,
    /// NIC time per message, µs, for rail-aligned traffic with one remote node (fitted): the
    /// firmware's and SRD's cost of a work request beyond its bytes.
    pub x_msg_us: f64,
    /// Growth of the per-message time per additional remote node, as a fraction (fitted):
    /// SRD congestion windows, incast and fan-out over more peers.
    pub incast: f64,
    /// Factor on the per-message time of a message to a GPU of another local index (another
    /// rail): UCCL-EP's 8 KB all-to-all measured about 2x.
    pub cross_rail: f64,
    /// One-way wire latency, µs (EFA round trips measure 15–25 µs).
    pub wire_us: f64,
    /// GPU writes a descriptor until the proxy sees it, µs.
    pub d2h_us: f64,
    /// Receiver proxy's completion-queue handling per message, µs.
    pub cqe_us: f64,
    /// Receiver's last completion until the receive kernel sees its count, µs.
    pub sig_us: f64,
}

impl Fabric {
    /// p5en: 8 H200, 16 × 200 Gb/s EFA (2 NICs of 25 GB/s per GPU). The two fitted values
    /// are those `efa-model` prints after its fit (kept here so tests and projections
    /// start from them; the command refits and reports any drift).
    pub fn p5en() -> Self {
        Self {
            name: "p5en",
            gpus_per_node: 8,
            nics_per_gpu: 2,
            nic_gbps: 25.0,
            x_msg_us: FITTED_X_MSG_US,
            incast: FITTED_INCAST,
            cross_rail: 2.0,
            wire_us: 9.0,
            d2h_us: 1.5,
            cqe_us: 0.15,
            sig_us: 1.5,
        }
    }

    /// p5: 8 H100, 32 × 100 Gb/s EFA (4 NICs of 12.5 GB/s per GPU); the same per-message cost
    /// (an assumption: no public LL results on p5 to fit it to).
    pub fn p5() -> Self {
        Self {
            name: "p5",
            nics_per_gpu: 4,
            nic_gbps: 12.5,
            ..Self::p5en()
        }
    }

    /// Remote nodes a GPU talks to in a job of `n` GPUs.
    pub fn remote_nodes(&self, n: usize) -> usize {
        n.div_ceil(self.gpus_per_node).saturating_sub(1)
    }

    /// NIC time of one message of `bytes` between GPUs `src` and `dst` in a job of `n` GPUs,
    /// µs: its per-message cost plus its bytes at the NIC's bandwidth.
    pub fn service_us(&self, bytes: u64, src: usize, dst: usize, n: usize) -> f64 {
        let fan = 1.0 + self.incast * self.remote_nodes(n).saturating_sub(1) as f64;
        let rail = if src % self.gpus_per_node == dst % self.gpus_per_node {
            1.0
        } else {
            self.cross_rail
        };
        self.x_msg_us * fan * rail + bytes as f64 / (self.nic_gbps * 1e3)
    }
}

/// The fitted per-message time (µs) of the p5en preset: see [`crate::calib::fit`].
pub const FITTED_X_MSG_US: f64 = 0.145;
/// The fitted fan-out growth of the p5en preset: see [`crate::calib::fit`].
pub const FITTED_INCAST: f64 = 0.67;
