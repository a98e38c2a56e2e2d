//! The host API by address (`pshmem::ByAddr`, what the C ABI and Python call) on the GPU heap:
//! the heap resolved at its reserved words, an over-aligned block freed by its address, a
//! misaligned signal refused before it reaches the device (a misaligned device atomic would
//! end the context), one operation on two heaps and a stream on host memory refused, and a
//! word consumed by GPU atomics while a peer's signal-adds land on it (none lost).

use std::time::Duration;

use pshmem::{Error, HeapKind, Pshmem, SignalOp, Stream, SymPtr};

type R<T> = Result<T, String>;

fn e(x: Error) -> String {
    format!("{x}")
}

fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, Error>, want: &str) -> R<()> {
    match r {
        Err(err) if format!("{err:?}").starts_with(want) => {
            println!("OK by-addr-gpu {what}");
            Ok(())
        }
        other => Err(format!("{what}: expected {want}, got {other:?}")),
    }
}

/// Every check, collective over the job.
pub fn run(s: &Pshmem, g: &pshmem::gpu::Gpu, rounds: u64) -> R<()> {
    let api = s.by_addr();
    let (me, n) = (s.my_pe(), s.n_pes());
    let next = (me + 1) % n;
    let base = g.ptr(SymPtr::from_offset(0));
    refused("reserved words", api.resolve("t", base, 8), "OutOfHeap")?;
    // The largest alignment the heap's base allows (at least 1 KiB: cuMemAlloc's are wider).
    let align = 1usize << base.trailing_zeros().min(16);
    let a = api.malloc(HeapKind::Gpu, 100, align, false).map_err(e)?;
    if a % align as u64 != 0 || api.heap_of(a, 100) != Some(HeapKind::Gpu) {
        return Err(format!("malloc aligned to {align}: {a:#x}"));
    }
    api.free(a).map_err(e)?;
    println!("OK by-addr-gpu aligned align={align}");
    let sig = api.malloc(HeapKind::Gpu, 64, 256, true).map_err(e)?;
    refused(
        "misaligned signal",
        api.signal_op(sig + 4, 1, SignalOp::Add, next, None),
        "Misaligned",
    )?;
    let host = s.malloc(64).map_err(e)?;
    let host = s.ptr(host) as u64;
    let src = [0u8; 8];
    refused(
        "two heaps",
        // SAFETY: `src` is live for the call (refused first).
        unsafe {
            api.put_signal(
                host,
                src.as_ptr(),
                8,
                sig,
                1,
                SignalOp::Add,
                next,
                false,
                None,
            )
        },
        "InvalidArgument",
    )?;
    // SAFETY: the runtime's stream, live while `g` is.
    let st = unsafe { Stream::from_raw(g.stream().cu_stream() as u64) };
    refused(
        "stream on host memory",
        // SAFETY: `src` is live for the call (refused first).
        unsafe { api.put(host, src.as_ptr(), 8, next, false, Some(st)) },
        "InvalidArgument",
    )?;
    s.barrier_all().map_err(e)?;
    consume(s, sig, rounds)?;
    s.barrier_all().map_err(e)?;
    api.free(sig).map_err(e)?;
    s.free(SymPtr::from_offset(
        host - s.ptr(SymPtr::from_offset(0)) as u64,
    ))
    .map_err(e)
}

/// Every PE adds `rounds` to the next PE's word at `sig` while consuming its own by GPU AMOs
/// (fetch-add of minus what it saw): nothing is lost; a reset by atomic swap leaves 0.
fn consume(s: &Pshmem, sig: u64, rounds: u64) -> R<()> {
    let api = s.by_addr();
    pshmem_tests::consume_signals(s, sig, rounds, Duration::from_secs(20))?;
    api.reset_word(sig, 0).map_err(e)?;
    let left = api.read_word(sig, true).map_err(e)?;
    if left != 0 {
        return Err(format!("consumed {rounds}, {left} left after the reset"));
    }
    println!("OK by-addr-gpu consume rounds={rounds}");
    Ok(())
}
