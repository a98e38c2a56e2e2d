"""The pshmem package on CUDA tensors: the same jobs scripts/gpu-test.sh runs (which needs no
pytest). Skips, saying why, without a GPU. Several PEs on one GPU need CUDA MPS running.

    .venv/bin/python -m pytest python/tests/test_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from test_host import ROOT, WORKERS, job

if not torch.cuda.is_available():
    pytest.skip("SKIP GPU tests: torch sees no CUDA device here", allow_module_level=True)


@pytest.mark.parametrize("p2p", ["direct", "proxy"])
def test_every_operation_on_cuda_tensors(p2p):
    extra = {"PSHMEM_DISABLE_P2P": "1", "PSHMEM_PROVIDER": "tcp"} if p2p == "proxy" else {}
    r = job(2, str(WORKERS / "ops.py"), "--device", "cuda", **extra)
    assert r.stdout.count("ops on cuda: passed") == 2


@pytest.mark.parametrize("example", ["ring", "collectives", "buffer", "patterns"])
def test_examples_on_cuda(example):
    r = job(2, str(ROOT / "examples" / "python" / f"{example}.py"), "--device", "cuda")
    assert f"{example}: all checks passed" in r.stdout
