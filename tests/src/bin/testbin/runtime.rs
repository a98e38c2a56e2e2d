//! Runtime scenarios: every host operation verified byte-exact, put-with-signal and fence
//! ordering, atomics exact under contention, error reporting, collective mismatches, and a
//! peer killed while others wait on it. Each prints `OK ...` lines and a `DIGEST` of what it
//! verified (the same on the direct path and through the proxy), or an `ERR` line.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use pshmem::{Cmp, Config, DType, Error, Pshmem, RedOp, SignalOp, SymPtr, team::TEAM_WORLD};
use pshmem_bootstrap::Bootstrap;
use pshmem_tests::{epoch_ms, pattern};

/// FNV-1a over everything verified, so that two runs can be compared.
struct Digest(u64);

impl Digest {
    fn update(&mut self, b: &[u8]) {
        for x in b {
            self.0 ^= u64::from(*x);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

fn seed(a: usize, b: usize, c: usize) -> u64 {
    ((a as u64) << 40) ^ ((b as u64) << 20) ^ (c as u64) ^ 0xfeed
}

mod moe;

type R<T> = Result<T, String>;

/// A runtime error as a message led by its kind.
pub fn e(x: Error) -> String {
    format!("{}: {x}", kind(&x))
}

/// The error's variant name.
pub fn kind(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}

/// Prints an `ERR` line for a runtime error.
pub fn report(e: &Error) -> ExitCode {
    let pe = e.pe().map_or_else(|| "none".into(), |p| p.to_string());
    println!(
        "ERR kind={} pe={pe} epoch_ms={} msg={}",
        kind(e),
        epoch_ms(),
        e.to_string().replace(' ', "_")
    );
    eprintln!("error: {e}");
    ExitCode::from(6)
}

/// Starts the runtime on the bootstrap already joined.
pub fn init(bs: Bootstrap) -> Result<Pshmem, Error> {
    let cfg = Config::from_env()?;
    Pshmem::init_with(bs, cfg)
}

fn expect_local(s: &Pshmem, at: SymPtr, want: &[u8], what: &str, d: &mut Digest) -> R<()> {
    let mut got = vec![0u8; want.len()];
    s.local_copy_out(at, &mut got).map_err(e)?;
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "{what}: {} bytes differ from byte {first} on",
            got.iter().zip(want).filter(|(a, b)| a != b).count()
        ));
    }
    d.update(&got);
    Ok(())
}

/// Every RMA flavour at every size: blocking from/to process buffers (staged through the
/// proxy), non-blocking from/to symmetric buffers (zero-copy), non-blocking raw.
fn rma(s: &Pshmem, sizes: &[usize], d: &mut Digest) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let max = sizes.iter().copied().max().unwrap_or(1).max(1);
    let src = s.malloc(max).map_err(e)?;
    let dst = s.malloc(max).map_err(e)?;
    let dst2 = s.malloc(max).map_err(e)?;
    let bar = || s.barrier_all().map_err(e);
    for &sz in sizes {
        let data = pattern(seed(me, 1, sz), sz);
        s.put(dst, &data, next).map_err(e)?;
        bar()?;
        expect_local(s, dst, &pattern(seed(prev, 1, sz), sz), "put", d)?;
        s.local_copy_in(src, &pattern(seed(me, 2, sz), sz))
            .map_err(e)?;
        bar()?;
        s.put_nbi_sym(dst2, src, sz, next).map_err(e)?;
        s.quiet().map_err(e)?;
        bar()?;
        expect_local(s, dst2, &pattern(seed(prev, 2, sz), sz), "put_nbi_sym", d)?;
        let raw = pattern(seed(me, 3, sz), sz);
        // SAFETY: `raw` lives until after the quiet below.
        unsafe { s.put_nbi(dst, raw.as_ptr(), sz, next) }.map_err(e)?;
        s.quiet().map_err(e)?;
        bar()?;
        expect_local(s, dst, &pattern(seed(prev, 3, sz), sz), "put_nbi (raw)", d)?;
        let mut got = vec![0u8; sz];
        s.get(&mut got, src, next).map_err(e)?;
        if got != pattern(seed(next, 2, sz), sz) {
            return Err(format!("get of {sz} bytes from PE {next} differs"));
        }
        d.update(&got);
        bar()?;
        s.get_nbi_sym(dst2, src, sz, next).map_err(e)?;
        s.quiet().map_err(e)?;
        expect_local(s, dst2, &pattern(seed(next, 2, sz), sz), "get_nbi_sym", d)?;
        let mut raw_get = vec![0u8; sz];
        // SAFETY: `raw_get` lives until after the quiet below and is not touched before it.
        unsafe { s.get_nbi(raw_get.as_mut_ptr(), src, sz, next) }.map_err(e)?;
        s.quiet().map_err(e)?;
        if raw_get != pattern(seed(next, 2, sz), sz) {
            return Err(format!(
                "get_nbi (raw) of {sz} bytes from PE {next} differs"
            ));
        }
        bar()?;
        println!("OK rma size={sz}");
    }
    Ok(())
}

