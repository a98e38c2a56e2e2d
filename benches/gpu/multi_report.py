#!/usr/bin/env python3
"""One report per machine from one run of scripts/multi-gpu.sh: every part's tables with their
baselines, the collectives' goals checked, and what was not run and why.

    python3 benches/gpu/multi_report.py OUT [NAME] > OUT/REPORT.md

Reads only what the parts left under OUT (nothing is typed in by hand); a part that did not run
is listed with the reason. Standard library only (the point-to-point plots come from
scripts/multi-gpu-report.sh on a machine with matplotlib).
"""

import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def demote(md, levels=1):
    """Shifts a part's own Markdown headings below this report's section headings."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", md, flags=re.M)


def body(md):
    """A part's Markdown without its own title line (this report gives each part a heading)."""
    return md.split("\n", 1)[1] if md.startswith("# ") else md


def coll_medians(coll_dir, name):
    """A bench-coll JSON's medians by (test, size); {} when the file is missing."""
    text = read(os.path.join(coll_dir, name))
    return {(r["test"], r["size"]): r["median"] for r in json.loads(text)["results"]} if text else {}


def ours_coll_table(coll_dir):
    """Our collective latencies alone (on-stream and one-block forms), for a run whose NCCL side
    left nothing: "" when ours left nothing either."""
    stream = coll_medians(coll_dir, "pshmem-coll.json")
    block = coll_medians(coll_dir, "pshmem-coll-block.json")
    if not stream and not block:
        return ""
    rows = ["| collective | bytes per PE | on-stream (µs) | one block (µs) |", "| --- | --- | --- | --- |"]
    for t, sz in sorted(set(stream) | set(block)):
        cell = lambda d: f"{d[(t, sz)]:.2f}" if (t, sz) in d else "—"
        rows.append(f"| {t} | {sz} | {cell(stream)} | {cell(block)} |")
    return "\n".join(rows)


GPU_TEST_PARTS = ["ring", "ops", "perf", "nvshmem", "python", "ep", "ht"]


def p2p_result(out):
    """The point-to-point part's bench-gpu result: `p2p/result.json` as the run left it, or
    `p2p/p2p.json`, the same bytes, which is all a filed folder keeps (scripts/multi-gpu-report.sh
    drops the copy)."""
    for f in ("result.json", "p2p.json"):
        if os.path.exists(os.path.join(out, "p2p", f)):
            return os.path.join(out, "p2p", f)
    return None


def missing_pieces(out, ngpu):
    """What a run of every part would have left and this folder lacks, part by part (a run split
    over several device calls, or cut short, says here what it did not reach)."""
    gaps = []
    # The GPU test script: parts named by the folders' suffixes (gpu-test-ring-ops, gpu-test-all).
    tested = set()
    for d in glob.glob(os.path.join(out, "gpu-test-*")):
        tested |= set(os.path.basename(d)[len("gpu-test-"):].split("-"))
    if tested and "all" not in tested:
        left = [x for x in GPU_TEST_PARTS if x not in tested]
        if left:
            gaps.append("the GPU test script's parts " + ", ".join(f"`{x}`" for x in left) +
                        ": not in this folder")
    # The NVSHMEM-compatible programs at 2 and 4 PEs.
    text = read(os.path.join(out, "examples", "compare.jsonl"))
    if text:
        pes = {json.loads(l)["pes"] for l in text.splitlines() if l.strip()}
        left = [n for n in (2, 4) if n not in pes]
        if left:
            gaps.append("the NVSHMEM-compatible programs at " + ", ".join(map(str, left)) +
                        " PEs: not in this folder")
    # Point to point: the baselines and sections a full bench-gpu run has on this machine.
    result = p2p_result(out)
    text = read(result) if result else None
    if text:
        doc = json.loads(text)
        have = {(r.get("table"), r.get("runtime")) for r in doc.get("rows", [])}
        want = [("nvlink", "nvshmem", "NVSHMEM over NVLink"), ("nvlink", "proxyshmem", "ours over NVLink"),
                ("network", "proxyshmem", "ours through the network path")]
        if ngpu >= 2:
            want += [("nvlink", "nccl", "NCCL over NVLink"), ("nvlink", "copy_engine", "the copy engine"),
                     ("network", "nccl", "NCCL's socket transport")]
        left = [w for t, r, w in want if (t, r) not in have]
        if not doc.get("proxy"):
            left.append("the proxy machinery")
        if left:
            gaps.append("point to point (`p2p`): " + ", ".join(left) + ": not in this folder")
    # MoE: the EP sizes a run covers (2, and 4) in each mode.
    for f, mode in (("ep-ll.json", "low-latency"), ("ep-ht.json", "normal-mode")):
        text = read(os.path.join(out, "ep", f))
        if text:
            sizes = {r["pes"] for r in json.loads(text)}
            left = [n for n in (2, 4) if n not in sizes]
            if left:
                gaps.append(f"MoE {mode} at EP " + ", ".join(map(str, left)) + ": not in this folder")
    # Collectives at 4 PEs where the machine has 4 GPUs.
    if ngpu >= 4 and os.path.isdir(os.path.join(out, "coll")) and not read(os.path.join(out, "coll", "coll-4pe.md")):
        gaps.append("collectives at 4 PEs beside NCCL with 4 ranks: not in this folder")
    return gaps


