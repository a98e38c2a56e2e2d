//! Transport scenarios: RMA byte-exact at many sizes, remote CQ data, messages, out-of-bounds
//! accesses, a peer killed mid-transfer, and visible reordering.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use pshmem::net::{BootstrapExchange, job};
use pshmem_bootstrap::Bootstrap;
use pshmem_tests::{epoch_ms, pattern};
use pshmem_transport::{
    Event, LocalMem, LocalRef, MemKind, MrId, Pe, PostError, RemoteMrId, RemoteRef, Transport,
    TransportError, establish,
    ofi::{OfiConfig, OfiTransport},
    sim::{SimConfig, SimTransport},
};

/// Which transport a scenario runs on.
#[derive(Debug, Clone, clap::Args)]
pub struct Which {
    /// tcp, shm or sim.
    #[arg(long, default_value = "tcp")]
    pub provider: String,
    /// Simulated fabric: deliver out of order (1) or in order (0).
    #[arg(long, default_value_t = 1)]
    pub reorder: u8,
    /// Simulated fabric: random extra delay per request, microseconds.
    #[arg(long, default_value_t = 0)]
    pub delay_us: u64,
    /// Rails (libfabric endpoints, or simulated NICs).
    #[arg(long, default_value_t = 1)]
    pub rails: usize,
}

/// Opens and connects the transport.
pub fn open(bs: &Bootstrap, w: &Which) -> Result<Box<dyn Transport>, TransportError> {
    let mut t: Box<dyn Transport> = match w.provider.as_str() {
        "sim" => Box::new(SimTransport::open(
            job(bs),
            SimConfig {
                reorder: w.reorder != 0,
                max_delay: Duration::from_micros(w.delay_us),
                rails: w.rails,
                ..SimConfig::default()
            },
        )?),
        p => {
            let prov = match p {
                "tcp" => "tcp;ofi_rxm",
                other => other,
            };
            let mut cfg = OfiConfig::from_env(Some(prov))?;
            cfg.rails = w.rails;
            Box::new(OfiTransport::open(job(bs), &cfg)?)
        }
    };
    establish(t.as_mut(), &BootstrapExchange(bs))?;
    Ok(t)
}

/// Exchanges registration `mr` of every PE: the remote ids in PE order.
fn exchange_mr(
    t: &mut dyn Transport,
    bs: &Bootstrap,
    mr: MrId,
) -> Result<Vec<RemoteMrId>, TransportError> {
    pshmem_transport::exchange_mr(t, &BootstrapExchange(bs), mr)
}

/// 8-byte aligned zeroed memory.
pub struct Buf(Vec<u64>);

impl Buf {
    pub fn new(len: usize) -> Self {
        Self(vec![0u64; len.div_ceil(8).max(1)])
    }
    pub fn bytes(&mut self) -> &mut [u8] {
        let n = self.0.len() * 8;
        // SAFETY: a u64 buffer viewed as its bytes.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), n) }
    }
    pub fn mem(&mut self) -> LocalMem {
        LocalMem {
            ptr: self.0.as_mut_ptr().cast(),
            len: self.0.len() * 8,
            kind: MemKind::Host,
        }
    }
}

/// What polling saw besides the completion being waited for.
#[derive(Default, Debug)]
pub struct Seen {
    pub remote_writes: Vec<u64>,
    pub recvs: Vec<Vec<u8>>,
    /// Completions not yet waited for: ctx → success or the error.
    pub completed: std::collections::HashMap<u64, Result<(), TransportError>>,
}

pub fn collect(seen: &mut Seen, e: &Event<'_>) {
    match e {
        Event::RemoteWrite { data } => seen.remote_writes.push(*data),
        Event::Recv { data } => seen.recvs.push(data.to_vec()),
        Event::Done { ctx } => {
            seen.completed.insert(*ctx, Ok(()));
        }
        Event::Failed { ctx, error } => {
            seen.completed.insert(*ctx, Err(error.clone()));
        }
    }
}

/// Polls until `ctx` completes.
pub fn wait(
    t: &mut dyn Transport,
    ctx: u64,
    seen: &mut Seen,
    limit: Duration,
) -> Result<(), TransportError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(r) = seen.completed.remove(&ctx) {
            return r;
        }
        t.poll(&mut |e| collect(seen, &e))?;
        if Instant::now() > deadline {
            return Err(TransportError::InvalidArgument {
                op: "wait",
                reason: format!("no completion for {ctx} in {limit:?}"),
            });
        }
    }
}

