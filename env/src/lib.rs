//! # pshmem-env
//!
//! Owns the one table of environment variables that proxyshmem reads.
//!
//! Every variable any crate of the project reads is listed in [`VARS`] with its default, its
//! [`Kind`] (what values it takes), the part that reads it and a description, so that
//! `pshmem-info` can print the settings in force and the documentation has a single source
//! (NVSHMEM's `env_defs.h` idea). Crates read variables only through the typed getters below,
//! which reject malformed values with an [`EnvError`] naming the variable. A leaf crate (no
//! tokio, no clap): the C ABI and the Python package read it too.
//!
//! With the `subscriber` feature, [`init_logging`] is the project's one logging set-up
//! (`PSHMEM_LOG`), for programs and the C and Python front ends.
#![forbid(unsafe_code)]

use std::time::Duration;

#[cfg(feature = "subscriber")]
mod log;
#[cfg(feature = "subscriber")]
pub use log::init_logging;

mod kind;
mod parse;

pub use kind::{ANY, Kind, Range, between};
pub use parse::{fallback, parse_bool, parse_cpu_list, parse_size};

/// A value a variable does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {reason}")]
pub struct EnvError {
    /// The variable.
    pub var: String,
    /// The value given.
    pub value: String,
    /// What it should be.
    pub reason: String,
}

/// One environment variable: name, default (as text; empty means "unset"), kind, owner and
/// meaning.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// The value used when it is unset ("" when unset means "absent").
    pub default: &'static str,
    /// What values it takes.
    pub kind: Kind,
    /// Bounds of a numeric value, in the kind's unit (bytes, seconds, …).
    pub range: Range,
    /// Which part of the runtime reads it.
    pub component: &'static str,
    /// What it does.
    pub description: &'static str,
}

macro_rules! vars {
    ($( $ident:ident = ($name:literal, $default:literal, $kind:expr, $range:expr, $comp:literal, $desc:literal); )*) => {
        $(
            #[doc = $desc]
            pub const $ident: EnvVar = EnvVar {
                name: $name,
                default: $default,
                kind: $kind,
                range: $range,
                component: $comp,
                description: $desc,
            };
        )*
        /// Every variable, in documentation order.
        pub const VARS: &[EnvVar] = &[$($ident),*];
    };
}

