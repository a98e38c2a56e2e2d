//! Who is at the other end of a TCP connection, when it is on this machine: the kernel's socket
//! table (`NETLINK_SOCK_DIAG`, the interface `ss` uses) answers for the peer's own socket, found
//! by its exact address pair; where sock_diag is missing (a kernel without `inet_diag`), the
//! same table read from `/proc/net/tcp` and `tcp6` does. A peer on another host has no socket
//! here: no answer.

use std::net::SocketAddr;

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::{
    SockDiagMessage,
    constants::{AF_INET, AF_INET6, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, SocketId, StateFlags},
};
use netlink_sys::{Socket, SocketAddr as NlAddr, protocols::NETLINK_SOCK_DIAG};

/// The uid owning the socket at `peer` connected to `local` (our end of an accepted connection),
/// if that socket is on this machine and the kernel says; `None` otherwise (a remote peer, or a
/// peer already gone: then the caller goes on without knowing).
pub(crate) fn local_peer_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    // The peer's socket: its address is the source, ours the destination. An IPv4 peer on a
    // dual-stack listener shows as IPv4-mapped: look it up as IPv4.
    let (peer, local) = (canonical(peer), canonical(local));
    by_sock_diag(peer, local).or_else(|| by_proc_net(peer, local))
}

/// The lookup through `NETLINK_SOCK_DIAG` (one socket, by its address pair).
fn by_sock_diag(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let family = if peer.is_ipv4() { AF_INET } else { AF_INET6 };
    let mut socket_id = if peer.is_ipv4() {
        SocketId::new_v4()
    } else {
        SocketId::new_v6()
    };
    socket_id.source_port = peer.port();
    socket_id.source_address = peer.ip();
    socket_id.destination_port = local.port();
    socket_id.destination_address = local.ip();
    // All ones: no cookie to match (INET_DIAG_NOCOOKIE).
    socket_id.cookie = [0xff; 8];
    let mut header = NetlinkHeader::default();
    // No NLM_F_DUMP: the kernel looks up this one socket (inet_diag_find_one_icsk).
    header.flags = NLM_F_REQUEST;
    let mut packet = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id,
        })
        .into(),
    );
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    let socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    socket.connect(&NlAddr::new(0, 0)).ok()?;
    socket.send(&buf, 0).ok()?;
    let mut answer = vec![0u8; 8192];
    let n = socket.recv(&mut &mut answer[..], 0).ok()?;
    let msg = NetlinkMessage::<SockDiagMessage>::deserialize(&answer[..n]).ok()?;
    match msg.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => Some(r.header.uid),
        _ => None,
    }
}

/// The lookup through `/proc/net/tcp` or `tcp6`: the row whose local address is `peer` and
/// remote address `local` (addresses as the kernel prints them: each 32-bit word of the address
/// in hex, in this machine's byte order, then the port), its uid column.
fn by_proc_net(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let table = if peer.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(table).ok()?;
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (me, them) = (parse_proc_addr(f.get(1)?)?, parse_proc_addr(f.get(2)?)?);
        (me == peer && them == local).then(|| f.get(7)?.parse().ok())?
    })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), as `/proc/net/tcp*` prints them.
fn parse_proc_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for i in (0..addr.len()).step_by(8) {
        let word = u32::from_str_radix(addr.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip: std::net::IpAddr = match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok()?.into(),
        16 => <[u8; 16]>::try_from(bytes).ok()?.into(),
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// A skipped part, made visible in CI: `scripts/test.sh` prints every line written to
    /// `PSHMEM_TEST_SKIPS` after the run (as `pshmem_tests::skipped` does; that crate depends
    /// on this one, so it is not used here).
    fn skipped(test: &str, why: &str) {
        use std::io::Write;
        let line = format!("SKIP {test}: {why}\n");
        eprint!("{line}");
        if let Some(path) = std::env::var_os("PSHMEM_TEST_SKIPS") {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path);
            let _ = f.and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }

    #[test]
    fn finds_the_uid_of_a_local_peer_and_nothing_for_an_unknown_one() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, from) = l.accept().expect("accept");
        assert_eq!(from, c.local_addr().expect("addr"));
        let me = nix::unistd::getuid().as_raw();
        let local = s.local_addr().expect("addr");
        assert_eq!(local_peer_uid(from, local), Some(me));
        // Each way on its own: /proc is the fallback where sock_diag is missing.
        match by_sock_diag(from, local) {
            Some(uid) => assert_eq!(uid, me),
            None => skipped("peer_uid sock_diag lookup", "this kernel has no inet_diag"),
        }
        assert_eq!(by_proc_net(from, local), Some(me));
        // An address pair no socket has.
        let nobody: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        assert_eq!(local_peer_uid(nobody, local), None);
        assert_eq!(by_proc_net(nobody, local), None);
    }

    #[test]
    fn reads_addresses_as_proc_net_tcp_prints_them() {
        let v4 = format!("{:08X}:1F90", u32::from_ne_bytes([127, 0, 0, 1]));
        assert_eq!(
            parse_proc_addr(&v4),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        let words: String = [[0u8, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]
            .iter()
            .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
            .collect();
        assert_eq!(
            parse_proc_addr(&format!("{words}:0050")),
            Some("[::1]:80".parse().unwrap())
        );
        // An IPv4-mapped IPv6 address is the IPv4 one (as accept reports it on a v4 socket).
        let mapped: String = [
            [0u8, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0xff, 0xff],
            [10, 1, 2, 3],
        ]
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
        assert_eq!(
            parse_proc_addr(&format!("{mapped}:0001")),
            Some("10.1.2.3:1".parse().unwrap())
        );
        assert_eq!(parse_proc_addr("zz:1"), None);
    }

    #[test]
    fn finds_an_ipv6_peer_through_proc() {
        let Ok(l) = TcpListener::bind("[::1]:0") else {
            skipped("peer_uid IPv6 lookup", "no ::1 here");
            return;
        };
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, from) = l.accept().expect("accept");
        assert_eq!(from, c.local_addr().expect("addr"));
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(by_proc_net(from, s.local_addr().expect("addr")), Some(me));
    }
}
