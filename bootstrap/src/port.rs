//! Choosing a port for rank 0 before it runs (the launcher and the test harness do this).
//!
//! A port taken with `bind(0)` and released comes from the kernel's ephemeral range, the same
//! range every outgoing connection draws its local port from. On a busy host (a test suite
//! running jobs side by side) an outgoing connection can take it before rank 0 binds it, and
//! rank 0 then fails with "address in use". Ports below the ephemeral range are never handed
//! to outgoing connections, so choosing there leaves only the race with another program that
//! explicitly binds the same port within the same instant.

use std::{
    io,
    net::{Ipv4Addr, TcpListener},
    sync::{
        OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

/// Lowest port we choose from (below it live well-known services).
const FLOOR: u32 = 20_000;
/// How many candidates to try before falling back to an ephemeral port.
const TRIES: u32 = 512;

/// A TCP port on 127.0.0.1 that nothing listens on now, below the kernel's ephemeral range.
///
/// Successive calls in one process return different ports; different processes start at
/// different places (process id and clock), so concurrent jobs rarely probe the same port.
/// Falls back to an ephemeral port if the range below the ephemeral one is too small or full.
pub fn free_loopback_port() -> io::Result<u16> {
    // Relaxed: the counter only spreads successive calls apart; no other memory depends on it.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low().unwrap_or(32_768);
    if low > FLOOR + TRIES {
        let span = low - FLOOR;
        // Where this process starts probing: fixed for its lifetime, so that successive calls
        // walk the range one port after the next and never return a port twice.
        static START: OnceLock<u32> = OnceLock::new();
        let start = *START.get_or_init(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            std::process::id().wrapping_mul(7_919).wrapping_add(nanos) % span
        });
        let candidates = (0..TRIES).map(|_| {
            let k = NEXT.fetch_add(1, Ordering::Relaxed);
            FLOOR + (start + k % span) % span
        });
        if let Some(port) = first_free(candidates)? {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The first candidate that 127.0.0.1 lets us bind now (`None` if every one is taken).
fn first_free(candidates: impl IntoIterator<Item = u32>) -> io::Result<Option<u16>> {
    for port in candidates {
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(_) => return Ok(Some(port)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The first port of the kernel's ephemeral range (Linux), if it can be read.
fn ephemeral_low() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_bindable_distinct_and_below_the_ephemeral_range() {
        let low = ephemeral_low().unwrap_or(32_768);
        let ports: Vec<u16> = (0..64).map(|_| free_loopback_port().unwrap()).collect();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "{ports:?}");
        for p in ports {
            if low > FLOOR + TRIES {
                assert!(
                    (FLOOR..low).contains(&(p as u32)),
                    "{p} outside {FLOOR}..{low}"
                );
            }
            TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
        }
    }

    #[test]
    fn a_taken_port_is_skipped() {
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = u32::from(held.local_addr().unwrap().port());
        let free = u32::from(free_loopback_port().unwrap());
        assert_eq!(first_free([taken, free]).unwrap(), Some(free as u16));
        assert_eq!(first_free([taken]).unwrap(), None);
    }
}
