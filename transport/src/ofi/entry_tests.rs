//! Unit tests of the entry choice, socket errors, shm names in one AV and CQ sizing.

use super::discover::{api_version, discover};
use super::*;

#[test]
fn only_a_socket_providers_connection_errors_mean_a_lost_peer() {
    for p in ["tcp", "tcp;ofi_rxm", "sockets", "udp;ofi_rxd"] {
        assert!(over_sockets(p), "{p}");
    }
    for p in ["efa", "efa-direct", "verbs;ofi_rxm", "shm", "tcpx"] {
        assert!(!over_sockets(p), "{p}");
    }
    assert!(connection_lost(true, libc::ENOTCONN));
    assert!(connection_lost(true, libc::ECONNRESET));
    assert!(!connection_lost(true, libc::EIO));
    // EFA's completion statuses are small numbers too: never read as errnos.
    assert!(!connection_lost(false, libc::ENOTCONN));
}

fn e(p: &str, f: &str, d: &str) -> (String, String, String) {
    (p.into(), f.into(), d.into())
}

#[test]
fn efa_direct_is_preferred_on_the_wanted_domain() {
    // libfabric ≥ 1.22 lists both fabrics for every EFA device.
    let list = [
        e("efa", "efa", "rdmap16s27-rdm"),
        e("efa", "efa-direct", "rdmap16s27-rdm"),
        e("efa", "efa", "rdmap32s27-rdm"),
        e("efa", "efa-direct", "rdmap32s27-rdm"),
    ];
    assert_eq!(pick_entry(&list, "rdmap32s27-rdm"), 3);
    assert_eq!(pick_entry(&list, "rdmap16s27-rdm"), 1);
    // An unknown domain: the first efa-direct entry.
    assert_eq!(pick_entry(&list, "nope"), 1);
}

#[test]
fn without_efa_direct_the_providers_first_entry_of_the_domain() {
    let old = [e("efa", "efa", "a"), e("efa", "efa", "b")];
    assert_eq!(pick_entry(&old, "b"), 1);
    assert_eq!(pick_entry(&old, "c"), 0);
    // Other providers never switch fabric, whatever the names.
    let tcp = [
        e("tcp;ofi_rxm", "10.0.0.0/24", "eth0"),
        e("tcp;ofi_rxm", "efa-direct", "eth0"),
    ];
    assert_eq!(pick_entry(&tcp, "eth0"), 0);
}

/// shm's endpoint names carry the creating pid, so a job whose pids straddle a power of ten
/// (9999 and 10000) has names of different lengths: they must all go into one AV, each at
/// the index of its insertion. (A packed insert refused them: CI saw "endpoint names of
/// different lengths" from a 3-PE shm job at pid 9996.)
#[test]
fn shm_names_of_different_lengths_go_into_one_av() {
    let version = api_version();
    let list = discover("shm", None, version, &[false])
        .expect("libfabric's shm provider")
        .list;
    let entry = list.iter().next().expect("an shm entry");
    let fab = Fabric::open(entry).expect("fabric");
    let domain = Domain::open(&fab, entry).expect("domain");
    let cq = Cq::open(&domain, 64).expect("cq");
    let av = Av::open(&domain, 8).expect("av");
    let ep = Endpoint::open(&domain, entry, &cq, &av).expect("endpoint");
    let own = ep.name().expect("name");
    let region = shm::region_of(&own).expect("an shm name holds <pid>:<uid>:<n>");
    // The same name with one more digit in its pid (a process that may not exist: shm
    // maps a peer's region when it first reaches it, not at insertion).
    let at = own
        .windows(region.len())
        .position(|w| w == region.as_bytes())
        .expect("the region in the name");
    let mut longer = own.clone();
    longer.insert(at, b'9');
    assert_eq!(entry.raw().addr_format, sys::FI_ADDR_STR);
    let names = vec![own, longer];
    // Read as a fixed format, the lengths must agree (the provider reads one length).
    let refused = av
        .insert(&names, false)
        .expect_err("a fixed format of two lengths");
    assert!(
        refused.to_string().contains("PE 1's endpoint name"),
        "{refused}"
    );
    let addrs = av
        .insert(&names, true)
        .expect("names of two lengths in one AV");
    assert_eq!(addrs.len(), 2);
    assert_ne!(addrs[0], addrs[1], "two names, two addresses: {addrs:?}");
    shm::unlink_own(&[region]);
}

#[test]
fn completion_queues_leave_room_for_every_peers_immediates() {
    let cfg = OfiConfig::from_env(Some("tcp")).expect("config");
    let local = cq_entries(1024, 256, 0);
    // 64 PEs, each with its per-destination limit in flight to this one.
    let n = 64;
    let want = cq_entries(1024, 256, (n - 1) * cfg.incoming_per_peer);
    assert_eq!(want - local, 63 * cfg.incoming_per_peer);
    assert!(cfg.incoming_per_peer >= 1);
}
