//! Files of libfabric's shm provider: each endpoint creates a region `/dev/shm/<pid>:<uid>:<n>`
//! (16 MiB) that its peers map when they insert its address, and unlinks it only when the
//! endpoint is closed, so a SIGKILLed process leaves it behind for good.
//!
//! Two measures keep the host clean: with libfabric 1.x, once every PE of a job has connected
//! (so has mapped every region it will ever map), each PE unlinks its own regions
//! ([`unlink_own`]); the mappings stay valid and nothing is left behind however the job ends.
//! (2.x maps a region at the first message instead, so there the files stay until the
//! endpoint closes: [`mapped_at_insert`].) And a process opening the transport removes the
//! regions of dead processes of its user ([`sweep_stale`]), for jobs killed during their start,
//! before the unlink, or on 2.x.

use std::{ffi::CString, path::Path};

/// Where POSIX shared memory lives.
const SHM_DIR: &str = "/dev/shm";

/// The region file behind an shm endpoint name (`<pid>:<uid>:<n>`, possibly behind a URI
/// scheme), or `None` if the name is not one.
pub(crate) fn region_of(name: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(name).ok()?.trim_end_matches('\0');
    let s = s.rsplit("://").next()?;
    parse_region(s).map(|_| s.to_string())
}

/// The creating pid of a region file name `<pid>:<uid>:<n>` (digits only).
fn parse_region(name: &str) -> Option<i32> {
    let mut parts = name.split(':');
    let pid = parts.next()?;
    let rest: Vec<&str> = parts.collect();
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    (rest.len() == 2 && digits(pid) && rest.iter().all(|p| digits(p)))
        .then(|| pid.parse().ok())
        .flatten()
}

/// Whether the shm provider of libfabric `version` maps a peer's region when its address is
/// inserted (1.x), so that the region files can go once every peer connected. 2.1's maps it at
/// the first message (unlinked earlier, the peer's `shm_open` fails with ENOENT and the first
/// operation never completes: found running our tests against 2.1.0).
pub(crate) fn mapped_at_insert(version: u32) -> bool {
    version < pshmem_libfabric_sys::FI_VERSION(2, 0)
}

/// Unlinks this process's own region files (after every peer has mapped them).
pub(crate) fn unlink_own(regions: &[String]) {
    for r in regions {
        let Ok(c) = CString::new(format!("/{r}")) else {
            continue;
        };
        match nix::sys::mman::shm_unlink(c.as_c_str()) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => tracing::debug!("shm_unlink {r}: {e}"),
        }
    }
}

/// Removes region files of this user whose creating process no longer exists; returns how
/// many. A pid that exists (even if reused by another program) keeps its file: only a file
/// whose creator is certainly gone is removed.
pub(crate) fn sweep_stale() -> usize {
    sweep_in(Path::new(SHM_DIR))
}

fn sweep_in(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let uid = nix::unistd::getuid().as_raw();
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(parse_region) else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        if meta.uid() != uid || !meta.is_file() || alive(pid) {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
            tracing::debug!("removed {} (its process {pid} is gone)", e.path().display());
        }
    }
    removed
}

/// Whether a process with this pid exists and has not exited. A zombie has exited: its
/// parent has not reaped it yet, which may be never (a launcher killed with its ranks leaves
/// them to a pid 1 that does not reap, in some containers). EPERM from kill means it exists
/// under another user.
fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself hold ')'.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next());
        return !matches!(state, Some("Z") | Some("X"));
    }
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_names_are_recognised_exactly() {
        assert_eq!(parse_region("1234:0:0"), Some(1234));
        assert_eq!(parse_region("1234:0:12"), Some(1234));
        for bad in [
            "1234:0",
            "1234:0:0:0",
            "a1:0:0",
            ":0:0",
            "1:0:",
            "sem.x",
            "1234",
        ] {
            assert_eq!(parse_region(bad), None, "{bad}");
        }
        assert_eq!(region_of(b"55:0:1\0").as_deref(), Some("55:0:1"));
        assert_eq!(region_of(b"fi_shm://55:0:1").as_deref(), Some("55:0:1"));
        assert_eq!(region_of(b"fi_sockaddr_in://127.0.0.1:5"), None);
    }

    #[test]
    fn the_sweep_removes_only_files_of_dead_processes() {
        let dir = std::env::temp_dir().join(format!("pshmem-shm-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A pid that cannot exist (above pid_max's ceiling of 2^22), ours, and a non-region.
        let dead = dir.join("4194999:0:0");
        let live = dir.join(format!("{}:0:0", std::process::id()));
        let other = dir.join("unrelated");
        for f in [&dead, &live, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        // A process that has exited but is not reaped yet (a zombie) is gone too.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let zombie = dir.join(format!("{}:0:0", child.id()));
        std::fs::write(&zombie, b"x").unwrap();
        let t = std::time::Instant::now();
        while alive(child.id() as i32) && t.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(sweep_in(&dir), 2);
        assert!(!dead.exists() && !zombie.exists());
        assert!(live.exists() && other.exists());
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
