"""Every public call of the pshmem package with bad arguments (issue 41's sweep), on N PEs
launched by pshmrun, on the host heap: before init, while the job runs, and after finalize.
Each call must raise its typed error (a ``pshmem.PshmemError`` subclass, or ``TypeError`` for
an argument of the wrong Python type) with a message naming what is wrong; none may crash,
hang or be accepted silently, and the job must work afterwards. Every public function and
Team method must appear in the running phase's table (so a new one cannot be left out).
Prints ``BAD ...`` per call that fails and ``SWEEP phase=... calls=N refused=N`` per phase.

    pshmrun -n 2 python python/tests/workers/sweep.py
"""

import inspect
import sys

import torch

import pshmem

NotInit, Bad, Mismatch = pshmem.NotInitialized, pshmem.InvalidArgument, pshmem.CollectiveMismatch
bad_lines = []
covered = set()


class Phase:
    def __init__(self, name):
        self.name, self.calls, self.refused = name, 0, 0

    def expect(self, name, fn, exc, *words):
        """``fn()`` must raise ``exc`` with every word of ``words`` in its message."""
        covered.add(name)
        self.calls += 1
        try:
            got = fn()
        except exc as e:
            msg = str(e)
            if all(w in msg for w in words):
                self.refused += 1
            else:
                bad_lines.append(f"BAD {self.name} {name}: message {msg!r} lacks {words}")
            return
        except Exception as e:  # noqa: BLE001 - the wrong class is the failure
            bad_lines.append(f"BAD {self.name} {name}: {type(e).__name__}: {e} "
                             f"(wanted {exc.__name__})")
            return
        bad_lines.append(f"BAD {self.name} {name}: returned {got!r} (wanted {exc.__name__})")

    def done(self):
        print(f"SWEEP phase={self.name} calls={self.calls} refused={self.refused}", flush=True)


def without_a_job(phase, word):
    """Every call that needs a running job, with arguments that would otherwise be fine."""
    t = torch.zeros(4, dtype=torch.int64)
    w = pshmem.Team(0)
    for name, fn in [
        ("my_pe", pshmem.my_pe),
        ("n_pes", pshmem.n_pes),
        ("empty", lambda: pshmem.empty(4)),
        ("zeros", lambda: pshmem.zeros(4)),
        ("full", lambda: pshmem.full(4, 1.0)),
        ("free", lambda: pshmem.free(t)),
        ("peer_tensor", lambda: pshmem.peer_tensor(t, 0)),
        ("is_symmetric", lambda: pshmem.is_symmetric(t)),
        ("put", lambda: pshmem.put(t, t, 0)),
        ("get", lambda: pshmem.get(t, t, 0)),
        ("put_signal", lambda: pshmem.put_signal(t, t, t[:1], 1, 0)),
        ("signal_op", lambda: pshmem.signal_op(t[:1], 1, 0)),
        ("signal_fetch", lambda: pshmem.signal_fetch(t[:1])),
        ("signal_wait_until", lambda: pshmem.signal_wait_until(t[:1], "ge", 0)),
        ("atomic_fetch_add", lambda: pshmem.atomic_fetch_add(t[:1], 1, 0)),
        ("atomic_add", lambda: pshmem.atomic_add(t[:1], 1, 0)),
        ("atomic_fetch", lambda: pshmem.atomic_fetch(t[:1], 0)),
        ("atomic_set", lambda: pshmem.atomic_set(t[:1], 1, 0)),
        ("atomic_swap", lambda: pshmem.atomic_swap(t[:1], 1, 0)),
        ("atomic_compare_swap", lambda: pshmem.atomic_compare_swap(t[:1], 0, 1, 0)),
        ("quiet", pshmem.quiet),
        ("fence", pshmem.fence),
        ("barrier", pshmem.barrier),
        ("sync", pshmem.sync),
        ("broadcast", lambda: pshmem.broadcast(t, t)),
        ("all_gather", lambda: pshmem.all_gather(t, t)),
        ("fcollect", lambda: pshmem.fcollect(t, t)),
        ("alltoall", lambda: pshmem.alltoall(t, t)),
        ("all_reduce", lambda: pshmem.all_reduce(t)),
        ("reduce_scatter", lambda: pshmem.reduce_scatter(t, t)),
        ("finalize", pshmem.finalize),
        ("Team.my_pe", w.my_pe),
        ("Team.n_pes", w.n_pes),
        ("Team.translate_pe", lambda: w.translate_pe(0, w)),
        ("Team.split_strided", lambda: w.split_strided(0, 1, 1)),
        ("Team.split_2d", lambda: w.split_2d(1)),
        ("Team.destroy", lambda: pshmem.Team(4).destroy()),
    ]:
        phase.expect(name, fn, NotInit, word)
    phase.done()


