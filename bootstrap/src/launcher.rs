//! Which launcher started this process, read from the variables each one sets for its ranks:
//! Open MPI's `mpirun` (and `prterun`), the Hydra launcher of MPICH, Intel MPI and MVAPICH
//! (`mpiexec`, whose PMI variables these are), and Slurm's `srun`. Ours (`PSHMEM_RANK`, …) and
//! torchrun's are read by [`crate::config`]; this module only says what a launcher claims, so
//! that a job it started as several ranks never runs as several one-PE jobs.
//!
//! Read from the launchers' documentation: Open MPI's mpirun(1) "Exported environment
//! variables" (`OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}`), MPICH's Hydra
//! (`PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`) and sbatch(1)/srun(1)'s
//! output environment (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`, `SLURM_LOCALID`,
//! `SLURM_STEP_NUM_NODES`, `SLURM_STEP_NODELIST`, `SLURM_JOB_ID`, `SLURM_STEP_ID`). Slurm's
//! variables count only inside a job step (`SLURM_STEP_NUM_TASKS`): a batch script's own
//! process also sees `SLURM_NTASKS`, but it is one process, not a rank of a step.

use std::fmt;

use crate::error::{BootstrapError, Result};

/// A launcher whose variables name this process's rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Open MPI's `mpirun` / `prterun`.
    OpenMpi,
    /// Hydra (`mpiexec` of MPICH, Intel MPI, MVAPICH): the PMI variables.
    Hydra,
    /// Slurm's `srun`, inside a job step.
    Slurm,
    /// A PMIx launcher that exports only `PMIX_RANK` (the job's size is PMIx's to tell): the
    /// program's MPI world gives the size.
    Pmix,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OpenMpi => "Open MPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE)",
            Self::Hydra => "an MPICH-style mpiexec (PMI_RANK/PMI_SIZE)",
            Self::Slurm => "srun (SLURM_PROCID/SLURM_STEP_NUM_TASKS)",
            Self::Pmix => "a PMIx launcher (PMIX_RANK)",
        })
    }
}

/// What a launcher says about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Who said it.
    pub by: Launcher,
    /// This process's rank.
    pub rank: usize,
    /// The number of ranks.
    pub size: usize,
    /// Its rank among the job's processes on this host, if the launcher says.
    pub local_rank: Option<usize>,
    /// The job's processes on this host, if the launcher says.
    pub local_size: Option<usize>,
    /// The hosts the job spans, if the launcher says.
    pub hosts: Option<usize>,
    /// A name of this job that every rank of it sees and later jobs do not reuse, if the
    /// launcher gives one (the rendezvous file's name).
    pub job: Option<String>,
    /// Slurm's host list of the step (`node[01-04],gpu7`).
    pub nodelist: Option<String>,
}

impl Launch {
    /// Whether the launcher says every rank runs on this host.
    pub fn one_host(&self) -> bool {
        self.spans_hosts() == Some(false)
    }

    /// Whether the job spans several hosts, by the launcher's host count or this host's share
    /// of the ranks; `None` when it says neither.
    pub fn spans_hosts(&self) -> Option<bool> {
        match (self.hosts, self.local_size) {
            (Some(h), _) => Some(h > 1),
            (None, Some(local)) => Some(local < self.size),
            (None, None) => None,
        }
    }

    /// The error this rank reports about its launch.
    pub fn error(&self, reason: impl Into<String>) -> BootstrapError {
        BootstrapError::Launch {
            rank: self.rank,
            world: self.size,
            launcher: self.by.to_string(),
            reason: reason.into(),
        }
    }
}

