//! Unique-id mode: rank 0 creates an opaque token (its address and a random job secret) that
//! the application distributes by its own means (torch.distributed, MPI), as
//! `nvshmemx_get_uniqueid` / `ncclGetUniqueId` do.
//!
//! Creating the id binds rank 0's listening socket at once (so the port cannot be taken between
//! creation and init); the socket is parked in a process-wide registry keyed by the secret until
//! rank 0 calls init with the same id.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket},
    sync::Mutex,
};

use pshmem_env::{self as env, EnvError};

use crate::error::{BootstrapError, Result};

/// Size of the opaque token in bytes (the size of `nvshmemx_uniqueid_t`'s storage).
pub const UNIQUE_ID_LEN: usize = 128;
const UID_MAGIC: &[u8; 8] = b"PSHMUID1";

/// The opaque token that lets ranks find rank 0 without a launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    /// Where rank 0 listens.
    pub addr: SocketAddr,
    /// The job secret.
    pub secret: u64,
}

static PARKED: Mutex<Option<HashMap<u64, TcpListener>>> = Mutex::new(None);

impl UniqueId {
    /// Creates a token on rank 0: binds a listener on `PSHMEM_BOOTSTRAP_ADDR` if set, else on an
    /// ephemeral port of this host's outward-facing address (loopback without a route).
    pub fn new() -> Result<Self> {
        let bind_addr = match env::BOOTSTRAP_ADDR.raw() {
            Some(a) => a,
            None => format!("{}:0", outward_ip()),
        };
        Self::bind(&bind_addr)
    }

    /// Creates a token on rank 0 listening on `bind_addr` (`host:port`, port 0 for any).
    pub fn bind(bind_addr: &str) -> Result<Self> {
        let listener = TcpListener::bind(bind_addr).map_err(|e| bind_error(bind_addr, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| bind_error(bind_addr, e))?;
        let secret = loop {
            let s: u64 = rand::random();
            if s != 0 {
                break s;
            }
        };
        PARKED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(secret, listener);
        Ok(Self { addr, secret })
    }

    /// Serialises into the fixed-size token.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_LEN] {
        let mut b = [0u8; UNIQUE_ID_LEN];
        b[..8].copy_from_slice(UID_MAGIC);
        b[8..16].copy_from_slice(&self.secret.to_le_bytes());
        b[16..18].copy_from_slice(&self.addr.port().to_le_bytes());
        match self.addr.ip() {
            IpAddr::V4(ip) => {
                b[18] = 4;
                b[19..23].copy_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                b[18] = 6;
                b[19..35].copy_from_slice(&ip.octets());
            }
        }
        b
    }

    /// Parses a token, rejecting anything that was not made by [`UniqueId::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let bad = |reason: &str| {
            BootstrapError::Config(EnvError {
                var: "unique id".into(),
                value: format!("{} bytes", b.len()),
                reason: reason.into(),
            })
        };
        if b.len() != UNIQUE_ID_LEN {
            return Err(bad("a unique id is exactly 128 bytes"));
        }
        if &b[..8] != UID_MAGIC {
            return Err(bad("not a proxyshmem unique id (bad magic)"));
        }
        let secret = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        let port = u16::from_le_bytes([b[16], b[17]]);
        let ip = match b[18] {
            4 => IpAddr::V4(Ipv4Addr::new(b[19], b[20], b[21], b[22])),
            6 => IpAddr::from(<[u8; 16]>::try_from(&b[19..35]).expect("16 bytes")),
            _ => return Err(bad("unknown address family")),
        };
        Ok(Self {
            addr: SocketAddr::new(ip, port),
            secret,
        })
    }

    /// Takes the listener parked by [`UniqueId::new`] in this process, if any.
    pub(crate) fn take_listener(&self) -> Option<TcpListener> {
        PARKED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|m| m.remove(&self.secret))
    }
}

/// Maps a bind failure to a typed error.
pub(crate) fn bind_error(addr: &str, e: std::io::Error) -> BootstrapError {
    match (e.kind(), addr.parse::<SocketAddr>()) {
        (std::io::ErrorKind::AddrInUse, Ok(addr)) => BootstrapError::AddrInUse { addr },
        _ => BootstrapError::Bind {
            addr: addr.into(),
            message: e.to_string(),
        },
    }
}

/// The local address used to reach the outside (no packet is sent: connecting a UDP socket
/// only selects a route), or loopback when there is no route.
fn outward_ip() -> IpAddr {
    let probe = || -> std::io::Result<IpAddr> {
        let s = UdpSocket::bind("0.0.0.0:0")?;
        s.connect("192.0.2.1:9")?;
        Ok(s.local_addr()?.ip())
    };
    probe()
        .ok()
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trip_and_rejects_garbage() {
        let id = UniqueId {
            addr: "10.1.2.3:4567".parse().unwrap(),
            secret: 0x1234,
        };
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
        let id6 = UniqueId {
            addr: "[fe80::1]:9".parse().unwrap(),
            secret: 7,
        };
        assert_eq!(UniqueId::from_bytes(&id6.to_bytes()).unwrap(), id6);
        assert!(UniqueId::from_bytes(&[0u8; 128]).is_err());
        assert!(UniqueId::from_bytes(&id.to_bytes()[..64]).is_err());
    }

    #[test]
    fn new_binds_and_parks() {
        let id = UniqueId::new().unwrap();
        assert_ne!(id.secret, 0);
        assert_ne!(id.addr.port(), 0);
        assert!(id.take_listener().is_some());
        assert!(id.take_listener().is_none());
    }
}