vars! {
    RANK = ("PSHMEM_RANK", "", Kind::Count, between(0.0, 1048575.0), "bootstrap",
        "This process's rank (PE number). Falls back to RANK (torchrun); unset everywhere means a 1-PE job.");
    WORLD_SIZE = ("PSHMEM_WORLD_SIZE", "", Kind::Count, between(1.0, 1048576.0), "bootstrap",
        "Number of PEs in the job. Falls back to WORLD_SIZE (torchrun).");
    LOCAL_RANK = ("PSHMEM_LOCAL_RANK", "", Kind::Count, between(0.0, 1048575.0), "bootstrap",
        "Rank among the PEs of this host. Falls back to LOCAL_RANK; unset means computed from host ids at join.");
    LOCAL_SIZE = ("PSHMEM_LOCAL_SIZE", "", Kind::Count, between(1.0, 1048576.0), "bootstrap",
        "Number of PEs on this host. Falls back to LOCAL_WORLD_SIZE; unset means computed at join.");
    BOOTSTRAP_ADDR = ("PSHMEM_BOOTSTRAP_ADDR", "", Kind::Address, ANY, "bootstrap",
        "host:port where rank 0 listens. Falls back to MASTER_ADDR:(MASTER_PORT + PSHMEM_BOOTSTRAP_PORT_OFFSET).");
    BOOTSTRAP_PORT_OFFSET = ("PSHMEM_BOOTSTRAP_PORT_OFFSET", "1", Kind::Count, between(0.0, 65535.0), "bootstrap",
        "Added to MASTER_PORT when the torchrun variables are used, because torch's own TCPStore listens on MASTER_PORT.");
    JOB_SECRET = ("PSHMEM_JOB_SECRET", "", Kind::Hex, ANY, "bootstrap",
        "64-bit job secret (hex) that every bootstrap frame carries and the same-host heap exchange authenticates with; connections without it are refused. pshmrun (which passes it through PSHMEM_JOB_SECRET_FD instead) and unique ids make a random one; under torchrun or srun set the same random value on every rank (e.g. export PSHMEM_JOB_SECRET=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')): unset, the job is unauthenticated and says so once.");
    JOB_SECRET_FD = ("PSHMEM_JOB_SECRET_FD", "", Kind::Count, between(3.0, 1048575.0), "bootstrap",
        "Set by pshmrun: an inherited memfd (named pshmem-job-secret) holding the job secret, which a rank reads at its first init and then closes, so that the secret is not in /proc/<pid>/environ, which every process of the same user can read. It wins over PSHMEM_JOB_SECRET, except in a process where the descriptor is not open (one started by a rank that closed it): there PSHMEM_JOB_SECRET is taken if set.");
    BOOTSTRAP_TIMEOUT = ("PSHMEM_BOOTSTRAP_TIMEOUT", "60", Kind::Seconds, between(0.1, 86400.0), "bootstrap",
        "Seconds to wait for every rank to join; the error names the ranks that never arrived.");
    BOOTSTRAP_OP_TIMEOUT = ("PSHMEM_BOOTSTRAP_OP_TIMEOUT", "300", Kind::Seconds, between(0.1, 604800.0), "bootstrap",
        "Seconds one bootstrap collective may wait for live but slow ranks before failing: rank 0 then aborts the job naming them (ranks other than 0 wait 2 s more, for that verdict).");
    HEARTBEAT_MS = ("PSHMEM_BOOTSTRAP_HEARTBEAT_MS", "500", Kind::Millis, between(10.0, 60000.0), "bootstrap",
        "Interval between heartbeats on idle bootstrap connections, in milliseconds.");
    PEER_TIMEOUT_MS = ("PSHMEM_BOOTSTRAP_PEER_TIMEOUT_MS", "4000", Kind::Millis, between(100.0, 3600000.0), "bootstrap",
        "A connection silent for this long (no data, no heartbeat) means the peer is dead.");
    LAUNCHER_PID = ("PSHMEM_LAUNCHER_PID", "", Kind::Count, between(1.0, 4194304.0), "bootstrap",
        "Set by pshmrun: a rank's runtime (and what it started) dies with this launcher process, through a parent-death signal, even where the rank's program is a script that started it.");
    HOST_ID = ("PSHMEM_HOST_ID", "", Kind::Text, ANY, "bootstrap",
        "Overrides the host identity (hostname + boot id) used to find same-host peers; tests use it to emulate several hosts.");
    RENDEZVOUS_DIR = ("PSHMEM_RENDEZVOUS_DIR", "", Kind::Path, ANY, "bootstrap",
        "Where the ranks of a job that mpirun, mpiexec or srun started on one host meet when no address is named (rank 0 writes its unique id there, in a pshmem-<uid> folder private to the user): default $XDG_RUNTIME_DIR, else the temporary directory.");
    LOG = ("PSHMEM_LOG", "warn", Kind::Text, ANY, "all",
        "tracing filter for proxyshmem's own log (e.g. info, debug, pshmem_proxy=trace).");
    PROVIDER = ("PSHMEM_PROVIDER", "", Kind::Text, ANY, "transport",
        "libfabric provider to use (e.g. efa, verbs;ofi_rxm, tcp;ofi_rxm, shm, or 'sim' for the simulated fabric). Falls back to FI_PROVIDER, then efa > verbs;ofi_rxm > tcp;ofi_rxm > shm.");
    OFI_MORE = ("PSHMEM_OFI_MORE", "0", Kind::Count, between(0.0, 4096.0), "transport",
        "libfabric doorbell batching: a run of up to this many posts on one rail carries FI_MORE (the provider may ring the NIC's doorbell once for the run); the last post of each proxy batch goes without it. 0: off.");
    FABRIC_IFACE = ("PSHMEM_FABRIC_IFACE", "", Kind::Text, ANY, "transport",
        "Network interface or address the tcp provider binds (default: loopback when all PEs share a host, else libfabric's choice).");
    SIM_REORDER = ("PSHMEM_SIM_REORDER", "1", Kind::Bool, ANY, "transport",
        "Simulated fabric: deliver operations to a peer out of order (1) or in order (0).");
    SIM_DELAY_US = ("PSHMEM_SIM_DELAY_US", "0", Kind::Micros, between(0.0, 10000000.0), "transport",
        "Simulated fabric: extra delivery delay per operation in microseconds (random up to this value).");
    SIM_BANDWIDTH_GBPS = ("PSHMEM_SIM_BANDWIDTH_GBPS", "0", Kind::Number, between(0.0, 100000.0), "transport",
        "Simulated fabric: modelled link bandwidth in GB/s (0 = unlimited; otherwise at least 0.001).");
    SIM_DUPLICATE = ("PSHMEM_SIM_DUPLICATE", "0", Kind::Number, between(0.0, 1.0), "transport",
        "Simulated fabric: probability that a local completion is reported twice (fault injection: the proxy must ignore the second; 0 = never).");
    SIM_GPU_MEMORY = ("PSHMEM_SIM_GPU_MEMORY", "0", Kind::Bool, ANY, "transport",
        "Simulated fabric: 1 takes GPU memory (its NIC threads copy through CUDA), so a GPU heap is registered as with DMA-BUF instead of going through host staging (the only GPU path on the efa profile).");
    SIM_PROFILE = ("PSHMEM_SIM_PROFILE", "", Kind::Choice(&["", "efa"]), ANY, "transport",
        "Capabilities of the simulated fabric: default, or efa (EFA's: 4-byte remote CQ data (the immediate), 32-byte inject, 8 KiB sends; unordered unless PSHMEM_SIM_REORDER=0).");
    SYMMETRIC_SIZE = ("PSHMEM_SYMMETRIC_SIZE", "1073741824", Kind::Size, between(65536.0, 17592186044416.0), "runtime",
        "Bytes reserved for the symmetric heap of each PE (suffixes K, M, G accepted).");
    DISABLE_P2P = ("PSHMEM_DISABLE_P2P", "0", Kind::Bool, ANY, "runtime",
        "1 forces every operation through the ring and proxy, even to same-host PEs.");
    PROXY_THREADS = ("PSHMEM_PROXY_THREADS", "1", Kind::Count, between(1.0, 64.0), "proxy",
        "Proxy threads per PE; the rings are spread over them.");
    RINGS = ("PSHMEM_RINGS", "1", Kind::Count, between(1.0, 512.0), "proxy",
        "Command rings per PE for host-initiated operations (each application thread issues on one, assigned round-robin).");
    GPU_RINGS = ("PSHMEM_GPU_RINGS", "", Kind::Count, between(1.0, 64.0), "runtime",
        "Command rings of the GPU path: ring 0 serves the device API; kernels that choose rings (the MoE kernels of ep/, by expert) spread their descriptors over all of them. Default: 8 per proxy thread when peers are reached through an RDMA provider, else 1 (docs/PROTOCOLS.md, 'GPU proxy shape').");
    GPU_PROXY_THREADS = ("PSHMEM_GPU_PROXY_THREADS", "", Kind::Count, between(1.0, 16.0), "runtime",
        "Proxy threads of the GPU path, each with its own endpoint (and landing area on the host-staged path); GPU ring r is drained by thread r modulo this. Default: when peers are reached through an RDMA provider, one per 3 cores of the GPU's share of its NUMA node, at most 4; else 1.");
    RING_SLOTS = ("PSHMEM_RING_SLOTS", "4096", Kind::Count, between(2.0, 1048576.0), "proxy",
        "Descriptor slots per command ring (power of two).");
    PROXY_BATCH = ("PSHMEM_PROXY_BATCH", "64", Kind::Count, between(1.0, 65536.0), "proxy",
        "Most descriptors a proxy drains from one ring before posting and polling.");
    PROXY_IDLE_US = ("PSHMEM_PROXY_IDLE_US", "200", Kind::Micros, between(0.0, 10000000.0), "proxy",
        "After this many microseconds without work, incoming traffic and anything in flight, the proxy stops spinning and blocks; traffic that wakes it restarts the count; 0 spins forever.");
    PROXY_SLEEP_US = ("PSHMEM_PROXY_SLEEP_US", "50", Kind::Micros, between(1.0, 1000000.0), "proxy",
        "Longest an idle proxy blocks before looking at its rings again, in microseconds: on the transport's wait descriptor where it has one (incoming traffic wakes it at once), else asleep.");
    PROXY_MAX_INFLIGHT = ("PSHMEM_PROXY_MAX_INFLIGHT", "256", Kind::Count, between(1.0, 65536.0), "proxy",
        "Most transport operations a proxy thread keeps in flight; the rest wait in its queues (flow control towards the provider).");
    PROXY_MAX_INFLIGHT_PER_PE = ("PSHMEM_PROXY_MAX_INFLIGHT_PER_PE", "256", Kind::Count, between(1.0, 65536.0), "proxy",
        "Most transport operations one proxy thread keeps in flight to one destination PE (a burst to one peer waits in the proxy, traffic to the others moves on).");
    STRONG_SIGNALS = ("PSHMEM_STRONG_SIGNALS", "0", Kind::Bool, ANY, "proxy",
        "On unordered fabrics with remote CQ data (EFA, shm, several rails): 1 makes every signal (signal, put-with-signal) from one PE to another apply only after every put and p that the same ring issued to that PE before it landed. 0: a put-with-signal's signal waits only for its own data (the NVSHMEM rule; order other puts with a fence). Either way signals apply in the order issued (a sequence number, held at the target).");
    TRACE = ("PSHMEM_TRACE", "", Kind::Path, ANY, "proxy",
        "Path prefix of the proxy trace: each proxy thread keeps every operation's arrival, posts and finish, and writes PATH.<thread>.json (Chrome trace; opens in Perfetto) and PATH.<thread>.summary.json (with the thread's CPU profile: time per phase of its loop, inside transport calls and GPU copy calls) when it stops. Empty: no trace.");
    PROXY_CPU = ("PSHMEM_PROXY_CPU", "", Kind::CpuList, ANY, "proxy",
        "Cores for the proxy threads: 'none' disables pinning, or a list like 3,5-7 (CPU numbers up to 8191); default from topology.");
    OP_TIMEOUT = ("PSHMEM_OP_TIMEOUT", "120", Kind::Seconds, between(0.1, 604800.0), "runtime",
        "Seconds a quiet, barrier or wait may block before failing with a timeout error (peer death fails sooner).");
    STAGING_CHUNK = ("PSHMEM_STAGING_CHUNK", "1048576", Kind::Size, between(4096.0, 1073741824.0), "proxy",
        "Bytes per staging chunk: the registered bounce buffers through which the proxy moves sources and destinations outside the symmetric heap (larger transfers are pipelined chunk by chunk).");
    STAGING_BUFFERS = ("PSHMEM_STAGING_BUFFERS", "8", Kind::Count, between(1.0, 1024.0), "proxy",
        "Staging chunks per proxy thread (the pipelining depth of staged transfers).");
    RAILS = ("PSHMEM_RAILS", "", Kind::Count, between(1.0, 32.0), "transport",
        "Endpoints (rails) per PE; default: the NICs chosen by topology, at least 1. The simulated fabric opens this many NICs per PE (default 1).");
    TOPOLOGY_XML = ("PSHMEM_TOPOLOGY_XML", "", Kind::Path, ANY, "topology",
        "Read the hwloc topology from this XML file instead of the running machine.");
    CUDA_DEVICE = ("PSHMEM_CUDA_DEVICE", "", Kind::Count, between(0.0, 1023.0), "runtime",
        "CUDA device ordinal for this PE, for the GPU path (not read in host mode; placement assumes local rank modulo the device count, as pshmem-info shows).");
    DISABLE_CUDA = ("PSHMEM_DISABLE_CUDA", "0", Kind::Bool, ANY, "runtime",
        "1 runs in host mode even where a CUDA driver and GPU are present.");
    GPU_SYMMETRIC_SIZE = ("PSHMEM_GPU_SYMMETRIC_SIZE", "1073741824", Kind::Size, between(0.0, 4398046511104.0), "runtime",
        "Bytes of GPU symmetric heap (device memory) per PE that the program may allocate, as NVSHMEM counts NVSHMEM_SYMMETRIC_SIZE (suffixes K, M, G accepted); gpu_init allocates this plus the runtime's own part (the teams' sync words, 2 MiB and more) and 2 MiB of alignment slack.");
    GPU_REGISTRATION = ("PSHMEM_GPU_REGISTRATION", "auto", Kind::Choice(&["auto", "dmabuf", "hmem", "staged"]), ANY, "runtime",
        "How the proxy's transport reaches the GPU heap: auto takes the first this PE's provider and GPU offer of dmabuf (the heap registered through a DMA-BUF fd), hmem (registered by address as CUDA memory, FI_HMEM) and staged (a pinned host landing area, copies by the proxy); naming one forces it, and gpu_init fails on every PE where a PE cannot have it. pshmem-info shows the choice and why.");
    EMULATE_GPU_HEAP = ("PSHMEM_EMULATE_GPU_HEAP", "0", Kind::Choice(&["0", "1", "staged", "registered"]), ANY, "runtime",
        "Tests the GPU paths' protocols without a GPU (use with PSHMEM_DISABLE_P2P=1): 1 (or staged) runs the host heap through the host-staged path (landing area, target-side copies and AMOs); registered treats it as a registered GPU heap (RMA into it, AMOs and copies through the device interface), as DMA-BUF registration would.");
    MAX_TEAMS = ("PSHMEM_MAX_TEAMS", "32", Kind::Count, between(4.0, 64.0), "runtime",
        "Team slots per PE, the four predefined teams included (falls back to NVSHMEM_MAX_TEAMS); each takes a little host and GPU heap per PE of the job.");
    COPY_ENGINE_MIN = ("PSHMEM_COPY_ENGINE_MIN", "2097152", Kind::Size, between(0.0, 1099511627776.0), "runtime",
        "Host-initiated puts and gets of at least this many bytes to a PE whose GPU heap this GPU maps (NVLink, same GPU) go through the copy engine instead of a one-block kernel; 0: always, a size above any transfer: never.");
    GPU_LANDING_SLOTS = ("PSHMEM_GPU_LANDING_SLOTS", "4", Kind::Count, between(1.0, 1024.0), "proxy",
        "Host-staged GPU path: landing slots (of PSHMEM_STAGING_CHUNK bytes, pinned) each PE keeps for every initiator; the chunks of one transfer in flight per target.");
}

