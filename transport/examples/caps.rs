//! Prints what each libfabric provider offers here (1 PE on loopback), with and without native
//! atomics (asking for them can cost ordering: rxm's software atomics drop WAW/SAW).
use pshmem_transport::{
    Transport,
    ofi::{OfiConfig, OfiTransport},
};

fn main() {
    for prov in ["tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa"] {
        for atomics in [false, true] {
            let mut cfg = OfiConfig::from_env(Some(prov)).expect("config");
            cfg.node = Some("127.0.0.1".into());
            cfg.native_atomics = atomics;
            match OfiTransport::open_raw(0, 1, &cfg) {
                Ok(t) => println!("{prov} (atomics asked: {atomics}): {:?}", t.caps()),
                Err(e) => println!("{prov}: {e}"),
            }
        }
    }
}
