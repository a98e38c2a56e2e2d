"""The NCCL baseline scripts' wait on their ranks (benches/gpu/rank_procs.py): a rank that dies
must end the run at once with its name, not hang until the limit (nccl_coll.py hung a whole
device call on 2 H200s when both ranks raised at the barrier's row)."""

import multiprocessing as mp
import os
import sys
import time

import pytest

GPU = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "benches", "gpu")
sys.path.insert(0, GPU)

from rank_procs import results_or_exit  # noqa: E402

CTX = mp.get_context("fork")


def _puts(q):
    q.put([{"test": "x", "median": 1.0}])


def _dies():
    os._exit(3)


def _sleeps():
    time.sleep(60)


def test_returns_rank_zeros_rows():
    q = CTX.Queue()
    procs = [CTX.Process(target=_puts, args=(q,)), CTX.Process(target=_sleeps)]
    for p in procs:
        p.start()
    try:
        assert results_or_exit(q, procs[:1], 30, "t") == [{"test": "x", "median": 1.0}]
    finally:
        procs[1].kill()


def test_a_dead_rank_ends_the_wait_and_is_named():
    q = CTX.Queue()
    procs = [CTX.Process(target=_sleeps), CTX.Process(target=_dies)]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    with pytest.raises(SystemExit, match="rank 1 exited with code 3"):
        results_or_exit(q, procs, 60, "t")
    assert time.monotonic() - t0 < 15
    assert not procs[0].is_alive(), "the surviving rank is killed"


def test_the_limit_ends_the_wait():
    q = CTX.Queue()
    procs = [CTX.Process(target=_sleeps)]
    procs[0].start()
    with pytest.raises(SystemExit, match="no results from rank 0 within 2 s"):
        results_or_exit(q, procs, 2, "t")
    assert not procs[0].is_alive()


def test_the_barrier_row_has_calls():
    pytest.importorskip("torch")
    import nccl_coll

    assert nccl_coll.reps_for(0) == 50
    assert nccl_coll.reps_for(256 << 20) == 1