/// NVSHMEM's variables that ours fall back to, for programs built against the NVSHMEM
/// compatibility headers (ours win when both are set).
pub const NVSHMEM_ALIASES: &[(&str, &str)] = &[
    ("PSHMEM_GPU_SYMMETRIC_SIZE", "NVSHMEM_SYMMETRIC_SIZE"),
    ("PSHMEM_DISABLE_P2P", "NVSHMEM_DISABLE_P2P"),
    ("PSHMEM_MAX_TEAMS", "NVSHMEM_MAX_TEAMS"),
];

/// The torchrun variables read as fallbacks (documented with the table; not ours to default).
pub const TORCHRUN_VARS: &[(&str, &str)] = &[
    ("RANK", "fallback for PSHMEM_RANK"),
    ("WORLD_SIZE", "fallback for PSHMEM_WORLD_SIZE"),
    ("LOCAL_RANK", "fallback for PSHMEM_LOCAL_RANK"),
    ("LOCAL_WORLD_SIZE", "fallback for PSHMEM_LOCAL_SIZE"),
    (
        "MASTER_ADDR",
        "with MASTER_PORT, fallback for PSHMEM_BOOTSTRAP_ADDR",
    ),
    ("MASTER_PORT", "see PSHMEM_BOOTSTRAP_PORT_OFFSET"),
    (
        "OMPI_COMM_WORLD_RANK",
        "with OMPI_COMM_WORLD_SIZE, _LOCAL_RANK and _LOCAL_SIZE (Open MPI's mpirun): this rank when ours and torchrun's are unset",
    ),
    (
        "PMI_RANK",
        "with PMI_SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS (Hydra: MPICH, Intel MPI, MVAPICH mpiexec): this rank when ours, torchrun's and Open MPI's are unset",
    ),
    (
        "SLURM_PROCID",
        "with SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST, SLURM_JOB_ID and SLURM_STEP_ID (srun, inside a step): this rank when no other launcher's variables are set",
    ),
    (
        "PMIX_NAMESPACE",
        "the job's name for the same-host rendezvous file (also OMPI_MCA_ess_base_jobid, PMI_KVSNAME)",
    ),
    (
        "PMIX_RANK",
        "alone (no launcher's size variable): a PMIx launcher's rank; the job's size then comes from the program's MPI world, and without MPI init fails naming what to set",
    ),
    ("FI_PROVIDER", "fallback for PSHMEM_PROVIDER"),
    (
        "NVSHMEM_SYMMETRIC_SIZE",
        "fallback for PSHMEM_GPU_SYMMETRIC_SIZE (programs built against the NVSHMEM headers)",
    ),
    ("NVSHMEM_DISABLE_P2P", "fallback for PSHMEM_DISABLE_P2P"),
    ("NVSHMEM_MAX_TEAMS", "fallback for PSHMEM_MAX_TEAMS"),
    (
        "CUDA_MPS_PIPE_DIRECTORY",
        "where the CUDA MPS check looks for the control daemon (default /tmp/nvidia-mps)",
    ),
    (
        EFA_DEVICE_RDMA,
        "libfabric's efa provider: 1 lets the NIC read and write GPU memory; pshmrun sets it to 1 \
         for its ranks when unset, and the transport warns when efa runs without it",
    ),
    (
        CUDA_DEVICE_MAX_CONNECTIONS,
        "CUDA's hardware work queues per context: pshmrun sets 16 when unset for jobs with peers \
         behind the proxy (emulated hosts, or P2P disabled), or 64 / PEs per GPU when several \
         share one under MPS (at least 8); the Python package sets the same on import. With \
         CUDA's default, streams share queues, and the proxy's copies and AMO kernels could \
         queue behind an application kernel waiting for them (seen as a stall of the MoE \
         kernels, 4 PEs on one H100 under MPS); the runtime warns when it finds peers behind \
         the proxy with the variable unset. Each queue costs context creation time (under MPS \
         on the H100, 2 PEs: 0.59 s with 16, 0.34 s with 8), so jobs whose peers are all mapped \
         keep CUDA's default; more than 64 per GPU ran out of memory under MPS there",
    ),
    (
        CUDA_MODULE_LOADING,
        "CUDA's module loading: pshmrun sets EAGER when unset for jobs with peers behind the \
         proxy (emulated hosts, or P2P disabled: a lazily loaded kernel can deadlock with a \
         kernel waiting on a peer that only this process's proxy can serve), and the runtime \
         warns when it finds LAZY with peers behind the proxy",
    ),
];

