"""Three communication patterns of training and inference, each beside torch.distributed:

- small gradient sync: an in-place all-reduce of a gradient bucket (target < 100 µs);
- pipeline-stage handoff: stage 0 hands a 16 KiB activation to stage 1 with put-with-signal,
  stage 1 waits on the signal on its stream (one way: half a ping-pong; target < 5 µs);
- parameter lookup: one 4 KiB row read from the peer that holds the shard, with a one-sided
  get and, where the peer is mapped, by indexing its shard directly (target < 2 µs).

On a GPU each pshmem figure is given twice: "eager" (one Python call per step) and "graph"
(the steps captured in a CUDA graph and replayed: pshmem's stream operations are kernel launches
only, so they capture). The targets are judged on the graph figure on a GPU, on the eager one on
the host. On one GPU the PEs share it under MPS: same-GPU copies, not NVLink.

    pshmrun -n 2 python examples/python/patterns.py [--device cpu|cuda]
"""

import torch
import torch.distributed as dist

import pshmem
from _common import ratio, setup

ctx = setup("patterns", __doc__)
me, n, dev = ctx.me, ctx.n, ctx.device
gpu = dev.type == "cuda"
peer = (me + 1) % n
iters = ctx.args.iters or (200 if gpu else 100)


def judge(eager, graph, target):
    best = graph if graph is not None else eager
    return "met" if best < target else "not met"


# ---- small gradient sync -------------------------------------------------------------------
grad_rows = []
for nbytes in (64 << 10, 256 << 10, 1 << 20):
    count = nbytes // 4
    g = pshmem.full(count, float(me + 1), dtype=torch.float32, device=dev)
    pshmem.all_reduce(g)
    ctx.sync()
    ctx.check(bool((g == n * (n + 1) / 2).all()), f"gradient sync of {nbytes} B (in place)")
    eager = ctx.time_us(lambda: pshmem.all_reduce(g), iters)
    graph = ctx.graph_us(lambda: pshmem.all_reduce(g), iters)
    tg = torch.ones(count, device=ctx.tdevice)
    theirs = ctx.time_us(lambda: dist.all_reduce(tg), iters, tdev=ctx.tdevice)
    grad_rows.append([nbytes, eager, graph, theirs, ratio(graph or eager, theirs),
                      judge(eager, graph, 100.0)])
    pshmem.free(g)

# ---- pipeline-stage handoff (PEs 0 and 1) ----------------------------------------------------
act_elems = 8 * 1024  # 8 tokens x 1024 hidden, bf16: 16 KiB
inbox = pshmem.zeros(act_elems, dtype=torch.bfloat16, device=dev)
flag = pshmem.zeros(1, dtype=torch.int64, device=dev)
act = torch.full((act_elems,), float(me + 1), dtype=torch.bfloat16, device=dev)


def ping_pong():
    # Stage 0 hands over, stage 1 hands back: each side's wait consumes its flag (resets it to
    # 0 once seen), so the same steps replay in a CUDA graph.
    if me == 0:
        pshmem.put_signal(inbox, act, flag, 1, 1)
        pshmem.signal_wait_until(flag, "eq", 1, reset=0)
    elif me == 1:
        pshmem.signal_wait_until(flag, "eq", 1, reset=0)
        pshmem.put_signal(inbox, act, flag, 1, 0)


ping_pong()
ctx.sync()
if me < 2:
    want = 2.0 if me == 0 else 1.0
    ctx.check(bool((inbox == want).all()), f"stage {me} received the activation of stage {1 - me}")
eager = ctx.time_us(ping_pong, iters) / 2
graph = ctx.graph_us(ping_pong, iters)
graph = None if graph is None else graph / 2
tact = torch.empty(act_elems, dtype=torch.bfloat16, device=ctx.tdevice)


def torch_ping_pong():
    if me == 0:
        dist.send(tact, 1)
        dist.recv(tact, 1)
    elif me == 1:
        dist.recv(tact, 0)
        dist.send(tact, 0)


theirs = ctx.time_us(torch_ping_pong, iters, tdev=ctx.tdevice) / 2
handoff = [[act_elems * 2, eager, graph, theirs, ratio(graph or eager, theirs),
            judge(eager, graph, 5.0)]]

# ---- parameter lookup from a peer's shard ----------------------------------------------------
rows, dim = 4096, 1024  # each PE holds a 16 MiB shard of float32 rows
shard = pshmem.empty((rows, dim), dtype=torch.float32, device=dev)
shard.copy_(torch.arange(rows, device=dev, dtype=torch.float32).unsqueeze(1) + me * rows)
row = torch.empty(dim, dtype=torch.float32, device=dev)
r = 1234
pshmem.barrier()
ctx.sync()
pshmem.get(row, shard[r], peer)
ctx.sync()
ctx.check(bool((row == peer * rows + r).all()), f"row {r} of PE {peer}'s shard by get")
view = pshmem.peer_tensor(shard, peer)
idx = torch.tensor([r], device=dev)
lookup = []
eager = ctx.time_us(lambda: pshmem.get(row, shard[r], peer), iters)
graph = ctx.graph_us(lambda: pshmem.get(row, shard[r], peer), iters)
trow = torch.empty(dim, device=ctx.tdevice)
tshard_row = torch.zeros(dim, device=ctx.tdevice)


def torch_lookup():
    # Two-sided: the owner (the left neighbour of the reader) must send the row.
    q = [dist.isend(tshard_row, (me - 1) % n), dist.irecv(trow, peer)]
    for x in q:
        x.wait()


theirs = ctx.time_us(torch_lookup, iters, tdev=ctx.tdevice)
lookup.append(["get (one-sided)", dim * 4, eager, graph, theirs, ratio(graph or eager, theirs),
               judge(eager, graph, 2.0)])
if view is not None:
    out = torch.empty((1, dim), dtype=torch.float32, device=dev)
    torch.index_select(view, 0, idx, out=out)
    ctx.sync()
    ctx.check(bool((out == peer * rows + r).all()), f"row {r} of PE {peer}'s shard through its view")
    step = lambda: torch.index_select(view, 0, idx, out=out)
    eager = ctx.time_us(step, iters)
    graph = ctx.graph_us(step, iters)
    lookup.append(["index the peer's shard (direct load)", dim * 4, eager, graph, theirs,
                   ratio(graph or eager, theirs), judge(eager, graph, 2.0)])

head = ["bytes", "pshmem eager µs", "pshmem graph µs", "torch.distributed µs", "speed-up",
        "target"]
ctx.table("small gradient sync: in-place all_reduce (target < 100 µs)", head, grad_rows)
ctx.table("pipeline-stage handoff, one way (target < 5 µs)", head, handoff)
ctx.table("parameter lookup from a peer's shard (target < 2 µs)", ["how"] + head, lookup)
pshmem.free(shard)
pshmem.free(flag)
pshmem.free(inbox)
ctx.finish()
