//! The runtime's side of connecting a transport: the transport never sees the bootstrap
//! (`pshmem-transport` opens a backend with a [`Job`] and asks for its exchanges through an
//! [`Exchange`]); here the bootstrap is lent as that exchange.

use std::sync::Arc;

use pshmem_bootstrap::Bootstrap;
use pshmem_transport::{Exchange, ExchangeError, Job, Pe};

/// The bootstrap's byte collectives, lent to a transport for its exchanges (endpoint records,
/// registration keys).
#[derive(Debug, Clone, Copy)]
pub struct BootstrapExchange<'a>(pub &'a Bootstrap);

impl Exchange for BootstrapExchange<'_> {
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, ExchangeError> {
        self.0
            .allgather(mine)
            .map_err(|e| Arc::new(e) as ExchangeError)
    }

    fn barrier(&self) -> Result<(), ExchangeError> {
        self.0.barrier().map_err(|e| Arc::new(e) as ExchangeError)
    }
}

/// Where this PE stands in the bootstrap's job, as a transport opens with it.
pub fn job(bs: &Bootstrap) -> Job {
    Job {
        rank: Pe::from_idx(bs.rank()),
        n_pes: bs.world_size(),
        local_size: bs.local_size(),
        same_machine: met_over_loopback(&bs.config().root_addr),
    }
}

/// Whether the bootstrap's rendezvous address is a loopback one: then every rank connected to
/// it from this machine (a loopback connection cannot leave it), emulated hosts included.
fn met_over_loopback(root: &str) -> bool {
    match root.parse::<std::net::SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => root
            .rsplit_once(':')
            .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost")),
    }
}

/// Opens the transport `cfg` names on this PE's `domains` (its NICs from placement; empty: the
/// provider's choice) and connects it to every PE (collective).
pub fn open_transport(
    bs: &Bootstrap,
    cfg: &pshmem_transport::TransportConfig,
    domains: &[String],
) -> pshmem_transport::Result<Box<dyn pshmem_transport::Transport>> {
    pshmem_transport::open(job(bs), &BootstrapExchange(bs), cfg, domains)
}

/// Exchanges registration `mr` of every PE (collective): the remote ids in PE order.
pub fn exchange_mr(
    t: &mut dyn pshmem_transport::Transport,
    bs: &Bootstrap,
    mr: pshmem_transport::MrId,
) -> pshmem_transport::Result<Vec<pshmem_transport::RemoteMrId>> {
    pshmem_transport::exchange_mr(t, &BootstrapExchange(bs), mr)
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_rendezvous_means_one_machine() {
        use super::met_over_loopback as lo;
        assert!(lo("127.0.0.1:4000") && lo("127.0.0.9:1") && lo("[::1]:80") && lo("localhost:5"));
        assert!(!lo("10.0.0.5:4000") && !lo("node7:4000") && !lo("[fe80::1]:1"));
    }
}
