//! The runtime's configuration, read from the one environment table (`pshmem_env`), or built
//! by the application. Every setting of the host path, the GPU path, placement and the
//! transport is here, read once by [`Config::from_env`]; init takes them from it. (The CUDA
//! layer, shared with the tools, still looks at `PSHMEM_DISABLE_CUDA` and CUDA's own
//! `CUDA_MPS_PIPE_DIRECTORY` where it loads the driver.)

use std::time::Duration;

use pshmem_env::{self as env, EnvError, parse_cpu_list};
use pshmem_proxy::ProxyConfig;
use pshmem_transport::TransportConfig;

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
    /// The transport: provider, simulated fabric, libfabric settings.
    pub transport: TransportConfig,
    /// A topology file describing this host (`PSHMEM_TOPOLOGY_XML`) instead of hwloc's.
    pub topology_xml: Option<String>,
    /// The host heap standing in for a GPU heap (`PSHMEM_EMULATE_GPU_HEAP`).
    pub emulate: Emulate,
    /// The GPU path, started by `gpu_init`.
    pub gpu: GpuConfig,
}

/// The GPU path's settings.
#[derive(Debug, Clone)]
pub struct GpuConfig {
    /// Bytes of GPU symmetric heap per PE (`PSHMEM_GPU_SYMMETRIC_SIZE`).
    pub heap_size: usize,
    /// The CUDA device (`PSHMEM_CUDA_DEVICE`); `None`: local rank modulo the devices.
    pub device: Option<usize>,
    /// GPU command rings (`PSHMEM_GPU_RINGS`; ring 0 is the device API's); `None`: from the
    /// topology at GPU init (`placement::default_gpu_proxy_shape`).
    pub rings: Option<usize>,
    /// Proxy threads draining them (`PSHMEM_GPU_PROXY_THREADS`); `None`: from the topology.
    pub proxy_threads: Option<usize>,
    /// Landing slots per source PE of the host-staged path (`PSHMEM_GPU_LANDING_SLOTS`).
    pub landing_slots: usize,
    /// Host puts and gets to mapped peers of at least this many bytes use the copy engine
    /// (`PSHMEM_COPY_ENGINE_MIN`).
    pub copy_engine_min: usize,
    /// Whether `CUDA_DEVICE_MAX_CONNECTIONS` was set when the configuration was read: CUDA
    /// reads it itself; unset, the runtime warns when some peers are reached through the proxy.
    pub cuda_connections_set: bool,
    /// How the proxy's transport reaches the heap (`PSHMEM_GPU_REGISTRATION`).
    pub registration: crate::gpu::registration::Want,
}

/// How a host heap stands in for a GPU heap, to test the GPU path's network protocols without
/// a GPU (`PSHMEM_EMULATE_GPU_HEAP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulate {
    /// A host heap, served as one.
    Off,
    /// The host-staged path: each proxy registers a landing area instead of the heap (`1`,
    /// `staged`).
    Staged,
    /// The registered path: the heap registered as a GPU heap would be by DMA-BUF.
    Registered,
}

impl Emulate {
    /// Whether the proxies serve the heap as a GPU heap.
    pub fn on(self) -> bool {
        self != Self::Off
    }

    /// The setting's canonical spelling (compared across PEs at init).
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "0",
            Self::Staged => "staged",
            Self::Registered => "registered",
        }
    }

    fn from_env() -> Result<Self, EnvError> {
        let v = env::EMULATE_GPU_HEAP.checked()?;
        match v.as_str() {
            "0" | "" => Ok(Self::Off),
            "1" | "staged" => Ok(Self::Staged),
            "registered" => Ok(Self::Registered),
            other => Err(env::EMULATE_GPU_HEAP.bad(other, "0, 1 (staged) or registered")),
        }
    }
}

impl GpuConfig {
    /// From the environment.
    pub fn from_env() -> Result<Self, EnvError> {
        Ok(Self {
            heap_size: size(&env::GPU_SYMMETRIC_SIZE)?,
            device: env::CUDA_DEVICE.opt_usize()?,
            rings: env::GPU_RINGS.opt_usize()?.map(|r| r.max(1)),
            proxy_threads: env::GPU_PROXY_THREADS.opt_usize()?.map(|t| t.max(1)),
            landing_slots: env::GPU_LANDING_SLOTS.usize()?.max(1),
            copy_engine_min: env::COPY_ENGINE_MIN.usize()?,
            cuda_connections_set: std::env::var_os(env::CUDA_DEVICE_MAX_CONNECTIONS).is_some(),
            registration: crate::gpu::registration::Want::from_env()?,
        })
    }
}

/// A byte count such as `1G`.
fn size(var: &env::EnvVar) -> Result<usize, EnvError> {
    let v = var.value();
    env::parse_size(&v).ok_or_else(|| var.bad(&v, "a byte count such as 1G"))
}

/// `PSHMEM_TOPOLOGY_XML`: a file that must exist (a name that does not is refused, rather than
/// a placement that silently falls back; `pshmem-info` only warns).
fn topology_file() -> Result<Option<String>, EnvError> {
    match env::TOPOLOGY_XML.raw() {
        Some(p) if !std::path::Path::new(&p).is_file() => {
            Err(env::TOPOLOGY_XML.bad(&p, "no such file (an hwloc XML topology)"))
        }
        p => Ok(p),
    }
}

/// `PSHMEM_TRACE`: a path prefix whose folder must exist (checked now, not when the traces are
/// written at the end of the job).
fn trace_prefix() -> Result<Option<std::path::PathBuf>, EnvError> {
    let v = env::TRACE.value();
    if v.is_empty() {
        return Ok(None);
    }
    let p = std::path::PathBuf::from(&v);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(env::TRACE.bad(&v, &format!("no folder {}", dir.display())));
    }
    Ok(Some(p))
}

impl Config {
    /// From the environment.
    pub fn from_env() -> Result<Self, EnvError> {
        let heap_size = size(&env::SYMMETRIC_SIZE)?;
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
            trace: trace_prefix()?,
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
            transport: TransportConfig::from_env()?,
            topology_xml: topology_file()?,
            emulate: Emulate::from_env()?,
            gpu: GpuConfig::from_env()?,
        })
    }
}
