#!/usr/bin/env python3
"""Host-initiated put bandwidth between two PEs whose GPU heaps are mapped (NVLink, or one GPU):
pshmem.put of a CUDA tensor on a stream, timed with CUDA events, at 64 KiB ... MAX.

    pshmrun -n 2 python3 benches/gpu/host_put.py SHAPE MAX OUT.json

SHAPE names the rows (the caller sets PSHMEM_COPY_ENGINE_MIN: "host-ce" with the default, i.e.
the copy engine from 2 MiB; "host-kernel" with a huge value, the one-block kernel). PE 0 puts
into PE 1 and writes {"rows": [...]} rows as benches/gpu/merge.py reads them."""
import json
import os
import statistics
import sys

import torch

import pshmem

shape, top, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
local = int(os.environ.get("PSHMEM_LOCAL_RANK", "0"))
torch.cuda.set_device(local % torch.cuda.device_count())
pshmem.init(device="cuda")
me = pshmem.my_pe()
dst = pshmem.zeros(top, dtype=torch.uint8, device="cuda")
src = torch.ones(top, dtype=torch.uint8, device="cuda")
rows = []
size = 64 << 10
while size <= top:
    reps = max(3, min(50, (256 << 20) // size))
    times = []
    for _ in range(5):
        pshmem.barrier()
        torch.cuda.synchronize()
        if me == 0:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                pshmem.put(dst[:size], src[:size], 1)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / reps)
        pshmem.barrier()
        torch.cuda.synchronize()
    if me == 0:
        gbps = size / statistics.median(times) / 1e9
        rows.append({"table": "nvlink", "runtime": "proxyshmem", "shape": shape, "test": "host_put_bw",
                     "size": size, "gbps": gbps})
        print(f"{shape} {size} {gbps:.1f} GB/s", flush=True)
    size *= 4
if me == 0:
    with open(out, "w") as f:
        json.dump({"rows": rows}, f)
pshmem.finalize()