/// The launcher named by the variables `get` returns, first Open MPI's, then Hydra's, then
/// Slurm's (an MPI launched by srun sets its own only once MPI starts, and then they agree);
/// `Ok(None)` when none is set. A rank without its size (or the reverse), or a value that is
/// not a number, is an error naming the variable.
pub fn detect(get: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
    let num = |var: &str| number(&get, var);
    let pair = |rank: &str, size: &str| pair(&get, rank, size);
    if let Some((rank, size)) = pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")? {
        return Ok(Some(Launch {
            by: Launcher::OpenMpi,
            rank,
            size,
            local_rank: num("OMPI_COMM_WORLD_LOCAL_RANK")?,
            local_size: num("OMPI_COMM_WORLD_LOCAL_SIZE")?,
            hosts: None,
            // PMIx names each job (Open MPI 5); Open MPI 4's runtime gives a job id.
            job: get("PMIX_NAMESPACE").or_else(|| get("OMPI_MCA_ess_base_jobid")),
            nodelist: None,
        }));
    }
    if let Some((rank, size)) = pair("PMI_RANK", "PMI_SIZE")? {
        return Ok(Some(Launch {
            by: Launcher::Hydra,
            rank,
            size,
            local_rank: num("MPI_LOCALRANKID")?,
            local_size: num("MPI_LOCALNRANKS")?,
            hosts: None,
            job: get("PMI_KVSNAME").or_else(|| get("PMIX_NAMESPACE")),
            nodelist: None,
        }));
    }
    if let Some(size) = num("SLURM_STEP_NUM_TASKS")? {
        let rank = num("SLURM_PROCID")?.ok_or_else(|| {
            BootstrapError::Config(pshmem_env::EnvError {
                var: "SLURM_PROCID".into(),
                value: "unset".into(),
                reason: "SLURM_STEP_NUM_TASKS is set: srun sets both".into(),
            })
        })?;
        let hosts = num("SLURM_STEP_NUM_NODES")?;
        let job = match (get("SLURM_JOB_ID"), get("SLURM_STEP_ID")) {
            (Some(j), Some(s)) => Some(format!("slurm-{j}.{s}")),
            _ => None,
        };
        return Ok(Some(Launch {
            by: Launcher::Slurm,
            rank,
            size,
            local_rank: num("SLURM_LOCALID")?,
            local_size: (hosts == Some(1)).then_some(size),
            hosts,
            job,
            nodelist: get("SLURM_STEP_NODELIST"),
        }));
    }
    Ok(None)
}

/// Variable `var` as a number (`None` when unset).
fn number(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Option<usize>> {
    match get(var) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            BootstrapError::Config(pshmem_env::EnvError {
                var: var.into(),
                value: v,
                reason: "expected a non-negative integer".into(),
            })
        }),
    }
}

/// A launcher's rank and size variables, set together or not at all.
fn pair(
    get: &impl Fn(&str) -> Option<String>,
    rank: &str,
    size: &str,
) -> Result<Option<(usize, usize)>> {
    match (number(get, rank)?, number(get, size)?) {
        (Some(r), Some(n)) => Ok(Some((r, n))),
        (None, None) => Ok(None),
        (r, _) => {
            let (set, unset) = if r.is_some() {
                (rank, size)
            } else {
                (size, rank)
            };
            Err(BootstrapError::Config(pshmem_env::EnvError {
                var: unset.into(),
                value: "unset".into(),
                reason: format!("{set} is set: the launcher sets both"),
            }))
        }
    }
}

/// A PMIx launcher that names only this process's rank (`PMIX_RANK`, no size variable of any
/// launcher above): the job's size is read from the program's MPI world when MPI is
/// initialised; otherwise the job cannot be sized here, and that is an error naming what to
/// set — never a job of one PE. `Ok(None)` without `PMIX_RANK`.
pub fn pmix_only(get: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
    let Some(rank) = get("PMIX_RANK") else {
        return Ok(None);
    };
    let mut launch = Launch {
        by: Launcher::Pmix,
        rank: rank.trim().parse().unwrap_or(0),
        size: 0,
        local_rank: None,
        local_size: None,
        hosts: None,
        job: get("PMIX_NAMESPACE"),
        nodelist: None,
    };
    let mpi = pshmem_mpi_sys::Mpi::find()
        .ok()
        .flatten()
        .filter(|m| m.active().unwrap_or(false));
    match mpi.map(|m| m.rank_size(m.world())) {
        Some(Ok((rank, size))) => {
            (launch.rank, launch.size) = (rank, size);
            Ok(Some(launch))
        }
        _ => Err(launch.error(format!(
            "PMIX_RANK={rank} is set but no launcher variable gives the job's size: initialise \
             MPI before pshmem (the job then meets over MPI_COMM_WORLD), or set PSHMEM_RANK, \
             PSHMEM_WORLD_SIZE and PSHMEM_BOOTSTRAP_ADDR"
        ))),
    }
}