fn p_and_g(s: &Pshmem, d: &mut Digest) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let c = s.calloc(4, 8).map_err(e)?;
    s.p(c, (me + 1) as u8, next).map_err(e)?;
    s.p(c + 2, 1000 + me as u16, next).map_err(e)?;
    s.p(c + 4, 70_000 + me as u32, next).map_err(e)?;
    s.p(c + 8, (1u64 << 40) + me as u64, next).map_err(e)?;
    s.p(c + 16, -(me as i32) - 1, next).map_err(e)?;
    s.p(c + 24, me as f64 + 0.5, next).map_err(e)?;
    s.quiet().map_err(e)?;
    s.barrier_all().map_err(e)?;
    let mut want = vec![0u8; 32];
    want[0] = (prev + 1) as u8;
    want[2..4].copy_from_slice(&(1000 + prev as u16).to_le_bytes());
    want[4..8].copy_from_slice(&(70_000 + prev as u32).to_le_bytes());
    want[8..16].copy_from_slice(&((1u64 << 40) + prev as u64).to_le_bytes());
    want[16..20].copy_from_slice(&(-(prev as i32) - 1).to_le_bytes());
    want[24..32].copy_from_slice(&(prev as f64 + 0.5).to_le_bytes());
    expect_local(s, c, &want, "p", d)?;
    let ok = s.g::<u8>(c, next).map_err(e)? == (me + 1) as u8
        && s.g::<u16>(c + 2, next).map_err(e)? == 1000 + me as u16
        && s.g::<u32>(c + 4, next).map_err(e)? == 70_000 + me as u32
        && s.g::<u64>(c + 8, next).map_err(e)? == (1u64 << 40) + me as u64
        && s.g::<i32>(c + 16, next).map_err(e)? == -(me as i32) - 1
        && s.g::<f64>(c + 24, next).map_err(e)? == me as f64 + 0.5;
    if !ok {
        return Err(format!("g from PE {next} read other values than were p'ut"));
    }
    s.barrier_all().map_err(e)?;
    println!("OK p-g");
    Ok(())
}

/// Put-with-signal: the receiver checks the data the moment it sees the signal, so a signal
/// that overtook its data (or part of it) fails the round. Rounds alternate blocking (staged),
/// non-blocking symmetric (zero-copy) and non-blocking raw, and SET and ADD.
fn put_signal(s: &Pshmem, sizes: &[usize], rounds: usize, d: &mut Digest) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let max = sizes.iter().copied().max().unwrap_or(1).max(1);
    let src = s.malloc(max).map_err(e)?;
    let data = s.malloc(max).map_err(e)?;
    let sig = s.calloc(2, 8).map_err(e)?;
    let ack = sig + 8;
    for r in 1..=rounds {
        let sz = sizes[r % sizes.len()];
        let payload = pattern(seed(me, 100 + r, sz), sz);
        let (value, op) = if r % 2 == 0 {
            (r as u64, SignalOp::Set)
        } else {
            (1, SignalOp::Add)
        };
        match r % 3 {
            0 => s
                .put_signal(data, &payload, sig, value, op, next)
                .map_err(e)?,
            1 => {
                s.local_copy_in(src, &payload).map_err(e)?;
                s.put_signal_nbi_sym(data, src, sz, sig, value, op, next)
                    .map_err(e)?;
            }
            _ => {
                // SAFETY: `payload` lives until the quiet at the end of the round.
                unsafe { s.put_signal_nbi(data, payload.as_ptr(), sz, sig, value, op, next) }
                    .map_err(e)?;
            }
        }
        let seen = s.signal_wait_until(sig, Cmp::Ge, r as u64).map_err(e)?;
        if seen != r as u64 {
            return Err(format!("round {r}: signal is {seen}"));
        }
        expect_local(
            s,
            data,
            &pattern(seed(prev, 100 + r, sz), sz),
            &format!("round {r} ({sz} bytes): data at the signal"),
            d,
        )?;
        s.signal_op(ack, 1, SignalOp::Add, prev).map_err(e)?;
        s.signal_wait_until(ack, Cmp::Ge, r as u64).map_err(e)?;
        s.quiet().map_err(e)?;
    }
    s.barrier_all().map_err(e)?;
    println!("OK put-signal rounds={rounds}");
    Ok(())
}

