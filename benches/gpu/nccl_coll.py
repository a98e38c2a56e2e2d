#!/usr/bin/env python3
"""NCCL's side of the collectives comparison (torch.distributed, one rank per GPU).

  nccl_coll.py OUT.json [MAX_BYTES] [RANKS]

For RANKS ranks (default 2) on GPUs 0 … RANKS-1: all_reduce (float sum; our reduce_latency), all_gather_into_tensor
(fcollect_latency), all_to_all_single (alltoall_latency), broadcast (bcast_latency),
reduce_scatter_tensor (reducescatter_latency) and barrier, at 4 B ... MAX_BYTES per rank (x4), each
the median of 5 samples of `reps` back-to-back calls timed with CUDA events on rank 0. Sizes are
bytes per rank, as pshmem-perf's."""
import json
import os
import socket
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rank_procs import results_or_exit

SAMPLES = 5


def sizes(hi):
    s = 4
    while s <= hi:
        yield s
        s *= 4


def reps_for(size):
    # Size 0 is the barrier: as many calls as the smallest messages.
    return max(1, min(50, (256 << 20) // max(size, 1)))


def rank_main(rank, n, port, hi, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", rank))
    rows = []

    def timed(name, size, fn):
        reps = reps_for(size)
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(SAMPLES):
            dist.barrier()
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1e3 / reps)
        if rank == 0:
            rows.append({"test": name, "size": size, "unit": "us", "samples": samples,
                         "median": statistics.median(samples)})

    for size in sizes(hi):
        e = size // 4
        x = torch.ones(e, dtype=torch.float32, device="cuda")
        out = torch.empty(e * n, dtype=torch.float32, device="cuda")
        rs_in = torch.ones(e * n, dtype=torch.float32, device="cuda")
        rs_out = torch.empty(e, dtype=torch.float32, device="cuda")
        a2a_in = torch.ones(e * n, dtype=torch.float32, device="cuda")
        a2a_out = torch.empty(e * n, dtype=torch.float32, device="cuda")
        timed("reduce_latency", size, lambda: dist.all_reduce(x))
        timed("fcollect_latency", size, lambda: dist.all_gather_into_tensor(out, x))
        timed("alltoall_latency", size, lambda: dist.all_to_all_single(a2a_out, a2a_in))
        timed("bcast_latency", size, lambda: dist.broadcast(x, 0))
        timed("reducescatter_latency", size, lambda: dist.reduce_scatter_tensor(rs_out, rs_in))
    timed("barrier_latency", 0, lambda: dist.barrier())
    if rank == 0:
        q.put(rows)
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    hi = int(sys.argv[2]) if len(sys.argv) > 2 else 256 << 20
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    if torch.cuda.device_count() < n:
        print(f"SKIP nccl_coll: needs {n} GPUs (one rank per GPU)")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, n, port, hi, q)) for r in range(n)]
    for p in procs:
        p.start()
    rows = results_or_exit(q, procs, 1200, "nccl_coll")
    for p in procs:
        p.join(timeout=120)
    with open(out, "w") as f:
        json.dump({"benchmark": "nccl-collectives", "ranks": n, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
