//! The simulated fabric's device memory (`SimConfig::gpu_memory`): refused until a device copy
//! is attached; then registrations of device memory are reached only through the copy, from
//! both sides of a write and a read. Its rails: what one PE receives spreads over them. And its
//! socket: only connections carrying the job's token reach the registrations.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use super::{SimConfig, SimTransport};
use crate::{DeviceCopy, Event, LocalMem, LocalRef, MemKind, Pe, RemoteRef, Transport};

/// "Device" memory that is host memory, counting the copies made through it.
#[derive(Debug, Default)]
struct HostAsDevice {
    copies: AtomicUsize,
}

impl DeviceCopy for HostAsDevice {
    fn read(&self, src: u64, dst: &mut [u8]) -> Result<(), String> {
        self.copies.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the test's registrations are live host buffers and the sim checked bounds.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn write(&self, dst: u64, src: &[u8]) -> Result<(), String> {
        self.copies.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }
}

fn device(buf: &mut [u8]) -> LocalMem {
    LocalMem {
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
        kind: MemKind::Cuda {
            device: 0,
            dmabuf_fd: None,
            dmabuf_offset: 0,
        },
    }
}

/// Polls `t` until the operation with context `ctx` completed (at most 5 s).
fn wait_done(t: &mut SimTransport, ctx: u64) {
    let end = Instant::now() + Duration::from_secs(5);
    let mut done = false;
    while !done {
        assert!(Instant::now() < end, "operation {ctx} did not complete");
        t.poll(&mut |e| match e {
            Event::Done { ctx: c } if c == ctx => done = true,
            Event::Failed { error, .. } => panic!("failed: {error}"),
            _ => {}
        })
        .unwrap();
    }
}

#[test]
fn device_memory_goes_through_the_attached_copy() {
    let cfg = SimConfig {
        gpu_memory: true,
        reorder: false,
        ..SimConfig::default()
    };
    let (p0, p1) = (Pe::new(0), Pe::new(1));
    let mut a = SimTransport::open_raw(p0, 2, cfg.clone()).unwrap();
    let mut b = SimTransport::open_raw(p1, 2, cfg).unwrap();
    let (mut buf_a, mut buf_b) = (vec![0u8; 4096], vec![0u8; 4096]);
    // SAFETY: the buffer outlives the transport's use of it (here: none, refused).
    let refused = unsafe { a.mr_reg(device(&mut buf_a)) };
    assert!(refused.is_err(), "no copy attached yet");
    let copy = Arc::new(HostAsDevice::default());
    assert!(a.attach_device_copy(copy.clone()) && b.attach_device_copy(copy.clone()));
    assert!(
        a.caps().gpu_memory && a.caps().dmabuf,
        "served as DMA-BUF would be"
    );
    let addrs = vec![a.address(), b.address()];
    a.connect(&addrs).unwrap();
    b.connect(&addrs).unwrap();
    // SAFETY: the buffers outlive the transports' use of them (the test's end).
    let ma = unsafe { a.mr_reg(device(&mut buf_a)) }.unwrap();
    // SAFETY: as above.
    let mb = unsafe { b.mr_reg(device(&mut buf_b)) }.unwrap();
    let rb = a.mr_import(p1, &b.mr_export(mb)).unwrap();
    // Written before posting, as a kernel would (the registration keeps only the address).
    buf_a[..5].copy_from_slice(b"hello");
    let (l, r) = (
        LocalRef { mr: ma, offset: 0 },
        RemoteRef {
            mr: rb,
            offset: 100,
        },
    );
    // SAFETY: both ranges lie in live registrations, untouched until completion.
    unsafe { a.write(p1, l, r, 5, 7) }.unwrap();
    wait_done(&mut a, 7);
    assert_eq!(&buf_b[100..105], b"hello");
    let back = LocalRef {
        mr: ma,
        offset: 200,
    };
    // SAFETY: as above.
    unsafe { a.read(p1, back, r, 5, 8) }.unwrap();
    wait_done(&mut a, 8);
    assert_eq!(&buf_a[200..205], b"hello");
    // The write's source and target, the read's source and destination.
    assert!(copy.copies.load(Ordering::Relaxed) >= 4);
}

fn host(buf: &mut [u8]) -> LocalMem {
    LocalMem {
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
        kind: MemKind::Host,
    }
}

