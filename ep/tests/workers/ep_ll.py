"""MoE low-latency dispatch/combine (pshmem.ep.Buffer) checked the way DeepEP's own test checks
its kernels, on N PEs (pshmrun; several PEs may share one GPU under CUDA MPS). Exits non-zero
listing the failed checks; prints one line per mode and "ep_ll: all checks passed".

    pshmrun -n 4 python ep/tests/workers/ep_ll.py [--tokens 64 --hidden 2048 --topk 8]

Per mode (FP8 / FP8 with power-of-two scales / BF16) x (hook or not) x (per-token or batched
messages) x (zero-copy combine or not), and FP8 with UE8M0 scales (exponent bytes) x hook:
- the rows received per local expert equal the occurrences of that expert in the all-gathered
  top-k (masked entries excluded), and so does the per-source range of each source rank;
- every received row is constant over its first H-128 channels, equal to its source's value,
  and its last 128 channels carry its token index, which equals the handle's source info; the
  source infos of each range are exactly the source's tokens that chose the expert, in order;
- combine equals x * sum_k w_k (masked -> 0) within DeepEP's tolerance (calc_diff < 9e-4 with
  FP8, 1e-5 with BF16), with no NaN;
- every call is queued behind a stream barrier still waiting for the peers;
- a zero-copy combine reads the rows from the combine buffer's view, not from x (DeepEP's
  test passes a separate tensor of the same shape as x);
- a profiler shows one kernel per operation (DeepEP's timing helper matches kernel names);
- a dispatch + combine step captured in a CUDA graph replays to the eager step's outputs;
- two input sets alternate (values, top-k and weights differ), so a stale count, flag or row
  from the previous call fails; each set's outputs hash the same every time (determinism).
"""

import argparse
import os
import sys
import time

import torch

import pshmem
from epcheck import Checks, calc_diff, digest
from pshmem.ep import Buffer

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--max-tokens", type=int, default=0, help="Tmax (default: tokens)")
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--topk", type=int, default=8)
p.add_argument("--experts-per-rank", type=int, default=4)
p.add_argument("--repeat", type=int, default=2)
p.add_argument("--quick", action="store_true", help="fewer modes")
p.add_argument("--num-sms", type=int, default=0, help="Buffer.set_num_sms")
args = p.parse_args()

