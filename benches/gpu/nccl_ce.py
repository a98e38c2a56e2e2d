#!/usr/bin/env python3
"""The NCCL and copy-engine side of the issue-7 comparison (PyTorch on the GPU machine).

  nccl_ce.py nvlink OUT.json   NCCL send/recv GPU0 -> GPU1 bandwidth and ping-pong latency,
                               and the copy engine's peer copy (one process, both GPUs)
  nccl_ce.py socket OUT.json   the same NCCL tests forced through the network
                               (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket, loopback)
  A third argument caps the largest size in bytes (default 1 GiB), as BENCH_GPU_NET_MAX does
  for the network path's runs of both runtimes.

Bandwidth: `reps` back-to-back transfers timed with CUDA events on the sender, median of
`samples`; latency: 8-byte send/recv ping-pong, half round trip, launched from Python.
"""
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rank_procs import results_or_exit

MIN, MAX = 8, 1 << 30
SAMPLES = 5


def sizes(lo=MIN, hi=MAX):
    s = lo
    while s <= hi:
        yield s
        s *= 2


def reps_for(size):
    return max(1, min(64, (1 << 30) // size))


def rank_main(rank, port, out_q, lo, hi):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    buf = torch.empty(hi, dtype=torch.uint8, device="cuda")
    buf.fill_(0x5A)
    rows = []
    for size in sizes(lo, hi):
        t = buf[:size]
        reps = reps_for(size)
        vals = []
        for s in range(SAMPLES + 1):
            dist.barrier()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                if rank == 0:
                    dist.send(t, 1)
                else:
                    dist.recv(t, 0)
            b.record()
            torch.cuda.synchronize()
            if s:
                vals.append(size * reps / (a.elapsed_time(b) * 1e-3) / 1e9)
        if rank == 0:
            rows.append({"runtime": "nccl", "test": "put_bw", "size": size,
                         "gbps": statistics.median(vals), "reps": reps})
    # Ping-pong.
    t = buf[:8]
    lat = []
    for s in range(SAMPLES + 1):
        dist.barrier()
        torch.cuda.synchronize()
        iters = 200
        t0 = time.perf_counter()
        for _ in range(iters):
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
        torch.cuda.synchronize()
        if s:
            lat.append((time.perf_counter() - t0) / iters / 2 * 1e6)
    if rank == 0:
        rows.append({"runtime": "nccl", "test": "p_latency", "size": 8,
                     "us": statistics.median(lat)})
        out_q.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def copy_engine(lo, hi):
    src = torch.empty(hi, dtype=torch.uint8, device="cuda:0").fill_(0x5A)
    dst = torch.empty(hi, dtype=torch.uint8, device="cuda:1")
    rows = []
    for size in sizes(lo, hi):
        reps = reps_for(size)
        vals = []
        for s in range(SAMPLES + 1):
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            with torch.cuda.device(0):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(reps):
                    dst[:size].copy_(src[:size], non_blocking=True)
                b.record()
                b.synchronize()
            torch.cuda.synchronize(1)
            if s:
                vals.append(size * reps / (a.elapsed_time(b) * 1e-3) / 1e9)
        rows.append({"runtime": "copy_engine", "test": "put_bw", "size": size,
                     "gbps": statistics.median(vals), "reps": reps})
    return rows


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    mode, out = sys.argv[1], sys.argv[2]
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST"):
        assert os.environ.get(k) in ("0", "1"), f"{k} must be set"
    os.environ.setdefault("TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING", "false")
    lo, hi = MIN, int(sys.argv[3]) if len(sys.argv) > 3 else MAX
    if mode == "socket":
        os.environ.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NET="Socket",
                          NCCL_SOCKET_IFNAME="lo")
        lo = 8
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, port, q, lo, hi)) for r in range(2)]
    for p in procs:
        p.start()
    rows = results_or_exit(q, procs, 1200, "nccl_ce")
    for p in procs:
        p.join(timeout=120)
    for r in rows:
        r["path"] = "nvlink" if mode == "nvlink" else "socket"
    if mode == "nvlink":
        rows += [dict(r, path="nvlink") for r in copy_engine(lo, hi)]
    doc = {"tool": "nccl_ce.py", "mode": mode, "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "rows": rows}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