/// Fence: `p(data, i); fence; p(flag, i)` — whenever the receiver sees flag f, data >= f.
/// Without the fence (`use_fence` false, the negative control) it counts the inversions.
fn fence(s: &Pshmem, rounds: usize, use_fence: bool) -> R<usize> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let next = (me + 1) % n;
    let w = s.calloc(3, 8).map_err(e)?;
    let (data, flag, done) = (w, w + 8, w + 16);
    for i in 1..=rounds as u64 {
        s.p(data, i, next).map_err(e)?;
        if use_fence {
            s.fence().map_err(e)?;
        }
        s.p(flag, i, next).map_err(e)?;
    }
    // Once everything has landed, say so (without a fence, the last flag written may not be
    // the last to land, so the receiver cannot tell from the values alone).
    s.quiet().map_err(e)?;
    s.signal_op(done, 1, SignalOp::Set, next).map_err(e)?;
    let start = Instant::now();
    let mut inversions = 0;
    loop {
        let finished = s.local_read::<u64>(done).map_err(e)? == 1;
        let f: u64 = s.local_read(flag).map_err(e)?;
        let dv: u64 = s.local_read(data).map_err(e)?;
        if dv < f {
            if use_fence {
                return Err(format!("fence: flag {f} visible before data ({dv})"));
            }
            inversions += 1;
        }
        if finished {
            if use_fence && (f, dv) != (rounds as u64, rounds as u64) {
                return Err(format!(
                    "fence: final flag {f} and data {dv}, expected {rounds}"
                ));
            }
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!("fence: no completion signal (flag {f}, data {dv})"));
        }
    }
    s.quiet().map_err(e)?;
    s.barrier_all().map_err(e)?;
    let overtaken = waw(s, rounds, use_fence)?;
    if use_fence {
        if overtaken > 0 {
            return Err(format!(
                "fence: {overtaken} second writes overtaken by the first"
            ));
        }
        println!("OK fence rounds={rounds}");
    }
    Ok(inversions + overtaken)
}

/// Two writes to each of `cells` words, `1` then `2` (with a fence between them or not);
/// returns how many words ended as `1`: the second write was overtaken. Unlike watching a flag
/// while it changes, the outcome stays in memory, so it does not depend on timing.
fn waw(s: &Pshmem, cells: usize, use_fence: bool) -> R<usize> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let next = (me + 1) % n;
    let c = s.calloc(cells, 8).map_err(e)?;
    for j in 0..cells {
        s.p(c + 8 * j, 1u64, next).map_err(e)?;
        if use_fence {
            s.fence().map_err(e)?;
        }
        s.p(c + 8 * j, 2u64, next).map_err(e)?;
    }
    s.quiet().map_err(e)?;
    s.barrier_all().map_err(e)?;
    let mut overtaken = 0;
    for j in 0..cells {
        match s.local_read::<u64>(c + 8 * j).map_err(e)? {
            2 => {}
            1 => overtaken += 1,
            v => return Err(format!("write-after-write cell {j} holds {v}")),
        }
    }
    s.barrier_all().map_err(e)?;
    s.free(c).map_err(e)?;
    Ok(overtaken)
}

