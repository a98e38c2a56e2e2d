//! `rt-sockets`: what a PE listens on once the runtime is up.

use pshmem::Pshmem;

/// Prints what this PE listens on once the runtime is up: `SOCKETS rank= transport=
/// tcp_listen=<ports> unix_listen=<count>`, from the kernel's socket tables joined with this
/// process's descriptors (so a test sees which endpoints a job opened).
pub fn run(s: &Pshmem) -> Result<(), String> {
    let mine: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("/proc/self/fd: {e}"))?
        .filter_map(|f| std::fs::read_link(f.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let mut ports = Vec::new();
    for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in table(path).lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st ... inode: LISTEN is state 0A.
            if f.len() > 9 && f[3] == "0A" && mine.contains(f[9]) {
                let port = f[1].rsplit(':').next().unwrap_or("0");
                ports.push(u16::from_str_radix(port, 16).unwrap_or(0));
            }
        }
    }
    ports.sort_unstable();
    // Num RefCount Protocol Flags Type St Inode: a listener has __SO_ACCEPTCON (0x10000).
    let unix = table("/proc/net/unix")
        .lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            f.len() > 6 && f[3] == "00010000" && mine.contains(f[6])
        })
        .count();
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    println!(
        "SOCKETS rank={} transport={} tcp_listen={} unix_listen={unix}",
        s.my_pe(),
        s.transport_name().replace(' ', "_"),
        if list.is_empty() {
            "-".to_string()
        } else {
            list.join(",")
        }
    );
    s.barrier_all().map_err(crate::runtime::e)
}
