//! The host API by address (`pshmem::ByAddr`, what the C ABI and Python call) on the host
//! heap: the heap resolved at its edges, zero-byte calls with null buffers, a stream refused on
//! host memory, put-with-signal `nbi` complete at quiet, waits and the atomic reset of a word,
//! aligned allocations, peer addresses and a collective. Each check prints `OK by-addr <what>`.

use std::time::Duration;

use pshmem::{ByAddr, Cmp, Coll, Error, HeapKind, Pshmem, SignalOp, Stream};
use pshmem_tests::pattern;

use crate::runtime::{e, kind};

type R<T> = Result<T, String>;

fn ok(what: &str) {
    println!("OK by-addr {what}");
}

/// `r` failed with the error variant `want`.
fn fails<T: std::fmt::Debug>(what: &str, r: Result<T, Error>, want: &str) -> R<()> {
    match r {
        Err(err) if kind(&err) == want => {
            ok(what);
            Ok(())
        }
        other => Err(format!("{what}: expected {want}, got {other:?}")),
    }
}

fn check(what: &str, cond: bool, detail: impl std::fmt::Display) -> R<()> {
    if cond {
        ok(what);
        Ok(())
    } else {
        Err(format!("{what}: {detail}"))
    }
}

/// The heap's edges: its reserved words, its end, zero bytes at and one past the end, and an
/// address in no heap.
fn resolve(api: ByAddr<'_>, base: u64, size: u64) -> R<()> {
    let at = |off: u64, len: usize| api.resolve("t", base + off, len);
    let reserved = pshmem::alloc::RESERVED;
    check(
        "resolve",
        at(reserved, 8).is_ok_and(|s| s.heap == HeapKind::Host && s.offset == reserved)
            && at(size - 8, 8).is_ok()
            && at(size - 1, 0).is_ok(),
        "the first, the last and an empty range of the user heap",
    )?;
    fails("resolve reserved", at(0, 8), "OutOfHeap")?;
    fails("resolve past the end", at(size - 8, 9), "OutOfHeap")?;
    fails("resolve one past the end", at(size, 0), "NotSymmetric")?;
    fails("resolve outside", api.resolve("t", 8, 8), "NotSymmetric")?;
    check(
        "heap_of",
        api.heap_of(base + reserved, 1) == Some(HeapKind::Host) && api.heap_of(8, 1).is_none(),
        "host for the heap, none elsewhere",
    )
}

/// Zero-byte calls with null buffers are checked and do nothing; a stream is refused on host
/// memory.
fn edges(api: ByAddr<'_>, x: u64, next: usize, n: usize) -> R<()> {
    let null = std::ptr::null_mut::<u8>();
    // SAFETY: zero bytes: the buffers are never touched.
    unsafe { api.put(x, null, 0, next, false, None) }.map_err(e)?;
    // SAFETY: as above.
    unsafe { api.get(null, x, 0, next, true, None) }.map_err(e)?;
    ok("zero bytes");
    // SAFETY: zero bytes.
    let r = unsafe { api.put(x, null, 0, n, false, None) };
    fails("zero bytes to a PE outside the job", r, "InvalidPe")?;
    // SAFETY: never dereferenced: the call is refused first (a stream on host memory).
    let stream = unsafe { Stream::from_raw(0x1000) };
    let buf = [1u8; 8];
    fails(
        "a stream on the host heap",
        // SAFETY: `buf` outlives the call (which is refused).
        unsafe { api.put(x, buf.as_ptr(), 8, next, false, Some(stream)) },
        "InvalidArgument",
    )?;
    fails(
        "a stream before the GPU part",
        api.quiet(false, Some(stream)),
        "InvalidArgument",
    )?;
    fails(
        "a misaligned signal",
        api.signal_op(x + 4, 1, SignalOp::Add, next, None),
        "Misaligned",
    )
}

