"""An intranode buffer test in the style of the NVSHMEM tutorial's NvshmemBuffer: one symmetric
buffer per PE, its P2P table (one PE writes a peer's buffer: latency and bandwidth by size) and
its AllGather table (every PE's slice into every buffer), each beside torch.distributed.

    pshmrun -n 2 python examples/python/buffer.py [--device cpu|cuda] [--max-bytes N]
"""

import torch
import torch.distributed as dist

import pshmem
from _common import ratio, setup


class SymmetricBuffer:
    """One symmetric byte buffer per PE and the operations the tutorial's buffer offers."""

    def __init__(self, nbytes: int, device):
        self.buf = pshmem.zeros(nbytes, dtype=torch.uint8, device=device)
        self.flag = pshmem.zeros(1, dtype=torch.int64, device=device)
        self.epoch = 0

    def write_to(self, src: torch.Tensor, pe: int) -> None:
        """src's bytes into ``pe``'s buffer, then its flag raised (put-with-signal)."""
        self.epoch += 1
        pshmem.put_signal(self.buf[: src.numel()], src, self.flag, self.epoch, pe)

    def wait_written(self) -> None:
        self.epoch += 1
        pshmem.signal_wait_until(self.flag, "ge", self.epoch)

    def peer(self, pe: int):
        """The peer's buffer as a tensor (None when it is reached only by the proxy)."""
        return pshmem.peer_tensor(self.buf, pe)

    def all_gather(self, out: torch.Tensor, nbytes: int) -> None:
        pshmem.all_gather(out[: nbytes * pshmem.n_pes()], self.buf[:nbytes])

    def free(self) -> None:
        pshmem.free(self.flag)
        pshmem.free(self.buf)


def more(p):
    p.add_argument("--max-bytes", type=int, default=0,
                   help="largest message (default: 1 MiB on the host, 64 MiB on a GPU)")


ctx = setup("buffer", __doc__, more)
me, n, dev = ctx.me, ctx.n, ctx.device
top = ctx.args.max_bytes or ((64 << 20) if dev.type == "cuda" else (1 << 20))
sizes, b = [], 8
while b <= top:
    sizes.append(b)
    b *= 8
buf = SymmetricBuffer(top, dev)
gathered = pshmem.zeros(top * n, dtype=torch.uint8, device=dev)
peer = 1

# Checks: PE 0 writes a pattern into PE 1's buffer; PE 1 sees it (flag, then data, then the
# direct view where there is one); the all-gather puts every PE's slice in order.
pattern = (torch.arange(top, device=dev) % 251).to(torch.uint8)
if me == 0:
    buf.write_to(pattern, peer)
    buf.epoch += 1
elif me == peer:
    buf.wait_written()
ctx.sync()
pshmem.barrier()
ctx.sync()
if me == peer:
    ctx.check(bool(torch.equal(buf.buf, pattern)), f"PE 0's {top} B landed in PE 1's buffer")
if me == 0:
    view = buf.peer(peer)
    ctx.check(view is None or bool(torch.equal(view, pattern)),
              "PE 1's buffer read through the peer view" if view is not None
              else "PE 1 is reached by the proxy only (no peer view)")
ctx.sync()
pshmem.barrier()  # PE 0 has read PE 1's buffer before PE 1 overwrites it
ctx.sync()
buf.buf.fill_(me)
pshmem.barrier()
buf.all_gather(gathered, 4096)
ctx.sync()
ok = all(bool((gathered[i * 4096:(i + 1) * 4096] == i).all()) for i in range(n))
ctx.check(ok, "all_gather of 4 KiB slices: PE order")

# P2P table: PE 0 streams `window` writes into PE 1's buffer, PE 1 waits for the last flag.
p2p = []
for nbytes in sizes:
    window = 16
    iters = ctx.args.iters or max(3, min(100, (64 << 20) // (nbytes * window)))
    src = pattern[:nbytes].clone()

    def ours():
        if me == 0:
            for _ in range(window):
                buf.write_to(src, peer)
            buf.epoch += 1
            pshmem.quiet()
        elif me == peer:
            buf.epoch += window - 1
            buf.wait_written()
        else:
            buf.epoch += window + 1

    t_ours = ctx.time_us(ours, iters)
    tsrc = torch.zeros(nbytes, dtype=torch.uint8, device=ctx.tdevice)

    def theirs():
        if me == 0:
            for q in [dist.isend(tsrc, peer) for _ in range(window)]:
                q.wait()
        elif me == peer:
            for q in [dist.irecv(tsrc, 0) for _ in range(window)]:
                q.wait()

    t_theirs = ctx.time_us(theirs, iters, tdev=ctx.tdevice)
    gbs = lambda t: nbytes * window / (t * 1e-6) / 1e9
    p2p.append([nbytes, t_ours / window, t_theirs / window, gbs(t_ours), gbs(t_theirs),
                ratio(t_ours, t_theirs)])

ag = []
for nbytes in sizes:
    iters = ctx.args.iters or max(3, min(100, (16 << 20) // (nbytes * n)))
    t_ours = ctx.time_us(lambda: buf.all_gather(gathered, nbytes), iters)
    ts = torch.zeros(nbytes, dtype=torch.uint8, device=ctx.tdevice)
    td = torch.zeros(nbytes * n, dtype=torch.uint8, device=ctx.tdevice)
    t_theirs = ctx.time_us(lambda: dist.all_gather_into_tensor(td, ts), iters, tdev=ctx.tdevice)
    busbw = lambda t: nbytes * (n - 1) / (t * 1e-6) / 1e9
    ag.append([nbytes, t_ours, t_theirs, busbw(t_ours), busbw(t_theirs), ratio(t_ours, t_theirs)])

ctx.table("P2P: PE 0 writes PE 1's buffer (16 in flight)",
          ["bytes", "pshmem µs/msg", "torch µs/msg", "pshmem GB/s", "torch GB/s", "speed-up"], p2p)
ctx.table("AllGather of each PE's slice",
          ["bytes per PE", "pshmem µs", "torch µs", "pshmem bus GB/s", "torch bus GB/s",
           "speed-up"], ag)
pshmem.free(gathered)
buf.free()
ctx.finish()