def running(phase):
    me, n = pshmem.my_pe(), pshmem.n_pes()
    nxt = (me + 1) % n
    x = pshmem.zeros(16, dtype=torch.int64)
    f = pshmem.zeros(16, dtype=torch.float32)
    u32 = pshmem.zeros(4, dtype=torch.int32)
    plain = torch.zeros(16, dtype=torch.int64)
    sig = x[:1]
    e = phase.expect

    # init / allocation / free
    e("init", lambda: pshmem.init(group=object()), TypeError, "group")
    e("empty", lambda: pshmem.empty(-4), Bad, "-4")
    e("empty", lambda: pshmem.empty((2, -1)), Bad, "-1")
    e("zeros", lambda: pshmem.zeros(1 << 60), pshmem.OutOfMemory, "heap")
    e("zeros", lambda: pshmem.zeros(4, dtype=torch.int64, device="meta"), Bad, "meta")
    e("full", lambda: pshmem.full(4, 1, dtype="int64"), TypeError, "dtype")
    e("free", lambda: pshmem.free(plain), Bad, "symmetric")
    e("free", lambda: pshmem.free(x[1:]), Bad, "free")
    e("free", lambda: pshmem.free("x"), TypeError, "torch.Tensor")
    e("peer_tensor", lambda: pshmem.peer_tensor(x, n), Bad, f"PE {n}")
    e("peer_tensor", lambda: pshmem.peer_tensor(plain, nxt), Bad, "symmetric")
    e("is_symmetric", lambda: pshmem.is_symmetric(3), TypeError, "torch.Tensor")

    # RMA
    e("put", lambda: pshmem.put(x, plain, n), Bad, f"PE {n}")
    e("put", lambda: pshmem.put(x, plain, -1), Bad, "PE -1")
    e("put", lambda: pshmem.put(plain, plain, nxt), Bad, "symmetric")
    e("put", lambda: pshmem.put(x, plain[:3], nxt), Bad, "bytes")
    e("put", lambda: pshmem.put(x[::2], plain[:8], nxt), Bad, "contiguous")
    e("put", lambda: pshmem.put(x, plain, nxt, stream=1), Bad, "stream")
    e("put", lambda: pshmem.put(x, plain, "1"), TypeError, "integer")
    e("get", lambda: pshmem.get(plain, x, n), Bad, f"PE {n}")
    e("get", lambda: pshmem.get(plain, plain, nxt), Bad, "symmetric")
    e("get", lambda: pshmem.get(plain[:2], x, nxt), Bad, "bytes")
    e("put_signal", lambda: pshmem.put_signal(x, plain, sig, 1, n), Bad, f"PE {n}")
    e("put_signal", lambda: pshmem.put_signal(x, plain, sig, 1, nxt, op="xor"), Bad, "xor")
    e("put_signal", lambda: pshmem.put_signal(x, plain, f[:2], 1, nxt), Bad, "8-byte")
    e("put_signal", lambda: pshmem.put_signal(x, plain, plain[:1], 1, nxt), Bad, "symmetric")
    e("put_signal", lambda: pshmem.put_signal(x, plain, sig, -1, nxt), Bad, "-1")

    # signals and atomics
    e("signal_op", lambda: pshmem.signal_op(sig, 1, n), Bad, f"PE {n}")
    e("signal_op", lambda: pshmem.signal_op(sig, 1, nxt, op=99), Bad, "99")
    e("signal_op", lambda: pshmem.signal_op(f[:1], 1, nxt), Bad, "8-byte")
    e("signal_op", lambda: pshmem.signal_op(sig, 2**64, nxt), Bad, "64")
    e("signal_fetch", lambda: pshmem.signal_fetch(plain[:1]), Bad, "symmetric")
    e("signal_fetch", lambda: pshmem.signal_fetch(f[:2]), Bad, "8-byte")
    e("signal_wait_until", lambda: pshmem.signal_wait_until(sig, "about", 1), Bad, "about")
    e("signal_wait_until", lambda: pshmem.signal_wait_until(plain[:1], "eq", 0), Bad, "symmetric")
    e("signal_wait_until", lambda: pshmem.signal_wait_until(sig, "eq", 0, reset=-1), Bad, "-1")
    e("atomic_fetch_add", lambda: pshmem.atomic_fetch_add(sig, 1, n), Bad, f"PE {n}")
    e("atomic_fetch_add", lambda: pshmem.atomic_fetch_add(f[:1], 1, nxt), Bad, "float32")
    e("atomic_add", lambda: pshmem.atomic_add(x[:2], 1, nxt), Bad, "2 elements")
    e("atomic_add", lambda: pshmem.atomic_add(plain[:1], 1, nxt), Bad, "symmetric")
    e("atomic_fetch", lambda: pshmem.atomic_fetch(sig, -2), Bad, "PE -2")
    e("atomic_set", lambda: pshmem.atomic_set(sig, 2**70, nxt), Bad, "does not fit")
    e("atomic_set", lambda: pshmem.atomic_set(u32[:1], 2**32, nxt), Bad, "32-bit")
    e("atomic_swap", lambda: pshmem.atomic_swap(sig, 1.5, nxt), TypeError, "integer")
    e("atomic_compare_swap", lambda: pshmem.atomic_compare_swap(f[:1], 0, 1, nxt), Bad,
      "float32")

    # ordering and synchronization
    e("quiet", lambda: pshmem.quiet(stream=1), Bad, "stream")
    e("fence", lambda: pshmem.fence(stream=1), Bad, "stream")
    e("barrier", lambda: pshmem.barrier(pshmem.Team(12345)), Bad, "team")
    e("barrier", lambda: pshmem.barrier(3), TypeError, "Team")
    e("sync", lambda: pshmem.sync(pshmem.Team(-7)), Bad, "team")

    # collectives (called alike on every PE: refused on every PE, nothing waits)
    y = pshmem.zeros(16, dtype=torch.int64)
    e("broadcast", lambda: pshmem.broadcast(x, y, root=n), Bad, "root")
    e("broadcast", lambda: pshmem.broadcast(plain, x), Bad, "symmetric")
    e("broadcast", lambda: pshmem.broadcast(x, f), Bad, "float32")
    e("all_gather", lambda: pshmem.all_gather(x, x[:3]), Bad, "")
    big = pshmem.zeros(8 * n, dtype=torch.int64)
    e("all_gather", lambda: pshmem.all_gather(torch.zeros(8 * n, dtype=torch.int64), x[:8]), Bad,
      "symmetric")
    e("fcollect", lambda: pshmem.fcollect(x, x[:5]), Bad, "")
    e("alltoall", lambda: pshmem.alltoall(x, x[:5]), Bad, "")
    e("alltoall", lambda: pshmem.alltoall(x, x, team=pshmem.Team(999)), Bad, "team")
    e("all_reduce", lambda: pshmem.all_reduce(x, op="median"), Bad, "median")
    e("all_reduce", lambda: pshmem.all_reduce(f, op="bxor"), Bad, "xor")
    e("all_reduce", lambda: pshmem.all_reduce(x, src=f), Bad, "")
    e("all_reduce", lambda: pshmem.all_reduce(plain), Bad, "symmetric")
    e("reduce_scatter", lambda: pshmem.reduce_scatter(x[:3], x), Bad, "")
    e("reduce_scatter", lambda: pshmem.reduce_scatter(x[:8], big, op="avg"), Bad, "avg")

    # teams
    w = pshmem.TEAM_WORLD
    gone = pshmem.Team(777)
    e("Team.my_pe", gone.my_pe, Bad, "team 777")
    e("Team.n_pes", gone.n_pes, Bad, "team 777")
    e("Team.translate_pe", lambda: w.translate_pe(n, w), Bad, f"PE {n}")
    e("Team.translate_pe", lambda: gone.translate_pe(0, w), Bad, "team 777")
    e("Team.translate_pe", lambda: w.translate_pe(0, gone), Bad, "team 777")
    e("Team.split_strided", lambda: w.split_strided(n, 1, 1), Bad, "start")
    e("Team.split_strided", lambda: w.split_strided(0, 0, 2), Bad, "stride")
    e("Team.split_strided", lambda: w.split_strided(0, 1, n + 1), Bad, "size")
    e("Team.split_strided", lambda: gone.split_strided(0, 1, 1), Bad, "team")
    e("Team.split_2d", lambda: w.split_2d(0), Bad, "xrange")
    e("Team.destroy", w.destroy, Bad, "team")
    e("Team.destroy", gone.destroy, Bad, "team")
    # Allocations that differ across PEs: refused on every PE, the job goes on.
    e("zeros", lambda: pshmem.zeros(100 + me), Mismatch, "PEs called it differently")

    # The job still works.
    plain[0] = 1000 + me
    pshmem.put(x[:1], plain[:1], nxt)
    pshmem.barrier()
    if int(x[0]) != 1000 + (me - 1) % n:
        bad_lines.append(f"BAD the job after the sweep: got {int(x[0])}")
    for t in (x, f, u32, y, big):
        pshmem.free(t)
    phase.done()


def public_calls():
    """Every public function of the package and every method of Team, by name."""
    names = {k for k in pshmem.__all__
             if inspect.isfunction(getattr(pshmem, k))}
    names |= {f"Team.{k}" for k, v in vars(pshmem.Team).items()
              if inspect.isfunction(v) and not k.startswith("_")}
    return names


# Calls with nothing to get wrong: is_initialized (no arguments, answers in every state).
EXEMPT = {"is_initialized"}
without_a_job(Phase("before-init"), "not initialized")
pshmem.init()
running(Phase("running"))
pshmem.finalize()
without_a_job(Phase("after-finalize"), "not initialized")
missing = public_calls() - covered - EXEMPT
for name in sorted(missing):
    bad_lines.append(f"BAD {name} is not in the sweep")
for line in bad_lines:
    print(line, flush=True)
print(f"SWEEP public={len(public_calls())} missing={len(missing)}", flush=True)
sys.exit(1 if bad_lines else 0)
