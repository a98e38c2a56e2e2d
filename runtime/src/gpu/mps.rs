//! Whether CUDA MPS serves this host. Without it, kernels of different processes on one GPU
//! are time-sliced: a PE spinning on a flag holds the GPU for a whole time slice, and device
//! operations between PEs sharing a GPU run about 2000x slower (`p` ping-pong 2229 µs instead
//! of 0.52 µs on one H200). Several PEs per GPU therefore need MPS, as with NVSHMEM.
//!
//! The check is the control daemon's pipe in `CUDA_MPS_PIPE_DIRECTORY` (default
//! `/tmp/nvidia-mps`), where every client of the daemon must look too; the daemon's process is
//! reported when it is visible from here (a container may not see it).

use std::path::PathBuf;

/// What was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsStatus {
    /// The pipe directory clients use.
    pub pipe_dir: PathBuf,
    /// Whether the daemon's control pipe is there.
    pub control: bool,
    /// Whether an `nvidia-cuda-mps-control` process is visible.
    pub daemon_visible: bool,
}

impl MpsStatus {
    /// Whether MPS serves this process's clients.
    pub fn running(&self) -> bool {
        self.control
    }

    /// One line for tools and warnings.
    pub fn describe(&self) -> String {
        match (self.control, self.daemon_visible) {
            (true, true) => format!("running (pipe directory {})", self.pipe_dir.display()),
            (true, false) => format!(
                "control pipe in {} (daemon not visible from here)",
                self.pipe_dir.display()
            ),
            (false, true) => format!(
                "not serving this process (a daemon runs, but not with pipe directory {}: set \
                 CUDA_MPS_PIPE_DIRECTORY as it was set for nvidia-cuda-mps-control)",
                self.pipe_dir.display()
            ),
            (false, false) => "not running".into(),
        }
    }
}

/// How to start MPS, for messages.
pub const HOW_TO_START: &str = "start it before the job with `export \
    CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log; mkdir -p \
    $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d` (stop it with `echo quit | \
    nvidia-cuda-mps-control`), with the same CUDA_MPS_PIPE_DIRECTORY in every PE";

/// Looks for MPS.
pub fn status() -> MpsStatus {
    let pipe_dir = pshmem_env::fallback("CUDA_MPS_PIPE_DIRECTORY")
        .map_or_else(|| PathBuf::from("/tmp/nvidia-mps"), PathBuf::from);
    MpsStatus {
        control: pipe_dir.join("control").exists(),
        daemon_visible: daemon_visible(),
        pipe_dir,
    }
}

/// Whether a process named `nvidia-cuda-mps-control` is visible in /proc.
fn daemon_visible() -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                let argv0 = c.split(|&b| b == 0).next().unwrap_or_default();
                argv0.ends_with(b"nvidia-cuda-mps-control")
            })
        })
}

/// The same-host PEs (other than `me`) whose GPU has PCI bus id `mine`, given each PE's
/// bus id (`None` for PEs on other hosts).
pub(crate) fn sharing(me: usize, mine: &str, buses: &[Option<String>]) -> Vec<usize> {
    buses
        .iter()
        .enumerate()
        .filter(|(r, b)| *r != me && b.as_deref() == Some(mine))
        .map(|(r, _)| r)
        .collect()
}

/// Says once per process that PEs share this GPU without MPS.
pub(crate) fn warn_if_unserved(me: usize, bus: &str, others: &[usize]) {
    if others.is_empty() {
        return;
    }
    let st = status();
    if st.running() {
        return;
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let others: Vec<String> = others.iter().map(ToString::to_string).collect();
        let msg = format!(
            "PE {me} shares GPU {bus} with PE(s) {} but CUDA MPS is {}: their kernels are \
             time-sliced and device operations between them run about 2000x slower. For \
             several PEs per GPU, {HOW_TO_START}.",
            others.join(", "),
            st.describe()
        );
        if tracing::dispatcher::has_been_set() {
            tracing::warn!("{msg}");
        } else {
            eprintln!("pshmem: warning: {msg}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_names_the_same_host_pes_on_this_gpu() {
        let b = |s: &str| Some(s.to_string());
        let buses = [
            b("0000:01:00.0"),
            b("0000:01:00.0"),
            b("0000:02:00.0"),
            None,
        ];
        assert_eq!(sharing(0, "0000:01:00.0", &buses), vec![1]);
        assert_eq!(sharing(2, "0000:02:00.0", &buses), Vec::<usize>::new());
    }

    #[test]
    fn the_status_follows_the_control_pipe() {
        let dir = std::env::temp_dir().join(format!("pshmem-mps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut st = MpsStatus {
            control: dir.join("control").exists(),
            daemon_visible: false,
            pipe_dir: dir.clone(),
        };
        assert!(!st.running());
        assert_eq!(st.describe(), "not running");
        std::fs::write(dir.join("control"), b"").unwrap();
        st.control = dir.join("control").exists();
        assert!(st.running());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
