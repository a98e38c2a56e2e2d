"""Normal-mode (high-throughput) MoE dispatch/combine (pshmem.ep.Buffer) timed like DeepEP's
intranode/internode tests: FP8 dispatch (rows + one float scale per 128 channels) and BF16
combine of 4096 tokens per rank, hidden 7168, top-8 of 256 experts. Times (CUDA events, median)
of the cached dispatch (with the handle: what DeepEP's tuning reports), the full dispatch
(layout kept, notify and its host round trip included) and the combine; GB/s counted as DeepEP
counts its bottleneck bandwidth: the received rows' bytes (NVL: FP8 H + H/128*4 per row for
dispatch, 2H for combine) and, across nodes, the bytes sent once per (token, remote node)
("RDMA"). Each rank prints one JSON line (ep/bench/report.py averages the ranks).

    pshmrun -n 4 [--hosts 2] python ep/bench/ht_bench.py [--tokens 4096 --hidden 7168]
"""

import argparse
import json
import os

import torch

import pshmem
from pshmem.ep import Buffer

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=4096)
p.add_argument("--hidden", type=int, default=7168)
p.add_argument("--topk", type=int, default=8)
p.add_argument("--experts", type=int, default=256)
p.add_argument("--iters", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--num-sms", type=int, default=20)
p.add_argument("--only", choices=["dispatch", "all"], default="all",
               help="dispatch: full dispatches only (for a proxy trace)")
p.add_argument("--label", default="")
args = p.parse_args()

local = int(os.environ.get("PSHMEM_LOCAL_RANK", "0"))
torch.cuda.set_device(local % torch.cuda.device_count())
pshmem.init(device="cuda")
me, N = pshmem.my_pe(), pshmem.n_pes()
G = pshmem.TEAM_NODE.n_pes()
R = N // G
T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
E = max(N, E // N * N)
torch.manual_seed(me)
x = torch.randn((T, H), device="cuda").to(torch.bfloat16)
scales = torch.rand((T, H // 128), device="cuda") + 0.5
x_fp8 = (x.float() / scales.repeat_interleave(128, dim=1)).to(torch.float8_e4m3fn)
topk_idx = torch.topk(torch.randn((T, E), device="cuda"), K, dim=-1).indices.to(torch.int64)
topk_w = torch.rand((T, K), device="cuda")
Buffer.set_num_sms(args.num_sms)
dcfg, ccfg = Buffer.get_dispatch_config(N), Buffer.get_combine_config(N)
nvl = max(c.get_nvl_buffer_size_hint(2 * H, N) for c in (dcfg, ccfg))
rdma = max(c.get_rdma_buffer_size_hint(2 * H, N) for c in (dcfg, ccfg))
buf = Buffer(None, num_nvl_bytes=nvl, num_rdma_bytes=rdma)
stream = torch.cuda.current_stream()
SLEEP = int(4e6)


def pause():
    # A barrier, then a GPU-side pause (about 2 ms) while the host queues the calls: the events
    # time the GPU, not Python's launches.
    pshmem.barrier(stream=stream)
    torch.cuda._sleep(SLEEP)


per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(topk_idx, E)
layout = dict(num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_node,
              is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=topk_idx,
              topk_weights=topk_w)
times = {"dispatch_full": [], "dispatch": [], "combine": []}
handle = recv = None
for i in range(args.warmup + args.iters):
    pause()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    recv, _, recv_w, _, handle, _ = buf.dispatch((x_fp8, scales), config=dcfg, **layout)
    e1.record()
    torch.cuda.synchronize()
    if i >= args.warmup:
        times["dispatch_full"].append(e0.elapsed_time(e1) * 1000)
    if args.only == "dispatch":
        continue
    pause()
    e0.record()
    buf.dispatch((x_fp8, scales), handle=handle, config=dcfg)
    e1.record()
    y = recv[0].to(torch.bfloat16)
    pause()
    e2, e3 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e2.record()
    buf.combine(y, handle, topk_weights=recv_w, config=ccfg)
    e3.record()
    torch.cuda.synchronize()
    if i >= args.warmup:
        times["dispatch"].append(e0.elapsed_time(e1) * 1000)
        times["combine"].append(e2.elapsed_time(e3) * 1000)
# A wait that timed out leaves every later call in the error state (fast, and wrong).
buf.check()


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


rows = recv[0].size(0)
d_nvl = rows * (H + H // 128 * 4)
c_nvl = rows * 2 * H
# Sent once per (token, remote node): the RDMA traffic of this rank.
remote_nodes = in_rank.view(T, R, G).any(-1).sum(1) - in_rank.view(T, R, G)[:, me // G].any(-1).int()
rdma_tokens = int(remote_nodes.sum().item()) if R > 1 else 0
d_rdma, c_rdma = rdma_tokens * (H + H // 128 * 4), rdma_tokens * 2 * H
us = {k: median(v) for k, v in times.items()}


def rate(b, t):
    return round(b / t / 1e3, 2) if t and b else None


print(json.dumps({
    "label": args.label, "rank": me, "pes": N, "nodes": R, "tokens": T, "hidden": H,
    "topk": K, "experts": E, "channels": handle.channels, "received_rows": rows,
    "rdma_tokens_sent": rdma_tokens,
    "p2p": os.environ.get("PSHMEM_DISABLE_P2P", "0") != "1",
    "provider": os.environ.get("PSHMEM_PROVIDER", "default"), "iters": args.iters,
    **{f"{k}_us": round(v, 1) for k, v in us.items()},
    "dispatch_nvl_GBps": rate(d_nvl, us["dispatch"]),
    "dispatch_full_nvl_GBps": rate(d_nvl, us["dispatch_full"]),
    "combine_nvl_GBps": rate(c_nvl, us["combine"]),
    "dispatch_rdma_GBps": rate(d_rdma, us["dispatch"]),
    "combine_rdma_GBps": rate(c_rdma, us["combine"]),
}), flush=True)
torch.cuda.synchronize()
pshmem.barrier()
buf.destroy()
pshmem.finalize()