/// CUDA's number of hardware work queues per context (default 8).
pub const CUDA_DEVICE_MAX_CONNECTIONS: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// The hardware queues to ask CUDA for when `local` PEs share `gpus` GPUs (0: unknown, taken as
/// one each): 16 rather than CUDA's 8, so that the proxy's stream rarely shares a queue with a
/// stream whose kernel waits for it; but under CUDA MPS the queues of every PE on a GPU add up,
/// and on an H100 4 PEs × 32 or 8 × 16 ran out of memory where 4 × 16 and 8 × 8 did not: at
/// most 64 per GPU, never below CUDA's 8.
pub fn cuda_queues(local: usize, gpus: usize) -> usize {
    let per_gpu = if gpus == 0 { 1 } else { local.div_ceil(gpus) };
    (64 / per_gpu.max(1)).clamp(8, 16)
}

/// GPUs of this host as the NVIDIA driver lists them (`/proc/driver/nvidia/gpus`), without
/// touching CUDA; 0 when there is no driver.
pub fn local_gpus() -> usize {
    std::fs::read_dir("/proc/driver/nvidia/gpus").map_or(0, |d| d.count())
}

/// CUDA's module-loading mode (EAGER or LAZY).
pub const CUDA_MODULE_LOADING: &str = "CUDA_MODULE_LOADING";