/// Retries a post while the transport says Retry, polling meanwhile.
pub fn post(
    t: &mut dyn Transport,
    seen: &mut Seen,
    mut f: impl FnMut(&mut dyn Transport) -> Result<(), PostError>,
) -> Result<(), TransportError> {
    loop {
        match f(t) {
            Ok(()) => return Ok(()),
            Err(PostError::Retry) => {
                t.poll(&mut |e| collect(seen, &e))?;
            }
            Err(PostError::Failed(e)) => return Err(*e),
        }
    }
}

/// A bootstrap barrier during which this PE keeps progressing its transport (manual-progress
/// providers need the target to poll for incoming RMA).
pub fn barrier(bs: &Bootstrap, t: &mut dyn Transport, seen: &mut Seen) {
    std::thread::scope(|s| {
        let h = s.spawn(|| bs.barrier());
        while !h.is_finished() {
            let _ = t.poll(&mut |e| collect(seen, &e));
        }
        h.join().expect("barrier thread").expect("barrier");
    });
    // Everything the peers did before the barrier has completed at their side, so its events
    // are queued here by now: drain them.
    while t.poll(&mut |e| collect(seen, &e)).unwrap_or(0) > 0 {}
}

fn fail(msg: String) -> Result<(), String> {
    Err(msg)
}

/// Writes then reads at every size, verified byte-exact, ring-wise (PE i → PE i+1).
pub fn rma(bs: &Bootstrap, w: &Which, sizes: &[usize]) -> Result<(), String> {
    let mut t = open(bs, w).map_err(|e| e.to_string())?;
    let (me, n) = (bs.rank(), bs.world_size());
    let max = sizes.iter().copied().max().unwrap_or(1);
    let (mut win, mut src) = (Buf::new(max), Buf::new(max));
    // SAFETY: both buffers outlive the transport (dropped after it, at the end of scope).
    let (wm, sm) = unsafe {
        (
            t.mr_reg(win.mem()).map_err(|e| e.to_string())?,
            t.mr_reg(src.mem()).map_err(|e| e.to_string())?,
        )
    };
    let remotes = exchange_mr(t.as_mut(), bs, wm).map_err(|e| e.to_string())?;
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut seen = Seen::default();
    for &s in sizes {
        let data = pattern((me * 1000 + s) as u64, s);
        src.bytes()[..s].copy_from_slice(&data);
        let l = LocalRef { mr: sm, offset: 0 };
        let r = RemoteRef {
            mr: remotes[next],
            offset: 0,
        };
        // SAFETY: src is registered and untouched until the completion is waited for.
        post(t.as_mut(), &mut seen, |t| unsafe {
            t.write(Pe::from_idx(next), l, r, s, 1)
        })
        .map_err(|e| e.to_string())?;
        wait(t.as_mut(), 1, &mut seen, Duration::from_secs(60))
            .map_err(|e| format!("write {s}: {e}"))?;
        barrier(bs, t.as_mut(), &mut seen);
        if win.bytes()[..s] != pattern((prev * 1000 + s) as u64, s)[..] {
            return fail(format!("write of {s} bytes from PE {prev} differs"));
        }
        // Now read back what the next PE received (written by this PE).
        src.bytes()[..s].fill(0);
        barrier(bs, t.as_mut(), &mut seen);
        // SAFETY: as above; src is not touched until the read completes.
        post(t.as_mut(), &mut seen, |t| unsafe {
            t.read(Pe::from_idx(next), l, r, s, 2)
        })
        .map_err(|e| e.to_string())?;
        wait(t.as_mut(), 2, &mut seen, Duration::from_secs(60))
            .map_err(|e| format!("read {s}: {e}"))?;
        if src.bytes()[..s] != data[..] {
            return fail(format!("read of {s} bytes from PE {next} differs"));
        }
        barrier(bs, t.as_mut(), &mut seen);
        println!("OK rma size={s}");
    }
    drop(t);
    Ok(())
}

