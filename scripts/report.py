#!/usr/bin/env python3
"""Renders the JSON results of scripts/bench-host.sh in one folder as a Markdown report.

Usage: python3 scripts/report.py DIR > DIR/REPORT.md
Every figure comes from the JSON files; targets are checked against the issues' thresholds,
using per-repetition paired ratios (the two sides run back to back in ABBA order).
"""
import json
import math
import os
import random
import sys


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def size(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def verdict(ok):
    return "**met**" if ok else "**missed**"


def paired(a, b):
    """Median of per-repetition ratios a[i]/b[i] (runs are stored in repetition order and
    measured side by side, ABBA), and the interquartile range of those ratios."""
    r = sorted(x / y for x, y in zip(a, b) if y > 0)
    if not r:
        return float("nan"), (float("nan"), float("nan"))
    n = len(r)
    med = r[n // 2] if n % 2 else (r[n // 2 - 1] + r[n // 2]) / 2
    return med, (r[n // 4], r[(3 * n) // 4])


def pooled(pairs):
    """Every repetition's paired ratio at every size pooled: their geometric mean and a 95 %
    bootstrap interval of it (2000 resamples, fixed seed). It says how well one run resolves a
    small cost when each single size is noisy."""
    logs = [math.log(x / y) for x, y in pairs if x > 0 and y > 0]
    if not logs:
        return float("nan"), (float("nan"), float("nan"))
    rng = random.Random(1)
    means = sorted(sum(rng.choices(logs, k=len(logs))) / len(logs) for _ in range(2000))
    return math.exp(sum(logs) / len(logs)), (math.exp(means[50]), math.exp(means[1949]))


def fabric_section(w, fb):
    w(f"## Raw transport: safe layer vs libfabric C API ({fb['transport']})\n")
    base = fb.get("baseline", "separate endpoint")
    w(f"C baseline on a {base}" + (" (the same connection, CQ and registered buffer as the "
      "safe layer: only the code that posts and polls differs)." if base == "shared endpoint"
      else " (its own fabric, domain, endpoint and registration).") + "\n")
    w("| size | safe layer GB/s | C API GB/s | paired ratio (IQR) |\n| --- | --- | --- | --- |")
    big, pairs = [], []
    for r in fb["bandwidth"]:
        pr, (lo, hi) = paired(r["safe_runs"], r["c_runs"])
        w(f"| {size(r['size'])} | {r['safe_gbps']:.3f} | {r['c_gbps']:.3f} | "
          f"{pr:.3f} ({lo:.2f}-{hi:.2f}) |")
        if r["size"] >= 64 << 10:
            big.append(pr)
            pairs += list(zip(r["safe_runs"], r["c_runs"]))
    lat = fb["latency"]
    w(f"\n8-byte write ping-pong, half round trip: safe layer {lat['safe_us']:.2f} µs, "
      f"C API {lat['c_us']:.2f} µs ("
      + ("median of the paired differences " if "diff_of_medians_us" in lat else "")
      + f"{lat['diff_us']:+.2f} µs).\n")
    worst = min(big) if big else float("nan")
    gm, (lo, hi) = pooled(pairs)
    w(f"- Target (issue 3) bandwidth cost ≤ 2% at ≥ 64 KiB: worst paired ratio {worst:.3f}; "
      f"all {len(pairs)} paired ratios at those sizes pooled: geometric mean {gm:.3f} "
      f"(95 % bootstrap interval {lo:.3f}-{hi:.3f}) -> {verdict(worst >= 0.98)} "
      "(the verdict takes the worst size)")
    w(f"- Target (issue 3) latency cost ≤ 0.5 µs: {lat['diff_us']:+.2f} µs "
      f"-> {verdict(lat['diff_us'] <= 0.5)}\n")


def main():
    d = sys.argv[1]
    out = []
    w = out.append
    fabs = [x for x in (load(d, f"fabric-bench-{p}.json") for p in ("tcp", "shm")) if x]
    fb = fabs[0] if fabs else None
    vr = load(d, "datapath-vs-raw.json")
    rt = load(d, "datapath-rate.json")
    machine = next((x["machine"] for x in (fb, vr, rt) if x), "unknown")
    w(f"# Host benchmarks: {os.path.basename(os.path.abspath(d))}\n")
    w(f"Machine: {machine}. Regenerate with `python3 scripts/report.py {d}`; rerun with "
      f"`bash scripts/bench-host.sh {d}`. Medians of alternating runs, each table from one run.\n")
    pin = os.path.join(d, "pinning.txt")
    if os.path.exists(pin):
        w(f"Threads: {open(pin).read().strip()}.\n")
    for fb in fabs:
        fabric_section(w, fb)
    if vr:
        w(f"## Full stack vs raw transport ({vr['runtime_transport']})\n")
        w("Runtime: `put_nbi` from the symmetric heap through ring + proxy, then `quiet`. "
          f"Raw: writes through our safe layer, {vr['window']} in flight, on "
          + ("the proxy thread's own endpoint (`Pshmem::exclusive`)" if "own endpoint" in
             vr.get("raw_transport", "") else f"a second endpoint ({vr.get('raw_transport')})")
          + ".\n")
        w("| size | runtime GB/s | raw GB/s | paired ratio (IQR) |\n| --- | --- | --- | --- |")
        ratios = []
        for r in vr["bandwidth"]:
            pr, (lo, hi) = paired(r["runtime_runs"], r["raw_runs"])
            w(f"| {size(r['size'])} | {r['runtime_gbps']:.3f} | {r['raw_gbps']:.3f} | "
              f"{pr:.3f} ({lo:.2f}-{hi:.2f}) |")
            ratios.append(pr)
        lat = vr["latency"]
        w(f"\n8-byte ping-pong, half round trip: runtime `p` + `wait_until` "
          f"{lat['runtime_pingpong_us']:.2f} µs, raw write {lat['raw_pingpong_us']:.2f} µs "
          f"(added {lat['added_us']:+.2f} µs). 8-byte `put` + `quiet`: {lat['put_quiet_us']:.2f} µs.\n")
        worst = min(ratios)
        pairs = [p for r in vr["bandwidth"] for p in zip(r["runtime_runs"], r["raw_runs"])]
        gm, (lo, hi) = pooled(pairs)
        w(f"- Target (issue 4) full-stack `put_bw` ≥ 0.9× raw at ≥ 64 KiB: worst paired ratio "
          f"{worst:.3f}; all {len(pairs)} paired ratios pooled: geometric mean {gm:.3f} "
          f"(95 % bootstrap interval {lo:.3f}-{hi:.3f}) -> {verdict(worst >= 0.9)} "
          "(the verdict takes the worst size)")
        w(f"- Target (issue 4) host put latency adds ≤ 3 µs: {lat['added_us']:+.2f} µs "
          f"-> {verdict(lat['added_us'] <= 3.0)}\n")
    if rt:
        w(f"## Ring + proxy alone (instant transport, batch {rt['batch']})\n")
        alone = rt.get("proxy_alone_mdesc_per_s")
        if alone is not None:
            slots = rt.get("proxy_alone_ring_slots")
            how = (f"full {slots}-slot rings, each published at once" if slots
                   else "a ring filled before it started")
            w(f"One proxy thread draining {how} (its own capacity): "
              f"**{alone:.2f} M descriptors/s** (median; runs "
              f"{min(rt['proxy_alone_runs']):.2f}-{max(rt['proxy_alone_runs']):.2f}).\n")
        w(f"With CPU producers running concurrently ({rt['ring_slots']}-slot ring, each producer "
          "ending with a quiet):\n")
        w("| producer threads | M descriptors/s |\n| --- | --- |")
        best = 0.0
        for r in rt["rows"]:
            w(f"| {r['producers']} | {r['mdesc_per_s']:.2f} |")
            best = max(best, r["mdesc_per_s"])
        cap = alone if alone is not None else best
        w(f"\n- Target (issue 4) ≥ 20 M descriptors/s per proxy thread: proxy alone {cap:.2f}, "
          f"best with live producers {best:.2f} -> {verdict(cap >= 20.0)}\n")
    for path in ("direct", "proxy"):
        p = load(d, f"pshmem-perf-{path}.json")
        if not p:
            continue
        w(f"## pshmem-perf, {p['path']} path ({p['transport']}, {p['n_pes']} PEs)\n")
        w("| test | size | median |\n| --- | --- | --- |")
        for r in p["results"]:
            s = "-" if r["size"] == 0 else size(r["size"])
            w(f"| {r['test']} | {s} | {r['median']:.3f} {r['unit']} |")
        w("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
