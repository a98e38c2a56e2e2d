"""Merges scripts/bench-ep.sh's results into OUT/ep-ll.json, a Markdown table OUT/ep-ll.md and
a bar chart OUT/ep-ll.svg:
µs and GB/s per dispatch and combine for each EP size, path and message mode; on the proxy path,
from the traced runs, the counted puts and signals each dispatch posts per PE and the medians
of each message's time in the proxy (ring to post) and in flight (post to completion).

    python ep/bench/report.py OUT
"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

out = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(out, "ep*-*.out"))):
    if path.endswith("-traced.out"):
        continue
    ranks = common.ranks_of(path)
    if not ranks:
        continue
    r = common.merged(ranks, ("dispatch_us", "combine_us", "dispatch_GBps", "combine_GBps",
                              "dispatch_send_us", "dispatch_recv_us", "combine_send_us",
                              "combine_recv_us"))
    r["dispatch_us_per_rank"] = [x["dispatch_us"] for x in sorted(ranks, key=lambda x: x.get("rank", 0))]
    sums = common.proxy_summaries(out, r["label"])
    if sums:
        msgs = 0.0
        queued, flight = [], []
        for s in sums:
            with open(s) as f:
                d = json.load(f)
            msgs += common.counted_traffic(d)[0]
            queued.append(d["ring_to_post_us"]["median"])
            flight.append(d["post_to_finish_us"]["median"])
        # The traced run: 10 dispatches per PE, no warm-up (ll_bench.py --only dispatch).
        per = 10 * r["pes"]
        r["messages_per_dispatch_per_pe"] = round(msgs / per, 1)
        # Per message, medians over the run (mean over the PEs' proxies): waiting in the proxy
        # from ring to post, and in flight from post to completion (the target's ack).
        r["proxy_ring_to_post_us"] = round(sum(queued) / len(queued), 1)
        r["proxy_post_to_finish_us"] = round(sum(flight) / len(flight), 1)
    rows.append(r)
rows.sort(key=lambda r: (r["pes"], not r["p2p"], r["messages"]))
with open(os.path.join(out, "ep-ll.json"), "w") as f:
    json.dump(rows, f, indent=1)
machine = common.machine(out)
lines = [
    "# MoE low-latency dispatch/combine (pshmem.ep)",
    "",
    f"Machine: {machine}. 128 tokens per rank, hidden 7168, top-8, 8 experts per rank, FP8",
    "dispatch, BF16 combine; GB/s as DeepEP counts (every selection's bytes, local ones",
    "included). Mean over ranks of each rank's median. "
    + common.sharing(out, [r["pes"] for r in rows]) + " `scripts/bench-ep.sh`.",
    "",
    "| EP | path | messages | dispatch µs | dispatch GB/s | combine µs | combine GB/s | "
    "send/recv µs (dispatch; combine) | msgs/dispatch/PE | proxy: ring→post / post→finish µs |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]
for r in rows:
    lines.append(
        f"| {r['pes']} | {'direct' if r['p2p'] else 'proxy (' + r['provider'] + ')'} | "
        f"{r['messages']} | {r['dispatch_us']} | {r['dispatch_GBps']} | {r['combine_us']} | "
        f"{r['combine_GBps']} | {r.get('dispatch_send_us')}/{r.get('dispatch_recv_us')}; "
        f"{r.get('combine_send_us')}/{r.get('combine_recv_us')} | "
        f"{r.get('messages_per_dispatch_per_pe', '')} | "
        f"{r.get('proxy_ring_to_post_us', '')} / {r.get('proxy_post_to_finish_us', '')} |")
text = "\n".join(lines) + "\n"


with open(os.path.join(out, "ep-ll.svg"), "w") as f:
    f.write(common.svg(rows, (("dispatch_us", "#4472c4"), ("combine_us", "#ed7d31")),
                     lambda r: f"EP{r['pes']} {'direct' if r['p2p'] else 'proxy'} {r['messages']}",
                     f"LL dispatch (blue) and combine (orange), µs per call, {machine or 'GPU'}"))
with open(os.path.join(out, "ep-ll.md"), "w") as f:
    f.write(text)
print(text)