/// libfabric's switch for EFA's device RDMA (GPU memory read and written by the NIC).
pub const EFA_DEVICE_RDMA: &str = "FI_EFA_USE_DEVICE_RDMA";

impl EnvVar {
    /// The raw value if set and not empty (ours, else the NVSHMEM variable it falls back to).
    pub fn raw(&self) -> Option<String> {
        let get = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        get(self.name).or_else(|| {
            NVSHMEM_ALIASES
                .iter()
                .find(|(ours, _)| *ours == self.name)
                .and_then(|(_, theirs)| get(theirs))
        })
    }

    /// The value in force: the set value, else the default.
    pub fn value(&self) -> String {
        self.raw().unwrap_or_else(|| self.default.to_string())
    }

    /// Whether the variable is explicitly set.
    pub fn is_set(&self) -> bool {
        self.raw().is_some()
    }

    /// `value` checked against the kind and the bounds.
    pub fn check(&self, value: &str) -> Result<(), EnvError> {
        self.kind.check(value).map_err(|why| self.bad(value, why))?;
        if let Some(x) = self.number(value)
            && !(self.range.lo..=self.range.hi).contains(&x)
        {
            return Err(self.bad(
                value,
                &format!(
                    "expected {} ({})",
                    self.range.describe(),
                    self.kind.describe()
                ),
            ));
        }
        Ok(())
    }