/// Atomics from every PE on PE 0's words, exact under contention.
fn atomics(s: &Pshmem, k: usize, d: &mut Digest) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let next = (me + 1) % n;
    let c = s.calloc(8, 8).map_err(e)?;
    let (fadd, cas32, sum, add32, swap, setw, i64w) =
        (c, c + 8, c + 16, c + 24, c + 32, c + 40, c + 48);
    let mut local_sum = 0u64;
    let mut last = None;
    for _ in 0..k {
        let v: u64 = s.atomic_fetch_add(fadd, 1, 0).map_err(e)?;
        if last.is_some_and(|l| v <= l) {
            return Err(format!("fetch_add went backwards: {v} after {last:?}"));
        }
        last = Some(v);
        local_sum += v;
        loop {
            let old: u32 = s.atomic_fetch(cas32, 0).map_err(e)?;
            if s.atomic_compare_swap(cas32, old, old + 1, 0).map_err(e)? == old {
                break;
            }
        }
        s.atomic_add::<u32>(add32, 1, 0).map_err(e)?;
        let _: i64 = s.atomic_fetch_add(i64w, -3i64, 0).map_err(e)?;
    }
    let mut ins = 0u64;
    let mut olds = 0u64;
    for i in 0..k as u64 {
        let v = ((me as u64) << 32) | (i + 1);
        ins = ins.wrapping_add(v);
        olds = olds.wrapping_add(s.atomic_swap::<u64>(swap, v, 0).map_err(e)?);
    }
    s.atomic_add::<u64>(sum, local_sum, 0).map_err(e)?;
    s.atomic_add::<u64>(setw, ins.wrapping_sub(olds), 0)
        .map_err(e)?;
    s.quiet().map_err(e)?;
    s.barrier_all().map_err(e)?;
    let total = (n * k) as u64;
    if me == 0 {
        let got = (
            s.local_read::<u64>(fadd).map_err(e)?,
            s.local_read::<u32>(cas32).map_err(e)?,
            s.local_read::<u32>(add32).map_err(e)?,
            s.local_read::<u64>(sum).map_err(e)?,
            s.local_read::<i64>(i64w).map_err(e)?,
        );
        let want = (
            total,
            total as u32,
            total as u32,
            total * (total.max(1) - 1) / 2,
            -3 * total as i64,
        );
        if got != want {
            return Err(format!("atomic totals {got:?}, expected {want:?}"));
        }
        let fin: u64 = s.local_read(swap).map_err(e)?;
        let bal: u64 = s.local_read(setw).map_err(e)?;
        if fin != bal {
            return Err(format!(
                "swap: final value {fin:#x} does not balance what was swapped in and out ({bal:#x})"
            ));
        }
        d.update(&total.to_le_bytes());
    }
    s.barrier_all().map_err(e)?;
    // set and fetch on the next PE's word (now free: PE 0 has checked it).
    s.atomic_set::<u64>(setw, 7 + me as u64, next).map_err(e)?;
    s.quiet().map_err(e)?;
    s.barrier_all().map_err(e)?;
    let v: u64 = s.atomic_fetch(setw, next).map_err(e)?;
    if v != 7 + me as u64 {
        return Err(format!("atomic_set/fetch on PE {next}: {v}"));
    }
    d.update(&v.to_le_bytes());
    s.barrier_all().map_err(e)?;
    println!("OK atomics k={k}");
    Ok(())
}

/// Every operation, verified; prints the digest.
pub fn ops(s: &Pshmem, sizes: &[usize], rounds: usize) -> R<()> {
    let mut d = Digest(0xcbf2_9ce4_8422_2325);
    rma(s, sizes, &mut d)?;
    p_and_g(s, &mut d)?;
    put_signal(s, sizes, rounds, &mut d)?;
    moe::counted(s, 3, &mut d)?;
    moe::channels(s, &mut d)?;
    fence(s, rounds * 4, true)?;
    atomics(s, rounds.max(10), &mut d)?;
    println!("DIGEST rank={} value={:016x}", s.my_pe(), d.0);
    Ok(())
}

/// Checks that `r` failed with the error variant `want`; prints an `OK error` line.
fn expect(what: &str, r: Result<(), Error>, want: &str) -> R<()> {
    match r {
        Err(err) if kind(&err) == want => {
            println!("OK error {what} kind={want}");
            Ok(())
        }
        Err(err) => Err(format!(
            "{what}: expected {want}, got {}: {err}",
            kind(&err)
        )),
        Ok(()) => Err(format!("{what}: expected {want}, got success")),
    }
}

