"""A/B of two builds on the MoE benchmarks, measured side by side in one device session
(`.device`-style runs of `scripts/bench-ep.sh` per build and round): OUT/raw/<batch>-<build>-<round>/
holds each run's per-configuration outputs. Writes OUT/ab.json, OUT/ab.md and OUT/ab.svg: per
configuration and operation, every round's mean-over-ranks time of each build, their medians
and the ratio new / old.

    python ep/bench/ab_report.py OUT [OLD NEW]
"""

import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

out = sys.argv[1]
old, new = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("old", "new")
runs = {}  # (label, op) -> build -> [µs per round]
for path in sorted(glob.glob(os.path.join(out, "raw", "*", "*.out"))):
    build = os.path.basename(os.path.dirname(path)).split("-")[1]
    ranks = common.ranks_of(path)
    if not ranks or build not in (old, new):
        continue
    r = common.merged(ranks, ("dispatch_us", "combine_us"))
    for op in ("dispatch", "combine"):
        if r.get(f"{op}_us") is not None:
            runs.setdefault((r["label"], op), {}).setdefault(build, []).append(r[f"{op}_us"])
rows = []
for (label, op), b in sorted(runs.items()):
    if old not in b or new not in b:
        continue
    mo, mn = statistics.median(b[old]), statistics.median(b[new])
    rows.append({"label": label, "op": op, old: b[old], new: b[new],
                 f"{old}_median_us": round(mo, 1), f"{new}_median_us": round(mn, 1),
                 "ratio": round(mn / mo, 3), "rounds": [len(b[old]), len(b[new])]})
with open(os.path.join(out, "ab.json"), "w") as f:
    json.dump(rows, f, indent=1)
lines = [f"| configuration | op | {old} µs (rounds) | {new} µs (rounds) | median {new} / {old} |",
         "| --- | --- | --- | --- | --- |"]
fmt = lambda v: ", ".join(f"{x:,.0f}" for x in v)  # noqa: E731
for r in rows:
    lines.append(f"| {r['label']} | {r['op']} | {fmt(r[old])} | {fmt(r[new])} | **{r['ratio']:.2f}** |")
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "ab.md"), "w") as f:
    f.write(text)
with open(os.path.join(out, "ab.svg"), "w") as f:
    f.write(common.svg(rows, [("ratio", "#1f77b4")], lambda r: f"{r['label']} {r['op']}",
                       f"median {new} / {old} time (below 1: {new} faster)"))
print(text, end="")