def coll_goals(coll_dir):
    """The collectives issue's goals against NCCL from bench-coll's JSON: (goal, figure, met)."""
    stream, block, nccl = (coll_medians(coll_dir, f) for f in
                           ("pshmem-coll.json", "pshmem-coll-block.json", "nccl-coll.json"))
    if not nccl or not (stream or block):
        return []
    # Ours: the faster of the host's on-stream form and the one-block device form, per size.
    ours = dict(stream)
    for k, v in block.items():
        ours[k] = min(v, ours.get(k, v))

    def ratios(test, pred):
        return [(s, nccl[(t, s)] / ours[(t, s)]) for (t, s) in ours
                if t == test and pred(s) and (t, s) in nccl and ours[(t, s)] > 0]

    def goal(label, test, pred, want):
        rs = sorted(ratios(test, pred))
        if not rs:
            return (label, "no sizes measured", None)
        worst = min(rs, key=lambda x: x[1])
        fig = f"NCCL / ours {min(r for _, r in rs):.2f}–{max(r for _, r in rs):.2f} (worst at {worst[0]} B)"
        return (label, fig, worst[1] >= want)

    out = [
        goal("allreduce ≤ 64 KiB ≥ 2× NCCL", "reduce_latency", lambda s: s <= 65536, 2.0),
        goal("fcollect ≤ 1 MiB ≥ 2× NCCL", "fcollect_latency", lambda s: s <= 1 << 20, 2.0),
        goal("fcollect ≥ 16 MiB ≥ 0.9× NCCL", "fcollect_latency", lambda s: s >= 16 << 20, 0.9),
    ]
    bar = ours.get(("barrier_latency", 0))
    out.append(("device barrier across 2 GPUs ≤ 2 µs",
                "not measured" if bar is None else f"{bar:.2f} µs", None if bar is None else bar <= 2.0))
    return out