/// The typed errors of bad arguments and use after finalize.
pub fn errors(s: &Pshmem) -> R<()> {
    let n = s.n_pes();
    let x = s.malloc(64).map_err(e)?;
    expect("invalid pe", s.p(x, 1u64, n), "InvalidPe")?;
    expect(
        "outside the heap",
        s.put(
            SymPtr::from_offset(u64::MAX - 4),
            &[1, 2, 3, 4, 5, 6, 7, 8],
            0,
        ),
        "OutOfHeap",
    )?;
    expect(
        "into the reserved area",
        s.put(SymPtr::from_offset(0), &[1], 0),
        "OutOfHeap",
    )?;
    expect(
        "calloc overflow",
        s.calloc(usize::MAX, 2).map(|_| ()),
        "SizeOverflow",
    )?;
    expect(
        "misaligned atomic",
        s.atomic_fetch_add::<u64>(x + 4, 1, 0).map(|_| ()),
        "Misaligned",
    )?;
    expect(
        "misaligned wait",
        s.wait_until::<u32>(x + 2, Cmp::Eq, 0).map(|_| ()),
        "Misaligned",
    )?;
    expect("bad alignment", s.align(3, 8).map(|_| ()), "BadAlignment")?;
    bad_targets(s, x)?;
    zero_length(s)?;
    expect(
        "heap exhausted",
        s.malloc(1 << 50).map(|_| ()),
        "HeapExhausted",
    )?;
    expect("free of a non-allocation", s.free(x + 64), "BadFree")?;
    s.free(x).map_err(e)?;
    s.finalize().map_err(e)?;
    expect("put after finalize", s.put(x, &[1], 0), "Finalized")?;
    expect("quiet after finalize", s.quiet(), "Finalized")?;
    expect("finalize twice", s.finalize(), "Finalized")?;
    Ok(())
}

/// Every operation given a PE outside the job, a range that starts inside the heap and runs
/// past its end, and (for the `_sym` variants) an out-of-heap source, destination or signal:
/// each a typed error, and nothing sent.
fn bad_targets(s: &Pshmem, x: SymPtr) -> R<()> {
    let n = s.n_pes();
    let peer = (s.my_pe() + 1) % n;
    let end = SymPtr::from_offset(s.config().heap_size as u64);
    let tail = SymPtr::from_offset(s.config().heap_size as u64 - 8);
    let far = SymPtr::from_offset(u64::MAX - 7);
    let mut buf = [0u8; 16];
    let unit = |r: Result<u64, Error>| r.map(|_| ());
    for pe in [n, n + 7, usize::MAX] {
        let what = |op: &str| format!("{op} to PE {pe}");
        expect(&what("get"), s.get(&mut buf, x, pe), "InvalidPe")?;
        expect(&what("g"), unit(s.g::<u64>(x, pe)), "InvalidPe")?;
        expect(
            &what("put_nbi_sym"),
            s.put_nbi_sym(x, x, 8, pe),
            "InvalidPe",
        )?;
        expect(
            &what("get_nbi_sym"),
            s.get_nbi_sym(x, x, 8, pe),
            "InvalidPe",
        )?;
        expect(
            &what("atomic_fetch_add"),
            unit(s.atomic_fetch_add::<u64>(x, 1, pe)),
            "InvalidPe",
        )?;
        expect(
            &what("atomic_compare_swap"),
            unit(s.atomic_compare_swap::<u64>(x, 0, 1, pe)),
            "InvalidPe",
        )?;
        expect(
            &what("atomic_fetch"),
            unit(s.atomic_fetch::<u64>(x, pe)),
            "InvalidPe",
        )?;
        expect(
            &what("atomic_set"),
            s.atomic_set::<u64>(x, 1, pe),
            "InvalidPe",
        )?;
        expect(
            &what("signal_op"),
            s.signal_op(x, 1, SignalOp::Add, pe),
            "InvalidPe",
        )?;
        expect(
            &what("put_signal"),
            s.put_signal(x + 8, &buf[..8], x, 1, SignalOp::Set, pe),
            "InvalidPe",
        )?;
        expect(
            &what("put_signal_nbi_sym"),
            s.put_signal_nbi_sym(x + 8, x + 8, 8, x, 1, SignalOp::Set, pe),
            "InvalidPe",
        )?;
    }
    // Ranges that start inside the heap and run past its end, then ones wholly outside it.
    for (at, how) in [
        (tail, "running past the end"),
        (end, "at the end"),
        (far, "far"),
    ] {
        let what = |op: &str| format!("{op} {how}");
        expect(&what("put"), s.put(at, &buf, peer), "OutOfHeap")?;
        expect(&what("get"), s.get(&mut buf, at, peer), "OutOfHeap")?;
        expect(
            &what("put_nbi_sym dest"),
            s.put_nbi_sym(at, x, 16, peer),
            "OutOfHeap",
        )?;
        expect(
            &what("put_nbi_sym src"),
            s.put_nbi_sym(x, at, 16, peer),
            "OutOfHeap",
        )?;
        expect(
            &what("get_nbi_sym dest"),
            s.get_nbi_sym(at, x, 16, peer),
            "OutOfHeap",
        )?;
        expect(
            &what("get_nbi_sym src"),
            s.get_nbi_sym(x, at, 16, peer),
            "OutOfHeap",
        )?;
        expect(
            &what("put_signal_nbi_sym dest"),
            s.put_signal_nbi_sym(at, x + 8, 16, x, 1, SignalOp::Set, peer),
            "OutOfHeap",
        )?;
        expect(
            &what("put_signal_nbi_sym src"),
            s.put_signal_nbi_sym(x + 8, at, 16, x, 1, SignalOp::Set, peer),
            "OutOfHeap",
        )?;
        expect(
            &what("local_copy_in"),
            s.local_copy_in(at, &buf),
            "OutOfHeap",
        )?;
        expect(
            &what("local_copy_out"),
            s.local_copy_out(at, &mut buf),
            "OutOfHeap",
        )?;
        if at != tail {
            // The signal word itself outside (a tail word is a valid signal).
            expect(
                &what("put_signal_nbi_sym signal"),
                s.put_signal_nbi_sym(x + 8, x + 8, 8, at, 1, SignalOp::Set, peer),
                "OutOfHeap",
            )?;
            expect(
                &what("signal_op"),
                s.signal_op(at, 1, SignalOp::Add, peer),
                "OutOfHeap",
            )?;
            expect(
                &what("atomic_fetch_add"),
                unit(s.atomic_fetch_add::<u64>(at, 1, peer)),
                "OutOfHeap",
            )?;
        }
    }
    s.quiet().map_err(e)?;
    Ok(())
}

