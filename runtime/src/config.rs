//! The runtime's configuration, read from the one environment table (`pshmem_env`), or built
//! by the application.

use std::time::Duration;

use pshmem_env::{self as env, EnvError, parse_cpu_list};
use pshmem_proxy::ProxyConfig;

/// How the runtime sets up a PE.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes of symmetric heap per PE (`PSHMEM_SYMMETRIC_SIZE`).
    pub heap_size: usize,
    /// Route every operation through the ring and proxy (`PSHMEM_DISABLE_P2P`).
    pub disable_p2p: bool,
    /// Proxy threads (`PSHMEM_PROXY_THREADS`); each opens its own transport.
    pub proxy_threads: usize,
    /// Command rings (`PSHMEM_RINGS`), spread over the proxy threads.
    pub rings: usize,
    /// Slots per ring (`PSHMEM_RING_SLOTS`, a power of two).
    pub ring_slots: usize,
    /// Longest a quiet, barrier or wait blocks (`PSHMEM_OP_TIMEOUT`).
    pub op_timeout: Duration,
    /// Cores for the proxy threads (`PSHMEM_PROXY_CPU`): `None` places them from the topology,
    /// an empty list leaves them unpinned ("none"), a list pins thread t to entry t mod len.
    pub proxy_cpus: Option<Vec<usize>>,
    /// Proxy behaviour (batch, back-off, staging).
    pub proxy: ProxyConfig,
    /// Team slots, predefined teams included (`PSHMEM_MAX_TEAMS`).
    pub max_teams: usize,
}

impl Config {
    /// From the environment.
    pub fn from_env() -> Result<Self, EnvError> {
        let heap_size = {
            let v = env::SYMMETRIC_SIZE.value();
            env::parse_size(&v)
                .ok_or_else(|| env::SYMMETRIC_SIZE.bad(&v, "a byte count such as 1G"))?
        };
        let ring_slots = env::RING_SLOTS.usize()?;
        if !ring_slots.is_power_of_two() || ring_slots < 2 {
            return Err(env::RING_SLOTS.bad(&ring_slots.to_string(), "a power of two >= 2"));
        }
        let proxy_cpus = match env::PROXY_CPU.raw().as_deref() {
            None => None,
            Some("none") => Some(Vec::new()),
            Some(list) => Some(
                parse_cpu_list(list)
                    .ok_or_else(|| env::PROXY_CPU.bad(list, "'none' or a list such as 3,5-7"))?,
            ),
        };
        let proxy = ProxyConfig {
            batch: env::PROXY_BATCH.usize()?.max(1),
            idle_after: env::PROXY_IDLE_US.micros()?,
            max_sleep: env::PROXY_SLEEP_US.micros()?,
            cpu: None,
            staging_chunk: env::STAGING_CHUNK.usize()?.max(4096),
            staging_chunks: env::STAGING_BUFFERS.usize()?.max(1),
            drain_limit: Duration::from_secs(5),
            max_inflight: env::PROXY_MAX_INFLIGHT.usize()?.max(1),
            max_inflight_per_pe: env::PROXY_MAX_INFLIGHT_PER_PE.usize()?.max(1),
            strong_signals: env::STRONG_SIGNALS.bool()?,
            trace: Some(env::TRACE.value())
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
        };
        Ok(Self {
            heap_size,
            disable_p2p: env::DISABLE_P2P.bool()?,
            proxy_threads: env::PROXY_THREADS.usize()?.max(1),
            rings: env::RINGS.usize()?.max(1),
            ring_slots,
            op_timeout: env::OP_TIMEOUT.secs()?,
            proxy_cpus,
            proxy,
            max_teams: env::MAX_TEAMS.usize()?,
        })
    }
}