/// Put-with-signal `nbi` from a buffer that stays live until quiet; the signal seen by a host
/// wait, then reset by an atomic swap (while the peer's signal-adds go on landing).
fn signals(s: &Pshmem, api: ByAddr<'_>, (data, sig): (u64, u64), rounds: u64) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let src = pattern(0xb1 + me as u64, 4096);
    // SAFETY: `src` lives until after the quiet below.
    unsafe {
        api.put_signal(
            data,
            src.as_ptr(),
            4096,
            sig,
            1,
            SignalOp::Add,
            next,
            true,
            None,
        )
    }
    .map_err(e)?;
    api.quiet(false, None).map_err(e)?;
    let seen = api.wait_until(sig, true, (Cmp::Ge, 1)).map_err(e)?;
    let mut got = vec![0u8; 4096];
    // SAFETY: `got` is a live exclusive buffer of 4096 bytes.
    unsafe { api.get(got.as_mut_ptr(), data, 4096, me, false, None) }.map_err(e)?;
    check(
        "put_signal nbi",
        seen == 1 && got == pattern(0xb1 + prev as u64, 4096),
        format!("signal {seen}, data from PE {prev}"),
    )?;
    api.reset_word(sig, 0).map_err(e)?;
    s.barrier_all().map_err(e)?;
    // The peer adds `rounds` times while this PE consumes what it sees: nothing is lost.
    let consumed = pshmem_tests::consume_signals(s, sig, rounds, Duration::from_secs(10));
    check("consume", consumed.is_ok(), format!("{consumed:?}"))?;
    check(
        "read_word",
        api.read_word(sig, true).map_err(e)? == 0,
        "the word is 0 after consuming",
    )
}

/// Aligned allocation, peer addresses and a collective through the API.
fn memory(s: &Pshmem, api: ByAddr<'_>, base: u64) -> R<()> {
    let (me, n) = (s.my_pe(), s.n_pes());
    let a = api.malloc(HeapKind::Host, 100, 4096, true).map_err(e)?;
    check(
        "aligned malloc",
        a % 4096 == 0 && a > base,
        format!("{a:#x}"),
    )?;
    fails(
        "alignment not a power of two",
        api.malloc(HeapKind::Host, 8, 48, false),
        "BadAlignment",
    )?;
    let mine = api.peer_addr(a, me).map_err(e)?;
    let next = api.peer_addr(a, (me + 1) % n).map_err(e)?;
    check(
        "peer_addr",
        mine == Some(a) && next.is_some() == s.is_direct((me + 1) % n),
        format!("{mine:?} {next:?}"),
    )?;
    let dest = api.malloc(HeapKind::Host, 8 * n, 64, true).map_err(e)?;
    let word = (me as u64 + 1).to_le_bytes();
    // SAFETY: `word` is live for the blocking put.
    unsafe { api.put(a, word.as_ptr(), 8, me, false, None) }.map_err(e)?;
    api.collective(Coll::Fcollect, pshmem::team::TEAM_WORLD, (dest, a), 8, None)
        .map_err(e)?;
    let mut all = vec![0u8; 8 * n];
    // SAFETY: `all` is a live exclusive buffer.
    unsafe { api.get(all.as_mut_ptr(), dest, 8 * n, me, false, None) }.map_err(e)?;
    let want: Vec<u8> = (1..=n as u64).flat_map(u64::to_le_bytes).collect();
    check("fcollect", all == want, "every PE's word in PE order")?;
    api.free(dest).map_err(e)?;
    api.free(a).map_err(e)?;
    fails("free twice", api.free(a), "BadFree")
}

/// Every check above, in order (collective: every PE runs them).
pub fn run(s: &Pshmem) -> R<()> {
    let api = s.by_addr();
    let (me, n) = (s.my_pe(), s.n_pes());
    let base = s.ptr(pshmem::SymPtr::from_offset(0)) as u64;
    resolve(api, base, s.config().heap_size as u64)?;
    let data = api.malloc(HeapKind::Host, 4096, 64, true).map_err(e)?;
    let sig = api.malloc(HeapKind::Host, 8, 64, true).map_err(e)?;
    edges(api, sig, (me + 1) % n, n)?;
    signals(s, api, (data, sig), 200)?;
    s.barrier_all().map_err(e)?;
    memory(s, api, base)?;
    s.barrier_all().map_err(e)
}