    /// A numeric value in the kind's unit (`None` for other kinds or unparsable text).
    fn number(&self, value: &str) -> Option<f64> {
        let v = value.trim();
        match self.kind {
            Kind::Count | Kind::Size | Kind::Millis | Kind::Micros => {
                parse_size(v).map(|x| x as f64)
            }
            Kind::Seconds | Kind::Number => v.parse().ok(),
            _ => None,
        }
    }

    /// The error for `value`, which this variable does not accept.
    pub fn bad(&self, value: &str, reason: &str) -> EnvError {
        EnvError {
            var: self.name.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    /// Parses the value in force as an unsigned integer (size suffixes K/M/G/T accepted),
    /// within the variable's bounds.
    pub fn usize(&self) -> Result<usize, EnvError> {
        let v = self.value();
        let n = parse_size(&v)
            .ok_or_else(|| self.bad(&v, "expected an unsigned integer (K/M/G suffix allowed)"))?;
        self.check(&v)?;
        Ok(n)
    }

    /// Like [`EnvVar::usize`] but `None` when unset and without default.
    pub fn opt_usize(&self) -> Result<Option<usize>, EnvError> {
        match self.raw() {
            None if self.default.is_empty() => Ok(None),
            _ => self.usize().map(Some),
        }
    }

    /// Parses a boolean: 1/0, true/false, yes/no, on/off.
    pub fn bool(&self) -> Result<bool, EnvError> {
        let v = self.value();
        parse_bool(&v).ok_or_else(|| self.bad(&v, "expected 0/1, true/false, yes/no or on/off"))
    }

    /// The value in force, checked against the variable's kind and bounds.
    pub fn checked(&self) -> Result<String, EnvError> {
        let v = self.value();
        if !v.is_empty() {
            self.check(&v)?;
        }
        Ok(v)
    }

    /// Parses whole seconds (fractions allowed) as a duration, within the bounds.
    pub fn secs(&self) -> Result<Duration, EnvError> {
        let v = self.value();
        let d = v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| self.bad(&v, "expected a non-negative number of seconds"))?;
        self.check(&v)?;
        Ok(d)
    }

    /// Parses a non-negative number, within the bounds.
    pub fn number_value(&self) -> Result<f64, EnvError> {
        let v = self.value();
        self.check(&v)?;
        v.trim()
            .parse::<f64>()
            .map_err(|_| self.bad(&v, "expected a number"))
    }

    /// Parses milliseconds as a duration.
    pub fn millis(&self) -> Result<Duration, EnvError> {
        self.usize().map(|ms| Duration::from_millis(ms as u64))
    }

    /// Parses microseconds as a duration.
    pub fn micros(&self) -> Result<Duration, EnvError> {
        self.usize().map(|us| Duration::from_micros(us as u64))
    }
}

/// Checks every variable in force against its kind and bounds: the first one that does not
/// hold, named with its value and what it should be.
pub fn validate_all() -> Result<(), EnvError> {
    VARS.iter().try_for_each(|v| v.checked().map(drop))
}

/// Renders the table (name, value in force, default, description) for `pshmem-info`.
pub fn render_table() -> String {
    let mut out = String::new();
    for v in VARS {
        let now = v.raw();
        let shown = match (&now, v.default) {
            (Some(s), _) => format!("{s} (set)"),
            (None, "") => "(unset)".to_string(),
            (None, d) => format!("{d} (default)"),
        };
        out.push_str(&format!(
            "  {:<34} {:<22} {:<13} {}\n",
            v.name,
            shown,
            v.kind.describe().replace("\\|", "|"),
            v.description
        ));
    }
    out
}

/// Renders the table as the Markdown of `docs/ENVIRONMENT.md` (a test keeps the file current).
pub fn render_markdown() -> String {
    let mut out = String::from(
        "# Environment variables\n\nGenerated from `env/src/lib.rs` (the one table); \
         `PSHMEM_BLESS=1 cargo test -p pshmem-env env_doc` rewrites it.\n\n\
         | variable | default | kind | range | read by | meaning |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for v in VARS {
        let d = if v.default.is_empty() {
            "(unset)"
        } else {
            v.default
        };
        let range = if v.range.bounded() {
            v.range.describe()
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| `{}` | `{d}` | {} | {range} | {} | {} |\n",
            v.name,
            v.kind.describe(),
            v.component,
            v.description
        ));
    }
    out.push_str("\nFallbacks read from other launchers and libraries:\n\n| variable | use |\n| --- | --- |\n");
    for (n, d) in TORCHRUN_VARS {
        out.push_str(&format!("| `{n}` | {d} |\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn cuda_queues_stay_within_what_mps_can_hold() {
        assert_eq!(super::cuda_queues(1, 1), 16);
        assert_eq!(super::cuda_queues(8, 8), 16, "one PE per GPU");
        assert_eq!(super::cuda_queues(4, 1), 16, "4 x 16 ran under MPS");
        assert_eq!(super::cuda_queues(8, 1), 8, "8 x 16 did not");
        assert_eq!(super::cuda_queues(16, 1), 8, "never below CUDA's 8");
        assert_eq!(super::cuda_queues(3, 0), 16, "no driver: one PE per GPU");
    }

    use super::*;

    #[test]
    fn env_doc_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ENVIRONMENT.md");
        let want = render_markdown();
        if std::env::var("PSHMEM_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/ENVIRONMENT.md is stale: run PSHMEM_BLESS=1 cargo test -p pshmem-env env_doc"
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size(" 64K "), Some(65536));
        assert_eq!(parse_size("16m"), Some(16 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("3,5-7"), Some(vec![3, 5, 6, 7]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("7-5"), None);
        // A typo's range is refused, not expanded (it aborted on a 32 GiB allocation).
        assert_eq!(parse_cpu_list("0-4294967295"), None);
        assert_eq!(parse_cpu_list("8192"), None);
        assert_eq!(parse_cpu_list("8190-8191"), Some(vec![8190, 8191]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }

    #[test]
    fn every_default_is_a_value_of_its_kind_within_its_bounds() {
        for v in VARS {
            if !v.default.is_empty() {
                assert_eq!(v.check(v.default), Ok(()), "{}={}", v.name, v.default);
            }
        }
    }

    #[test]
    fn bounds_refuse_with_the_allowed_range() {
        let e = RAILS.check("999").unwrap_err();
        assert_eq!(e.var, "PSHMEM_RAILS");
        assert!(e.reason.contains("1..=32"), "{e}");
        assert!(RAILS.check("0").is_err());
        assert!(RAILS.check("4").is_ok());
        let e = RING_SLOTS.check("1T").unwrap_err();
        assert!(e.reason.contains("2..=1M"), "{e}");
        assert!(OP_TIMEOUT.check("0").is_err());
        assert!(BOOTSTRAP_TIMEOUT.check("1.5").is_ok());
        assert!(SYMMETRIC_SIZE.check("1G").is_ok());
        assert!(SYMMETRIC_SIZE.check("100").is_err());
    }

    #[test]
    fn kinds_refuse_what_they_do_not_take() {
        assert!(Kind::Count.check("12x").is_err());
        assert!(Kind::Bool.check("maybe").is_err());
        assert!(Kind::Seconds.check("-1").is_err());
        assert!(Kind::Seconds.check("nan").is_err());
        assert!(Kind::Hex.check("xyz").is_err());
        assert!(Kind::Address.check("localhost").is_err());
        assert!(Kind::CpuList.check("3-1").is_err());
        assert!(Kind::Choice(&["a", "b"]).check("c").is_err());
        assert!(Kind::Address.check("127.0.0.1:29500").is_ok());
        assert!(Kind::Hex.check("0xdeadbeef").is_ok());
    }

    #[test]
    fn table_names_are_unique_and_prefixed() {
        let mut names: Vec<_> = VARS.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len(), "duplicate variable in the table");
        assert!(VARS.iter().all(|v| v.name.starts_with("PSHMEM_")));
        assert!(VARS.iter().all(|v| !v.description.is_empty()));
    }
}
