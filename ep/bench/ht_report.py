"""Merges scripts/bench-ep.sh's normal-mode results (OUT/ht*.out) into OUT/ep-ht.json and a
Markdown table OUT/ep-ht.md: µs and GB/s (DeepEP's bottleneck bandwidth) of the cached
dispatch, the full dispatch (notify included) and the combine per EP size, node count and
path; from the traced runs, the messages and bytes each full dispatch posts through the proxy
per PE (across nodes with NVLink inside them: the RDMA traffic an EFA projection replays).

    python ep/bench/ht_report.py OUT
"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

out = sys.argv[1]


rows = []
for path in sorted(glob.glob(os.path.join(out, "ht*-*.out"))):
    if path.endswith("-traced.out"):
        continue
    ranks = common.ranks_of(path)
    if not ranks:
        continue
    r = common.merged(ranks, ("dispatch_us", "dispatch_full_us", "combine_us",
                              "dispatch_nvl_GBps", "dispatch_full_nvl_GBps", "combine_nvl_GBps",
                              "dispatch_rdma_GBps", "combine_rdma_GBps", "received_rows",
                              "rdma_tokens_sent"))
    sums = common.proxy_summaries(out, r["label"])
    tpath = path.replace(".out", "-traced.out")
    traced = common.ranks_of(tpath) if os.path.exists(tpath) else []
    if sums and traced:
        msgs = nbytes = 0
        for s in sums:
            with open(s) as f:
                m, b = common.counted_traffic(json.load(f))
            msgs, nbytes = msgs + m, nbytes + b
        per = traced[0]["iters"] * r["pes"]  # full dispatches traced, over all PEs
        r["proxy_messages_per_dispatch_per_pe"] = round(msgs / per, 1)
        r["proxy_MB_per_dispatch_per_pe"] = round(nbytes / per / 1e6, 2)
    rows.append(r)
rows.sort(key=lambda r: (r["pes"], r["nodes"], not r["p2p"]))
with open(os.path.join(out, "ep-ht.json"), "w") as f:
    json.dump(rows, f, indent=1)
machine = common.machine(out)

def path_name(r):
    if r["nodes"] > 1:
        inside = "NVLink/IPC" if r["p2p"] else "proxy"
        return f"{r['nodes']} nodes ({r['provider']} between, {inside} inside)"
    return "direct (IPC)" if r["p2p"] else f"proxy ({r['provider']})"


lines = [
    "# MoE normal-mode (high-throughput) dispatch/combine (pshmem.ep)",
    "",
    f"Machine: {machine}. {rows[0]['tokens'] if rows else 4096} tokens per rank, hidden 7168, "
    "top-8 of 256 experts, FP8 dispatch (one scale per 128 channels), BF16 combine. GB/s as "
    "DeepEP counts its bottleneck: the received rows' bytes (NVL) and, across nodes, the bytes "
    "sent once per (token, remote node) (RDMA). Mean over ranks of each rank's median. "
    + common.sharing(out, [r["pes"] for r in rows])
    + (" Nodes are emulated (`pshmrun --hosts 2`)." if any(r["nodes"] > 1 for r in rows) else "")
    + " `scripts/bench-ep.sh` (EP_MODES=ht).",
    "",
    "| EP | path | channels | dispatch µs (cached) | NVL GB/s | full dispatch µs | combine µs | "
    "NVL GB/s | RDMA GB/s (dispatch / combine) | proxy msgs / MB per dispatch per PE |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]
for r in rows:
    rdma = (f"{r['dispatch_rdma_GBps']} / {r['combine_rdma_GBps']}" if r["nodes"] > 1 else "–")
    msgs = (f"{r['proxy_messages_per_dispatch_per_pe']} / {r['proxy_MB_per_dispatch_per_pe']}"
            if "proxy_messages_per_dispatch_per_pe" in r else "–")
    lines.append(
        f"| {r['pes']} | {path_name(r)} | {r['channels']} | {r['dispatch_us']} | "
        f"{r['dispatch_nvl_GBps']} | {r['dispatch_full_us']} | {r['combine_us']} | "
        f"{r['combine_nvl_GBps']} | {rdma} | {msgs} |")
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "ep-ht.svg"), "w") as f:
    f.write(common.svg(rows, (("dispatch_nvl_GBps", "#4472c4"), ("combine_nvl_GBps", "#ed7d31")),
                     lambda r: f"EP{r['pes']} {path_name(r)}",
                     f"Normal mode: dispatch (blue) and combine (orange) NVL GB/s, "
                     f"{machine or 'GPU'}"))
with open(os.path.join(out, "ep-ht.md"), "w") as f:
    f.write(text)
print(text)
