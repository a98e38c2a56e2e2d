//! A hostile local program, run as another user (or the same one, outside the job), against
//! every job it can find on this machine, until a stop file appears:
//! - **tcp**: every listening TCP socket on a loopback address that another uid owns
//!   (`/proc/net/tcp`) is taken for a libfabric `tcp;ofi_rxm` endpoint; from a fresh endpoint
//!   each time it reads 8 bytes of registration "0" at offset 0 under each key a counting
//!   allocator hands out (0–3);
//! - **sim**: every abstract socket of a simulated NIC (`/proc/net/unix`, `@pshmem-sim-`) gets a
//!   hello without the job's token, then a read request;
//! - **bootstrap**: every such TCP listener gets a hello frame under a wrong secret.
//!
//! Prints `ATTACK` with attempts and what each path got (bytes read, answers): all must be 0.

use std::{
    collections::BTreeSet,
    io::{Read, Write},
    net::TcpStream,
    os::{
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixStream},
    },
    path::Path,
    process::ExitCode,
    time::{Duration, Instant},
};

use pshmem_transport::{
    LocalMem, LocalRef, MemKind, Pe, RemoteRef, Transport,
    ofi::{OfiConfig, OfiTransport},
};

/// Keys tried per endpoint: those a counting allocator hands out first.
const KEYS: u64 = 4;

#[derive(Default)]
struct Tally {
    tcp_attempts: u64,
    tcp_got: u64,
    sim_attempts: u64,
    sim_got: u64,
    bs_attempts: u64,
    bs_got: u64,
}

/// Runs until `stop_file` exists or `seconds` pass.
pub fn run(seconds: f64, stop_file: &Path) -> ExitCode {
    let me = nix::unistd::getuid().as_raw();
    let t0 = Instant::now();
    let mut t = Tally::default();
    while !stop_file.exists() && t0.elapsed().as_secs_f64() < seconds {
        let ports = tcp_listeners(me);
        for &port in &ports {
            for key in 0..KEYS {
                t.tcp_attempts += 1;
                t.tcp_got += fabric_read(port, key);
            }
            t.bs_attempts += 1;
            t.bs_got += bootstrap_hello(port);
        }
        for name in sim_sockets() {
            t.sim_attempts += 1;
            t.sim_got += sim_read(&name);
        }
        if ports.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    println!(
        "ATTACK tcp_attempts={} tcp_got={} sim_attempts={} sim_got={} bs_attempts={} bs_got={}",
        t.tcp_attempts, t.tcp_got, t.sim_attempts, t.sim_got, t.bs_attempts, t.bs_got
    );
    ExitCode::SUCCESS
}

/// Ports of listening TCP sockets on 127.0.0.0/8 owned by another uid.
fn tcp_listeners(me: u32) -> BTreeSet<u16> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, state, uid) = (f.get(1)?, f.get(3)?, f.get(7)?);
            let (ip, port) = local.split_once(':')?;
            // Little-endian hex: 0100007F is 127.0.0.1; the first octet is the last byte.
            let loopback = ip.len() == 8 && ip.ends_with("7F");
            let other = uid.parse::<u32>().ok()? != me;
            (*state == "0A" && loopback && other).then(|| u16::from_str_radix(port, 16).ok())?
        })
        .collect()
}

