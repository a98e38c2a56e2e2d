"""All-reduce and all-gather on symmetric tensors (the NVSHMEM tutorial's second week), beside
torch.distributed's all_reduce and all_gather_into_tensor.

Every size is checked against the value it must have (PE i contributes i + 1 everywhere), then
timed for both.

    pshmrun -n 2 python examples/python/collectives.py [--device cpu|cuda] [--max-bytes N]
"""

import torch
import torch.distributed as dist

import pshmem
from _common import ratio, setup


def more(p):
    p.add_argument("--max-bytes", type=int, default=0,
                   help="largest message per PE (default: 1 MiB on the host, 64 MiB on a GPU)")


ctx = setup("collectives", __doc__, more)
me, n, dev = ctx.me, ctx.n, ctx.device
top = ctx.args.max_bytes or ((64 << 20) if dev.type == "cuda" else (1 << 20))
sizes = []
b = 4 << 10
while b <= top:
    sizes.append(b)
    b *= 4

reduce_rows, gather_rows = [], []
for nbytes in sizes:
    count = nbytes // 4
    iters = ctx.args.iters or max(5, min(200, (32 << 20) // (nbytes * n)))
    # all-reduce (sum): PE i contributes i + 1, so every element ends as n(n+1)/2.
    src = pshmem.full(count, float(me + 1), dtype=torch.float32, device=dev)
    dst = pshmem.zeros(count, dtype=torch.float32, device=dev)
    pshmem.all_reduce(dst, src)
    ctx.sync()
    want = n * (n + 1) / 2
    ctx.check(bool((dst == want).all()), f"all_reduce of {nbytes} B: every element {want}")
    ours = ctx.time_us(lambda: pshmem.all_reduce(dst, src), iters)
    t = torch.full((count,), float(me + 1), device=ctx.tdevice)
    theirs = ctx.time_us(lambda: dist.all_reduce(t), iters, tdev=ctx.tdevice)
    reduce_rows.append([nbytes, ours, theirs, ratio(ours, theirs)])
    pshmem.free(dst)
    pshmem.free(src)

    # all-gather: PE i's block is all i; dst holds every block in PE order.
    src = pshmem.full(count, float(me), dtype=torch.float32, device=dev)
    dst = pshmem.zeros(count * n, dtype=torch.float32, device=dev)
    pshmem.all_gather(dst, src)
    ctx.sync()
    want_g = torch.arange(n, dtype=torch.float32, device=dev).repeat_interleave(count)
    ctx.check(bool(torch.equal(dst, want_g)), f"all_gather of {nbytes} B per PE: blocks in PE order")
    ours = ctx.time_us(lambda: pshmem.all_gather(dst, src), iters)
    ts = torch.full((count,), float(me), device=ctx.tdevice)
    td = torch.empty(count * n, device=ctx.tdevice)
    theirs = ctx.time_us(lambda: dist.all_gather_into_tensor(td, ts), iters, tdev=ctx.tdevice)
    gather_rows.append([nbytes, ours, theirs, ratio(ours, theirs)])
    pshmem.free(dst)
    pshmem.free(src)

head = ["bytes per PE", "pshmem µs", "torch.distributed µs", "speed-up"]
ctx.table("all_reduce (sum, float32)", head, reduce_rows)
ctx.table("all_gather (float32)", head, gather_rows)
ctx.finish()
