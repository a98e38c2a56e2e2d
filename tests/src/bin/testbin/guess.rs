//! A hostile local program that connects to a PE's endpoint, knowing its address but not the
//! key of its heap registration, guesses keys: the small integers a counting allocator hands
//! out, 1 (the internal buffers), 0. Each guess comes from a fresh endpoint of its own (the
//! tcp provider drops a connection at the first refused key), as an attacker's would; none
//! may read or write a byte, and the job's own traffic goes on.

use std::time::{Duration, Instant};

use pshmem_bootstrap::Bootstrap;
use pshmem_transport::{
    LocalRef, Pe, RemoteRef, Transport, TransportError,
    ofi::{OfiConfig, OfiTransport},
};

use crate::transport::{Buf, Seen, Which, barrier, collect, open, post};

/// Keys tried: 0..=GUESSES.
const GUESSES: u64 = 24;
const MARK: u8 = 0xA7;

/// The victim's registration blob (ofi layout: len u64, rails u32, then (base, key) per rail)
/// with every rail's key replaced by `key`.
fn forge(blob: &[u8], key: u64) -> Vec<u8> {
    let mut f = blob.to_vec();
    let rails = u32::from_le_bytes(f[8..12].try_into().expect("4")) as usize;
    for r in 0..rails {
        let o = 12 + 16 * r + 8;
        f[o..o + 8].copy_from_slice(&key.to_le_bytes());
    }
    f
}

/// One guess from a fresh endpoint: a read (`write` false) or a write of 8 bytes at the start of
/// the victim's registration with `key`. True when it completed without error.
fn attempt(
    prov: &str,
    victim: &[u8],
    blob: &[u8],
    key: u64,
    write: bool,
) -> Result<bool, TransportError> {
    let mut buf = Buf::new(64);
    buf.bytes().fill(0x11);
    let mut t = OfiTransport::open_raw(Pe::from_idx(0), 2, &OfiConfig::from_env(Some(prov))?)?;
    t.connect(&[t.address(), victim.to_vec()])?;
    // SAFETY: `buf` outlives the transport (declared before it).
    let lm = unsafe { t.mr_reg(buf.mem())? };
    let fake = t.mr_import(Pe::from_idx(1), &forge(blob, key))?;
    let (local, remote) = (
        LocalRef { mr: lm, offset: 0 },
        RemoteRef {
            mr: fake,
            offset: 0,
        },
    );
    let mut seen = Seen::default();
    let t: &mut dyn Transport = &mut t;
    // SAFETY: `buf` is registered and outlives the operation (the transport goes first).
    post(t, &mut seen, |t| unsafe {
        if write {
            t.write(Pe::from_idx(1), local, remote, 8, 1)
        } else {
            t.read(Pe::from_idx(1), local, remote, 8, 1)
        }
    })?;
    // An error completion (the target refused the key) or none (a provider that drops a refused
    // access) both mean the guess got nothing.
    let deadline = Instant::now() + Duration::from_secs(2);
    while seen.completed.is_empty() && Instant::now() < deadline {
        if t.poll(&mut |e| collect(&mut seen, &e)).is_err() {
            break;
        }
    }
    let got = matches!(seen.completed.get(&1), Some(Ok(())));
    Ok(got || (!write && buf.bytes()[..8].contains(&MARK)))
}

/// PE 0 attacks PE 1's 4 KiB window (the job's own transport, with its keys never shown to the
/// attacker) with a read and a write per guessed key while PE 1 keeps progressing; then the two
/// PEs write to each other as usual. Prints `OK guess keys=N` when no guess got anything.
pub fn guess(bs: &Bootstrap, w: &Which) -> Result<(), String> {
    let err = |e: TransportError| e.to_string();
    if bs.world_size() != 2 || w.provider == "sim" {
        return Err("tp-guess runs on 2 PEs over a libfabric provider".into());
    }
    let prov = if w.provider == "tcp" {
        "tcp;ofi_rxm"
    } else {
        w.provider.as_str()
    };
    let mut win = Buf::new(4096);
    win.bytes().fill(MARK);
    let mut t = open(bs, w).map_err(err)?;
    // SAFETY: `win` outlives the transport (declared before it).
    let wm = unsafe { t.mr_reg(win.mem()).map_err(err)? };
    let mine = [t.address(), t.mr_export(wm)].concat();
    let all = bs.allgather(&mine).map_err(|e| e.to_string())?;
    let victim_addr_len = t.address().len();
    let (addr, blob) = all[1].split_at(victim_addr_len);
    let honest = u64::from_le_bytes(blob[20..28].try_into().expect("8"));
    let mut seen = Seen::default();
    let mut reached = Vec::new();
    if bs.rank() == 0 {
        for key in 0..=GUESSES {
            for write in [false, true] {
                if attempt(prov, addr, blob, key, write).map_err(err)? {
                    reached.push((key, if write { "write" } else { "read" }));
                }
            }
        }
    }
    // PE 1 progresses its endpoint (manual progress) until PE 0 is done.
    barrier(bs, t.as_mut(), &mut seen);
    let untouched = win.bytes().iter().all(|b| *b == MARK);
    let flags = bs
        .allgather(&[u8::from(untouched)])
        .map_err(|e| e.to_string())?;
    if !reached.is_empty() || flags[1] != [1] || honest <= GUESSES {
        return Err(format!(
            "guessed keys reached PE 1's window (its key {honest}): {reached:?}, window \
             untouched {}",
            flags[1] == [1]
        ));
    }
    // The job's own traffic is unaffected: an honest write each way.
    let peer = Pe::from_idx(1 - bs.rank());
    let remote = t
        .mr_import(peer, &all[peer.idx()][victim_addr_len..])
        .map_err(err)?;
    let mut src = Buf::new(8);
    src.bytes().fill(0x5A);
    // SAFETY: `src` outlives the transport's use of it (waited for below).
    let sm = unsafe { t.mr_reg(src.mem()).map_err(err)? };
    let (l, r) = (
        LocalRef { mr: sm, offset: 0 },
        RemoteRef {
            mr: remote,
            offset: 8,
        },
    );
    // SAFETY: as above.
    post(t.as_mut(), &mut seen, |t| unsafe {
        t.write(peer, l, r, 8, 7)
    })
    .map_err(err)?;
    crate::transport::wait(t.as_mut(), 7, &mut seen, Duration::from_secs(5)).map_err(err)?;
    barrier(bs, t.as_mut(), &mut seen);
    if win.bytes()[8..16] != [0x5A; 8] {
        return Err("the job's own write did not land after the attack".into());
    }
    println!("OK guess keys={}", GUESSES + 1);
    Ok(())
}
