"""Merges scripts/bench-ep.sh's results into OUT/ep-ll.json and a Markdown table OUT/ep-ll.md:
µs and GB/s per dispatch and combine for each EP size, path and message mode; on the proxy path,
from the traced runs, the counted puts and signals each dispatch posts per PE and the proxy's
busy time per message.

    python benches/ep/report.py OUT
"""

import glob
import json
import os
import sys

out = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(out, "ep*-*.out"))):
    if path.endswith("-traced.out"):
        continue
    ranks = []
    with open(path) as f:
        for line in f:
            at = line.find('{"label"')
            if at >= 0:
                ranks.append(json.loads(line[at:]))
    if not ranks:
        continue
    r = dict(ranks[0])
    r.pop("rank", None)
    for k in ("dispatch_us", "combine_us", "dispatch_GBps", "combine_GBps", "dispatch_send_us",
              "dispatch_recv_us", "combine_send_us", "combine_recv_us"):
        vals = [x[k] for x in ranks if x.get(k) is not None]
        r[k] = round(sum(vals) / len(vals), 2) if vals else None
    r["ranks_reporting"] = len(ranks)
    r["dispatch_us_per_rank"] = [x["dispatch_us"] for x in sorted(ranks, key=lambda x: x.get("rank", 0))]
    name = r["label"]
    tdir = os.path.join(out, f"trace-{name}")
    sums = glob.glob(os.path.join(tdir, "t.pshmem-gpu-proxy-*.summary.json"))
    if sums:
        msgs = busy = total = 0.0
        for s in sums:
            with open(s) as f:
                d = json.load(f)
            for kind in ("put_counted", "signal_counted"):
                k = d.get("per_kind", {}).get(kind)
                if k:
                    msgs += k["messages"]
            busy += d.get("busy_us", 0.0)
            total += d.get("messages", 0)
        # The traced run: 10 dispatches per PE, no warm-up (ll_bench.py --only dispatch).
        per = 10 * r["pes"]
        r["messages_per_dispatch_per_pe"] = round(msgs / per, 1)
        # Busy time of the GPU proxies over every message they posted in that run.
        r["proxy_busy_us_per_message"] = round(busy / max(total, 1), 3)
    rows.append(r)
rows.sort(key=lambda r: (r["pes"], not r["p2p"], r["messages"]))
with open(os.path.join(out, "ep-ll.json"), "w") as f:
    json.dump(rows, f, indent=1)
machine = ""
mt = os.path.join(out, "machine.txt")
if os.path.exists(mt):
    machine = open(mt).read().strip().replace("\n", "; ")
lines = [
    "# MoE low-latency dispatch/combine (pshmem.ep)",
    "",
    f"Machine: {machine}. 128 tokens per rank, hidden 7168, top-8, 8 experts per rank, FP8",
    "dispatch, BF16 combine; GB/s as DeepEP counts (every selection's bytes, local ones",
    "included). Mean over ranks of each rank's median. `scripts/bench-ep.sh`.",
    "",
    "| EP | path | messages | dispatch µs | dispatch GB/s | combine µs | combine GB/s | "
    "send/recv µs (dispatch; combine) | msgs/dispatch/PE | proxy µs/msg |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]
for r in rows:
    lines.append(
        f"| {r['pes']} | {'direct' if r['p2p'] else 'proxy (' + r['provider'] + ')'} | "
        f"{r['messages']} | {r['dispatch_us']} | {r['dispatch_GBps']} | {r['combine_us']} | "
        f"{r['combine_GBps']} | {r.get('dispatch_send_us')}/{r.get('dispatch_recv_us')}; "
        f"{r.get('combine_send_us')}/{r.get('combine_recv_us')} | "
        f"{r.get('messages_per_dispatch_per_pe', '')} | "
        f"{r.get('proxy_busy_us_per_message', '')} |")
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "ep-ll.md"), "w") as f:
    f.write(text)
print(text)
