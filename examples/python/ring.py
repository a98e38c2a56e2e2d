"""Ring communication and one-sided put/get (the NVSHMEM tutorial's first week), in PyTorch.

1. Each PE writes its number into its right neighbour's symmetric tensor with put-with-signal;
   the neighbour waits on the signal, not on a barrier.
2. A token travels around the ring: each PE waits for it, adds its number, forwards it.
3. Each PE reads its right neighbour's tensor with a one-sided get (the neighbour does nothing).

Timed beside torch.distributed: a ring pass of the token (send/recv) and a get of 4 KiB.

    pshmrun -n 2 python examples/python/ring.py [--device cpu|cuda]
"""

import torch
import torch.distributed as dist

import pshmem
from _common import ratio, setup

ctx = setup("ring", __doc__)
me, n, dev = ctx.me, ctx.n, ctx.device
nxt, prv = (me + 1) % n, (me - 1) % n

# 1. neighbour exchange with put-with-signal.
inbox = pshmem.zeros(1, dtype=torch.int32, device=dev)
sig = pshmem.zeros(1, dtype=torch.int64, device=dev)
mine = torch.full((1,), me, dtype=torch.int32, device=dev)
pshmem.put_signal(inbox, mine, sig, 1, nxt)
pshmem.signal_wait_until(sig, "ge", 1)
ctx.sync()
ctx.check(inbox.item() == prv, f"PE {me} received {inbox.item()} from its left neighbour {prv}")

# 2. a token around the ring, `rounds` times; signal value r marks round r's arrival.
token = pshmem.zeros(1, dtype=torch.int64, device=dev)
tsig = pshmem.zeros(1, dtype=torch.int64, device=dev)
pshmem.barrier()
ctx.sync()
rnd = [0]


def token_pass():
    r = rnd[0] = rnd[0] + 1
    if me == 0:
        start = torch.zeros(1, dtype=torch.int64, device=dev) if r == 1 else token.clone()
        pshmem.put_signal(token, start, tsig, r, nxt)
        pshmem.signal_wait_until(tsig, "ge", r)
    else:
        pshmem.signal_wait_until(tsig, "ge", r)
        pshmem.put_signal(token, token + me, tsig, r, nxt)


token_pass()
ctx.sync()
if me == 0:
    want = sum(range(n))
    ctx.check(token.item() == want, f"the token came back holding {token.item()} (0+1+..+{n-1} = {want})")

# 3. one-sided get of the right neighbour's block.
block = pshmem.full(1024, float(me) * 100, dtype=torch.float32, device=dev)
got = torch.empty(1024, dtype=torch.float32, device=dev)
pshmem.barrier()
pshmem.get(got, block, nxt)
ctx.sync()
ctx.check(bool((got == nxt * 100).all()), f"get of PE {nxt}'s block read {got[0].item()}")

# Timing: a whole ring pass of the token, per hop; then a 4 KiB get.
iters = ctx.args.iters or (200 if dev.type == "cuda" else 100)
ours_hop = ctx.time_us(token_pass, iters) / n
ttok = torch.zeros(1, dtype=torch.int64, device=ctx.tdevice)


def torch_pass():
    if me == 0:
        dist.send(ttok, nxt)
        dist.recv(ttok, prv)
    else:
        dist.recv(ttok, prv)
        ttok.add_(me)
        dist.send(ttok, nxt)


theirs_hop = ctx.time_us(torch_pass, iters, tdev=ctx.tdevice) / n
ours_get = ctx.time_us(lambda: pshmem.get(got, block, nxt), iters)
tgot = torch.empty(1024, dtype=torch.float32, device=ctx.tdevice)
tblock = torch.full((1024,), float(me), device=ctx.tdevice)


def torch_get():
    # Two-sided: the owner must send what a one-sided get just reads.
    reqs = [dist.isend(tblock, prv), dist.irecv(tgot, nxt)]
    for q in reqs:
        q.wait()


theirs_get = ctx.time_us(torch_get, iters, tdev=ctx.tdevice)
ctx.table("ring", ["measure", "pshmem µs", "torch.distributed µs", "speed-up"], [
    ["token ring, per hop (put-with-signal + wait vs send/recv)", ours_hop, theirs_hop,
     ratio(ours_hop, theirs_hop)],
    ["4 KiB from the right neighbour (get vs isend/irecv)", ours_get, theirs_get,
     ratio(ours_get, theirs_get)],
])
ctx.finish()
