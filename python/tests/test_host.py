"""The pshmem package in host mode: jobs of several processes on this machine's CPU (launched
by pshmrun or torchrun), each test one job. Run by scripts/test.sh:

    .venv/bin/python -m pytest python/tests
"""

from __future__ import annotations

import ast
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PSHMRUN = ROOT / "target" / "release" / "pshmrun"
WORKERS = Path(__file__).resolve().parent / "workers"
PY = sys.executable


def env(**extra: str) -> dict:
    e = dict(os.environ)
    e.setdefault("PSHMEM_OP_TIMEOUT", "60")
    e.update(extra)
    return e


def job(n: int, *args: str, timeout: int = 300, **extra: str) -> subprocess.CompletedProcess:
    """``pshmrun -n N python ARGS...``; fails the test with its output when it fails."""
    assert PSHMRUN.exists(), f"{PSHMRUN} is missing: cargo build --release -p pshmem-tools"
    cmd = [str(PSHMRUN), "-n", str(n), "--timeout", str(timeout), "--", PY, *args]
    r = subprocess.run(cmd, cwd=ROOT, env=env(**extra), capture_output=True, text=True,
                       timeout=timeout + 30)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


def one(code: str, timeout: int = 60, **extra: str) -> subprocess.CompletedProcess:
    """A 1-PE job (no launcher) running ``code``."""
    return subprocess.run([PY, "-c", code], cwd=ROOT, env=env(**extra), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("n", [2, 3])
def test_every_operation_direct(n):
    r = job(n, str(WORKERS / "ops.py"), "--device", "cpu")
    assert r.stdout.count("ops on cpu: passed") == n


def test_every_operation_through_the_proxy():
    # Same-host peers forced through the command ring, the proxy and libfabric tcp.
    r = job(3, str(WORKERS / "ops.py"), "--device", "cpu", PSHMEM_DISABLE_P2P="1")
    assert r.stdout.count("ops on cpu: passed") == 3


@pytest.mark.parametrize("n,p2p", [(2, "0"), (3, "1")])
def test_every_call_with_bad_arguments_is_a_typed_error(n, p2p):
    # Issue 41's sweep: every public call with bad arguments before init, while the job runs
    # (direct, and through the proxy) and after finalize; each a typed error naming the fault.
    r = job(n, str(WORKERS / "sweep.py"), PSHMEM_DISABLE_P2P=p2p)
    assert "BAD" not in r.stdout, r.stdout
    phases = [line for line in r.stdout.splitlines() if "SWEEP phase=" in line]
    assert len(phases) == 3 * n, r.stdout
    for line in phases:
        calls = line.split("calls=")[1].split()[0]
        assert f"refused={calls}" in line, line
    assert r.stdout.count("missing=0") == n, r.stdout


def free_port_pair() -> int:
    """A port P such that P and P + 1 are free now (torchrun's store listens on P, the
    bootstrap on P + 1), so that concurrent runs and other services do not collide.

    Chosen below the kernel's ephemeral range (as bootstrap/src/port.rs does): a port released
    there is never handed to an outgoing connection before torchrun binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    floor = 20000
    for _ in range(200):
        port = random.randrange(floor, low - 1) if low - 1 > floor else 0
        with socket.socket() as a:
            try:
                a.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports found")


def torchrun(*args: str, **extra: str) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 ARGS...`` on free ports (skips where torchrun is not
    installed)."""
    exe = Path(PY).parent / "torchrun"
    if not exe.exists():
        pytest.skip("torchrun is not installed next to this python")
    port = free_port_pair()
    cmd = [str(exe), "--nproc-per-node", "2", "--master-port", str(port), *args]
    r = subprocess.run(cmd, cwd=ROOT, env=env(**extra), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    return r


def test_init_from_a_torch_distributed_group():
    # torchrun's variables, a gloo group, and pshmem.init(group=...) on top of it.
    r = torchrun(str(WORKERS / "ops.py"), "--device", "cpu", "--group")
    assert r.stdout.count("ops on cpu: passed") == 2


def test_init_from_torchrun_environment():
    # No group: the bootstrap reads RANK/WORLD_SIZE/MASTER_ADDR and listens on MASTER_PORT+1.
    r = torchrun(str(WORKERS / "ops.py"), "--device", "cpu",
                 PSHMEM_JOB_SECRET="0123456789abcdef")
    assert r.stdout.count("ops on cpu: passed") == 2


def test_init_under_mpirun():
    # Open MPI's mpirun starts the ranks with nothing of ours exported: pshmem.init() reads
    # its variables and the ranks meet on their own (no MPI in this process).
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun (scripts/setup.sh installs Open MPI)")
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
           "-np", "2", PY, str(WORKERS / "ops.py"), "--device", "cpu"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert r.stdout.count("ops on cpu: passed") == 2, r.stdout


def test_example_under_torchrun():
    r = torchrun(str(ROOT / "examples" / "python" / "ring.py"), "--device", "cpu",
                 "--iters", "3", PSHMEM_JOB_SECRET="0123456789abcdef")
    assert "ring: all checks passed" in r.stdout


@pytest.mark.parametrize("example", ["ring", "collectives", "buffer", "patterns"])
def test_examples(example):
    args = [str(ROOT / "examples" / "python" / f"{example}.py"), "--device", "cpu",
            "--iters", "3"]
    if example in ("collectives", "buffer"):
        args += ["--max-bytes", "65536"]
    r = job(2, *args)
    assert f"{example}: all checks passed" in r.stdout
    assert "| pshmem" in r.stdout or "pshmem µs" in r.stdout or "pshmem eager" in r.stdout


def test_single_pe_tensors_share_the_heap():
    r = one(
        "import torch, pshmem\n"
        "with pshmem.init() as pe:\n"
        "    assert (pe.my_pe, pe.n_pes) == (0, 1)\n"
        "    s = pshmem.zeros(4, dtype=torch.int64)\n"
        "    s[0] = 77\n"  # a store through the tensor is a store to the heap
        "    assert pshmem.signal_fetch(s) == 77\n"
        "    pshmem.signal_op(s, 5, 0, op='add'); pshmem.quiet()\n"
        "    assert s[0].item() == 82\n"
        "    v = s[1:3]\n"
        "    assert pshmem.is_symmetric(v) and pshmem.peer_tensor(v, 0) is v\n"
        "assert not pshmem.is_initialized()\n"
        "print('ok')\n")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_a_tensor_read_after_finalize_keeps_its_values_with_a_warning():
    # Before: the heap was unmapped at finalize and reading the tensor was SIGSEGV.
    r = one("import torch, pshmem, warnings\n"
            "pshmem.init()\n"
            "s = pshmem.zeros(4, dtype=torch.int64); s[0] = 7\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    pshmem.finalize()\n"
            "print('value', s[0].item(), s.sum().item())\n"
            "print('warned', [x.category.__name__ for x in w], str(w[0].message))\n"
            "del s\n"
            "pshmem.init(); t = pshmem.zeros(2); del t; pshmem.finalize()\n"
            "print('again')\n")
    assert r.returncode == 0, r.stderr
    assert "value 7 7" in r.stdout and "again" in r.stdout, r.stdout
    assert "warned ['ResourceWarning'] 1 tensor(s)" in r.stdout, r.stdout


def test_init_again_after_finalize():
    # Before: the second init failed with "rank 1 joined twice" (rank 0's old listener).
    r = job(2, "-c", "import pshmem\n"
                     "for i in range(3):\n"
                     "    pshmem.init(); pshmem.barrier(); pshmem.finalize()\n"
                     "print('rounds done')\n", timeout=60)
    assert r.stdout.count("rounds done") == 2, r.stdout


def test_a_rank_script_running_two_programs_in_turn():
    # pshmrun's secret comes through a memfd each program of a rank's script reads anew.
    prog = f"{PY} -c 'import pshmem; pshmem.init(); pshmem.barrier(); pshmem.finalize(); print(\"prog ok\")'"
    cmd = [str(PSHMRUN), "-n", "2", "--timeout", "60", "--", "sh", "-c", f"{prog} && {prog}"]
    r = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
    assert r.returncode == 0 and r.stdout.count("prog ok") == 4, r.stdout + r.stderr


def test_calls_before_init_raise_not_initialized():
    r = one("import pshmem\n"
            "try:\n    pshmem.my_pe()\nexcept pshmem.NotInitialized as e:\n    print('raised', e)\n")
    assert "raised pshmem is not initialized" in r.stdout, r.stdout + r.stderr


def test_a_wait_ends_with_timeout_naming_pe_and_operation():
    r = one("import torch, pshmem\n"
            "pshmem.init()\n"
            "s = pshmem.zeros(1, dtype=torch.int64)\n"
            "try:\n    pshmem.signal_wait_until(s, 'eq', 1)\n"
            "except pshmem.Timeout as e:\n    print('timeout:', e)\n",
            PSHMEM_OP_TIMEOUT="1")
    assert "timeout: PE 0: signal_wait_until" in r.stdout, r.stdout + r.stderr


def test_a_wait_releases_the_gil():
    # Another Python thread sets the signal while the main thread waits for it: it can only
    # run if the wait released the GIL.
    r = one("import threading, time, torch, pshmem\n"
            "pshmem.init()\n"
            "s = pshmem.zeros(1, dtype=torch.int64)\n"
            "def late():\n"
            "    time.sleep(0.3)\n"
            "    pshmem.signal_op(s, 5, 0)\n"
            "threading.Thread(target=late).start()\n"
            "print('seen', pshmem.signal_wait_until(s, 'eq', 5))\n"
            "pshmem.finalize()\n",
            PSHMEM_OP_TIMEOUT="10")
    assert "seen 5" in r.stdout, r.stdout + r.stderr


def test_ctrl_c_interrupts_a_wait():
    code = ("import torch, pshmem\n"
            "pshmem.init()\n"
            "s = pshmem.zeros(1, dtype=torch.int64)\n"
            "print('waiting', flush=True)\n"
            "try:\n    pshmem.signal_wait_until(s, 'eq', 1)\n"
            "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n")
    p = subprocess.Popen([PY, "-c", code], cwd=ROOT, env=env(PSHMEM_OP_TIMEOUT="60"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert "interrupted" in out, out + err
    assert time.monotonic() - t0 < 5, "the wait took too long to notice Ctrl-C"


def test_type_stubs_match_the_extension():
    # The stub must name exactly what the extension exports, so it cannot drift.
    import pshmem._pshmem as C

    stub = Path(C.__file__).with_name("_pshmem.pyi")
    if not stub.exists():
        stub = ROOT / "python" / "pshmem" / "_pshmem.pyi"
    tree = ast.parse(stub.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    exported = {n for n in dir(C) if not n.startswith("__")} | {"__version__"}
    assert names == exported, (f"only in the stub: {sorted(names - exported)}; "
                               f"only in the extension: {sorted(exported - names)}")


def test_an_exit_without_finalize_says_goodbye():
    """A program that ends without finalize() (DeepEP's tests do, after destroy_process_group):
    the package leaves at exit, so no PE reports another as dead or its data path as faulty
    (issue 41, item 10)."""
    code = ("import pshmem, torch; pshmem.init(); t = pshmem.zeros(4, dtype=torch.int64); "
            "pshmem.barrier(); print('OK exit-without-finalize', pshmem.my_pe())")
    r = job(3, "-c", code)
    assert r.stdout.count("OK exit-without-finalize") == 3, r.stdout
    for bad in ("died or disconnected", "data path fault", "ERROR"):
        assert bad not in r.stderr, f"{bad!r} at exit:\n{r.stderr}"


def test_a_collective_waiting_for_a_pe_that_left_fails_at_once():
    """A PE that leaves (exits without finalize) while another waits for it in a collective:
    the waiting PE fails at once, naming it, not after the timeout."""
    code = "\n".join([
        "import sys, time, pshmem",
        "pshmem.init()",
        "pshmem.barrier()",
        "if pshmem.my_pe() == 1:",
        "    sys.exit(0)",
        "t = time.monotonic()",
        "try:",
        "    pshmem.barrier()",
        "    print('FAIL the barrier completed')",
        "except pshmem.PshmemError as e:",
        "    print('OK left', round(time.monotonic() - t, 1), str(e).replace(' ', '_'))",
    ])
    r = job(2, "-c", code, PSHMEM_OP_TIMEOUT="60")
    line = next(l for l in r.stdout.splitlines() if "OK left" in l or "FAIL" in l)
    assert "OK left" in line and "left_the_job" in line, r.stdout + r.stderr
    assert float(line.split()[3]) < 10, line


def test_an_uncaught_exception_is_still_a_death():
    """Leaving at exit is for deliberate exits: a PE ended by an uncaught exception is reported
    to the others as dead, as before."""
    code = "\n".join([
        "import pshmem",
        "pshmem.init()",
        "pshmem.barrier()",
        "if pshmem.my_pe() == 1:",
        "    raise RuntimeError('boom')",
        "try:",
        "    pshmem.barrier()",
        "except pshmem.PshmemError as e:",
        "    print('OK died', str(e).replace(' ', '_'))",
    ])
    cmd = [str(PSHMRUN), "-n", "2", "--timeout", "60", "--", PY, "-c", code]
    r = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
    assert r.returncode != 0, r.stdout + r.stderr
    line = next((l for l in r.stdout.splitlines() if "OK died" in l), "")
    assert "died" in line and "left_the_job" not in line, r.stdout + r.stderr