/// The first host of a Slurm host list (`node[07-09,12],gpu1` → `node07`), as srun places
/// rank 0 on the step's first node.
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list.find([',', '[']).unwrap_or(list.len());
    let prefix = &list[..end];
    if list[end..].starts_with('[') {
        // The first number of the bracket, keeping its zero padding.
        let inner = &list[end + 1..];
        let first: String = inner.chars().take_while(|c| c.is_ascii_digit()).collect();
        if first.is_empty() {
            return None;
        }
        // A suffix after the bracket (`n[1-2]-ib`) belongs to the name too.
        let close = inner.find(']')?;
        let rest: String = inner[close + 1..]
            .chars()
            .take_while(|&c| c != ',')
            .collect();
        return Some(format!("{prefix}{first}{rest}"));
    }
    (!prefix.is_empty()).then(|| prefix.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn open_mpi_hydra_and_slurm_are_read() {
        let l = detect(env(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_NAMESPACE", "prterun-host-123@1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((l.by, l.rank, l.size), (Launcher::OpenMpi, 3, 4));
        assert_eq!((l.local_rank, l.local_size), (Some(1), Some(2)));
        assert!(!l.one_host());
        assert_eq!(l.spans_hosts(), Some(true));
        assert_eq!(l.job.as_deref(), Some("prterun-host-123@1"));

        let l = detect(env(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            ("MPI_LOCALNRANKS", "2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.by, l.rank, l.size, l.one_host()),
            (Launcher::Hydra, 0, 2, true)
        );

        let l = detect(env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_STEP_NUM_NODES", "2"),
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_NODELIST", "gpu[03-04]"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((l.by, l.rank, l.size), (Launcher::Slurm, 5, 8));
        assert_eq!(l.job.as_deref(), Some("slurm-77.0"));
        assert!(!l.one_host());
        let unknown = Launch {
            hosts: None,
            local_size: None,
            ..l
        };
        assert_eq!(unknown.spans_hosts(), None);
    }

    #[test]
    fn a_batch_script_is_not_a_step_and_half_a_pair_is_an_error() {
        // sbatch's own process: SLURM_NTASKS and SLURM_PROCID, but no step.
        let none = detect(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")])).unwrap();
        assert!(none.is_none());
        assert!(detect(env(&[])).unwrap().is_none());
        let e = detect(env(&[("OMPI_COMM_WORLD_RANK", "1")])).unwrap_err();
        assert!(e.to_string().contains("OMPI_COMM_WORLD_SIZE"), "{e}");
        let e = detect(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("PMI_RANK"), "{e}");
    }

    /// Without MPI in the process (this test binary has none), a rank number alone cannot size
    /// the job: an error, not one PE.
    #[test]
    fn a_pmix_rank_without_a_size_is_an_error() {
        assert!(pmix_only(env(&[])).unwrap().is_none());
        let e = pmix_only(env(&[("PMIX_RANK", "1")])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("PMIX_RANK=1") && text.contains("PSHMEM_WORLD_SIZE"),
            "{text}"
        );
    }

    #[test]
    fn the_first_host_of_a_slurm_list() {
        assert_eq!(first_host("node[07-09,12],gpu1").as_deref(), Some("node07"));
        assert_eq!(first_host("gpu1,node[2-3]").as_deref(), Some("gpu1"));
        assert_eq!(first_host("localhost").as_deref(), Some("localhost"));
        assert_eq!(first_host("n[001-004]-ib,x").as_deref(), Some("n001-ib"));
        assert_eq!(first_host("").as_deref(), None);
        assert_eq!(first_host("n[]").as_deref(), None);
    }
}