/// One read of 8 bytes at offset 0 of registration "0" with `key`, from a fresh endpoint to
/// 127.0.0.1:`port`: 1 when it completed (bytes read), else 0.
fn fabric_read(port: u16, key: u64) -> u64 {
    let mut buf = vec![0u64; 2];
    let Ok(cfg) = OfiConfig::from_env(Some("tcp;ofi_rxm")) else {
        return 0;
    };
    let Ok(mut t) = OfiTransport::open_raw(Pe::from_idx(0), 2, &cfg) else {
        return 0;
    };
    // The victim's address: one rail, a sockaddr_in (AF_INET, port big-endian, 127.0.0.1).
    let mut sin = vec![2u8, 0];
    sin.extend_from_slice(&port.to_be_bytes());
    sin.extend_from_slice(&[127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut addr = 1u32.to_le_bytes().to_vec();
    addr.extend_from_slice(&(sin.len() as u32).to_le_bytes());
    addr.extend_from_slice(&sin);
    if t.connect(&[t.address(), addr]).is_err() {
        return 0;
    }
    let mem = LocalMem {
        ptr: buf.as_mut_ptr().cast(),
        len: 16,
        kind: MemKind::Host,
    };
    // SAFETY: `buf` outlives the transport (declared before it, so dropped after it).
    let Ok(lm) = (unsafe { t.mr_reg(mem) }) else {
        return 0;
    };
    let mut blob = 4096u64.to_le_bytes().to_vec();
    blob.extend_from_slice(&1u32.to_le_bytes());
    blob.extend_from_slice(&0u64.to_le_bytes());
    blob.extend_from_slice(&key.to_le_bytes());
    let Ok(remote) = t.mr_import(Pe::from_idx(1), &blob) else {
        return 0;
    };
    let (l, r) = (
        LocalRef { mr: lm, offset: 0 },
        RemoteRef {
            mr: remote,
            offset: 0,
        },
    );
    // The first post waits for the connection (Retry) while polling drives it; a port that is
    // no libfabric endpoint (a bootstrap's) never connects.
    let deadline = Instant::now() + Duration::from_millis(300);
    loop {
        // SAFETY: as above.
        match unsafe { t.read(Pe::from_idx(1), l, r, 8, 1) } {
            Ok(()) => break,
            Err(pshmem_transport::PostError::Retry) if Instant::now() < deadline => {
                if t.poll(&mut |_| {}).is_err() {
                    return 0;
                }
            }
            Err(_) => return 0,
        }
    }
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut done = None;
    while done.is_none() && Instant::now() < deadline {
        let poll = t.poll(&mut |e| {
            if let pshmem_transport::Event::Done { ctx: 1 } = e {
                done = Some(true)
            } else if let pshmem_transport::Event::Failed { ctx: 1, .. } = e {
                done = Some(false)
            }
        });
        if poll.is_err() {
            break;
        }
    }
    drop(t);
    u64::from(done == Some(true))
}

/// A hello frame under a wrong secret: 1 when rank 0 answered anything but a refusal (bytes
/// that are not a Reject frame), else 0.
fn bootstrap_hello(port: u16) -> u64 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let mut frame = b"PSHM".to_vec();
    frame.extend_from_slice(&1u16.to_le_bytes());
    frame.push(1); // Hello
    frame.push(0);
    frame.extend_from_slice(&0x0bad_5ec2_e700_0001_u64.to_le_bytes());
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(&0u32.to_le_bytes());
    if s.write_all(&frame).is_err() {
        return 0;
    }
    let mut head = [0u8; 24];
    match s.read(&mut head) {
        // A Reject (kind 3) in our own secret tells nothing of the job.
        Ok(n) if n >= 7 && head[6] == 3 => 0,
        Ok(0) | Err(_) => 0,
        Ok(_) => 1,
    }
}

/// Abstract socket names of simulated NICs (`/proc/net/unix` lists them to every user).
fn sim_sockets() -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter_map(|p| p.strip_prefix('@'))
        .filter(|n| n.starts_with("pshmem-sim-"))
        .map(|n| n.as_bytes().to_vec())
        .collect()
}

/// A sim message: the 64-byte header (kind, region, id, offset, len, data, payload length)
/// and its payload, as PROTOCOLS.md section 8 describes.
fn sim_msg(kind: u8, region: u32, len: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[0] = kind;
    b[4..8].copy_from_slice(&region.to_le_bytes());
    b[8..16].copy_from_slice(&1u64.to_le_bytes());
    b[24..32].copy_from_slice(&len.to_le_bytes());
    b[56..64].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// A hello with a guessed (zero) token, then a read of 8 bytes of region 0: 1 when any answer
/// came, else 0.
fn sim_read(name: &[u8]) -> u64 {
    let Ok(addr) = SocketAddr::from_abstract_name(name) else {
        return 0;
    };
    let Ok(mut s) = UnixStream::connect_addr(&addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let hello = sim_msg(32, 0, 0, &[0u8; 16]);
    let read = sim_msg(3, 0, 8, &[]);
    if s.write_all(&hello)
        .and_then(|()| s.write_all(&read))
        .is_err()
    {
        return 0;
    }
    let mut head = [0u8; 64];
    match s.read(&mut head) {
        Ok(0) | Err(_) => 0,
        Ok(_) => 1,
    }
}
