#!/usr/bin/env python3
"""Paired, interleaved proxy-capacity comparison of two datapath-bench binaries (A = before,
B = after a change): `datapath-bench rate` alternately A B B A ... on one machine, the proxy
thread alone on full in-cache rings (instant transport), and the median of the per-pair ratios
B/A. Writes JSON and a Markdown table.

Usage: scripts/ab-rate.py OLD_BIN NEW_BIN OUT_PREFIX [PAIRS]   (default 15 pairs)
On a machine with cores to spare, pin the two threads apart: PSHMEM_PROXY_CPU=9 for the proxy
thread and AB_CORE=3 for the rest of the process (taskset); AB_REPS sets the measurements per run
(default 3, their median is the run's figure).
"""
import json, os, platform, re, statistics, subprocess, sys

old, new, out = sys.argv[1], sys.argv[2], sys.argv[3]
pairs = int(sys.argv[4]) if len(sys.argv) > 4 else 15
PAT = re.compile(r"proxy thread alone .*?: ([0-9.]+) M descriptors/s")


REPS = os.environ.get("AB_REPS", "3")
CORE = os.environ.get("AB_CORE")


def rate(binary):
    cmd = [binary, "rate", "--reps", REPS, "--producers", "1"]
    if CORE:
        cmd = ["taskset", "-c", CORE] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = PAT.search(p.stdout)
    if not m:
        sys.exit(f"no rate in the output of {binary}:\n{p.stdout}")
    return float(m.group(1))


rows = []
for i in range(pairs):
    # ABBA order: neither side always runs first.
    if i % 2 == 0:
        a, b = rate(old), rate(new)
    else:
        b, a = rate(new), rate(old)
    rows.append({"pair": i, "old": a, "new": b, "ratio": b / a})
    print(f"pair {i}: old {a:.2f}  new {b:.2f}  ratio {b / a:.3f}", flush=True)

ratios = [r["ratio"] for r in rows]
doc = {
    "what": "datapath-bench rate: proxy thread alone on full in-cache rings (instant transport), M descriptors/s",
    "machine": f"{platform.node()} ({os.cpu_count()} cores)",
    "pinning": {"proxy": os.environ.get("PSHMEM_PROXY_CPU"), "rest": CORE},
    "reps_per_run": int(REPS),
    "old": old, "new": new, "pairs": rows,
    "median_old": statistics.median(r["old"] for r in rows),
    "median_new": statistics.median(r["new"] for r in rows),
    "median_ratio": statistics.median(ratios),
    "min_ratio": min(ratios), "max_ratio": max(ratios),
}
with open(out + ".json", "w") as f:
    json.dump(doc, f, indent=1)
with open(out + ".md", "w") as f:
    f.write(f"# Proxy capacity, before and after ({doc['machine']})\n\n")
    f.write(f"{doc['what']}; {pairs} pairs, alternating ABBA, each run the median of {REPS} "
            f"measurements; proxy thread on core {doc['pinning']['proxy'] or 'any'}, the rest on "
            f"core {CORE or 'any'}.\n\n")
    f.write("| pair | before | after | after / before |\n| --- | --- | --- | --- |\n")
    for r in rows:
        f.write(f"| {r['pair']} | {r['old']:.2f} | {r['new']:.2f} | {r['ratio']:.3f} |\n")
    f.write(f"\nMedian before {doc['median_old']:.2f}, after {doc['median_new']:.2f}; "
            f"**median of paired ratios {doc['median_ratio']:.3f}** "
            f"(range {doc['min_ratio']:.3f}–{doc['max_ratio']:.3f}).\n")
print(f"median ratio new/old: {doc['median_ratio']:.3f}")