local = int(os.environ.get("PSHMEM_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(local % torch.cuda.device_count())
pshmem.init(device="cuda")
me, N = pshmem.my_pe(), pshmem.n_pes()
T, H, K = args.tokens, args.hidden, args.topk
Tmax = args.max_tokens or T
El = args.experts_per_rank
E = El * N
K = min(K, E)
checks = Checks(me)
check, failures = checks.check, checks.failures


def all_gather(t):
    src = pshmem.empty(t.shape, dtype=t.dtype, device="cuda")
    dst = pshmem.empty((N, *t.shape), dtype=t.dtype, device="cuda")
    src.copy_(t)
    torch.cuda.synchronize()
    pshmem.all_gather(dst, src)
    torch.cuda.synchronize()
    out = dst.clone()
    pshmem.free(src)
    pshmem.free(dst)
    return out


def dequant(recv_x):
    if isinstance(recv_x, tuple):
        q, s = recv_x
        if s.dtype == torch.int32:  # UE8M0: exponent bytes, as DeepEP's per_token_cast_back
            s = (s.contiguous().view(torch.uint8).int() << 23).view(torch.float32)
        f = q.float().view(q.shape[0], q.shape[1], H // 128, 128) * s.unsqueeze(-1)
        return f.view(q.shape)
    return recv_x.float()



# Row values with at most four significant bits: exact in bf16 and in FP8 e4m3 under either
# scale (amax/448, or a power of two with round_scale), so a row's body must arrive exactly and
# only the token-index channels carry quantisation error, as in DeepEP's own test.
BODY_VALUES = sorted({m << k for m in range(8, 16) for k in range(4)})
BODY_VALUES = [-v for v in reversed(BODY_VALUES)] + BODY_VALUES  # 64 values, 8..120 both signs


def body_value(rank, s):
    """The constant of rank's rows in input set s: distinct over ranks and sets up to 9 PEs."""
    return float(BODY_VALUES[(rank * 7 + s * 3) % len(BODY_VALUES)])


def make_set(s):
    """Input set s: x, top-k (with 10 masked selections) and weights, all different per set,
    so that a stale count, flag or row from the previous call fails the checks. Set 1 also has
    tokens that name one expert in two top-k slots (one row, added with both weights)."""
    torch.manual_seed(1234 + 97 * s + me)
    x = torch.full((T, H), body_value(me, s), dtype=torch.bfloat16, device="cuda")
    x[:, -128:] = torch.arange(T, device="cuda").to(torch.bfloat16).view(-1, 1)
    scores = torch.randn((T, E), device="cuda").abs() + 1
    topk_idx = torch.topk(scores, K, dim=-1).indices.to(torch.int64)
    topk_weights = torch.randn((T, K), device="cuda").abs().float()
    for _ in range(min(10, T)):  # DeepEP masks 10 random selections
        topk_idx[torch.randint(0, T, (1,)).item(), torch.randint(0, K, (1,)).item()] = -1
    if s == 1 and K > 1:
        for t in torch.randperm(T)[:min(8, T)].tolist():
            topk_idx[t, K - 1] = topk_idx[t, 0]
    topk_idx = topk_idx.contiguous()
    return x, topk_idx, topk_weights, all_gather(topk_idx)  # all_topk: [N, T, K]


SETS = [make_set(0), make_set(1)]

if args.num_sms:
    Buffer.set_num_sms(args.num_sms)
hint = Buffer.get_low_latency_rdma_size_hint(Tmax, H, N, E)
buf = Buffer(None, num_rdma_bytes=hint, low_latency_mode=True, num_qps_per_rank=El)

modes = []
for dtype in ("fp8", "fp8-round", "bf16"):
    for hook in (False, True):
        for per_token in (False, True):
            for zero_copy in (False, True):
                modes.append((dtype, hook, per_token, zero_copy))
modes += [("fp8-ue8m0", hook, False, False) for hook in (False, True)]
if args.quick:
    modes = [m for i, m in enumerate(modes) if i % 5 == 0]


OPS = [0]


def slow(what, t0):
    OPS[0] += 1
    dt = time.monotonic() - t0
    if dt > 5:
        print(f"[PE {me}] slow: op {OPS[0]} {what} took {dt:.1f} s, started at "
              f"{t0 % 1000:.3f}", flush=True)


def run(mode, x, topk_idx, topk_weights):
    dtype, hook, per_token, zero_copy = mode
    t0 = time.monotonic()
    buf.per_token = per_token
    use_fp8, round_scale = dtype != "bf16", dtype in ("fp8-round", "fp8-ue8m0")
    # Queued behind a barrier kernel that waits for the peers (as a benchmark does): nothing
    # the dispatch call does on the host may hold up this PE's proxy meanwhile.
    pshmem.barrier(stream=torch.cuda.current_stream())
    recv_x, recv_count, handle, event, h = buf.low_latency_dispatch(
        x, topk_idx, Tmax, E, use_fp8=use_fp8, round_scale=round_scale,
        use_ue8m0=dtype == "fp8-ue8m0", return_recv_hook=hook, async_finish=not hook)
    if hook:
        h()
    else:
        event.current_stream_wait()
    torch.cuda.synchronize()
    slow(f"dispatch {mode}", t0)
    t0 = time.monotonic()
    y = dequant(recv_x).to(torch.bfloat16)
    if zero_copy:
        # As DeepEP's test: the rows written into the next combine buffer's view, and a tensor
        # of the same shape passed as x, whose contents zero-copy must not read (zeros here).
        buf.get_next_low_latency_combine_buffer(handle)[:, :, :] = y
        y = torch.zeros_like(y)
    out, event, h = buf.low_latency_combine(y, topk_idx, topk_weights, handle,
                                            zero_copy=zero_copy, return_recv_hook=hook)
    if hook:
        h()
    torch.cuda.synchronize()
    slow(f"combine {mode}", t0)
    return recv_x, recv_count, handle, out


for mode in modes:
    dtype = mode[0]
    name = "{} hook={} per_token={} zero_copy={}".format(*mode)
    hashes = {}
    # Input sets 0, 1, 0, 1...: consecutive calls never see the same counts or rows, and each
    # set's outputs must hash the same every time it comes back.
    for rep in range(max(args.repeat, 2) + 1):
        si_ = rep % 2
        x, topk_idx, topk_weights, all_topk = SETS[si_]
        recv_x, recv_count, handle, out = run(mode, x, topk_idx, topk_weights)
        src_info, layout_range = handle[0], handle[1]
        deq = dequant(recv_x).to(torch.bfloat16).float()  # as DeepEP compares: in bf16
        h = digest(out)
        for dl in range(El):
            e = me * El + dl
            want = int((all_topk == e).any(dim=-1).sum().item())  # tokens, not slots
            got = int(recv_count[dl].item())
            check(got == want, f"{name}: expert {e} received {got} rows, expected {want}")
            for j in range(N):
                rng = int(layout_range[dl, j].item())
                begin, n = rng >> 32, rng & 0xFFFFFFFF
                toks = (all_topk[j] == e).any(dim=-1).nonzero().view(-1)
                check(n == toks.numel(), f"{name}: expert {e} from PE {j}: {n} rows, "
                                         f"expected {toks.numel()}")
                if n != toks.numel():
                    continue
                rows = deq[dl, begin:begin + n]
                si = src_info[dl, begin:begin + n]
                check(torch.equal(si.long(), toks), f"{name}: expert {e} from PE {j}: source "
                                                    f"tokens {si.tolist()} != {toks.tolist()}")
                if n == 0:
                    continue
                body = rows[:, :-128]
                check(torch.equal(body.amax(dim=-1), body.amin(dim=-1)),
                      f"{name}: expert {e} from PE {j}: a row is not constant")
                err = (body[:, 0] - body_value(j, si_)).abs().max().item()
                check(err == 0, f"{name}: expert {e} from PE {j}: rows are not "
                                  f"{body_value(j, si_)} (off by {err}; first row starts "
                                  f"{body[0, :4].tolist()})")
                tail = rows[:, -128:]
                ttol = 0.0625 * T if dtype in ("fp8-round", "fp8-ue8m0") else 0.0
                err = (tail - si.view(-1, 1).float()).abs().max().item()
                check(err <= ttol, f"{name}: expert {e} from PE {j}: token index channels "
                                   f"differ (by {err} at most)")
            rows_q = recv_x[0][dl] if isinstance(recv_x, tuple) else recv_x[dl]
            h ^= digest(rows_q[:got]) if got else 0
        wsum = (topk_weights * (topk_idx >= 0)).sum(dim=-1, keepdim=True)
        ref = x.float() * wsum
        d = calc_diff(ref, out.float())
        limit = 9e-4 if dtype != "bf16" else 1e-5
        check(d < limit, f"{name}: combine calc_diff {d:.2e} >= {limit}")
        check(not torch.isnan(out).any().item(), f"{name}: combine has NaN")
        hashes.setdefault(si_, set()).add(h)
    check(all(len(v) == 1 for v in hashes.values()),
          f"{name}: outputs differ between repeats of one input")
    print(f"[PE {me}] ep_ll {N} PEs {name}: " + ("passed" if not failures else "FAILED"),
          flush=True)
    # Stop together: a PE that left the loop alone would leave its peers waiting for its
    # tokens until the operation timeout, burying the first failure under cascades.
    if all_gather(torch.tensor([len(failures)], device="cuda")).sum().item():
        break

try:
    buf.check()
except Exception as e:  # noqa: BLE001 - any device error fails the run, named
    check(False, f"a device call failed: {e}")

# DeepEP's users time the kernels by name (its bench_kineto): exactly one row of the
# profiler's table may contain "dispatch", one "combine"; with the hook, the kernel whose name
# contains "::dispatch" runs twice (its two phases).
if not failures:
    from torch.profiler import ProfilerActivity, profile

    x, topk_idx, topk_weights, _ = SETS[0]
    for hook in (False, True):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                run(("fp8", hook, False, False), x, topk_idx, topk_weights)
        if not any(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events()):
            print(f"[PE {me}] SKIP: the profiler recorded no kernel here (no CUPTI), so the "
                  "one-kernel-per-operation check did not run", flush=True)
            break
        table = prof.key_averages().table(sort_by="cuda_time_total", max_name_column_width=100)
        for name in ("dispatch", "combine"):
            rows = [line for line in table.splitlines() if name in line]
            check(len(rows) == 1, f"profiler, hook={hook}: {len(rows)} rows name {name!r}: "
                                  f"{rows}")
            runs = [e for e in prof.events() if f"::{name}" in e.name
                    and e.device_type == torch.autograd.DeviceType.CUDA]
            # One launch a call, or two with the hook (or when the grids, as pshmem.ep sizes
            # them, exceed what is resident at once).
            send, recv, shared = Buffer._ll_grids(name, T, H, E, N, buf._sms())
            blocks = max(send[0] * send[1], (shared or recv)[0] * (shared or recv)[1])
            want = 2 * (2 if hook or blocks > buf._resident else 1)
            check(len(runs) == want, f"profiler, hook={hook}: {len(runs)} launches of the "
                                     f"::{name} kernel in two calls, expected {want}")
    print(f"[PE {me}] ep_ll {N} PEs: one kernel per operation in the profile: "
          + ("passed" if not failures else "FAILED"), flush=True)

# A decode step captured in a CUDA graph (dispatch and combine, no host work between them)
# replays to what an eager step gives. thread_local: this PE's proxy thread keeps making CUDA
# calls during the capture.
if not failures:
    x, topk_idx, topk_weights, _ = SETS[1]

    def step():
        recv_x, count, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, Tmax, E,
                                                               use_fp8=False)
        out, _, _ = buf.low_latency_combine(recv_x, topk_idx, topk_weights, handle)
        return count, out

    eager = [t.clone() for t in step()]
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            captured = step()
        for _ in range(3):
            for t in captured:
                t.zero_()  # a replay that did nothing must not pass on the last one's outputs
            graph.replay()
            torch.cuda.synchronize()
            check(torch.equal(captured[0], eager[0]) and torch.equal(captured[1], eager[1]),
                  "a CUDA-graph replay of dispatch + combine differs from an eager step")
    except Exception as e:  # noqa: BLE001 - reported as a failed check, named
        check(False, f"capturing dispatch + combine in a CUDA graph failed: {e}")
    print(f"[PE {me}] ep_ll {N} PEs: CUDA-graph capture of dispatch + combine: "
          + ("passed" if not failures else "FAILED"), flush=True)

# clean_low_latency_buffer, then one more round must still be right.
buf.clean_low_latency_buffer(Tmax, H, E)
torch.cuda.synchronize()
x, topk_idx, topk_weights, all_topk = SETS[0]
recv_x, recv_count, handle, out = run(("bf16", False, False, False), x, topk_idx, topk_weights)
for dl in range(El):
    e = me * El + dl
    check(int(recv_count[dl].item()) == int((all_topk == e).any(dim=-1).sum().item()),
          f"after clean_low_latency_buffer: expert {e} count")
torch.cuda.synchronize()
pshmem.barrier()
buf.destroy()
pshmem.finalize()
if failures:
    print(f"[PE {me}] ep_ll: {len(failures)} checks failed", flush=True)
    sys.exit(1)
print(f"[PE {me}] ep_ll: all checks passed", flush=True)
