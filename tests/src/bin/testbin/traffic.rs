//! Traffic of a known shape for the proxy trace's tests (`rt-trace`).

use pshmem::{Cmp, Error, Pshmem, SignalOp};

/// PE 0: `count` blocking puts of `size` bytes and `count` 8-byte `p`s to PE 1, then quiet; or
/// (`signal`) `count` puts with signal from its heap, which PE 1 waits for and checks.
pub fn traffic(s: &Pshmem, count: usize, size: usize, signal: bool) -> Result<(), Error> {
    let buf = s.malloc(size + 8)?;
    let src = s.malloc(size)?;
    let data = vec![3u8; size];
    s.local_copy_in(src, &data)?;
    s.barrier_all()?;
    match (s.my_pe(), signal) {
        (0, false) => {
            for i in 0..count {
                s.put(buf, &data, 1)?;
                s.p(buf + size, i as u64, 1)?;
            }
            s.quiet()?;
        }
        (0, true) => {
            // From the heap: one RMA write per part (a raw source would go through 1 MiB
            // staging chunks).
            for _ in 0..count {
                s.put_signal_nbi_sym(buf, src, size, buf + size, 1, SignalOp::Add, 1)?;
            }
            s.quiet()?;
        }
        (1, true) => {
            s.signal_wait_until(buf + size, Cmp::Ge, count as u64)?;
            let mut got = vec![0u8; size];
            s.local_copy_out(buf, &mut got)?;
            // A test binary: a wrong byte ends the rank, which the test sees.
            assert!(got == data, "PE 1: the signalled put's data differs");
        }
        _ => {}
    }
    s.barrier_all()
}