/// `write_data` from every PE to every other: each target must see every (source, seq) value
/// exactly once, after the bytes landed.
pub fn data(bs: &Bootstrap, w: &Which, count: usize) -> Result<(), String> {
    let mut t = open(bs, w).map_err(|e| e.to_string())?;
    let (me, n) = (bs.rank(), bs.world_size());
    let mut win = Buf::new(8 * n * count);
    let mut src = Buf::new(8 * count);
    // SAFETY: buffers outlive the transport.
    let (wm, sm) = unsafe {
        (
            t.mr_reg(win.mem()).map_err(|e| e.to_string())?,
            t.mr_reg(src.mem()).map_err(|e| e.to_string())?,
        )
    };
    let remotes = exchange_mr(t.as_mut(), bs, wm).map_err(|e| e.to_string())?;
    let mut seen = Seen::default();
    for dst in (0..n).filter(|d| *d != me) {
        for seq in 0..count {
            let v = ((me as u64) << 32) | seq as u64;
            src.bytes()[8 * seq..8 * seq + 8].copy_from_slice(&v.to_le_bytes());
            let l = LocalRef {
                mr: sm,
                offset: 8 * seq,
            };
            let r = RemoteRef {
                mr: remotes[dst],
                offset: (8 * (me * count + seq)) as u64,
            };
            // SAFETY: each source slot is written once and not touched again.
            post(t.as_mut(), &mut seen, |t| unsafe {
                t.write_data(Pe::from_idx(dst), l, r, 8, v, 100 + seq as u64)
            })
            .map_err(|e| e.to_string())?;
        }
        for seq in 0..count {
            wait(
                t.as_mut(),
                100 + seq as u64,
                &mut seen,
                Duration::from_secs(60),
            )
            .map_err(|e| e.to_string())?;
        }
    }
    barrier(bs, t.as_mut(), &mut seen);
    let mut got = seen.remote_writes.clone();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..n)
        .filter(|s| *s != me)
        .flat_map(|s| (0..count).map(move |q| ((s as u64) << 32) | q as u64))
        .collect();
    want.sort_unstable();
    if got != want {
        return fail(format!(
            "remote CQ data: got {} values, want {}",
            got.len(),
            want.len()
        ));
    }
    for s in (0..n).filter(|s| *s != me) {
        for q in 0..count {
            let o = 8 * (s * count + q);
            let v = u64::from_le_bytes(win.bytes()[o..o + 8].try_into().expect("8"));
            if v != ((s as u64) << 32) | q as u64 {
                return fail(format!("data of write {q} from PE {s} differs"));
            }
        }
    }
    println!("OK data values={}", got.len());
    Ok(())
}

