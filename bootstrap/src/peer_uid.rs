//! Who is at the other end of a TCP connection, when it is on this machine: the kernel's socket
//! table (`NETLINK_SOCK_DIAG`, the interface `ss` uses) answers for the peer's own socket, found
//! by its exact address pair. A peer on another host has no socket here: no answer.

use std::net::SocketAddr;

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::{
    SockDiagMessage,
    constants::{AF_INET, AF_INET6, IPPROTO_TCP},
    inet::{ExtensionFlags, InetRequest, SocketId, StateFlags},
};
use netlink_sys::{Socket, SocketAddr as NlAddr, protocols::NETLINK_SOCK_DIAG};

/// The uid owning the socket at `peer` connected to `local` (our end of an accepted connection),
/// if that socket is on this machine and the kernel says; `None` otherwise (a remote peer, a
/// peer already gone, or no sock_diag: then the caller goes on without knowing).
pub(crate) fn local_peer_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    // The peer's socket: its address is the source, ours the destination. An IPv4 peer on a
    // dual-stack listener shows as IPv4-mapped: look it up as IPv4.
    let (peer, local) = (canonical(peer), canonical(local));
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

    #[test]
    fn finds_the_uid_of_a_local_peer_and_nothing_for_an_unknown_one() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, from) = l.accept().expect("accept");
        assert_eq!(from, c.local_addr().expect("addr"));
        let me = nix::unistd::getuid().as_raw();
        let local = s.local_addr().expect("addr");
        assert_eq!(local_peer_uid(from, local), Some(me));
        // An address pair no socket has.
        let nobody: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        assert_eq!(local_peer_uid(nobody, local), None);
    }
}
