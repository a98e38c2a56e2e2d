#!/usr/bin/env python3
"""Side-by-side table of pshmem-perf's collective latencies and NCCL's from one run.

  coll_table.py OURS.json NCCL.json > table.md"""
import json
import sys


def rows(path):
    d = json.load(open(path))
    return {(r["test"], r["size"]): r["median"] for r in d["results"]}


ours, nccl = rows(sys.argv[1]), rows(sys.argv[2])
print("| collective | bytes per PE | proxyshmem (µs) | NCCL (µs) | NCCL / ours |")
print("| --- | --- | --- | --- | --- |")
for (test, size) in sorted(ours, key=lambda k: (k[0], k[1])):
    if (test, size) not in nccl:
        continue
    o, n = ours[(test, size)], nccl[(test, size)]
    print(f"| {test} | {size} | {o:.2f} | {n:.2f} | {n / o:.2f} |")
