//! # pshmem-benches
//!
//! Owns the benchmarks: `fabric-bench` (the raw transport through our safe layer beside the
//! same operations written against libfabric's C API), `pshmem-perf` (NVSHMEM-perftest-style
//! tests of the runtime), `datapath-bench` (the runtime beside the raw transport, and the ring
//! and proxy alone against a transport that completes at once), and the shared helpers for
//! statistics and result files. Every comparison is measured side by side in one run; results
//! are kept as JSON under `benches/results/` with a Markdown report.

#![deny(unsafe_code)]

/// pshmem-perf's device-initiated kernels (`cuda/perf.cu`, compiled by the build script).
pub static PERF_KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/perf.fatbin"));

pub mod gpu_perf;
// Kernel argument structs implement an unsafe trait (`KernelArgs`), by the macro that lists them.
#[allow(unsafe_code)]
mod kargs;
pub mod raw;

/// The median of the paired ratios `a[i] / b[i]`: the two sides of each pair ran back to back,
/// so a drift of the machine between pairs (a VM's speed phases) cancels, which a ratio of the
/// two medians does not.
pub fn paired_ratio(a: &[f64], b: &[f64]) -> f64 {
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    median(&r)
}

/// The collective latency tests of `pshmem-perf`, named after NVSHMEM's collective perftests;
/// the index is the kind `perf_coll` (benches/cuda/perf.cu) takes.
pub const COLLECTIVES: [&str; 6] = [
    "sync_latency",
    "bcast_latency",
    "fcollect_latency",
    "alltoall_latency",
    "reduce_latency",
    "reducescatter_latency",
];

/// Median of a sample (sorted copy).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// "64 B", "4 KiB", "16 MiB".
pub fn size_label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Powers of two from `min` to `max` inclusive.
pub fn pow2_sizes(min: usize, max: usize) -> Vec<usize> {
    std::iter::successors(Some(min.max(1)), |s| s.checked_mul(2))
        .take_while(|s| *s <= max)
        .collect()
}

/// A short description of the machine for result files.
pub fn machine() -> String {
    // The machine's processors, not this process's affinity (benchmarks may run pinned).
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpus = info.lines().filter(|l| l.starts_with("processor")).count();
    let model = Some(info.as_str())
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    format!(
        "{} ({} cpus, {model})",
        pshmem_bootstrap::config::hostname(),
        cpus
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(size_label(64), "64 B");
        assert_eq!(size_label(4096), "4 KiB");
        assert_eq!(size_label(3 << 20), "3 MiB");
        assert_eq!(pow2_sizes(64, 1024), vec![64, 128, 256, 512, 1024]);
    }
}