/// Messages of varied sizes from every PE to every other, verified.
pub fn send(bs: &Bootstrap, w: &Which, count: usize) -> Result<(), String> {
    let mut t = open(bs, w).map_err(|e| e.to_string())?;
    let (me, n) = (bs.rank(), bs.world_size());
    let max = t.caps().max_send_size;
    let mut seen = Seen::default();
    for dst in (0..n).filter(|d| *d != me) {
        for k in 0..count {
            let len = [1, 8, 63, 64, 65, 1000, max][k % 7];
            let mut msg = pattern((me * 7919 + k) as u64, len);
            msg[0] = me as u8;
            post(t.as_mut(), &mut seen, |t| {
                t.send(Pe::from_idx(dst), &msg, 7)
            })
            .map_err(|e| e.to_string())?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.recvs.len() < count * (n - 1) {
        t.poll(&mut |e| collect(&mut seen, &e))
            .map_err(|e| e.to_string())?;
        if Instant::now() > deadline {
            return fail(format!(
                "received {} of {} messages",
                seen.recvs.len(),
                count * (n - 1)
            ));
        }
    }
    barrier(bs, t.as_mut(), &mut seen);
    // Unordered fabrics may deliver one source's messages in any order: compare as multisets.
    let mut want: Vec<Vec<u8>> = (0..n)
        .filter(|s| *s != me)
        .flat_map(|src| {
            (0..count).map(move |k| {
                let mut m = pattern(
                    (src * 7919 + k) as u64,
                    [1, 8, 63, 64, 65, 1000, max][k % 7],
                );
                m[0] = src as u8;
                m
            })
        })
        .collect();
    want.sort();
    let mut got = seen.recvs.clone();
    got.sort();
    if got != want {
        return fail(format!(
            "received messages differ from those sent ({} vs {})",
            got.len(),
            want.len()
        ));
    }
    println!("OK send messages={}", seen.recvs.len());
    Ok(())
}

/// Out-of-bounds remote accesses: refused at post; and a forged registration that claims more
/// than was registered is refused by the target (an error completion), leaving the bytes past
/// the registration untouched.
pub fn oob(bs: &Bootstrap, w: &Which) -> Result<(), String> {
    let mut t = open(bs, w).map_err(|e| e.to_string())?;
    let me = bs.rank();
    let reg = 4096;
    let mut win = Buf::new(2 * reg);
    win.bytes()[reg..].fill(0xC5);
    let mut src = Buf::new(reg);
    src.bytes().fill(0x11);
    let mut wmem = win.mem();
    wmem.len = reg;
    // SAFETY: buffers outlive the transport.
    let (wm, sm) = unsafe {
        (
            t.mr_reg(wmem).map_err(|e| e.to_string())?,
            t.mr_reg(src.mem()).map_err(|e| e.to_string())?,
        )
    };
    let blob = t.mr_export(wm);
    let all = bs.allgather(&blob).map_err(|e| e.to_string())?;
    let peer = (me + 1) % bs.world_size();
    let honest: RemoteMrId = t
        .mr_import(Pe::from_idx(peer), &all[peer])
        .map_err(|e| e.to_string())?;
    let mut seen = Seen::default();
    let l = LocalRef { mr: sm, offset: 0 };
    // SAFETY: src is registered.
    match unsafe {
        t.write(
            Pe::from_idx(peer),
            l,
            RemoteRef {
                mr: honest,
                offset: reg as u64 - 8,
            },
            16,
            1,
        )
    } {
        Err(PostError::Failed(e)) if matches!(*e, TransportError::OutOfBounds { .. }) => {
            println!("OK oob refused-at-post")
        }
        other => {
            return fail(format!(
                "out-of-bounds write was not refused at post: {other:?}"
            ));
        }
    }
    // SAFETY: as above.
    match unsafe {
        t.read(
            Pe::from_idx(peer),
            l,
            RemoteRef {
                mr: honest,
                offset: u64::MAX - 2,
            },
            16,
            1,
        )
    } {
        Err(PostError::Failed(e)) if matches!(*e, TransportError::OutOfBounds { .. }) => {}
        other => {
            return fail(format!(
                "overflowing read offset was not refused: {other:?}"
            ));
        }
    }
    // Forge: the peer's blob with the length doubled (layouts: sim 4+8, ofi 8+4+16r).
    let mut forged = all[peer].clone();
    if w.provider == "sim" {
        forged[4..12].copy_from_slice(&((2 * reg) as u64).to_le_bytes());
    } else {
        forged[..8].copy_from_slice(&((2 * reg) as u64).to_le_bytes());
    }
    let fake = t
        .mr_import(Pe::from_idx(peer), &forged)
        .map_err(|e| e.to_string())?;
    // SAFETY: as above.
    post(t.as_mut(), &mut seen, |t| unsafe {
        t.write(
            Pe::from_idx(peer),
            l,
            RemoteRef {
                mr: fake,
                offset: reg as u64,
            },
            64,
            2,
        )
    })
    .map_err(|e| e.to_string())?;
    let res = wait(t.as_mut(), 2, &mut seen, Duration::from_secs(5));
    barrier(bs, t.as_mut(), &mut seen);
    let untouched = win.bytes()[reg..].iter().all(|b| *b == 0xC5);
    match res {
        Err(TransportError::InvalidArgument { op: "wait", .. }) if untouched => {
            println!("OK oob target-dropped (no completion)")
        }
        Err(e) if untouched => println!(
            "OK oob target-refused error={}",
            e.to_string().replace(' ', "_")
        ),
        Ok(_) if untouched => {
            return fail("forged out-of-bounds write completed without error".into());
        }
        _ => {
            return fail(
                "forged out-of-bounds write corrupted the bytes past the registration".into(),
            );
        }
    }
    Ok(())
}

/// PE 1 streams writes to PE 0; PE 0 SIGKILLs itself; PE 1 must see an error within 5 s,
/// either from the fabric or from the bootstrap's failure detection (through fail_peer).
pub fn kill(bs: &Bootstrap, w: &Which) -> Result<(), String> {
    let mut t = open(bs, w).map_err(|e| e.to_string())?;
    let me = bs.rank();
    let len = 1 << 20;
    let mut win = Buf::new(len);
    let mut src = Buf::new(len);
    // SAFETY: buffers outlive the transport (PE 0 never returns).
    let (wm, sm) = unsafe {
        (
            t.mr_reg(win.mem()).map_err(|e| e.to_string())?,
            t.mr_reg(src.mem()).map_err(|e| e.to_string())?,
        )
    };
    let remotes = exchange_mr(t.as_mut(), bs, wm).map_err(|e| e.to_string())?;
    let dead = Arc::new(AtomicUsize::new(usize::MAX));
    {
        let dead = dead.clone();
        bs.on_failure(move |e| {
            dead.store(e.dead_rank().unwrap_or(usize::MAX - 1), Ordering::SeqCst)
        });
    }
    let mut seen = Seen::default();
    barrier(bs, t.as_mut(), &mut seen);
    if me == 0 {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(500) {
            let _ = t.poll(&mut |_| {});
        }
        println!("DYING epoch_ms={}", epoch_ms());
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    let l = LocalRef { mr: sm, offset: 0 };
    let r = RemoteRef {
        mr: remotes[0],
        offset: 0,
    };
    let mut ctx = 0u64;
    let mut inflight = 0usize;
    let mut noticed = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let d = dead.load(Ordering::SeqCst);
        if d != usize::MAX {
            t.fail_peer(Pe::new(0), "bootstrap reports rank 0 dead");
        }
        if inflight < 8 {
            // SAFETY: src is registered and never modified.
            match unsafe { t.write(Pe::new(0), l, r, len, ctx) } {
                Ok(()) => {
                    ctx += 1;
                    inflight += 1;
                }
                Err(PostError::Retry) => {}
                Err(PostError::Failed(e)) => {
                    println!(
                        "ERR kind=post epoch_ms={} via={} msg={}",
                        epoch_ms(),
                        if d != usize::MAX {
                            "bootstrap"
                        } else {
                            "fabric"
                        },
                        e.to_string().replace(' ', "_")
                    );
                    noticed = true;
                    break;
                }
            }
        }
        let mut failed = None;
        let _ = t.poll(&mut |e| match e {
            Event::Done { .. } => inflight -= 1,
            Event::Failed { error, .. } => failed = Some(error),
            _ => {}
        });
        if let Some(e) = failed {
            println!(
                "ERR kind=completion epoch_ms={} via={} msg={}",
                epoch_ms(),
                if d != usize::MAX {
                    "bootstrap"
                } else {
                    "fabric"
                },
                e.to_string().replace(' ', "_")
            );
            noticed = true;
            break;
        }
    }
    let _ = win.bytes();
    if !noticed {
        return fail("no error within 30 s of the peer's death".into());
    }
    // The survivor's transport is dropped (and its endpoints closed) without hanging.
    drop(t);
    std::process::exit(0);
}

/// Sim: PE 0 sends `count` write_data to PE 1, each carrying its sequence number; PE 1 counts
/// how often a later one arrived before an earlier one.
pub fn reorder(bs: &Bootstrap, w: &Which, count: usize) -> Result<(), String> {
    let mut t = open(bs, w).map_err(|e| e.to_string())?;
    let me = bs.rank();
    let mut win = Buf::new(8 * count);
    let mut src = Buf::new(8 * count);
    // SAFETY: buffers outlive the transport.
    let (wm, sm) = unsafe {
        (
            t.mr_reg(win.mem()).map_err(|e| e.to_string())?,
            t.mr_reg(src.mem()).map_err(|e| e.to_string())?,
        )
    };
    let remotes = exchange_mr(t.as_mut(), bs, wm).map_err(|e| e.to_string())?;
    let mut seen = Seen::default();
    if me == 0 {
        for seq in 0..count {
            src.bytes()[8 * seq..8 * seq + 8].copy_from_slice(&(seq as u64).to_le_bytes());
            let l = LocalRef {
                mr: sm,
                offset: 8 * seq,
            };
            let r = RemoteRef {
                mr: remotes[1],
                offset: 8 * seq as u64,
            };
            // SAFETY: each slot is written once.
            post(t.as_mut(), &mut seen, |t| unsafe {
                t.write_data(Pe::new(1), l, r, 8, seq as u64, seq as u64)
            })
            .map_err(|e| e.to_string())?;
        }
        let mut done = 0;
        let mut order = Vec::new();
        while done < count {
            t.poll(&mut |e| {
                if let Event::Done { ctx } = e {
                    done += 1;
                    order.push(ctx);
                }
            })
            .map_err(|e| e.to_string())?;
        }
        let inv = order.windows(2).filter(|p| p[1] < p[0]).count();
        println!("OK reorder side=initiator completion_inversions={inv}");
    }
    barrier(bs, t.as_mut(), &mut seen);
    if me == 1 {
        if seen.remote_writes.len() != count {
            return fail(format!(
                "{} of {count} writes seen",
                seen.remote_writes.len()
            ));
        }
        let inv = seen
            .remote_writes
            .windows(2)
            .filter(|p| p[1] < p[0])
            .count();
        println!("OK reorder side=target arrival_inversions={inv}");
    }
    Ok(())
}