/// Zero-length transfers of every kind succeed, move nothing, and a zero-length put-with-signal
/// still delivers its signal.
fn zero_length(s: &Pshmem) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let peer = (me + 1) % n;
    let from = (me + n - 1) % n;
    let buf = s.calloc(1, 64).map_err(e)?;
    let sig = s.calloc(1, 8).map_err(e)?;
    s.put(buf, &[], peer).map_err(e)?;
    s.get(&mut [], buf, peer).map_err(e)?;
    s.put_nbi_sym(buf, buf, 0, peer).map_err(e)?;
    s.get_nbi_sym(buf, buf, 0, peer).map_err(e)?;
    s.put_signal(buf, &[], sig, 7, SignalOp::Set, peer)
        .map_err(e)?;
    s.put_signal_nbi_sym(buf, buf, 0, sig, 3, SignalOp::Add, peer)
        .map_err(e)?;
    s.quiet().map_err(e)?;
    let got = s.signal_wait_until(sig, Cmp::Ge, 10).map_err(e)?;
    if got != 10 {
        return Err(format!(
            "zero-length put-signals from PE {from} left {got}, not 10"
        ));
    }
    s.barrier_all().map_err(e)?;
    let mut bytes = [1u8; 64];
    s.local_copy_out(buf, &mut bytes).map_err(e)?;
    if bytes != [0u8; 64] {
        return Err("a zero-length transfer wrote bytes".into());
    }
    println!("OK zero-length");
    s.free(sig).map_err(e)?;
    s.free(buf).map_err(e)?;
    Ok(())
}

/// Collective calls that differ across PEs: `size` (PE 0 asks for another size) or `order`
/// (PE 0 frees where the others allocate).
pub fn mismatch(s: &Pshmem, how: &str) -> Result<(), Error> {
    let me = s.my_pe();
    match how {
        "size" => {
            s.malloc(if me == 0 { 1024 } else { 2048 })?;
        }
        _ => {
            let a = s.malloc(128)?;
            if me == 0 {
                s.free(a)?;
            } else {
                s.malloc(128)?;
            }
        }
    }
    Ok(())
}

