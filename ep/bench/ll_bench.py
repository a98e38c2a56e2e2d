"""Low-latency MoE dispatch/combine (pshmem.ep.Buffer) timed like DeepEP's benchmark: µs per
dispatch and per combine and GB/s counted as DeepEP counts bytes (every selection, local ones
included: FP8 dispatch H + H/128*4 + 16 bytes, BF16 combine 2H bytes). Each rank prints one
JSON line with its medians (ep/bench/report.py averages the ranks).

    pshmrun -n 8 python ep/bench/ll_bench.py --tokens 128 --hidden 7168 --topk 8 \
        --experts-per-rank 8 [--per-token] [--bf16] [--only dispatch --iters 50]

`--only dispatch` runs dispatches alone (for a proxy trace: messages per dispatch).
"""

import argparse
import json
import os

import torch

import pshmem
from pshmem.ep import Buffer

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=128)
p.add_argument("--hidden", type=int, default=7168)
p.add_argument("--topk", type=int, default=8)
p.add_argument("--experts-per-rank", type=int, default=8)
p.add_argument("--iters", type=int, default=30)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--per-token", action="store_true", help="one message per token (else batched)")
p.add_argument("--bf16", action="store_true", help="BF16 dispatch (else FP8)")
p.add_argument("--only", choices=["dispatch", "both"], default="both")
p.add_argument("--label", default="")
p.add_argument("--pause", choices=["barrier+sleep", "barrier", "sleep", "none"],
               default="barrier+sleep", help="what precedes each timed call (diagnosis)")
args = p.parse_args()

local = int(os.environ.get("PSHMEM_LOCAL_RANK", "0"))
torch.cuda.set_device(local % torch.cuda.device_count())
pshmem.init(device="cuda")
me, N = pshmem.my_pe(), pshmem.n_pes()
T, H, K, El = args.tokens, args.hidden, args.topk, args.experts_per_rank
E = El * N
K = min(K, E)
torch.manual_seed(me)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
topk_idx = torch.topk(torch.randn((T, E), device="cuda"), K, dim=-1).indices.to(torch.int64)
topk_w = torch.rand((T, K), device="cuda")
buf = Buffer(None, num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(T, H, N, E),
             low_latency_mode=True, num_qps_per_rank=El, per_token=args.per_token)
use_fp8 = not args.bf16
stream = torch.cuda.current_stream()
disp, comb = [], []
# A GPU-side pause after each barrier (about 2 ms): the host enqueues the calls while the GPU
# waits, so the events measure the kernels (and the wait for peers), not Python's launch cost.
SLEEP = int(4e6)


def pause():
    if "barrier" in args.pause:
        pshmem.barrier(stream=stream)
    if "sleep" in args.pause:
        torch.cuda._sleep(SLEEP)


for i in range(args.warmup + args.iters):
    pause()  # the launches below queue up meanwhile: events time the GPU
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    e0.record()
    recv_x, count, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, T, E, use_fp8=use_fp8)
    e1.record()
    if args.only == "both":
        y = recv_x[0].float().view(El, N * T, H // 128, 128).mul(
            recv_x[1].unsqueeze(-1)).view(El, N * T, H).to(torch.bfloat16) if use_fp8 else recv_x
        e1b = torch.cuda.Event(enable_timing=True)
        e1b.record()
        buf.low_latency_combine(y, topk_idx, topk_w, handle)
        e2.record()
    torch.cuda.synchronize()
    if i >= args.warmup:
        disp.append(e0.elapsed_time(e1) * 1000)
        if args.only == "both":
            comb.append(e1b.elapsed_time(e2) * 1000)


# The phases apart (the receive hook): send and receive kernels of dispatch and combine.
phase = {"dispatch_send": [], "dispatch_recv": [], "combine_send": [], "combine_recv": []}
for i in range(args.iters if args.only == "both" else 0):
    pause()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(6)]
    ev[0].record()
    recv_x, count, handle, _, hook = buf.low_latency_dispatch(x, topk_idx, T, E, use_fp8=use_fp8,
                                                              return_recv_hook=True)
    ev[1].record()
    hook()
    ev[2].record()
    y = recv_x[0].float().view(El, N * T, H // 128, 128).mul(
        recv_x[1].unsqueeze(-1)).view(El, N * T, H).to(torch.bfloat16) if use_fp8 else recv_x
    pause()
    ev[3].record()
    _, _, hook = buf.low_latency_combine(y, topk_idx, topk_w, handle, return_recv_hook=True)
    ev[4].record()
    hook()
    ev[5].record()
    torch.cuda.synchronize()
    phase["dispatch_send"].append(ev[0].elapsed_time(ev[1]) * 1000)
    phase["dispatch_recv"].append(ev[1].elapsed_time(ev[2]) * 1000)
    phase["combine_send"].append(ev[3].elapsed_time(ev[4]) * 1000)
    phase["combine_recv"].append(ev[4].elapsed_time(ev[5]) * 1000)


# A wait that timed out leaves every later call running in the error state (fast, and wrong):
# a run that met an error must not report figures.
buf.check()


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


sel = int((topk_idx >= 0).sum().item())
d_bytes = sel * ((H + H // 128 * 4 + 16) if use_fp8 else (2 * H + 16))
c_bytes = sel * 2 * H
d_us, c_us = median(disp), median(comb)
# One line per rank (the report averages the ranks).
print(json.dumps({
    "label": args.label, "rank": me, "pes": N, "tokens": T, "hidden": H, "topk": K,
    "experts": E, "dispatch": "fp8" if use_fp8 else "bf16",
    "messages": "per_token" if args.per_token else "batched",
    "p2p": os.environ.get("PSHMEM_DISABLE_P2P", "0") != "1",
    "provider": os.environ.get("PSHMEM_PROVIDER", "default"),
    "iters": args.iters, "dispatch_us": round(d_us, 2),
    "combine_us": round(c_us, 2) if args.only == "both" else None,
    "dispatch_GBps": round(d_bytes / d_us / 1e3, 2),
    "combine_GBps": round(c_bytes / c_us / 1e3, 2) if c_us else None,
    **{f"{k}_us": round(median(v), 2) for k, v in phase.items() if v},
}), flush=True)
torch.cuda.synchronize()
pshmem.barrier()
buf.destroy()
pshmem.finalize()
