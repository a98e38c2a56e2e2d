"""Summarises the proxy traces of scripts/bench-efa-path.sh part moe (the MoE kernels through the
proxy on the simulated efa profile) into OUT/moe-efa.json and prints a Markdown table.

Per operation per PE: the MoE's own posts (counted puts and counted signals; a put cut into a
part per rail counts a message per part) and their bytes, and every message of the run (with the
barriers that pace it); signal gates, fence gates and holds over the whole run; busy time per
message of each GPU proxy thread; proxy threads (each holds a core while the job runs).

What each run called, per PE (as the script runs them):
  moe-ll-epN-dispatch  10 dispatches
  moe-ll-epN-both      20 dispatches and 20 combines (ll_bench.py: a timed loop, then the hook
                       loop)  -> the combine's figures are (both - 2 x dispatch) / 20
  moe-ht-epN-dispatch  3 full dispatches (layout, notify, rows)
  moe-ht-epN-all       3 x (full dispatch + cached dispatch + combine) -> the cached dispatch +
                       combine pair is (all - dispatch) / 3

    python3 ep/bench/efa_moe.py OUT
"""

import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CALLS = {("ll", "dispatch"): 10, ("ll", "both"): 20, ("ht", "dispatch"): 3, ("ht", "all"): 3}


def channels(d):
    """The normal mode's channels, from the run's JSON lines (None for low latency)."""
    try:
        for line in open(d + ".out"):
            if line.find('"channels"') >= 0:
                return json.loads(line[line.index("{"):])["channels"]
    except (OSError, ValueError, KeyError):
        pass
    return None


def run(d):
    sums = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, "*.summary.json")))]
    gpu = [s for s in sums if "gpu-proxy" in s.get("thread", "")]
    counted = [common.counted_traffic(s) for s in sums]
    return {
        "counted_messages": sum(c[0] for c in counted),
        "counted_bytes": sum(c[1] for c in counted),
        "messages": sum(s.get("messages", 0) for s in sums),
        **{k: sum(s.get(k, 0) for s in sums) for k in ("gates", "fence_gates", "holds")},
        "proxy_threads": len(sums),
        "channels": channels(d),
        "gpu_proxy_threads": len(gpu),
        "gpu_busy_us_per_message": sorted(round(s.get("busy_us_per_message", 0), 1) for s in gpu),
    }


def main(out):
    raw = {}
    for d in sorted(glob.glob(os.path.join(out, "moe-*-ep*-*"))):
        m = re.fullmatch(r"moe-(ll|ht)-ep(\d+)-(dispatch|both|all)", os.path.basename(d))
        if not (m and os.path.isdir(d)):
            continue
        done = os.path.exists(d + ".out") and '"label"' in open(d + ".out").read()
        if not done:  # failed or timed out: its traces cover an unknown number of calls
            print(f"efa_moe: {os.path.basename(d)} did not finish; left out", file=sys.stderr)
            continue
        raw[(m.group(1), int(m.group(2)), m.group(3))] = run(d)
    rows = {}
    for (mode, n, what), r in sorted(raw.items()):
        if what != "dispatch":
            continue
        per = n * CALLS[(mode, "dispatch")]
        rows[f"{mode}-ep{n}-dispatch"] = {"pes": n, "per_pe": r["counted_messages"] / per,
                                          "MB_per_pe": r["counted_bytes"] / per / 1e6, **r}
        both = raw.get((mode, n, "both" if mode == "ll" else "all"))
        if not both:
            continue
        if mode == "ll":  # 20 dispatches + 20 combines per PE
            k, name = 2, "ll-ep%d-combine" % n
        else:  # 3 full + 3 cached dispatches + 3 combines per PE
            k, name = 1, "ht-ep%d-cached-dispatch+combine" % n
        per2 = n * CALLS[(mode, "both" if mode == "ll" else "all")]
        rows[name] = {
            "pes": n,
            "per_pe": (both["counted_messages"] - k * r["counted_messages"]) / per2,
            "MB_per_pe": (both["counted_bytes"] - k * r["counted_bytes"]) / per2 / 1e6,
            **both,
        }
    json.dump({"runs": {f"{a}-ep{b}-{c}": v for (a, b, c), v in raw.items()}, "per_operation": rows},
              open(os.path.join(out, "moe-efa.json"), "w"), indent=1)
    print("| operation | channels | counted posts per PE | MB per PE | signal gates | fence gates "
          "| holds | proxy threads (GPU) | GPU proxy busy µs per message |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, v in rows.items():
        print(f"| {name} | {v['channels'] or '-'} | {v['per_pe']:.1f} | {v['MB_per_pe']:.2f} | {v['gates']} | "
              f"{v['fence_gates']} | {v['holds']} | {v['proxy_threads']} ({v['gpu_proxy_threads']}) "
              f"| {', '.join(str(x) for x in v['gpu_busy_us_per_message'])} |")


if __name__ == "__main__":
    main(sys.argv[1])
