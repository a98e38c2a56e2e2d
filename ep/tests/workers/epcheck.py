"""What the MoE test workers (ep_ll.py, ep_ht.py) share: named checks that record failures,
DeepEP's calc_diff, and a digest of a tensor's bytes for the repeat-hash checks. Imported from
the workers' own folder (a worker run as a script has it on sys.path); unit-tested on the CPU
in ep/tests/test_ep_host.py."""

import torch


class Checks:
    """Failed checks of PE `me`, each printed as it fails."""

    def __init__(self, me):
        self.me = me
        self.failures = []

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
            print(f"[PE {self.me}] FAILED: {what}", flush=True)


def calc_diff(x, y):
    """DeepEP's 1 - 2·Σxy / Σ(x² + y²) on x + 1 and y + 1, in double."""
    x, y = x.double() + 1, y.double() + 1
    denom = (x * x + y * y).sum()
    return (1 - 2 * (x * y).sum() / denom).item()


def digest(t):
    """A hash of the tensor's bytes (0 for None or fewer than 8 bytes)."""
    if t is None:
        return 0
    b = t.contiguous().view(torch.uint8).view(-1)
    n = b.numel() // 8 * 8
    w = b[:n].view(torch.int64)
    return int(torch.bitwise_xor(w.sum(), w[::7].sum() * 31).item()) if n else 0
