#!/usr/bin/env python3
"""Merges the outputs of scripts/bench-gpu.sh (one folder) into one results JSON:
    merge.py OUT_DIR RESULT.json
Rows: {"table", "runtime", "shape", "size", "gbps" | "us" | "mops", ...}."""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except OSError:
        pass
    return rows


def perf(path, table, runtime, shape):
    doc = load(path)
    rows = []
    for r in (doc or {}).get("results", []):
        row = {"table": table, "runtime": runtime, "shape": shape, "size": r["size"],
               "test": r["test"], "blocks": r.get("blocks", 0)}
        key = {"GB/s": "gbps", "us": "us", "Mops/s": "mops"}[r["unit"]]
        row[key] = r["median"]
        rows.append(row)
    return rows


def main():
    out, result = sys.argv[1], sys.argv[2]
    rows = []
    for name, table in (("nccl-nvlink.json", "nvlink"), ("nccl-socket.json", "network")):
        doc = load(os.path.join(out, name)) or {}
        for r in doc.get("rows", []):
            rows.append(dict(r, table=table, shape="-"))
    for shape in ("nvshmem", "best"):
        for r in jsonl(os.path.join(out, f"nvshmem-{shape}.jsonl")):
            rows.append(dict(r, table="nvlink"))
        rows += perf(os.path.join(out, f"pshmem-nvlink-{shape}.json"), "nvlink", "proxyshmem", shape)
    rows += perf(os.path.join(out, "pshmem-nvlink-lat.json"), "nvlink", "proxyshmem", "-")
    for name in ("host-put-ce.json", "host-put-kernel.json"):
        rows += (load(os.path.join(out, name)) or {}).get("rows", [])
    rows += perf(os.path.join(out, "pshmem-network-bw.json"), "network", "proxyshmem", "auto")
    rows += perf(os.path.join(out, "pshmem-network-bw-tuned.json"), "network", "proxyshmem", "tuned")
    rows += perf(os.path.join(out, "pshmem-network-bw-slots.json"), "network", "proxyshmem", "slots")
    rows += perf(os.path.join(out, "pshmem-network-lat.json"), "network", "proxyshmem", "-")
    # The ceiling: raw libfabric (the C API) on the network path's provider, same processes.
    fab = load(os.path.join(out, "fabric-tcp.json")) or {}
    for r in fab.get("bandwidth", []):
        rows.append({"table": "network", "runtime": "libfabric", "shape": "-", "size": r["size"],
                     "test": "write_bw", "gbps": r["c_gbps"]})
    if fab.get("latency"):
        rows.append({"table": "network", "runtime": "libfabric", "shape": "-", "size": 8,
                     "test": "write_latency", "us": fab["latency"]["c_us"]})
    # The profile: the proxy trace's summary per traced size and proxy thread.
    profile = {}
    for path in sorted(glob.glob(os.path.join(out, "trace-*.summary.json"))):
        m = re.match(r"trace-(\d+)\.(.+)\.summary\.json$", os.path.basename(path))
        doc = load(path)
        # The GPU proxies (initiator and target), and any other thread that had operations.
        if m and doc and ("gpu-proxy" in m.group(2) or doc.get("operations")):
            profile.setdefault(m.group(1), {})[m.group(2)] = doc
    proxy = {}
    for line in open(os.path.join(out, "proxy.log")) if os.path.exists(os.path.join(out, "proxy.log")) else []:
        if not line.startswith("OK "):
            continue
        kv = dict(t.split("=", 1) for t in line.split()[2:] if "=" in t)
        name = line.split()[1]
        if name == "ring-rate":
            proxy.setdefault("ring_rate", []).append(
                {"proxies": int(kv["proxies"]), "rings_per_proxy": int(kv.get("rings_per_proxy", 1)),
                 "mdesc_per_s": float(kv["mdesc_per_s"]),
                 "mdesc_per_s_per_proxy": float(kv["mdesc_per_s_per_proxy"]),
                 "warps": int(kv["warps"])})
        elif name in ("ring-latency", "mailbox"):
            proxy[name.replace("-", "_")] = {k: float(v) for k, v in kv.items()
                                              if re.fullmatch(r"[\d.]+", v)}
    machine = open(os.path.join(out, "machine.txt")).read() if os.path.exists(
        os.path.join(out, "machine.txt")) else ""
    gpus = open(os.path.join(out, "gpus.txt")).read().strip() if os.path.exists(
        os.path.join(out, "gpus.txt")) else "2"
    doc = {"machine": machine.strip(), "gpus": int(gpus), "rows": rows, "proxy": proxy,
           "profile": profile,
           "files": sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*")))}
    with open(result, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"merged {len(rows)} rows into {result}")


if __name__ == "__main__":
    main()
