"""MoE normal-mode (high-throughput) layout, dispatch and combine (pshmem.ep.Buffer) checked the
way DeepEP's intranode and internode tests check theirs, on N PEs (pshmrun; several PEs may
share one GPU under CUDA MPS; `pshmrun --hosts 2` makes two emulated nodes, so tokens cross
between them through the proxy and are forwarded inside each). Exits non-zero listing the
failed checks; prints one line per mode and "ep_ht: all checks passed".

    pshmrun -n 4 --hosts 2 python ep/tests/workers/ep_ht.py [--tokens 256 --hidden 1024]

Every rank builds every rank's inputs from seeds, so each reference is computed locally:
- get_dispatch_layout equals a torch reference (tokens per rank, per node, per expert, and the
  token-in-rank matrix);
- the received rows are grouped by source rank as the rank prefix matrix says, each source's
  rows are exactly its tokens for this rank in token order (source indices), and each row
  equals that token's input bytes (bf16, or FP8 with its scales);
- received top-k holds this rank's local expert ids (-1 elsewhere) and their weights (0
  elsewhere); the per-expert counts equal the reference, rounded up to expert_alignment;
- num_worst_tokens: the padded outputs equal the unpadded ones, the rest has top-k -1;
- a cached re-dispatch (handle, new x) delivers the new rows at the same places;
- FP8 scales may be column-major (DeepEP's tests pass them so); a dispatch may carry no top-k
  (then none is received, and combine sums unweighted); `capture()` gives a previous event;
- the default torch device is CUDA, as in DeepEP's tests;
- combine returns x * (ranks the token went to) + both biases (calc_diff < 5e-6) and the
  original weights (masked -1 -> 0), with no NaN;
- two input sets alternate and every output hashes the same each time its set comes back
  (`--repeat 20`: DeepEP's pressure test);
- a num_worst_tokens dispatch captured in a CUDA graph and replayed equals an eager one.
"""

import argparse
import os
import sys
import time

import torch

import pshmem
from epcheck import Checks, calc_diff, digest
from pshmem.ep import Buffer, Config

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=256)
p.add_argument("--hidden", type=int, default=1024)
p.add_argument("--topk", type=int, default=8)
p.add_argument("--experts-per-rank", type=int, default=4)
p.add_argument("--repeat", type=int, default=2)
p.add_argument("--num-sms", type=int, default=8)
p.add_argument("--quick", action="store_true", help="fewer modes")
p.add_argument("--stacks-after", type=float, default=0,
               help="debugging a stall: print every thread's Python stack after this many s")
args = p.parse_args()
if args.stacks_after > 0:
    import faulthandler
    faulthandler.dump_traceback_later(args.stacks_after, exit=False)

