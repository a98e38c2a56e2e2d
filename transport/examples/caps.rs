//! Prints what each libfabric provider offers here (1 PE on loopback).
use pshmem_transport::{
    Pe, Transport,
    ofi::{OfiConfig, OfiTransport},
};

fn main() {
    for prov in ["tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa"] {
        let mut cfg = OfiConfig::from_env(Some(prov)).expect("config");
        cfg.node = Some("127.0.0.1".into());
        match OfiTransport::open_raw(Pe::new(0), 1, &cfg) {
            Ok(t) => println!("{prov}: {:?}", t.caps()),
            Err(e) => println!("{prov}: {e}"),
        }
    }
}
