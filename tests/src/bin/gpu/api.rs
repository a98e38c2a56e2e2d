//! Device API tests, one PE per process (`gpu-ops-rank`, `gpu-kill-rank`), launched N at a time
//! by `gpu-ops` / `gpu-kill` in `main.rs`. Every device operation on the next PE, verified byte
//! for byte on the host and counted wrong in the kernels.

use std::{sync::Arc, time::Instant};

use cudarc::driver::{CudaModule, CudaSlice, CudaStream, DevicePtr};
use pshmem::{
    Pshmem, SymPtr,
    cuda::{Kernel, KernelArgs},
    error::Error,
};

use crate::kargs::{
    AmoSemanticsArgs, AtomicsArgs, BarrierArgs, FillArgs, PgArgs, PutSignalArgs, PutgetArgs,
    WaitArgs,
};

type R<T> = Result<T, String>;

fn e(x: Error) -> String {
    x.to_string()
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Byte `i` of pattern `seed` (as `t_byte` in device_test.cu).
fn t_byte(seed: u64, i: u64) -> u8 {
    (mix(seed ^ (i >> 3)) >> ((i & 7) * 8)) as u8
}

fn expect(seed: u64, from: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| t_byte(seed, from + i)).collect()
}

fn seed(pe: usize, what: u64) -> u64 {
    (pe as u64) << 32 | what
}

struct Ctx<'a> {
    s: &'a Pshmem,
    g: &'a pshmem::gpu::Gpu,
    m: Arc<CudaModule>,
    st: Arc<CudaStream>,
}

/// Kernel `name` of `m` (loaded in `g`'s context).
fn kernel<A: KernelArgs>(
    g: &pshmem::gpu::Gpu,
    m: &Arc<CudaModule>,
    name: &'static str,
) -> R<Kernel<A>> {
    Kernel::load(g.context(), m, name).map_err(|x| format!("{name}: {x}"))
}

