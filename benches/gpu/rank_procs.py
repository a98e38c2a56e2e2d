"""Waiting on the baseline scripts' spawned ranks (nccl_coll.py, nccl_ce.py) without hanging.

A rank that fails (a Python exception, NCCL's abort) never puts its results on the queue, so a
parent that only waits on the queue hangs until its limit: nccl_coll.py did on 2 H200s, for the
whole device call, when the barrier's row raised in both ranks."""

import queue
import sys
import time


def results_or_exit(q, procs, limit_s, who):
    """The first item rank 0 puts on q; or, once a rank has exited with a non-zero code (or
    after limit_s), kill the others and exit naming it."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            return q.get(timeout=1)
        except queue.Empty:
            pass
        dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead:
            kill(procs)
            sys.exit(f"{who}: rank {dead[0][0]} exited with code {dead[0][1]} before rank 0's results")
    kill(procs)
    sys.exit(f"{who}: no results from rank 0 within {limit_s} s")


def kill(procs):
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=10)
