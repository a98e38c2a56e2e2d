"""Every operation of the pshmem package, checked on N PEs (launched by pshmrun or torchrun).
Exits non-zero with the failed checks listed. ``--device cpu`` (host heap) or ``cuda``.

    pshmrun -n 3 python python/tests/workers/ops.py --device cpu
"""

import argparse
import os
import sys

import torch

import pshmem

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
p.add_argument("--group", action="store_true", help="init from a torch.distributed gloo group")
args = p.parse_args()
dev = torch.device(args.device)
if dev.type == "cuda":
    local = int(os.environ.get("PSHMEM_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(local % torch.cuda.device_count())
if args.group:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    pshmem.init(group=dist.group.WORLD)
    assert pshmem.my_pe() == dist.get_rank() and pshmem.n_pes() == dist.get_world_size()
else:
    pshmem.init()
me, n = pshmem.my_pe(), pshmem.n_pes()
nxt, prv = (me + 1) % n, (me - 1) % n
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"[PE {me}] FAILED: {what}", flush=True)


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def barrier():
    sync()
    pshmem.barrier()
    sync()


def raises(exc, fn, what, contains=()):
    try:
        fn()
    except exc as e:
        msg = str(e)
        check(all(c in msg for c in contains), f"{what}: message {msg!r} lacks {contains}")
        return
    except Exception as e:  # noqa: BLE001 - the wrong class is the failure
        check(False, f"{what}: raised {type(e).__name__}: {e}, not {exc.__name__}")
        return
    check(False, f"{what}: did not raise {exc.__name__}")


# ---- tensors -----------------------------------------------------------------------------------
x = pshmem.zeros((4, 8), dtype=torch.float32, device=dev)
check(isinstance(x, torch.Tensor) and x.shape == (4, 8) and x.dtype == torch.float32,
      "zeros gives a float32 (4, 8) torch.Tensor")
check(x.device.type == dev.type, f"zeros on {dev}")
check(bool((x == 0).all()), "zeros is zero")
check(pshmem.is_symmetric(x) and not pshmem.is_symmetric(torch.zeros(3, device=dev)),
      "is_symmetric tells heap tensors from others")
f = pshmem.full(16, 3, dtype=torch.int64, device=dev)
check(bool((f == 3).all()), "full")
e = pshmem.empty(5, dtype=torch.bfloat16, device=dev)
check(e.dtype == torch.bfloat16 and e.numel() == 5, "empty bf16")
z0 = pshmem.zeros(0, dtype=torch.float32, device=dev)
check(z0.numel() == 0, "an empty symmetric tensor")

# ---- put / get ---------------------------------------------------------------------------------
barrier()
pshmem.put(x, torch.full((4, 8), float(me), device=dev), nxt)
barrier()
check(bool((x == prv).all()), f"put from PE {prv} landed")
row = torch.empty(8, device=dev)
pshmem.get(row, x[2], nxt)  # a row view of the symmetric tensor
sync()
check(bool((row == me).all()), "get of a row view from the right neighbour")
barrier()
pshmem.put(x[1], torch.full((8,), 100.0 + me, device=dev), nxt, nbi=True)
pshmem.quiet()
barrier()
check(bool((x[1] == 100 + prv).all()) and bool((x[0] == prv).all()), "put nbi + quiet, row only")
out = torch.empty((4, 8), device=dev)
pshmem.get(out, x, prv, nbi=True)
pshmem.quiet()
sync()
check(bool((out[1] == 100 + (prv - 1) % n).all()), "get nbi + quiet")
barrier()
# Large transfers (4 MiB + 4 bytes): between mapped GPUs they go by the copy engine, through the
# proxy in staged chunks; blocking, on a stream, and nbi + quiet.
big_n = (1 << 20) + 1
ramp = torch.arange(big_n, dtype=torch.float32, device=dev)
big = pshmem.zeros(big_n, dtype=torch.float32, device=dev)
barrier()
pshmem.put(big, ramp + me, nxt)
barrier()
check(bool((big == ramp + prv).all()), "a 4 MiB put")
back = torch.empty(big_n, device=dev)
pshmem.get(back, big, nxt)
sync()
check(bool((back == ramp + me).all()), "a 4 MiB get")
barrier()
if dev.type == "cuda":
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        staged = ramp * 2 + me
    pshmem.put(big, staged, nxt, stream=s)
    s.synchronize()
    barrier()
    check(bool((big == ramp * 2 + prv).all()), "a 4 MiB put on a stream")
    barrier()
pshmem.put(big, ramp * 3 + me, nxt, nbi=True)
pshmem.quiet()
barrier()
check(bool((big == ramp * 3 + prv).all()), "a 4 MiB put nbi + quiet")
barrier()

# ---- signals -----------------------------------------------------------------------------------
data = pshmem.zeros(64, dtype=torch.int32, device=dev)
sig = pshmem.zeros(2, dtype=torch.int64, device=dev)
barrier()
pshmem.put_signal(data, torch.arange(64, dtype=torch.int32, device=dev) + me, sig, 7, nxt)
v = pshmem.signal_wait_until(sig, "eq", 7, host=True)
check(v == 7, f"host wait on put_signal's signal returned {v}")
check(bool((data == torch.arange(64, device=dev) + prv).all()), "put_signal's data before its signal")
barrier()  # every PE has seen its signal before the next update to it
pshmem.put_signal(data, torch.zeros(64, dtype=torch.int32, device=dev), sig, 5, nxt, op="add")
pshmem.signal_wait_until(sig, ">=", 12)
sync()
check(pshmem.signal_fetch(sig) == 12, "put_signal add")
pshmem.signal_op(sig[1:], 41, nxt)
pshmem.signal_op(sig[1:], 1, nxt, op="add")
pshmem.quiet()
v = pshmem.signal_wait_until(sig[1:], "eq", 42, host=True)
check(v == 42, "signal_op set then add on the second word")
for cmp, val in (("ne", 0), ("gt", 41), ("le", 42), ("lt", 43), ("ge", 42)):
    w = pshmem.signal_wait_until(sig[1:], cmp, val, host=True)
    check(w == 42, f"wait {cmp} {val} on 42")
barrier()
# A consumed signal: the wait resets the word (on the stream for CUDA tensors).
pshmem.signal_op(sig, 3, nxt)
pshmem.quiet()
pshmem.signal_wait_until(sig, "eq", 3, reset=0)
sync()
check(pshmem.signal_fetch(sig) == 0, "a wait with reset=0 leaves the word at 0")
barrier()

# ---- atomics -----------------------------------------------------------------------------------
ctr = pshmem.zeros(1, dtype=torch.int64, device=dev)
c32 = pshmem.zeros(1, dtype=torch.int32, device=dev)
barrier()
old = pshmem.atomic_fetch_add(ctr, me + 1, 0)
pshmem.atomic_add(c32, 1, 0)
barrier()
if me == 0:
    check(pshmem.atomic_fetch(ctr, 0) == n * (n + 1) // 2, "fetch_add from every PE")
    check(pshmem.atomic_fetch(c32, 0) == n, "32-bit add from every PE")
check(0 <= old <= n * (n + 1) // 2, "fetch_add's old value")
barrier()
if me == 0:
    pshmem.atomic_set(ctr, 5, nxt)
    check(pshmem.atomic_swap(ctr, 6, nxt) == 5, "set then swap")
    check(pshmem.atomic_compare_swap(ctr, 6, 9, nxt) == 6, "compare_swap matched")
    check(pshmem.atomic_compare_swap(ctr, 6, 1, nxt) == 9, "compare_swap unmatched")
barrier()

# ---- collectives -------------------------------------------------------------------------------
src = pshmem.full(10, float(me), dtype=torch.float32, device=dev)
dst = pshmem.zeros(10, dtype=torch.float32, device=dev)
barrier()
pshmem.broadcast(dst, src, root=n - 1)
sync()
check(bool((dst == n - 1).all()), "broadcast from the last PE")
g = pshmem.zeros(10 * n, dtype=torch.float32, device=dev)
pshmem.all_gather(g, src)
sync()
check(torch.equal(g.cpu(), torch.arange(n, dtype=torch.float32).repeat_interleave(10)),
      "all_gather in PE order")
a_src = pshmem.empty(3 * n, dtype=torch.int64, device=dev)
a_src.copy_(torch.arange(3 * n, device=dev) + 1000 * me)
a_dst = pshmem.zeros(3 * n, dtype=torch.int64, device=dev)
barrier()
pshmem.alltoall(a_dst, a_src)
sync()
want = torch.cat([torch.arange(3 * me, 3 * me + 3) + 1000 * j for j in range(n)])
check(torch.equal(a_dst.cpu(), want), "alltoall blocks")
for dt in (torch.int32, torch.int64, torch.float32, torch.float64, torch.float16, torch.bfloat16):
    s = pshmem.full(33, me + 1, dtype=dt, device=dev)
    d = pshmem.zeros(33, dtype=dt, device=dev)
    barrier()
    pshmem.all_reduce(d, s)
    sync()
    check(bool((d == n * (n + 1) // 2).all()), f"all_reduce sum {dt}")
    pshmem.all_reduce(d, s, op="max")
    sync()
    check(bool((d == n).all()), f"all_reduce max {dt}")
    pshmem.all_reduce(s, op="min")  # in place
    sync()
    check(bool((s == 1).all()), f"all_reduce min in place {dt}")
    barrier()
    pshmem.free(d)
    pshmem.free(s)
# Past the low-latency protocol's 2 KiB per member: the one-block fold and, from 256 KiB per
# member on a GPU, the grid's. Every type; an odd tail; buffers one element off 16-byte
# alignment (the element-wise fold); reduce_scatter. Element i of PE p is (p + 1) * (i % 5 + 1):
# exact in 16-bit floats, and an element folded into the wrong place shows.
for dt in (torch.int32, torch.int64, torch.float32, torch.float64, torch.float16, torch.bfloat16):
    for count, off in ((1029, 0), (70001, 0), (1029, 1)):
        s_all = pshmem.empty(count + 1, dtype=dt, device=dev)
        d_all = pshmem.zeros(count + 1, dtype=dt, device=dev)
        s, d = s_all[off:off + count], d_all[off:off + count]
        pat = torch.arange(count, device=dev) % 5 + 1
        s.copy_(pat * (me + 1))
        barrier()
        pshmem.all_reduce(d, s)
        sync()
        check(torch.equal(d, (pat * (n * (n + 1) // 2)).to(dt)),
              f"all_reduce sum of {count} {dt} at element offset {off}")
        pshmem.all_reduce(d, s, op="max")
        sync()
        check(torch.equal(d, (pat * n).to(dt)), f"all_reduce max of {count} {dt} at offset {off}")
        barrier()
        pshmem.free(d_all)
        pshmem.free(s_all)
    rs_s = pshmem.empty(1029 * n, dtype=dt, device=dev)
    rs_d = pshmem.zeros(1029, dtype=dt, device=dev)
    rs_s.copy_((torch.arange(1029 * n, device=dev) % 5 + 1) * (me + 1))
    barrier()
    pshmem.reduce_scatter(rs_d, rs_s)
    sync()
    want = (torch.arange(1029 * me, 1029 * (me + 1), device=dev) % 5 + 1) * (n * (n + 1) // 2)
    check(torch.equal(rs_d, want.to(dt)), f"reduce_scatter sum of 1029 {dt} per PE")
    barrier()
    pshmem.free(rs_d)
    pshmem.free(rs_s)
rs_src = pshmem.empty(4 * n, dtype=torch.float32, device=dev)
rs_src.copy_(torch.arange(4 * n, dtype=torch.float32, device=dev))
rs_dst = pshmem.zeros(4, dtype=torch.float32, device=dev)
barrier()
pshmem.reduce_scatter(rs_dst, rs_src)
sync()
check(torch.equal(rs_dst.cpu(), n * torch.arange(4 * me, 4 * me + 4, dtype=torch.float32)),
      "reduce_scatter sum")
try:
    import torch.distributed as dist

    red = dist.ReduceOp.MAX
except Exception:  # noqa: BLE001 - torch built without distributed
    red = "max"
pshmem.all_reduce(dst, src, op=red)
sync()
check(bool((dst == n - 1).all()), "all_reduce with a torch.distributed.ReduceOp")

# ---- teams -------------------------------------------------------------------------------------
w = pshmem.TEAM_WORLD
check(w.my_pe() == me and w.n_pes() == n, "TEAM_WORLD")
evens = w.split_strided(0, 2, (n + 1) // 2)
# Symmetric allocation is collective over the world, even for a team's buffers.
ts = pshmem.full(4, float(me), dtype=torch.float32, device=dev)
td = pshmem.zeros(4, dtype=torch.float32, device=dev)
barrier()
if me % 2 == 0:
    check(evens is not None and evens.my_pe() == me // 2, "even team membership")
    check(evens.translate_pe(evens.n_pes() - 1, w) == 2 * (evens.n_pes() - 1), "translate_pe")
    pshmem.all_reduce(td, ts, team=evens)
    sync()
    check(bool((td == sum(range(0, n, 2))).all()), "all_reduce over the even team")
    pshmem.barrier(evens)
    sync()
    evens.destroy()
else:
    check(evens is None, "odd PEs are outside the even team")
barrier()
pshmem.free(td)
pshmem.free(ts)

# ---- peer views --------------------------------------------------------------------------------
pv = pshmem.zeros(8, dtype=torch.float32, device=dev)
barrier()
view = pshmem.peer_tensor(pv, nxt)
check(pshmem.peer_tensor(pv, me) is pv, "peer_tensor of this PE is the tensor")
gpu = dev.type == "cuda"
if view is not None:
    check(pshmem._C.is_direct(nxt, gpu), "a view only for a mapped peer")
    view.copy_(torch.full((8,), float(me), device=dev))
    barrier()
    check(bool((pv == prv).all()), "a store through the left neighbour's view landed here")
else:
    check(not pshmem._C.is_direct(nxt, gpu), "no view for a mapped peer")
    barrier()
direct = os.environ.get("PSHMEM_DISABLE_P2P", "0") != "1"
check((view is not None) == direct, f"peer view exists iff the direct path is on ({direct})")

# ---- errors ------------------------------------------------------------------------------------
raises(pshmem.InvalidArgument, lambda: pshmem.put(x, torch.zeros((4, 8), device=dev), n + 3),
       "put to a PE beyond the job", (f"PE {me}", "put", f"PE {n + 3}"))
raises(pshmem.InvalidArgument,
       lambda: pshmem.put(torch.zeros(3, device=dev), torch.zeros(3, device=dev), nxt),
       "put to a tensor off the heap", (f"PE {me}", "put", "not on a symmetric heap"))
raises(pshmem.InvalidArgument, lambda: pshmem.put(x, torch.zeros(3, device=dev), nxt),
       "put of a different size", ("put", "bytes"))
raises(pshmem.InvalidArgument, lambda: pshmem.free(x[1]), "free of a view inside", ("free",))
raises(pshmem.InvalidArgument, lambda: pshmem.signal_op(x, 1, nxt), "a float32 signal",
       ("8-byte",))
# Atomics on a float, on two elements, or with a value wider than the element (issue 41).
raises(pshmem.InvalidArgument, lambda: pshmem.atomic_add(x[:1], 1, nxt), "an atomic on float32",
       ("float32", "integers"))
raises(pshmem.InvalidArgument, lambda: pshmem.atomic_add(a_dst[:2], 1, nxt),
       "an atomic on two elements", ("2 elements",))
raises(pshmem.InvalidArgument, lambda: pshmem.atomic_set(ctr, 2**70 + 5, nxt),
       "an atomic value wider than 64 bits", ("does not fit",))
raises(pshmem.InvalidArgument, lambda: pshmem.atomic_add(c32, 2**32, nxt),
       "an atomic value wider than 32 bits", ("32-bit",))
raises(pshmem.InvalidArgument, lambda: pshmem.all_reduce(e, e.clone(), op="median"),
       "an unknown reduction", ("median",))
raises(pshmem.InvalidArgument, lambda: pshmem.all_reduce(f, op="sum", src=f.to(torch.int8)),
       "all_reduce of different dtypes", ())
if dev.type == "cpu":
    raises(pshmem.InvalidArgument, lambda: pshmem.put(x, x, nxt, stream=1),
           "a stream with host tensors", ("stream",))
check(issubclass(pshmem.Timeout, pshmem.PshmemError)
      and issubclass(pshmem.PshmemError, RuntimeError), "exception hierarchy")
# Every PE asks for a different size: the runtime refuses on every PE, and the job goes on.
raises(pshmem.CollectiveMismatch, lambda: pshmem.zeros(100 + me, device=dev),
       "allocations that differ across PEs", ("PEs called it differently",))
barrier()

# ---- free and reuse ----------------------------------------------------------------------------
for t in (x, f, e, z0, data, sig, ctr, c32, src, dst, g, a_src, a_dst, rs_src, rs_dst, pv):
    pshmem.free(t)
big = pshmem.zeros(1 << 20, dtype=torch.uint8, device=dev)
check(bool((big == 0).all()), "a reallocation after frees is zeroed")
pshmem.free(big)

sync()
pshmem.finalize()
print(f"[PE {me}] ops on {dev}: {'FAILED ' + str(len(failures)) if failures else 'passed'}",
      flush=True)
sys.exit(1 if failures else 0)