/// Small writes (no CQ data, below the striping size) go on the pair's home rail, which
/// spreads what one PE receives over its NICs: four PEs writing to PE 0 over 2 rails load both
/// of PE 0's rails equally (with the destination alone deciding, all would take one rail).
#[test]
fn what_a_pe_receives_spreads_over_its_rails() {
    let cfg = SimConfig {
        rails: 2,
        reorder: false,
        ..SimConfig::default()
    };
    let n = 5;
    let mut ts: Vec<SimTransport> = (0..n)
        .map(|pe| SimTransport::open_raw(Pe::from_idx(pe), n, cfg.clone()).unwrap())
        .collect();
    let addrs: Vec<Vec<u8>> = ts.iter().map(|t| t.address()).collect();
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 64 * 1024]).collect();
    let mut mrs = Vec::new();
    for (t, b) in ts.iter_mut().zip(bufs.iter_mut()) {
        t.connect(&addrs).unwrap();
        // SAFETY: the buffers outlive the transports' use of them (the test's end).
        mrs.push(unsafe { t.mr_reg(host(b)) }.unwrap());
    }
    let target = ts[0].mr_export(mrs[0]);
    for (s, t) in ts.iter_mut().enumerate().skip(1) {
        let r = RemoteRef {
            mr: t.mr_import(Pe::new(0), &target).unwrap(),
            offset: s as u64 * 4096,
        };
        for k in 0..4u64 {
            let l = LocalRef {
                mr: mrs[s],
                offset: 0,
            };
            // SAFETY: both ranges lie in live registrations, untouched until completion.
            unsafe { t.write(Pe::new(0), l, r, 4096, k) }.unwrap();
            wait_done(t, k);
        }
    }
    let mut per_rail = [0u64; 2];
    for t in &ts[1..] {
        for (r, b) in t.rail_bytes().iter().enumerate() {
            per_rail[r] += b;
        }
    }
    assert_eq!(per_rail, [2 * 4 * 4096, 2 * 4 * 4096]);
}

/// Sends `hello` then a 5-byte write into registration `mr` of the NIC at `name`; returns
/// whether an answer came back (else the NIC closed the connection unanswered).
fn knock(name: &[u8], hello: Vec<u8>, mr: u32) -> bool {
    use std::{
        io::{Read, Write},
        os::{
            linux::net::SocketAddrExt,
            unix::net::{SocketAddr, UnixStream},
        },
    };

    use super::{Kind, Msg};
    let addr = SocketAddr::from_abstract_name(name).unwrap();
    let mut s = UnixStream::connect_addr(&addr).unwrap();
    let msgs = [
        Msg {
            kind: Kind::Hello as u8,
            payload: hello,
            ..Msg::default()
        },
        Msg {
            kind: Kind::Write as u8,
            region: mr,
            id: 1,
            len: 5,
            payload: b"owned".to_vec(),
            ..Msg::default()
        },
    ];
    // (A refused connection may be closed before the write: a broken pipe is its answer.)
    for m in msgs {
        if s.write_all(&m.encode()).is_err() {
            return false;
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 64];
    match s.read(&mut head) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => panic!("no answer, no close"),
        Err(_) => false,
    }
}

/// Nothing outside the job reaches a NIC's registrations: a connection whose hello lacks the
/// token the job's bootstrap carried (none, zeros, one bit off) is closed before any request is
/// applied; with the token the same write lands (so the refusals are not vacuous).
#[test]
fn a_connection_without_the_jobs_token_reaches_nothing() {
    let cfg = SimConfig {
        reorder: false,
        ..SimConfig::default()
    };
    let mut b = SimTransport::open_raw(Pe::new(1), 2, cfg).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: the buffer outlives the transport's use of it (the test's end).
    let mr = unsafe { b.mr_reg(host(&mut buf)) }.unwrap();
    let addr = b.address();
    let (token, name) = addr.split_at(super::TOKEN_LEN);
    let mut off_by_one = token.to_vec();
    off_by_one[0] ^= 1;
    for hello in [Vec::new(), vec![0u8; super::TOKEN_LEN], off_by_one] {
        assert!(!knock(name, hello, mr.0), "answered without the token");
    }
    assert_eq!(&buf[..5], &[0u8; 5], "written without the token");
    assert!(knock(name, token.to_vec(), mr.0), "the job's own hello");
    let end = Instant::now() + Duration::from_secs(5);
    // SAFETY: a plain read of the test's buffer, which the NIC wrote before answering.
    while unsafe { std::ptr::read_volatile(buf.as_ptr().cast::<[u8; 5]>()) } != *b"owned" {
        assert!(
            Instant::now() < end,
            "the write with the token did not land"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
