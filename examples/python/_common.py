"""What every example shares: start pshmem and torch.distributed over the same ranks, time
a step the same way for both, print a check and a table, write JSON.

Launch any example with ``pshmrun -n 2 python examples/python/NAME.py`` or
``torchrun --nproc-per-node 2 examples/python/NAME.py``; ``--device cpu|cuda`` (default: cuda
when there is a GPU). On one GPU the PEs share it (start CUDA MPS first) and the
torch.distributed baseline runs gloo on CPU tensors, since NCCL refuses two ranks on one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Optional

import torch
import torch.distributed as dist

import pshmem
from pshmem.distributed import default_backend, init_process_group


class Ctx:
    """The job as an example sees it."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = torch.device(args.device)
        self.me, self.n = pshmem.my_pe(), pshmem.n_pes()
        self.backend = dist.get_backend()
        # The baseline's tensors: on the GPU with NCCL, else (gloo) on the host.
        self.tdevice = self.device if self.backend == "nccl" else torch.device("cpu")
        ngpu = torch.cuda.device_count() if self.device.type == "cuda" else 0
        local = int(os.environ.get("PSHMEM_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
        self.where = (
            "host memory" if ngpu == 0
            else f"{self.n} PEs on {min(ngpu, local)} GPU(s)"
            + (" (shared under MPS)" if local > ngpu else "")
        )
        gpu = self.device.type == "cuda"
        direct = self.n > 1 and pshmem._C.is_direct((self.me + 1) % self.n, gpu)
        self.path = ("direct loads/stores to the peer's mapped heap" if direct
                     else f"proxy, {pshmem._C.transport()}")
        self.results: dict = {"example": args.prog, "pes": self.n, "device": str(self.device),
                              "where": self.where, "path": self.path, "backend": self.backend, "tables": {}}
        self.failed = False

    def sync(self) -> None:
        """Waits for this PE's queued GPU work."""
        if self.device.type == "cuda":
            torch.cuda.current_stream().synchronize()

    def say(self, msg: str) -> None:
        print(f"[PE {self.me}] {msg}", flush=True)

    def check(self, ok: bool, what: str) -> None:
        """Records a check; every PE prints its own verdict."""
        self.say(f"{'verified' if ok else 'FAILED'}: {what}")
        self.failed |= not ok

    def time_us(self, step: Callable[[], None], iters: int, reps: int = 7,
                tdev: Optional[torch.device] = None) -> float:
        """Median over ``reps`` batches of the time per step (µs): ``iters`` steps per batch,
        the PEs aligned by a barrier before each batch, queued GPU work waited for after it."""
        dev = tdev or self.device
        step()
        self._wait(dev)
        times = []
        for _ in range(reps):
            self._align()
            t0 = time.perf_counter()
            for _ in range(iters):
                step()
            self._wait(dev)
            times.append((time.perf_counter() - t0) / iters * 1e6)
        return statistics.median(times)

    def graph_us(self, step: Callable[[], None], iters: int, reps: int = 7) -> Optional[float]:
        """As :meth:`time_us` for ``iters`` steps captured in one CUDA graph and replayed (the
        launch cost of Python and torch taken out); None on the host."""
        if self.device.type != "cuda":
            return None
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            step()  # warm-up outside the capture (lazy initializations)
            s.synchronize()
            self._align()
            # thread_local: the runtime's proxy threads may use CUDA meanwhile.
            with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
                for _ in range(iters):
                    step()
        torch.cuda.current_stream().wait_stream(s)
        times = []
        for _ in range(reps):
            self._align()
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / iters * 1e6)
        return statistics.median(times)

    def _wait(self, dev: torch.device) -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def _align(self) -> None:
        # Host-side alignment of the PEs through torch.distributed (never pshmem's own queued
        # GPU barrier, which would not stop the host).
        dist.barrier()

    def table(self, name: str, head: list[str], rows: list[list]) -> None:
        """Prints a Markdown table (PE 0 only) and keeps it for the JSON."""
        self.results["tables"][name] = {"head": head, "rows": rows}
        if self.me != 0:
            return
        fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else ("—" if v is None else str(v))
        print(f"\n### {name}  ({self.where}; pshmem: {self.path}; "
              f"torch.distributed {self.backend} on {self.tdevice.type})")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(fmt(v) for v in r) + " |")
        sys.stdout.flush()

    def finish(self) -> None:
        """Writes the JSON (PE 0), finalizes, exits non-zero when a check failed anywhere."""
        # On the baseline's device: NCCL reduces only GPU tensors.
        failed = torch.tensor([int(self.failed)], device=self.tdevice)
        dist.all_reduce(failed)
        if self.me == 0 and self.args.json:
            with open(self.args.json, "w") as f:
                json.dump(self.results, f, indent=1)
        pshmem.finalize()
        dist.destroy_process_group()
        if self.me == 0:
            print(f"\n{self.args.prog}: {'all checks passed' if not failed.item() else 'CHECKS FAILED'}")
        sys.exit(1 if failed.item() else 0)


def ratio(ours: Optional[float], theirs: Optional[float]) -> Optional[float]:
    """theirs / ours: above 1 means pshmem is faster."""
    return None if not ours or not theirs else theirs / ours


def setup(prog: str, doc: str, add_args: Optional[Callable] = None) -> Ctx:
    p = argparse.ArgumentParser(prog=prog, description=doc.strip().splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"],
                   default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--iters", type=int, default=0, help="steps per timed batch (0: default)")
    p.add_argument("--json", help="write the results here (PE 0)")
    if add_args:
        add_args(p)
    args = p.parse_args()
    args.prog = prog
    if args.device == "cuda":
        local = int(os.environ.get("PSHMEM_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(local % torch.cuda.device_count())
    torchrun = "MASTER_ADDR" in os.environ and "RANK" in os.environ \
        and "PSHMEM_RANK" not in os.environ
    dev = "cuda" if args.device == "cuda" else None
    if torchrun:
        # torchrun: torch.distributed first, then pshmem from its process group.
        dist.init_process_group(default_backend(args.device))
        pshmem.init(group=dist.group.WORLD, device=dev)
    else:
        # pshmrun: pshmem first, then torch.distributed over the same ranks.
        pshmem.init(device=dev)
        init_process_group(device=args.device)
    ctx = Ctx(args)
    if ctx.n < 2:
        ctx.say(f"{prog} needs at least 2 PEs (pshmrun -n 2 ...)")
        pshmem.finalize()
        sys.exit(2)
    return ctx