def main():
    out = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else os.path.basename(os.path.abspath(out))
    machine = re.sub(r"\x1b\[[0-9;]*m", "", read(os.path.join(out, "machine.txt"), "unknown") or "unknown").strip()
    ngpu = len([l for l in machine.splitlines() if re.match(r"^\d+, ", l)])
    runs = (read(os.path.join(out, "run.txt"), "") or "").strip().splitlines()
    parts = (read(os.path.join(out, "parts.txt"), "") or "").strip().splitlines()
    not_run = []
    p = print
    p(f"# Multi-GPU runs — {name}\n")
    p("Generated by `benches/gpu/multi_report.py` from the folder written by "
      "`bash scripts/multi-gpu.sh BIN OUT` (one run, split into the invocations below where a "
      "machine's per-command limit required it).\n")
    p("```\n" + machine + "\n```\n")
    if runs:
        p("Invocations:\n")
        for r in runs:
            p(f"- `{r}`")
        p()
    if parts:
        p("Parts (exit status, seconds): " + "; ".join(f"`{x}`" for x in parts) + "\n")
    one_gpu = ngpu == 1
    if one_gpu:
        p("**One GPU**: every multi-PE run shares it under CUDA MPS. Peer traffic is a copy "
          "inside one GPU's memory, not an NVLink figure; NCCL refuses two ranks on one GPU, so "
          "its baselines cannot run here.\n")

    # 0. The GPU test script.
    p("## 0. The GPU test script\n")
    logs = sorted(glob.glob(os.path.join(out, "gpu-test-*", "gpu-tests.log")))
    if not logs:
        p("Not run in this folder.\n")
        not_run.append("the GPU test script (part `test`)")
    for log in logs:
        text = read(log, "")
        verdict = [l for l in text.splitlines() if l.startswith("gpu-test:")]
        steps = len([l for l in text.splitlines() if l.startswith("== ")])
        p(f"- `{os.path.basename(os.path.dirname(log))}`: {verdict[-1] if verdict else 'no verdict (stopped?)'}"
          f" — {steps} steps")
    p()

    # 1. The NVSHMEM-compatible programs beside NVSHMEM.
    p("## 1. NVSHMEM-compatible programs, ours and NVSHMEM 3.4.5's builds of the same sources\n")
    cmp_md = read(os.path.join(out, "examples", "compare.md"))
    if cmp_md:
        p(demote(body(cmp_md)).strip() + "\n")
    else:
        p("Not run (part `examples`).\n")
        not_run.append("the NVSHMEM-compatible programs beside NVSHMEM (part `examples`)")

    # 2. Collectives beside NCCL.
    p("## 2. Collectives beside NCCL (torch.distributed), 4 B … 256 MiB per PE\n")
    coll = os.path.join(out, "coll")
    table = read(os.path.join(coll, "coll.md"))
    ours_only = "" if table else ours_coll_table(coll)
    if table:
        p("Ours: `pshmem-perf` on the world team of 2 PEs (the host's on-stream form; goals use "
          "the faster of it and the one-block device form); NCCL: the same sizes through "
          "torch.distributed, same run.\n")
        p(table.strip() + "\n")
        goals = coll_goals(coll)
        if goals:
            p("| goal (collectives issue) | measured | met |\n| --- | --- | --- |")
            for g, fig, met in goals:
                p(f"| {g} | {fig} | {'—' if met is None else ('yes' if met else '**no**')} |")
            p()
        table4 = read(os.path.join(coll, "coll-4pe.md"))
        if table4:
            p("On 4 GPUs (world team of 4 PEs, NCCL with 4 ranks), same run:\n")
            p(table4.strip() + "\n")
    elif ours_only:
        p("**NCCL's side is missing** (no `nccl-coll.json`; `coll/nccl-coll.log` says why), so "
          "this table has no baseline. Ours: `pshmem-perf` on the world team of 2 PEs, the host's "
          "on-stream form and the one-block device form.\n")
        p(ours_only + "\n")
        not_run.append("NCCL's collectives (part `coll`): its run left no results")
    else:
        why = "needs 2 GPUs (NCCL runs one rank per GPU)" if one_gpu else "part `coll` not run"
        p(f"Not run: {why}.\n")
        not_run.append(f"collectives beside NCCL: {why}")

    # 3. MoE dispatch/combine.
    p("## 3. MoE dispatch/combine (pshmem.ep) at EP 2 and 4, over NVLink and through the proxy\n")
    found = False
    for f, title in (("ep-ll.md", "Low latency"), ("ep-ht.md", "Normal (high-throughput) mode")):
        md = read(os.path.join(out, "ep", f))
        if md:
            found = True
            p(f"### {title}\n")
            p(demote(body(md), 2).strip() + "\n")
    if not found:
        p("Not run (part `ep`).\n")
        not_run.append("MoE dispatch/combine (part `ep`)")
    elif one_gpu:
        p("EP ranks share the one GPU under MPS: \"direct\" is IPC within one GPU.\n")

    # 4. Point to point.
    p("## 4. Point to point: NVLink put/get and `p` latency, the staged network path\n")
    p2p_md = read(os.path.join(out, "p2p", "p2p.md"))
    result = p2p_result(out)
    if p2p_md:
        p(demote(body(p2p_md)).strip() + "\n")
    elif result:
        p(f"Measured (`{os.path.relpath(result, out)}`); its tables and plots are rendered by "
          "`scripts/multi-gpu-report.sh` (needs matplotlib).\n")
    else:
        p("Not run (part `p2p`).\n")
        not_run.append("point to point (part `p2p`)")

    # 5. The Python examples beside torch.distributed.
    p("## 5. The Python examples beside torch.distributed\n")
    py_dirs = sorted({os.path.dirname(x) for x in glob.glob(os.path.join(out, "gpu-test-*", "python-*.json"))})
    if py_dirs:
        md = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "report.py"),
                             py_dirs[-1], f"{name}, the python part of the GPU test script"],
                            capture_output=True, text=True).stdout
        rel = os.path.relpath(py_dirs[-1], out)
        md = re.sub(r"\]\(([\w.-]+\.svg)\)", lambda m: f"]({rel}/{m.group(1)})", body(md))
        p(demote(md).strip() + "\n")
    else:
        p("Not run (the python part of `test`).\n")
        not_run.append("the Python examples (part `test`, GPU_TEST_PARTS with python)")

    p("## Not run, and why\n")
    if one_gpu:
        not_run += [
            "NCCL and the copy engine over NVLink, NCCL's socket transport (`p2p`): NCCL needs one "
            "GPU per rank, and one GPU has no link",
            "EP with one GPU per rank: the EP ranks share one GPU",
        ]
    not_run += missing_pieces(out, ngpu)
    not_run.append("NVSHMEM through its proxy (no NIC on these machines: its transports need one)")
    for x in not_run:
        p(f"- {x}")


if __name__ == "__main__":
    main()