/// A peer dies while the others wait on it: in a barrier, in a quiet after puts to it, or in
/// a wait for a flag it would have set.
pub fn kill(s: &Pshmem, victim: usize, phase: &str) -> Result<(), Error> {
    let me = s.my_pe();
    let buf = s.malloc(1 << 20)?;
    let flag = s.calloc(1, 8)?;
    s.barrier_all()?;
    if me == victim {
        std::thread::sleep(Duration::from_millis(300));
        println!("DYING epoch_ms={}", epoch_ms());
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    match phase {
        "barrier" => s.barrier_all(),
        "reduce" => loop {
            s.reduce(TEAM_WORLD, DType::F32, RedOp::Sum, buf, buf + 4096, 1024)?;
        },
        "fcollect" => loop {
            s.fcollect(TEAM_WORLD, buf, buf + 65536, 1024)?;
        },
        "quiet" => {
            let data = vec![7u8; 1 << 20];
            loop {
                s.put_nbi_sym(buf, buf, 1 << 20, victim)?;
                s.put(buf, &data, victim)?;
                s.quiet()?;
            }
        }
        _ => s.wait_until::<u64>(flag, Cmp::Eq, 1).map(|_| ()),
    }
}

/// The `late` PEs stay away from a barrier (sleeping well past PSHMEM_OP_TIMEOUT, or stopped
/// by SIGSTOP); the others' barrier times out and names them.
///
/// With `how` "put" the late PEs stop (SIGSTOP) and the others make a blocking 8 MiB put to the
/// first of them, which cannot complete; once it has timed out they free its source and call
/// quiet, whose error they return (printing `STUCK first=<kind of the put's error> ms=<time
/// the quiet took>`).
pub fn late(s: &Pshmem, late: &[usize], how: &str) -> Result<(), Error> {
    let buf = s.malloc(8 << 20)?;
    s.barrier_all()?;
    let patience = s.config().op_timeout;
    if late.contains(&s.my_pe()) {
        // The last signals of a barrier may still be in flight when it returns here: deliver
        // them, so that the others' first barrier is complete.
        s.quiet()?;
        println!("LATE pe={}", s.my_pe());
        if how == "stop" || how == "put" {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
        std::thread::sleep(patience * 8);
        // Leave without a goodbye: the others have given up already.
        std::process::exit(0);
    }
    if how == "put" {
        // Unmapped once freed (8 MiB is above the allocator's mmap threshold): a proxy still
        // reading it would fault.
        let data = vec![1u8; 8 << 20];
        let first = s.put(buf, &data, late[0]);
        drop(data);
        let t = std::time::Instant::now();
        let second = s.quiet();
        let kind = |r: &Result<(), Error>| match r {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{e:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap_or("")
                .to_string(),
        };
        println!(
            "STUCK first={} ms={}",
            kind(&first),
            t.elapsed().as_millis()
        );
        std::thread::sleep(patience * 2);
        return second;
    }
    let r = s.barrier_all();
    // Stay while the other on-time PEs look at this one's barrier state.
    std::thread::sleep(patience * 3);
    r
}

/// Ordering negative control: a plain put followed by a signal with no fence, and two `p`s with
/// no fence, on a fabric that reorders. Counts the rounds where the signal was seen before all
/// of its data, and the flag before the data; the sim test expects some of each, which shows
/// that the put-signal and fence checks above can fail.
pub fn unordered(s: &Pshmem, rounds: usize, size: usize) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let src = s.malloc(size).map_err(e)?;
    let data = s.malloc(size).map_err(e)?;
    let sig = s.calloc(2, 8).map_err(e)?;
    let ack = sig + 8;
    let mut early = 0;
    for r in 1..=rounds {
        s.local_copy_in(src, &pattern(seed(me, r, size), size))
            .map_err(e)?;
        s.put_nbi_sym(data, src, size, next).map_err(e)?;
        s.signal_op(sig, r as u64, SignalOp::Set, next).map_err(e)?;
        s.signal_wait_until(sig, Cmp::Ge, r as u64).map_err(e)?;
        let mut got = vec![0u8; size];
        s.local_copy_out(data, &mut got).map_err(e)?;
        if got != pattern(seed(prev, r, size), size) {
            early += 1;
        }
        s.quiet().map_err(e)?;
        s.signal_op(ack, 1, SignalOp::Add, prev).map_err(e)?;
        s.signal_wait_until(ack, Cmp::Ge, r as u64).map_err(e)?;
    }
    s.barrier_all().map_err(e)?;
    let inversions = fence(s, rounds * 4, false)?;
    println!("OK unordered early={early} inversions={inversions} rounds={rounds}");
    Ok(())
}