impl Ctx<'_> {
    fn k<A: KernelArgs>(&self, name: &'static str) -> R<Kernel<A>> {
        kernel(self.g, &self.m, name)
    }

    /// Launches `k` on `blocks` blocks of `threads` on the test's stream.
    ///
    /// # Safety
    /// As [`Kernel::launch`].
    unsafe fn launch<A: KernelArgs>(
        &self,
        k: &Kernel<A>,
        (blocks, threads): (u32, u32),
        args: A,
    ) -> R<()> {
        // SAFETY: forwarded.
        unsafe { k.launch((blocks, 1), threads, self.st.cu_stream(), args) }
            .map_err(|x| x.to_string())
    }

    /// The device address of a counter (everything runs on the test's one stream).
    fn at(&self, c: &CudaSlice<u64>) -> u64 {
        c.device_ptr(&self.st).0
    }

    fn sync(&self, what: &'static str) -> R<()> {
        self.g.synchronize(&self.st, what).map_err(e)
    }

    fn fill(&self, p: SymPtr, len: usize, seed: u64) -> R<()> {
        let k: Kernel<FillArgs> = self.k("t_fill")?;
        let args = FillArgs {
            buf: self.g.ptr(p),
            n: len as u64,
            seed,
        };
        // SAFETY: `len` bytes of the GPU heap.
        unsafe { self.launch(&k, (64, 256), args) }?;
        self.sync("fill")
    }

    fn read(&self, p: SymPtr, len: usize) -> R<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.g.copy_out(p, &mut v).map_err(e)?;
        Ok(v)
    }

    fn counter(&self) -> R<CudaSlice<u64>> {
        self.st.alloc_zeros::<u64>(1).map_err(|x| x.to_string())
    }

    fn count(&self, c: &CudaSlice<u64>) -> R<u64> {
        Ok(self.st.clone_dtoh(c).map_err(|x| x.to_string())?[0])
    }

    fn phase(&self, what: &str) {
        eprintln!(
            "PROGRESS pe={} {what} at_ms={}",
            self.s.my_pe(),
            pshmem_tests::epoch_ms()
        );
    }

    fn barrier(&self) -> R<()> {
        self.s.barrier_all().map_err(e)
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Prints how this PE reaches `peer`, and checks that a job that maps every peer opens no
/// transport for the GPU heap (nor for the host heap when on one machine with peer mappings
/// on), and that one with any proxied peer does.
fn paths(s: &Pshmem, g: &pshmem::gpu::Gpu, peer: usize) -> R<()> {
    println!(
        "INFO pe={} device={} peer={peer} direct={} remote_path={} transport={}",
        s.my_pe(),
        g.ordinal(),
        g.is_direct(peer),
        g.remote_path(),
        s.transport_name().replace(' ', "_")
    );
    let all_mapped = (0..s.n_pes()).all(|p| g.is_direct(p));
    if all_mapped != (g.remote_path() == "none") {
        return Err(format!(
            "every peer mapped: {all_mapped}, but the GPU proxy path is {}",
            g.remote_path()
        ));
    }
    Ok(())
}

/// Every device operation on the next PE; prints one OK line per part.
pub fn ops_rank(s: &Pshmem) -> R<()> {
    let g = s.gpu_init().map_err(e)?;
    let (me, n) = (s.my_pe(), s.n_pes());
    let (peer, prev) = ((me + 1) % n, (me + n - 1) % n);
    let m = g.load(pshmem_tests::DEVICE_TEST_KERNELS).map_err(e)?;
    let c = Ctx {
        s,
        g,
        m,
        st: g.stream().clone(),
    };
    paths(s, g, peer)?;

    // put / get: 6 variants x sizes, odd destination offsets on odd variants.
    let sizes = [1usize, 8, 4099, (1 << 20) + 5, 3 << 20];
    let max = *sizes.iter().max().expect("sizes");
    let stride = max + 256;
    let src = s.gpu_malloc(max).map_err(e)?;
    let dst = s.gpu_calloc(6 * stride).map_err(e)?;
    let back = s.gpu_calloc(6 * stride).map_err(e)?;
    c.fill(src, max, seed(me, 1))?;
    c.barrier()?;
    let f: Kernel<PutgetArgs> = c.k("t_putget")?;
    let t0 = Instant::now();
    for &len in &sizes {
        for v in 0..6i32 {
            for put in [1i32, 0] {
                let off = v as usize * stride + (v as usize % 2);
                let (d, sp) = if put == 1 {
                    (c.g.ptr(dst + off), c.g.ptr(src))
                } else {
                    (c.g.ptr(back + off), c.g.ptr(src))
                };
                let args = PutgetArgs {
                    dst: d,
                    src: sp,
                    len: len as u64,
                    put,
                    v,
                    pe: peer as i32,
                    _pad: 0,
                };
                // SAFETY: symmetric buffers of at least `len` bytes at these offsets.
                unsafe { c.launch(&f, (1, 256), args) }?;
            }
        }
        c.sync("put/get")?;
        c.barrier()?;
        for v in 0..6usize {
            let off = v * stride + (v % 2);
            let got = c.read(dst + off, len)?;
            let want = expect(seed(prev, 1), 0, len);
            if let Some(i) = first_diff(&got, &want) {
                return Err(format!(
                    "put variant {v} of {len} bytes from PE {prev}: byte {i} differs"
                ));
            }
            let got = c.read(back + off, len)?;
            let want = expect(seed(peer, 1), 0, len);
            if let Some(i) = first_diff(&got, &want) {
                return Err(format!(
                    "get variant {v} of {len} bytes from PE {peer}: byte {i} differs"
                ));
            }
        }
        c.barrier()?;
    }
    println!(
        "OK put-get variants=6 sizes={:?} secs={:.3}",
        sizes,
        t0.elapsed().as_secs_f64()
    );

    // p of every type, then g.
    c.phase("p-g");
    let k = 1024usize;
    let p64 = s.gpu_calloc(k * 8).map_err(e)?;
    let p32 = s.gpu_calloc(k * 4).map_err(e)?;
    let p8 = s.gpu_calloc(k).map_err(e)?;
    let pd = s.gpu_calloc(k * 8).map_err(e)?;
    let pf = s.gpu_calloc(k * 4).map_err(e)?;
    let gout = s.gpu_calloc(k * 8).map_err(e)?;
    let gsrc = s.gpu_calloc(k * 8).map_err(e)?;
    let mine: Vec<u8> = (0..k as u64)
        .flat_map(|i| mix(me as u64 * 7 + i).to_le_bytes())
        .collect();
    g.copy_in(gsrc, &mine).map_err(e)?;
    c.barrier()?;
    {
        let f: Kernel<PgArgs> = c.k("t_pg")?;
        let args = PgArgs {
            p64: c.g.ptr(p64),
            p32: c.g.ptr(p32),
            p8: c.g.ptr(p8),
            pd: c.g.ptr(pd),
            pf: c.g.ptr(pf),
            gout: c.g.ptr(gout),
            gsrc: c.g.ptr(gsrc),
            n: k as i32,
            pe: peer as i32,
            me: me as i32,
            _pad: 0,
        };
        // SAFETY: `k` elements of each symmetric array.
        unsafe { c.launch(&f, (1, 256), args) }?;
        c.sync("p/g")?;
    }
    c.barrier()?;
    let word = |v: &[u8], i: usize, w: usize| v[i * w..i * w + w].to_vec();
    let (v64, v32, v8, vd, vf, vg) = (
        c.read(p64, k * 8)?,
        c.read(p32, k * 4)?,
        c.read(p8, k)?,
        c.read(pd, k * 8)?,
        c.read(pf, k * 4)?,
        c.read(gout, k * 8)?,
    );
    for (i, &b8) in v8.iter().enumerate().take(k) {
        let ok = word(&v64, i, 8) == mix(prev as u64 * 1_000_003 + i as u64).to_le_bytes()
            && word(&v32, i, 4) == (-((prev * 100_000 + i) as i32)).to_le_bytes()
            && b8 == (prev * 31 + i) as u8
            && word(&vd, i, 8) == (0.5 * i as f64 + prev as f64).to_le_bytes()
            && word(&vf, i, 4) == (0.25f32 * i as f32 - prev as f32).to_le_bytes()
            && word(&vg, i, 8) == mix(peer as u64 * 7 + i as u64).to_le_bytes();
        if !ok {
            return Err(format!("p/g element {i} is wrong"));
        }
    }
    println!("OK p-g elements={k} types=uint64,int,char,double,float");

    // put-with-signal ordering.
    c.phase("put-signal");
    let (kmsg, msg) = (32usize, 65536usize);
    let buf = s.gpu_calloc(kmsg * msg).map_err(e)?;
    let src2 = s.gpu_malloc(kmsg * msg).map_err(e)?;
    let sig = s.gpu_calloc(64).map_err(e)?;
    c.fill(src2, kmsg * msg, seed(me, 2))?;
    let f: Kernel<PutSignalArgs> = c.k("t_put_signal")?;
    for variant in 0..3i32 {
        g.copy_in(sig, &[0u8; 8]).map_err(e)?;
        g.copy_in(buf, &vec![0u8; kmsg * msg]).map_err(e)?;
        c.barrier()?;
        let errors = c.counter()?;
        let args = PutSignalArgs {
            buf: c.g.ptr(buf),
            src: c.g.ptr(src2),
            msg: msg as u64,
            sig: c.g.ptr(sig),
            peer_seed: seed(prev, 2),
            errors: c.at(&errors),
            k: kmsg as i32,
            pe: peer as i32,
            variant,
            _pad: 0,
        };
        // SAFETY: `kmsg * msg` bytes of symmetric buffers, one signal word, one counter.
        unsafe { c.launch(&f, (2, 256), args) }?;
        c.sync("put_signal")?;
        let bad = c.count(&errors)?;
        if bad != 0 {
            return Err(format!(
                "put_signal variant {variant}: {bad} bytes seen before their signal"
            ));
        }
        c.barrier()?;
        let got = c.read(buf, kmsg * msg)?;
        if let Some(i) = first_diff(&got, &expect(seed(prev, 2), 0, kmsg * msg)) {
            return Err(format!("put_signal variant {variant}: byte {i} differs"));
        }
        let sv = u64::from_le_bytes(c.read(sig, 8)?.try_into().expect("8"));
        if sv != kmsg as u64 {
            return Err(format!(
                "put_signal variant {variant}: signal {sv} != {kmsg}"
            ));
        }
    }
    println!("OK put-signal messages={kmsg} bytes={msg} variants=thread-nbi,block-nbi,thread");

    // Atomics: contention from every PE, then each operation's semantics.
    c.phase("atomics");
    let c64 = s.gpu_calloc(64).map_err(e)?;
    let c32 = s.gpu_calloc(64).map_err(e)?;
    let x64 = s.gpu_calloc(16 * 8).map_err(e)?;
    let x32 = s.gpu_calloc(8 * 4).map_err(e)?;
    c.barrier()?;
    let (blocks, threads, iters) = (4u32, 64u32, 3i32);
    {
        let f: Kernel<AtomicsArgs> = c.k("t_atomics")?;
        let args = AtomicsArgs {
            c64: c.g.ptr(c64),
            c32: c.g.ptr(c32),
            iters,
            _pad: 0,
        };
        // SAFETY: 3 + 2 words of symmetric counters.
        unsafe { c.launch(&f, (blocks, threads), args) }?;
        c.sync("atomics")?;
    }
    c.barrier()?;
    let v = c.read(c64, 24)?;
    let w = c.read(c32, 8)?;
    let total = (n as u64) * u64::from(blocks * threads) * iters as u64;
    let cas = (n as u64) * u64::from(blocks) * 4 * iters as u64;
    let got64: Vec<u64> = v
        .chunks(8)
        .map(|x| u64::from_le_bytes(x.try_into().expect("8")))
        .collect();
    let got32: Vec<u32> = w
        .chunks(4)
        .map(|x| u32::from_le_bytes(x.try_into().expect("4")))
        .collect();
    if got64 != [total, total, cas] || got32 != [total as u32, total as u32] {
        return Err(format!(
            "contended atomics: 64-bit {got64:?} (want {total}, {total}, {cas}), 32-bit {got32:?} (want {total})"
        ));
    }
    c.phase("amo-semantics");
    {
        let f: Kernel<AmoSemanticsArgs> = c.k("t_amo_semantics")?;
        let errors = c.counter()?;
        let args = AmoSemanticsArgs {
            x64: c.g.ptr(x64),
            x32: c.g.ptr(x32),
            errors: c.at(&errors),
            pe: peer as i32,
            _pad: 0,
        };
        // SAFETY: 16 + 8 symmetric words, one counter.
        unsafe { c.launch(&f, (1, 1), args) }?;
        c.sync("amo semantics")?;
        let bad = c.count(&errors)?;
        if bad != 0 {
            return Err(format!("{bad} AMO results differ from their definition"));
        }
    }
    println!(
        "OK atomics contended={total} cas={cas} semantics=fetch_add,add,swap,compare_swap,fetch,set x 32/64 bit, signal_op"
    );

    // Device barrier, and the host's on-stream barrier and quiet.
    c.phase("by-addr");
    c.barrier()?;
    crate::by_addr::run(s, g, 200)?;
    c.phase("barrier");
    c.barrier()?;
    {
        let word = s.gpu_calloc(8).map_err(e)?;
        c.barrier()?;
        let f: Kernel<BarrierArgs> = c.k("t_barrier")?;
        let errors = c.counter()?;
        let args = BarrierArgs {
            word: c.g.ptr(word),
            errors: c.at(&errors),
            rounds: 50,
            pe: peer as i32,
        };
        let t0 = Instant::now();
        // SAFETY: one symmetric word, one counter.
        unsafe { c.launch(&f, (1, 1), args) }?;
        c.sync("device barrier")?;
        let us = t0.elapsed().as_secs_f64() * 1e6 / 100.0;
        let bad = c.count(&errors)?;
        if bad != 0 {
            return Err(format!("device barrier: {bad} rounds saw a stale word"));
        }
        c.phase("on-stream");
        for _ in 0..10 {
            g.barrier_all_on_stream(&c.st).map_err(e)?;
            g.quiet_on_stream(&c.st).map_err(e)?;
        }
        c.sync("on-stream barrier")?;
        println!("OK barrier rounds=50 us_per_barrier={us:.1} on_stream=10");
    }
    c.barrier()?;
    g.check("gpu-ops").map_err(e)?;
    println!("OK gpu-ops pe={me}");
    Ok(())
}

/// `victim` dies while the others wait in a kernel for its signal.
pub fn kill_rank(s: &Pshmem, victim: usize) -> R<()> {
    let g = s.gpu_init().map_err(e)?;
    let me = s.my_pe();
    let m = g.load(pshmem_tests::DEVICE_TEST_KERNELS).map_err(e)?;
    let sig = s.gpu_calloc(8).map_err(e)?;
    s.barrier_all().map_err(e)?;
    if me == victim {
        std::thread::sleep(std::time::Duration::from_millis(500));
        println!("DYING epoch_ms={}", pshmem_tests::epoch_ms());
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    let st = g.stream().clone();
    let out = st.alloc_zeros::<u64>(2).map_err(|x| x.to_string())?;
    let f: Kernel<WaitArgs> = kernel(g, &m, "t_wait")?;
    let args = WaitArgs {
        sig: g.ptr(sig),
        out: out.device_ptr(&st).0,
    };
    // SAFETY: one symmetric word, two result words.
    unsafe { f.launch((1, 1), 1, st.cu_stream(), args) }.map_err(|x| x.to_string())?;
    match g.synchronize(&st, "signal_wait_until") {
        Err(err @ (Error::PeerDied { .. } | Error::OpFailed { .. })) => {
            println!(
                "ERR kind={} pe={} epoch_ms={} msg={}",
                if matches!(err, Error::PeerDied { .. }) {
                    "PeerDied"
                } else {
                    "OpFailed"
                },
                err.pe().map_or("none".into(), |p| p.to_string()),
                pshmem_tests::epoch_ms(),
                err.to_string().replace(' ', "_")
            );
            // The job is broken: leave without finalize.
            std::process::exit(3);
        }
        Err(other) => Err(other.to_string()),
        Ok(()) => Err("the wait ended without an error although the peer died".into()),
    }
}
