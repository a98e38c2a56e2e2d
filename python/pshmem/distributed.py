"""torch.distributed beside pshmem: one call that gives a pshmem job a process group.

Under torchrun the usual ``env://`` rendezvous is used. Under ``pshmrun`` (which sets no
``MASTER_ADDR``), rank 0 opens a ``TCPStore`` on a free port and the port reaches the other
PEs through pshmem itself (a broadcast on the host symmetric heap), so scripts can compare with
``torch.distributed`` without a second launcher.
"""

from __future__ import annotations

import os
from typing import Optional

import pshmem


def default_backend(device: str) -> str:
    """``'nccl'`` for CUDA when every local PE has a GPU of its own (NCCL refuses two ranks on
    one GPU), else ``'gloo'``."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return "gloo"
    local = int(os.environ.get("PSHMEM_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return "nccl" if torch.cuda.device_count() >= local else "gloo"


def init_process_group(backend: Optional[str] = None, device: str = "cpu") -> str:
    """Initializes ``torch.distributed`` over the same ranks as the running pshmem job (PE i is
    rank i) unless it already is; returns the backend in use."""
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_backend()
    backend = backend or default_backend(device)
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        dist.init_process_group(backend)
        return backend
    import torch

    me, n = pshmem.my_pe(), pshmem.n_pes()
    host = os.environ.get("PSHMEM_BOOTSTRAP_ADDR", "127.0.0.1:0").rsplit(":", 1)[0] or "127.0.0.1"
    store = None
    src = pshmem.zeros(1, dtype=torch.int64, device="cpu")
    dst = pshmem.zeros(1, dtype=torch.int64, device="cpu")
    if me == 0:
        store = dist.TCPStore(host, 0, n, is_master=True, wait_for_workers=False)
        src[0] = store.port
    pshmem.broadcast(dst, src, root=0)
    port = int(dst[0])
    pshmem.free(dst)
    pshmem.free(src)
    if store is None:
        store = dist.TCPStore(host, port, n, is_master=False)
    dist.init_process_group(backend, store=store, rank=me, world_size=n)
    return backend