local = int(os.environ.get("PSHMEM_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(local % torch.cuda.device_count())
# As DeepEP's tests run (their init_dist): pshmem.ep must not assume CPU is the default device
# (its pinned host buffer once failed so).
torch.set_default_device("cuda")
pshmem.init(device="cuda")
me, N = pshmem.my_pe(), pshmem.n_pes()
G = pshmem.TEAM_NODE.n_pes()
R = N // G
H, El = args.hidden, args.experts_per_rank
E = El * N
K = min(args.topk, E)
checks = Checks(me)
check, failures = checks.check, checks.failures



def tokens_of(rank, s):
    # Token counts differ per rank (and one rank may have none), as in real batches.
    return max(0, args.tokens - 17 * ((rank + s) % 3)) if (rank + s) % 7 != 6 else 0


def inputs(rank, s):
    """Rank's input set s: x (small integers times a power of two: exact in bf16, FP8 and in
    sums of a few), FP8 copy with scales, top-k with masked entries, weights. Made on the GPU
    from a seed (the same values on every PE)."""
    g = torch.Generator(device="cuda").manual_seed(1000 + 131 * s + rank)
    T = tokens_of(rank, s)
    kw = dict(generator=g, device="cuda")
    x = (torch.randint(-8, 8, (T, H), **kw).float() * 0.25).to(torch.bfloat16)
    scores = torch.rand((T, E), **kw) + 0.1
    topk = torch.topk(scores, K, dim=-1).indices.to(torch.int64)
    if T:  # masked selections, as DeepEP's tests make
        rows = torch.randint(0, T, (10,), **kw)
        cols = torch.randint(0, K, (10,), **kw)
        topk[rows, cols] = -1
    w = torch.rand((T, K), **kw).float() + 0.5
    scales = torch.rand((T, max(1, H // 128)), **kw).float() + 0.5
    b0 = (torch.randint(-4, 4, (T, H), **kw).float() * 0.5).to(torch.bfloat16)
    b1 = (torch.randint(-4, 4, (T, H), **kw).float() * 0.5).to(torch.bfloat16)
    return dict(T=T, x=x, topk=topk.contiguous(), w=w, scales=scales, b0=b0, b1=b1)


def ranks_of(topk):
    """Bool [T, N]: the ranks holding one of the token's experts."""
    m = torch.zeros((topk.size(0), N), dtype=torch.bool, device=topk.device)
    for k in range(K):
        e = topk[:, k]
        ok = e >= 0
        m[ok.nonzero().view(-1), (e[ok] // El)] = True
    return m


ALL = [[inputs(r, s) for r in range(N)] for s in (0, 1)]
MINE = [ALL[s][me] for s in (0, 1)]

Buffer.set_num_sms(args.num_sms)
cfg = Buffer.get_dispatch_config(N)
nvl = max(cfg.get_nvl_buffer_size_hint(H * 2, N), Buffer.get_combine_config(N)
          .get_nvl_buffer_size_hint(H * 2, N))
rdma = max(cfg.get_rdma_buffer_size_hint(H * 2, N), Buffer.get_combine_config(N)
           .get_rdma_buffer_size_hint(H * 2, N))
buf = Buffer(None, num_nvl_bytes=nvl, num_rdma_bytes=rdma)
torch.cuda.synchronize()
pshmem.barrier()  # every PE done with its set-up before the first timed wait
torch.cuda.synchronize()

# ---- layout -------------------------------------------------------------------------------
for s in (0, 1):
    mine, ref = MINE[s], ALL[s][me]
    per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(mine["topk"], E)
    want_in = ranks_of(ref["topk"])
    check(torch.equal(in_rank, want_in), f"layout set {s}: is_token_in_rank differs")
    check(per_rank.tolist() == want_in.sum(0).tolist(),
          f"layout set {s}: tokens per rank {per_rank.tolist()} != {want_in.sum(0).tolist()}")
    want_e = [int((ref["topk"] == e).sum()) for e in range(E)]
    check(per_expert.tolist() == want_e, f"layout set {s}: tokens per expert differ")
    if R > 1:
        want_n = want_in.view(-1, R, G).any(-1).sum(0).tolist() if ref["T"] else [0] * R
        check(per_node is not None and per_node.tolist() == want_n,
              f"layout set {s}: tokens per node {per_node} != {want_n}")
    else:
        check(per_node is None, "layout: tokens per node given with one node")


# allocate_on_comm_stream asks for previous_event and async_finish, as DeepEP's does.
try:
    buf.get_dispatch_layout(MINE[0]["topk"], E, allocate_on_comm_stream=True)
    check(False, "allocate_on_comm_stream without previous_event was accepted")
except pshmem.InvalidArgument as e:
    check("previous_event" in str(e), f"allocate_on_comm_stream refused without saying why: {e}")
got = buf.get_dispatch_layout(MINE[0]["topk"], E, previous_event=buf.capture(),
                              async_finish=True, allocate_on_comm_stream=True)
got[-1].current_stream_wait()
check(torch.equal(got[3], ranks_of(ALL[0][me]["topk"])),
      "layout with allocate_on_comm_stream: is_token_in_rank differs")


def expected(s):
    """For this rank: per source, the token indices it receives (ascending)."""
    return [ranks_of(ALL[s][r]["topk"])[:, me].nonzero().view(-1) for r in range(N)]


def run(s, fp8, worst, align):
    mine = MINE[s]
    pshmem.barrier(stream=torch.cuda.current_stream())
    per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(mine["topk"], E)
    # FP8 scales column-major, as DeepEP's intranode test passes them.
    x = (mine["x"].to(torch.float8_e4m3fn), mine["scales"].T.contiguous().T) if fp8 \
        else mine["x"]
    worst_rows = N * args.tokens if worst else 0
    recv_x, recv_topk, recv_w, per_e, handle, ev = buf.dispatch(
        x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_node,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=mine["topk"],
        topk_weights=mine["w"], expert_alignment=align, num_worst_tokens=worst_rows,
        config=cfg, async_finish=True, previous_event=buf.capture() if s else None)
    ev.current_stream_wait()
    torch.cuda.synchronize()
    return recv_x, recv_topk, recv_w, per_e, handle


modes = [(fp8, worst) for fp8 in (False, True) for worst in (False, True)]
if args.quick:
    modes = [(False, False), (True, True)]
t_start = time.monotonic()
for fp8, worst in modes:
    align = 8 if fp8 else 1
    name = f"{'fp8' if fp8 else 'bf16'} worst={worst} align={align}"
    hashes = {}
    for rep in range(max(args.repeat, 2) + 1):
        s = rep % 2
        exp = expected(s)
        recv_x, recv_topk, recv_w, per_e, handle = run(s, fp8, worst, align)
        rows_x = recv_x[0] if fp8 else recv_x
        src = handle.recv_src_idx
        n_recv = sum(int(t.numel()) for t in exp)
        if worst:
            check(rows_x.size(0) == N * args.tokens, f"{name}: {rows_x.size(0)} padded rows")
            check(per_e == [], f"{name}: a per-expert list with num_worst_tokens")
            check(bool((recv_topk[n_recv:] == -1).all().item()),
                  f"{name}: padding rows have top-k other than -1")
        else:
            check(rows_x.size(0) == n_recv, f"{name}: {rows_x.size(0)} rows, expected {n_recv}")
            want_e = []
            for dl in range(El):
                c = sum(int((ALL[s][r]["topk"] == me * El + dl).sum()) for r in range(N))
                want_e.append((c + align - 1) // align * align)
            check(per_e == want_e, f"{name}: per-expert counts {per_e} != {want_e}")
        rp = handle.rank_prefix
        begin = 0
        for r in range(N):
            n = int(exp[r].numel())
            check(int(rp[r, me]) == begin + n, f"{name}: rank prefix [{r}, {me}] = "
                                                f"{int(rp[r, me])}, expected {begin + n}")
            got_src = src[begin:begin + n].long()
            check(torch.equal(got_src, exp[r]), f"{name}: rows from PE {r} are tokens "
                                                f"{got_src.tolist()[:8]}..., expected "
                                                f"{exp[r].tolist()[:8]}...")
            if n and torch.equal(got_src, exp[r]):
                ref = ALL[s][r]
                want_x = ref["x"][exp[r]]
                if fp8:
                    check(torch.equal(rows_x[begin:begin + n].view(torch.uint8),
                                      want_x.to(torch.float8_e4m3fn).view(torch.uint8)),
                          f"{name}: FP8 rows from PE {r} differ")
                    check(torch.equal(recv_x[1][begin:begin + n], ref["scales"][exp[r]]),
                          f"{name}: scales from PE {r} differ")
                else:
                    check(torch.equal(rows_x[begin:begin + n], want_x),
                          f"{name}: rows from PE {r} differ")
                tk = ref["topk"][exp[r]]
                local_ids = tk - me * El
                mine_k = (tk >= 0) & (local_ids >= 0) & (local_ids < El)
                want_topk = torch.where(mine_k, local_ids, torch.full_like(tk, -1))
                check(torch.equal(recv_topk[begin:begin + n], want_topk),
                      f"{name}: top-k from PE {r} differs")
                want_w = torch.where(mine_k, ref["w"][exp[r]], torch.zeros_like(ref["w"][exp[r]]))
                check(torch.equal(recv_w[begin:begin + n], want_w),
                      f"{name}: weights from PE {r} differ")
            begin += n
        h = digest(rows_x[:n_recv]) ^ digest(src[:n_recv])

        # Cached re-dispatch: new rows (x + 1) at the same places.
        if not fp8:
            x2 = MINE[s]["x"] + 1
            rx2, rt2, rw2, _, _, ev = buf.dispatch(x2, handle=handle, config=cfg,
                                                   async_finish=True)
            ev.current_stream_wait()
            torch.cuda.synchronize()
            check(rt2 is None and rw2 is None, f"{name}: a cached dispatch returned top-k")
            check(torch.equal(rx2[:n_recv], rows_x[:n_recv] + 1),
                  f"{name}: the cached re-dispatch's rows differ")

        # A dispatch without top-k (DeepEP allows it): the same rows, no top-k, and a combine
        # of them without weights.
        if not fp8 and not worst:
            per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(
                MINE[s]["topk"], E)
            rx3, rt3, rw3, pe3, h3, ev = buf.dispatch(
                MINE[s]["x"], num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_node,
                is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, config=cfg,
                async_finish=True)
            ev.current_stream_wait()
            check(rt3 is None and rw3 is None, f"{name}: a dispatch without top-k returned one")
            check(pe3 == per_e, f"{name}: without top-k, per-expert counts {pe3} != {per_e}")
            check(torch.equal(rx3[:n_recv], rows_x[:n_recv]),
                  f"{name}: the rows of a dispatch without top-k differ")
            out3, w3, ev = buf.combine(rx3, h3, config=Buffer.get_combine_config(N),
                                       async_finish=True)
            ev.current_stream_wait()
            torch.cuda.synchronize()
            if ALL[s][me]["T"]:
                ref = ALL[s][me]
                cnt = ranks_of(ref["topk"]).sum(1, keepdim=True).float()
                d = calc_diff(ref["x"].float() * cnt, out3.float())
                check(w3 is None and d < 5e-6, f"{name}: combine after a dispatch without "
                                               f"top-k: calc_diff {d:.2e}, weights {w3}")

        # Combine: the received rows (as bf16), their weights, two biases.
        # (FP8 rows go back as their bf16 values, unscaled: exact, so the check stays tight.)
        y = rows_x.to(torch.bfloat16).contiguous() if fp8 else rows_x
        mine = MINE[s]
        out, out_w, ev = buf.combine(y, handle, topk_weights=recv_w, bias=(mine["b0"], mine["b1"]),
                                     config=Buffer.get_combine_config(N), async_finish=True)
        ev.current_stream_wait()
        torch.cuda.synchronize()
        ref = ALL[s][me]
        if ref["T"]:
            cnt = ranks_of(ref["topk"]).sum(1, keepdim=True).float()
            base = ref["x"].to(torch.float8_e4m3fn).float() if fp8 else ref["x"].float()
            want = base * cnt + ref["b0"].float() + ref["b1"].float()
            d = calc_diff(want, out.float())
            check(d < 5e-6, f"{name}: combine calc_diff {d:.2e}")
            check(not torch.isnan(out).any().item(), f"{name}: combine has NaN")
            want_w = torch.where(ref["topk"] >= 0, ref["w"], torch.zeros_like(ref["w"]))
            check(torch.equal(out_w, want_w), f"{name}: combined weights differ")
        h ^= digest(out)
        hashes.setdefault(s, set()).add(h)
    check(all(len(v) == 1 for v in hashes.values()),
          f"{name}: outputs differ between repeats of one input")
    print(f"[PE {me}] ep_ht {N} PEs ({R} node(s)) {name}: "
          + ("passed" if not failures else "FAILED"), flush=True)
    bad = pshmem.zeros((1,), dtype=torch.int32, device="cuda")
    tot = pshmem.zeros((1,), dtype=torch.int32, device="cuda")
    bad.fill_(len(failures))
    torch.cuda.synchronize()
    pshmem.all_reduce(tot, bad)
    torch.cuda.synchronize()
    stop = int(tot.item())
    pshmem.free(bad)
    pshmem.free(tot)
    if stop:
        break

# num_worst_tokens needs no host round trip: the dispatch can be captured in a CUDA graph, and
# a replay delivers what an eager call does.
if not failures and not args.quick:
    mine = MINE[0]
    n_recv = sum(int(t.numel()) for t in expected(0))
    per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(mine["topk"], E)
    kw = dict(num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_node,
              is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=mine["topk"],
              topk_weights=mine["w"], num_worst_tokens=N * args.tokens, config=cfg)
    eager = buf.dispatch(mine["x"], **kw)
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        # thread_local: this PE's proxy thread keeps making CUDA calls during the capture
        # (the default, global, mode would refuse them and invalidate the capture).
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            captured = buf.dispatch(mine["x"], **kw)
        pshmem.barrier()
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        check(torch.equal(captured[0][:n_recv], eager[0][:n_recv])
              and torch.equal(captured[1], eager[1]) and torch.equal(captured[2], eager[2]),
              "a CUDA-graph replay of a num_worst_tokens dispatch differs from an eager one")
        print(f"[PE {me}] ep_ht {N} PEs: CUDA-graph capture of a num_worst_tokens dispatch: "
              + ("passed" if not failures else "FAILED"), flush=True)
    except Exception as e:  # noqa: BLE001 - reported as a failed check, named
        check(False, f"capturing a num_worst_tokens dispatch in a CUDA graph failed: {e}")

try:
    buf.check()
except Exception as e:  # noqa: BLE001 - any device error fails the run, named
    check(False, f"a device call failed: {e}")
torch.cuda.synchronize()
pshmem.barrier()
buf.destroy()
pshmem.finalize()
if failures:
    print(f"[PE {me}] ep_ht: {len(failures)} checks failed", flush=True)
    sys.exit(1)
print(f"[PE {me}] ep_ht: all checks passed ({time.monotonic() - t_start:.1f} s)", flush=True)
