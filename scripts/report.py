#!/usr/bin/env python3
"""Renders the JSON results of scripts/bench-host.sh in one folder as a Markdown report.

Usage: python3 scripts/report.py DIR > DIR/REPORT.md
Every figure comes from the JSON files; targets are checked against the issues' thresholds.
"""
import json
import os
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


def main():
    d = sys.argv[1]
    out = []
    w = out.append
    fb = load(d, "fabric-bench-tcp.json")
    vr = load(d, "datapath-vs-raw.json")
    rt = load(d, "datapath-rate.json")
    machine = next((x["machine"] for x in (fb, vr, rt) if x), "unknown")
    w(f"# Host benchmarks: {os.path.basename(os.path.abspath(d))}\n")
    w(f"Machine: {machine}. Regenerate with `python3 scripts/report.py {d}`; rerun with "
      f"`bash scripts/bench-host.sh {d}`. Medians of alternating runs, each table from one run.\n")
    if fb:
        w(f"## Raw transport: safe layer vs libfabric C API ({fb['transport']})\n")
        w("| size | safe layer GB/s | C API GB/s | ratio |\n| --- | --- | --- | --- |")
        big = []
        for r in fb["bandwidth"]:
            w(f"| {size(r['size'])} | {r['safe_gbps']:.3f} | {r['c_gbps']:.3f} | {r['ratio']:.3f} |")
            if r["size"] >= 64 << 10:
                big.append(r["ratio"])
        lat = fb["latency"]
        w(f"\n8-byte write ping-pong, half round trip: safe layer {lat['safe_us']:.2f} µs, "
          f"C API {lat['c_us']:.2f} µs ({lat['diff_us']:+.2f} µs).\n")
        worst = min(big) if big else float("nan")
        w(f"- Target (issue 3) bandwidth cost ≤ 2% at ≥ 64 KiB: worst ratio {worst:.3f} "
          f"-> {verdict(worst >= 0.98)}")
        w(f"- Target (issue 3) latency cost ≤ 0.5 µs: {lat['diff_us']:+.2f} µs "
          f"-> {verdict(lat['diff_us'] <= 0.5)}\n")
    if vr:
        w(f"## Full stack vs raw transport ({vr['runtime_transport']})\n")
        w("Runtime: `put_nbi` from the symmetric heap through ring + proxy, then `quiet`. "
          f"Raw: writes through our safe layer, {vr['window']} in flight.\n")
        w("| size | runtime GB/s | raw GB/s | ratio |\n| --- | --- | --- | --- |")
        ratios = []
        for r in vr["bandwidth"]:
            w(f"| {size(r['size'])} | {r['runtime_gbps']:.3f} | {r['raw_gbps']:.3f} | {r['ratio']:.3f} |")
            ratios.append(r["ratio"])
        lat = vr["latency"]
        w(f"\n8-byte ping-pong, half round trip: runtime `p` + `wait_until` "
          f"{lat['runtime_pingpong_us']:.2f} µs, raw write {lat['raw_pingpong_us']:.2f} µs "
          f"(added {lat['added_us']:+.2f} µs). 8-byte `put` + `quiet`: {lat['put_quiet_us']:.2f} µs.\n")
        worst = min(ratios)
        w(f"- Target (issue 4) full-stack `put_bw` ≥ 0.9× raw at ≥ 64 KiB: worst ratio "
          f"{worst:.3f} -> {verdict(worst >= 0.9)}")
        w(f"- Target (issue 4) host put latency adds ≤ 3 µs: {lat['added_us']:+.2f} µs "
          f"-> {verdict(lat['added_us'] <= 3.0)}\n")
    if rt:
        w(f"## Ring + proxy alone (instant transport, batch {rt['batch']})\n")
        alone = rt.get("proxy_alone_mdesc_per_s")
        if alone is not None:
            w(f"One proxy thread draining a ring filled before it started (its own capacity): "
              f"**{alone:.2f} M descriptors/s**.\n")
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
