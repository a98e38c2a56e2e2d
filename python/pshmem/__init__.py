"""proxyshmem from Python: symmetric torch tensors and one-sided communication.

A job is a set of PEs (processes), started by ``pshmrun -n N python script.py``, by torchrun,
or from an existing ``torch.distributed`` process group::

    import torch, pshmem

    with pshmem.init() as pe:                        # collective
        x = pshmem.zeros(1024, dtype=torch.float32)  # symmetric: every PE allocates it
        src = torch.full((1024,), float(pe.my_pe))
        pshmem.put(x, src, (pe.my_pe + 1) % pe.n_pes)
        pshmem.barrier()
        assert x[0] == (pe.my_pe - 1) % pe.n_pes

Symmetric tensors (``empty``, ``zeros``, ``full``) are ordinary ``torch.Tensor`` objects whose
storage is the symmetric heap (host memory for ``device='cpu'``, GPU memory for CUDA devices),
handed over by DLPack without a copy. Free them with :func:`free` (a collective); whatever is
left is freed by :func:`finalize`.

Operations on CUDA tensors are launched on a CUDA stream (by default torch's current stream),
so they run in order with the torch work on it and return at once: a blocking ``put`` has
completed when the stream has passed it, an ``nbi`` one at the next :func:`quiet`. Operations
on host tensors are blocking calls. Host-side waits release the GIL, can be interrupted with
Ctrl-C and end with :class:`Timeout` after ``PSHMEM_OP_TIMEOUT``. Errors are subclasses of
:class:`PshmemError` whose message names the PE and the operation.
"""

from __future__ import annotations

import atexit
import operator
import os
import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

# CUDA's lazy loading (torch's default) loads a kernel at its first launch, which may wait for
# the kernels running in the context; a kernel waiting for data that this PE's proxy lands
# (in the same context) then deadlocks with any first launch until PSHMEM_OP_TIMEOUT. Eager
# loading unless the user chose otherwise; it takes effect if CUDA is not initialized yet (the
# runtime warns at GPU init when lazy loading is on and the proxy is in use).
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
# More hardware work queues than CUDA's 8, so that the proxy's stream does not share one with a
# stream whose kernel waits for the proxy; at most 64 per GPU when PEs share one under MPS (the
# same formula pshmrun uses, which sets it only for jobs with peers behind the proxy; see
# docs/ENVIRONMENT.md).
def _cuda_queues() -> str:
    local = os.environ.get("PSHMEM_LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or "1"
    try:
        gpus = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        gpus = 0
    per_gpu = -(-max(1, int(local) if local.isdigit() else 1) // gpus) if gpus else 1
    return str(min(16, max(8, 64 // max(1, per_gpu))))


os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", _cuda_queues())

from . import _pshmem as _C  # noqa: E402
from ._pshmem import (
    BootstrapError,
    CollectiveMismatch,
    ConfigError,
    CudaError,
    InternalError,
    InvalidArgument,
    NotInitialized,
    OutOfMemory,
    PeerFailed,
    PshmemError,
    Timeout,
    TransportError,
)

if TYPE_CHECKING:
    import torch


def _restore_python_signal_handlers() -> None:
    """Loading the extension loads libfabric, whose PSM providers install termination-signal
    handlers that the runtime then resets to the default action at the C level (see
    transport/libfabric-sys): that silently drops Python's own handlers (Ctrl-C's
    KeyboardInterrupt among them). Python still lists them, so install them again."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"):
        sig = getattr(signal, name, None)
        handler = signal.getsignal(sig) if sig is not None else None
        if callable(handler):
            signal.signal(sig, handler)


_restore_python_signal_handlers()

__version__: str = _C.__version__

__all__ = [
    "init", "finalize", "is_initialized", "my_pe", "n_pes", "Session",
    "Team", "TEAM_WORLD", "TEAM_SHARED", "TEAM_NODE",
    "empty", "zeros", "full", "free", "peer_tensor", "is_symmetric",
    "put", "get", "put_signal", "signal_op", "signal_fetch", "signal_wait_until",
    "atomic_fetch_add", "atomic_add", "atomic_fetch", "atomic_set", "atomic_swap",
    "atomic_compare_swap",
    "quiet", "fence", "barrier", "sync",
    "broadcast", "all_gather", "fcollect", "alltoall", "all_reduce", "reduce_scatter",
    "SIGNAL_SET", "SIGNAL_ADD", "CMP_EQ", "CMP_NE", "CMP_GT", "CMP_GE", "CMP_LT", "CMP_LE",
    "PshmemError", "NotInitialized", "InvalidArgument", "OutOfMemory", "PeerFailed", "Timeout",
    "ConfigError", "CudaError", "BootstrapError", "TransportError", "CollectiveMismatch",
    "InternalError",
]

SIGNAL_SET: int = _C.SIGNAL_SET
SIGNAL_ADD: int = _C.SIGNAL_ADD
CMP_EQ: int = _C.CMP_EQ
CMP_NE: int = _C.CMP_NE
CMP_GT: int = _C.CMP_GT
CMP_GE: int = _C.CMP_GE
CMP_LT: int = _C.CMP_LT
CMP_LE: int = _C.CMP_LE

_CMPS = {"eq": CMP_EQ, "ne": CMP_NE, "gt": CMP_GT, "ge": CMP_GE, "lt": CMP_LT, "le": CMP_LE,
         "==": CMP_EQ, "!=": CMP_NE, ">": CMP_GT, ">=": CMP_GE, "<": CMP_LT, "<=": CMP_LE}
_SIGNAL_OPS = {"set": SIGNAL_SET, "add": SIGNAL_ADD}
_REDUCE_OPS = dict(_C.REDUCE_OPS)
# torch dtype name -> the runtime's reduction type code (the names pshmem-abi gives them).
_RED_DTYPES = {
    "int32": "i32", "int64": "i64", "uint64": "u64", "uint32": "u32",
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
}
_DT_CODES = dict(_C.DTYPES)

# Allocation start -> (bytes, device) of every live symmetric tensor this PE allocated.
_allocs: dict[int, tuple[int, str]] = {}
# Tensors an nbi or on-stream operation may still read or write: kept alive until quiet.
_pending: list[Any] = []
# Symmetric scratch tensors for in-place collectives, by (device, bytes).
_scratch: dict[tuple[str, int], Any] = {}


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError(
            "pshmem's tensor API needs PyTorch: pip install torch (or pshmem[torch])"
        ) from e
    return torch


# ---- init ------------------------------------------------------------------------------------


class Session:
    """The running PE, as returned by :func:`init`; a context manager that finalizes."""

    @property
    def my_pe(self) -> int:
        return my_pe()

    @property
    def n_pes(self) -> int:
        return n_pes()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        if is_initialized():
            finalize()

    def __repr__(self) -> str:
        if not is_initialized():
            return "<pshmem.Session finalized>"
        return f"<pshmem.Session PE {my_pe()} of {n_pes()}, transport {_C.transport()}>"


def init(group: Any = None, *, device: Any = None) -> Session:
    """Starts this PE (collective) and returns the :class:`Session`.

    ``group=None``: from the launcher's environment (``pshmrun``; torchrun's ``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; the ``PSHMEM_*`` variables; or the ranks
    ``mpirun``, ``mpiexec`` or ``srun`` gave, meeting over the process's MPI if mpi4py
    initialised it, else on their own); a process started by none of them is a 1-PE job. ``group``: an initialized
    ``torch.distributed`` process group: its rank 0 makes a unique id and the group broadcasts
    it, so its ranks become PEs 0..size-1 in group order.

    ``device``: a CUDA device (``'cuda'``, ``'cuda:1'``, an index, a ``torch.device``) starts
    the GPU part now; by default it starts at the first allocation of a CUDA tensor, on that
    tensor's device.
    """
    if group is None:
        _C.init()
    else:
        import torch.distributed as dist

        if not isinstance(group, dist.ProcessGroup):
            raise TypeError(
                f"init: group must be a torch.distributed ProcessGroup (or None), not "
                f"{type(group).__name__}")
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        box = [_C.unique_id() if rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        _C.init_unique_id(box[0], rank, size)
    if device is not None:
        dev = _torch().device(device) if not isinstance(device, int) else None
        index = device if isinstance(device, int) else dev.index
        if dev is not None and dev.type != "cuda":
            raise InvalidArgument(f"init: device {device!r} is not a CUDA device")
        _gpu_on(index)
    return Session()


def finalize() -> None:
    """Ends this PE (collective): completes its operations and frees both symmetric heaps
    (symmetric tensors still referenced must not be used after it)."""
    _allocs.clear()
    _pending.clear()
    _scratch.clear()
    _C.finalize()


_crashed = False
_prior_excepthook = sys.excepthook


def _excepthook(kind, value, tb) -> None:
    # An uncaught exception ends the process: the others should see a death, not a goodbye.
    global _crashed
    _crashed = True
    _prior_excepthook(kind, value, tb)


sys.excepthook = _excepthook


def _leave_at_exit() -> None:
    # A program that ends without finalize() (e.g. after torch.distributed's
    # destroy_process_group): leave alone, so that the other PEs see a goodbye, not a death.
    # Not after an uncaught exception: that is a death, and the others say so.
    if _C.initialized() and not _crashed:
        _allocs.clear()
        _pending.clear()
        _scratch.clear()
        try:
            _C.leave()
        except Exception as e:  # noqa: BLE001 - at exit, a report is all that is left to do
            print(f"pshmem: leaving at exit: {e}", file=sys.stderr)


atexit.register(_leave_at_exit)


def is_initialized() -> bool:
    return _C.initialized()


def my_pe() -> int:
    """This PE's number in the job, 0..n_pes()-1."""
    return _C.my_pe()


def n_pes() -> int:
    """The number of PEs of the job."""
    return _C.n_pes()


def _gpu_on(index: Optional[int]) -> int:
    torch = _torch()
    if index is None:
        index = torch.cuda.current_device()
    cur = _C.gpu_device()
    if cur is not None:
        if cur != index:
            raise InvalidArgument(
                f"PE {my_pe()}: the GPU part runs on cuda:{cur}, not cuda:{index}"
            )
        return cur
    # torch makes its context current first; the runtime then uses the same (primary) context.
    torch.cuda.set_device(index)
    torch.cuda.init()
    return _C.gpu_init(index)


# ---- teams -----------------------------------------------------------------------------------


class Team:
    """A team of PEs (a handle of the runtime's team table)."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = handle

    def my_pe(self) -> int:
        """This PE's index in the team (-1 when not a member); InvalidArgument when there is
        no such team."""
        v = _C.team_my_pe(self.handle)
        if v < 0:
            self.n_pes()
        return v

    def n_pes(self) -> int:
        """The team's size; InvalidArgument when there is no such team (never created, or
        destroyed)."""
        v = _C.team_n_pes(self.handle)
        if v < 0:
            raise InvalidArgument(
                f"PE {my_pe()}: team {self.handle}: no such team (not created, or destroyed)")
        return v

    def translate_pe(self, pe: int, dest: "Team") -> int:
        """The number in ``dest`` of this team's member ``pe`` (-1 when it is not a member of
        ``dest``); InvalidArgument for a team that does not exist or a ``pe`` outside this
        team."""
        if not isinstance(dest, Team):
            raise TypeError(f"translate_pe: dest must be a pshmem.Team, not {type(dest).__name__}")
        size, pe = self.n_pes(), operator.index(pe)
        dest.n_pes()
        if not 0 <= pe < size:
            raise InvalidArgument(
                f"PE {my_pe()}: translate_pe: PE {pe} is not in team {self.handle} of {size} PEs")
        return _C.team_translate_pe(self.handle, pe, dest.handle)

    def split_strided(self, start: int, stride: int, size: int) -> Optional["Team"]:
        """A new team of ``size`` members from ``start``, ``stride`` apart (collective over
        this team); None on the PEs outside it."""
        h = _C.team_split_strided(self.handle, start, stride, size)
        return None if h == _C.TEAM_INVALID else Team(h)

    def split_2d(self, xrange: int) -> tuple[Optional["Team"], Optional["Team"]]:
        """The x- and y-axis teams of a 2-D grid with rows of ``xrange`` (collective)."""
        x, y = _C.team_split_2d(self.handle, xrange)
        return (None if x == _C.TEAM_INVALID else Team(x),
                None if y == _C.TEAM_INVALID else Team(y))

    def destroy(self) -> None:
        _C.team_destroy(self.handle)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Team) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)

    def __repr__(self) -> str:
        return f"Team({self.handle})"


TEAM_WORLD = Team(_C.TEAM_WORLD)
TEAM_SHARED = Team(_C.TEAM_SHARED)
TEAM_NODE = Team(_C.TEAM_NODE)


def _team(team: Optional[Team]) -> int:
    if team is None:
        return _C.TEAM_WORLD
    if not isinstance(team, Team):
        raise TypeError(f"team must be a pshmem.Team or None, not {type(team).__name__}")
    return team.handle


def _tensor(op: str, what: str, t: Any) -> None:
    """Refuses what is not a tensor (before any attribute of it is touched)."""
    if not isinstance(t, _torch().Tensor):
        raise TypeError(f"{op}: {what} must be a torch.Tensor, not {type(t).__name__}")


def _pe(op: str, pe: Any) -> int:
    """A PE number: an integer, not negative (the runtime names one past the job)."""
    pe = operator.index(pe)
    if pe < 0:
        raise InvalidArgument(f"PE {my_pe()}: {op}: PE {pe} is not a PE (0 to n_pes() - 1)")
    return pe


def _word(op: str, what: str, v: Any) -> int:
    """A 64-bit word's value."""
    v = operator.index(v)
    if not 0 <= v < 1 << 64:
        raise InvalidArgument(f"PE {my_pe()}: {op}: {what} {v} does not fit a 64-bit word "
                              "(0 to 2**64 - 1)")
    return v


# ---- symmetric tensors -------------------------------------------------------------------------


def _device(device: Any):
    torch = _torch()
    if device is None:
        get = getattr(torch, "get_default_device", None)
        device = get() if get else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type not in ("cpu", "cuda"):
        raise InvalidArgument(f"device {dev} is neither cpu nor cuda")
    return dev


def _shape(shape: Union[int, Sequence[int]]) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(operator.index(s) for s in shape)
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"PE {my_pe()}: allocation: shape {dims} has a negative size")
    return dims


def _bytes_view(addr: int, extent: int, pe: int):
    """A uint8 tensor of ``extent`` bytes at symmetric address ``addr``, on ``pe``'s copy."""
    torch = _torch()
    cap = _C.capsule(addr, extent, pe, [extent], [1], 1, 8)  # kDLUInt, 8 bits
    return None if cap is None else torch.from_dlpack(cap)


def _alloc(shape, dtype, device, zero: bool):
    torch = _torch()
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype {dtype!r} is not a torch.dtype")
    dev = _device(device)
    shape = _shape(shape)
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * dtype.itemsize
    gpu = dev.type == "cuda"
    if gpu:
        _gpu_on(dev.index)
    addr = _C.malloc(nbytes, gpu, zero)
    raw = _bytes_view(addr, max(nbytes, 1), my_pe())
    assert raw is not None
    _allocs[addr] = (nbytes, str(dev))
    return raw[:nbytes].view(dtype).view(shape)


def empty(shape: Union[int, Sequence[int]], dtype: "Optional[torch.dtype]" = None,
          device: Any = None) -> "torch.Tensor":
    """A symmetric tensor (uninitialized) on ``device`` of ``dtype`` (default: torch's default
    device and dtype). Collective: every PE allocates the same shape and dtype in the same order."""
    return _alloc(shape, dtype, device, zero=False)


def zeros(shape: Union[int, Sequence[int]], dtype: "Optional[torch.dtype]" = None,
          device: Any = None) -> "torch.Tensor":
    """:func:`empty`, filled with zeros before the allocation completes on any PE (so a
    peer may write into it as soon as its own call returned)."""
    return _alloc(shape, dtype, device, zero=True)


def full(shape: Union[int, Sequence[int]], fill_value: Any,
         dtype: "Optional[torch.dtype]" = None, device: Any = None) -> "torch.Tensor":
    """:func:`empty`, then filled with ``fill_value`` by this PE (on the current stream for
    CUDA): a peer may read or write it only after a barrier."""
    t = _alloc(shape, dtype, device, zero=False)
    t.fill_(fill_value)
    return t


def free(t: "torch.Tensor") -> None:
    """Frees a symmetric tensor (collective). ``t`` must be the tensor :func:`empty` returned
    (or a view starting where it starts); it and its views must not be used afterwards."""
    _tensor("free", "t", t)
    # An empty tensor has no data pointer of its own: its storage starts at the allocation.
    addr = t.data_ptr() if t.numel() else t.untyped_storage().data_ptr()
    if addr not in _allocs:
        raise InvalidArgument(
            f"PE {my_pe()}: free: {addr:#x} is not the start of a symmetric tensor"
        )
    if t.is_cuda:
        # Work queued on the tensor must finish before a peer's next allocation may reuse it.
        _torch().cuda.current_stream(t.device).synchronize()
    _C.free(addr)
    del _allocs[addr]
    for k, v in list(_scratch.items()):
        if v.data_ptr() == addr:
            del _scratch[k]


def _extent(t) -> int:
    """Bytes from ``t``'s first element to one past its last (non-negative strides)."""
    if t.numel() == 0:
        return 0
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def is_symmetric(t: "torch.Tensor") -> bool:
    """Whether ``t`` lies in a symmetric heap of this PE."""
    _tensor("is_symmetric", "t", t)
    return _C.heap_of(t.data_ptr(), _extent(t)) is not None


def peer_tensor(t: "torch.Tensor", pe: int) -> "Optional[torch.Tensor]":
    """A view of ``pe``'s copy of the symmetric tensor ``t``, loaded and stored directly (over
    NVLink for CUDA tensors, shared memory for host ones); None when ``pe`` is reached only
    through the network proxy. ``t`` itself for this PE."""
    _tensor("peer_tensor", "t", t)
    pe = _pe("peer_tensor", pe)
    if pe == my_pe():
        return t
    torch = _torch()
    extent = _extent(t)
    raw = _bytes_view(t.data_ptr(), max(extent, 1), pe)
    if raw is None:
        return None
    flat = raw[:extent].view(t.dtype)
    return torch.as_strided(flat, t.shape, t.stride())


# ---- operations --------------------------------------------------------------------------------


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _dense(op: str, t, what: str) -> None:
    if not t.is_contiguous():
        raise InvalidArgument(f"PE {my_pe()}: {op}: {what} is not contiguous (use .contiguous())")


def _stream(op: str, t, stream: Any) -> Optional[int]:
    """The raw stream an operation on ``t`` runs on: None for host tensors."""
    if not t.is_cuda:
        if stream is not None:
            raise InvalidArgument(f"PE {my_pe()}: {op}: a stream is for CUDA tensors only")
        return None
    torch = _torch()
    if stream is None:
        stream = torch.cuda.current_stream(t.device)
    return int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream)


def _pair(op: str, sym, local) -> int:
    _tensor(op, "the symmetric tensor", sym)
    _tensor(op, "the local tensor", local)
    _dense(op, sym, "the symmetric tensor")
    _dense(op, local, "the local tensor")
    if sym.device != local.device:
        raise InvalidArgument(
            f"PE {my_pe()}: {op}: the tensors are on {sym.device} and {local.device}; "
            "copy the local one to the symmetric one's device first"
        )
    n = _nbytes(sym)
    if _nbytes(local) != n:
        raise InvalidArgument(
            f"PE {my_pe()}: {op}: {n} bytes against {_nbytes(local)} bytes"
        )
    return n


def _hold(local, nbi: bool, stream: Any) -> None:
    """Keeps ``local``'s memory from reuse while an operation may still touch it: until the
    next quiet for nbi operations (the proxy may read it after the kernel ended); for a CUDA
    operation on another stream than the current one, until that stream has run it (torch's
    caching allocator otherwise reuses memory in the current stream's order only)."""
    if nbi:
        _pending.append(local)
    elif stream is not None and local.is_cuda and not isinstance(stream, int):
        torch = _torch()
        if stream != torch.cuda.current_stream(local.device):
            try:
                local.record_stream(stream)
            except RuntimeError:
                pass  # not from the caching allocator (a symmetric tensor): nothing to hold


def put(dst: "torch.Tensor", src: "torch.Tensor", pe: int, *, stream: Any = None,
        nbi: bool = False) -> None:
    """Copies ``src`` (local, same device and size) into ``pe``'s copy of the symmetric
    ``dst``. Host tensors: blocking (``nbi``: complete at quiet). CUDA tensors: on ``stream``
    (default: the current stream), complete when the stream has passed it (``nbi``: at the next
    quiet on the stream)."""
    n = _pair("put", dst, src)
    st = _stream("put", dst, stream)
    _C.put(dst.data_ptr(), src.data_ptr(), n, _pe("put", pe), nbi, st)
    _hold(src, nbi, stream)


def get(dst: "torch.Tensor", src: "torch.Tensor", pe: int, *, stream: Any = None,
        nbi: bool = False) -> None:
    """Copies ``pe``'s copy of the symmetric ``src`` into ``dst`` (local, same device and
    size). Completion as for :func:`put`."""
    n = _pair("get", src, dst)
    st = _stream("get", src, stream)
    _C.get(dst.data_ptr(), src.data_ptr(), n, _pe("get", pe), nbi, st)
    _hold(dst, nbi, stream)


def _signal_word(op: str, sig) -> int:
    _tensor(op, "the signal", sig)
    if sig.element_size() * sig.numel() < 8 or sig.element_size() != 8:
        raise InvalidArgument(
            f"PE {my_pe()}: {op}: a signal is an 8-byte element (torch.int64 or torch.uint64)"
        )
    return sig.data_ptr()


def _code(table: dict, op: str, what: str, v: Any) -> int:
    if isinstance(v, int):
        return v
    try:
        return table[str(v).lower()]
    except KeyError:
        raise InvalidArgument(f"PE {my_pe()}: {op}: no {what} {v!r} ({', '.join(table)})")


def put_signal(dst: "torch.Tensor", src: "torch.Tensor", signal: "torch.Tensor", value: int,
               pe: int, *, op: Union[str, int] = "set", stream: Any = None,
               nbi: bool = False) -> None:
    """:func:`put`, then ``pe``'s signal word (element 0 of the symmetric 8-byte tensor
    ``signal``) set to (``op='set'``) or increased by (``'add'``) ``value`` — visible only after
    the data."""
    n = _pair("put_signal", dst, src)
    st = _stream("put_signal", dst, stream)
    code = _code(_SIGNAL_OPS, "put_signal", "signal operation", op)
    _C.put_signal(dst.data_ptr(), src.data_ptr(), n, _signal_word("put_signal", signal),
                  _word("put_signal", "value", value), code, _pe("put_signal", pe), nbi, st)
    _hold(src, nbi, stream)


def signal_op(signal: "torch.Tensor", value: int, pe: int, *, op: Union[str, int] = "set",
              stream: Any = None) -> None:
    """Sets (``op='set'``) or adds to (``'add'``) ``pe``'s signal word. Complete at quiet."""
    code = _code(_SIGNAL_OPS, "signal_op", "signal operation", op)
    _C.signal_op(_signal_word("signal_op", signal), _word("signal_op", "value", value), code,
                 _pe("signal_op", pe),
                 _stream("signal_op", signal, stream))


def signal_fetch(signal: "torch.Tensor") -> int:
    """This PE's signal word now."""
    return _C.signal_fetch(_signal_word("signal_fetch", signal))


def signal_wait_until(signal: "torch.Tensor", cmp: Union[str, int], value: int, *,
                      stream: Any = None, host: bool = False,
                      reset: Optional[int] = None) -> Optional[int]:
    """Waits until this PE's signal word satisfies ``cmp value`` (``'eq'``, ``'ne'``,
    ``'gt'``, ``'ge'``, ``'lt'``, ``'le'`` or ``>=`` etc.); then, with ``reset``, sets the word
    to that value (a consumed signal: a CUDA graph can replay the same wait).

    CUDA signal: the stream (default: current) waits and the call returns None at once, unless
    ``host=True``: then the host waits. Host signal: the host waits. A host wait releases the
    GIL, returns the word it saw, ends on Ctrl-C (KeyboardInterrupt) or after
    ``PSHMEM_OP_TIMEOUT`` (:class:`Timeout`)."""
    code = _code(_CMPS, "signal_wait_until", "comparison", cmp)
    word = _signal_word("signal_wait_until", signal)
    st = None if host else _stream("signal_wait_until", signal, stream)
    value = _word("signal_wait_until", "value", value)
    reset = None if reset is None else _word("signal_wait_until", "reset", reset)
    return _C.signal_wait_until(word, code, value, st, reset)


def _atomic(op: int, dest, operand: int, compare: int, pe: int) -> int:
    # One 4- or 8-byte integer: a float would be added to as its bit pattern, a second element
    # ignored, and a value that does not fit truncated (issue 41) — each refused instead.
    torch = _torch()
    _tensor("atomic", "the target", dest)
    pe = _pe("atomic", pe)
    operand, compare = operator.index(operand), operator.index(compare)
    if dest.dtype.is_floating_point or dest.dtype.is_complex or dest.dtype == torch.bool:
        raise InvalidArgument(
            f"PE {my_pe()}: atomic: the target is {dest.dtype}; atomics act on 4- or 8-byte "
            "integers")
    if dest.element_size() not in (4, 8):
        raise InvalidArgument(f"PE {my_pe()}: atomic: a 4- or 8-byte element is needed")
    if dest.numel() != 1:
        raise InvalidArgument(
            f"PE {my_pe()}: atomic: the target has {dest.numel()} elements; pass the one "
            "element (a view such as t[i:i+1])")
    bits = 8 * dest.element_size()
    for name, v in (("value", operand), ("compare", compare)):
        if not -(1 << (bits - 1)) <= v < (1 << bits):
            raise InvalidArgument(
                f"PE {my_pe()}: atomic: {name} {v} does not fit a {bits}-bit element")
    return _C.atomic(op, dest.data_ptr(), dest.element_size() == 8, operand & (2**64 - 1),
                     compare & (2**64 - 1), pe)


def atomic_fetch_add(dest: "torch.Tensor", value: int, pe: int) -> int:
    """Adds ``value`` to element 0 of ``dest`` on ``pe``; returns the old value (blocking)."""
    return _atomic(_C.AMO_FETCH_ADD, dest, value, 0, pe)


def atomic_add(dest: "torch.Tensor", value: int, pe: int) -> None:
    _atomic(_C.AMO_ADD, dest, value, 0, pe)


def atomic_fetch(dest: "torch.Tensor", pe: int) -> int:
    return _atomic(_C.AMO_FETCH, dest, 0, 0, pe)


def atomic_set(dest: "torch.Tensor", value: int, pe: int) -> None:
    _atomic(_C.AMO_SET, dest, value, 0, pe)


def atomic_swap(dest: "torch.Tensor", value: int, pe: int) -> int:
    return _atomic(_C.AMO_SWAP, dest, value, 0, pe)


def atomic_compare_swap(dest: "torch.Tensor", compare: int, value: int, pe: int) -> int:
    """Stores ``value`` where element 0 on ``pe`` equals ``compare``; returns the old value."""
    return _atomic(_C.AMO_COMPARE_SWAP, dest, value, compare, pe)


def _cuda_stream_or_none(stream: Any) -> Optional[int]:
    if _C.gpu_device() is None:
        if stream is not None:
            raise InvalidArgument(f"PE {my_pe()}: a stream, but the GPU part is not started")
        return None
    torch = _torch()
    if stream is None:
        stream = torch.cuda.current_stream(_C.gpu_device())
    return int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream)


def quiet(*, stream: Any = None) -> None:
    """Completes this PE's operations: host ones now; GPU ones on ``stream`` (default: the
    current stream) once the GPU part is up. Releases what nbi operations held."""
    _C.quiet(_cuda_stream_or_none(stream))
    _pending.clear()


def fence(*, stream: Any = None) -> None:
    """Orders this PE's operations to each PE: earlier ones land before later ones."""
    _C.fence(_cuda_stream_or_none(stream))


def barrier(team: Optional[Team] = None, *, stream: Any = None) -> None:
    """Completes this PE's operations, then waits until every member arrived. Once the GPU
    part is up it is ordered on ``stream`` (default: the current stream) and returns at once;
    otherwise the host waits."""
    _C.team_sync(_team(team), True, _cuda_stream_or_none(stream))
    _pending.clear()


def sync(team: Optional[Team] = None, *, stream: Any = None) -> None:
    """Waits until every member arrived (completes nothing); placement as :func:`barrier`."""
    _C.team_sync(_team(team), False, _cuda_stream_or_none(stream))


# ---- collectives -------------------------------------------------------------------------------


def _coll_stream(op: str, dst, src, stream: Any) -> Optional[int]:
    _tensor(op, "dst", dst)
    _tensor(op, "src", src)
    _dense(op, dst, "dst")
    _dense(op, src, "src")
    if dst.device != src.device:
        raise InvalidArgument(f"PE {my_pe()}: {op}: dst on {dst.device}, src on {src.device}")
    if dst.dtype != src.dtype:
        raise InvalidArgument(f"PE {my_pe()}: {op}: dst is {dst.dtype}, src is {src.dtype}")
    return _stream(op, dst, stream)


def _members(team: Optional[Team]) -> int:
    n = _C.team_n_pes(_team(team))
    if n < 1:
        raise InvalidArgument(f"PE {my_pe()}: no team {_team(team)}")
    return n


def _overlap(a, b) -> bool:
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + _nbytes(b) and b0 < a0 + _nbytes(a)


def _scratch_like(t):
    """A symmetric tensor of ``t``'s bytes on its device, cached (allocated collectively the
    first time a size is used in place, as every PE does at the same call)."""
    key = (str(t.device), _nbytes(t))
    s = _scratch.get(key)
    if s is None:
        s = empty(_nbytes(t), dtype=_torch().uint8, device=t.device)
        _scratch[key] = s
    return s[: _nbytes(t)].view(t.dtype).view(t.shape)


def broadcast(dst: "torch.Tensor", src: "torch.Tensor", root: int = 0, *,
              team: Optional[Team] = None, stream: Any = None) -> None:
    """The root member's ``src`` into every member's ``dst`` (same size)."""
    st = _coll_stream("broadcast", dst, src, stream)
    if _nbytes(dst) != _nbytes(src):
        raise InvalidArgument(f"PE {my_pe()}: broadcast: dst and src differ in size")
    _C.collective("broadcast", _team(team), dst.data_ptr(), src.data_ptr(), _nbytes(src),
                  root, 0, 0, st)


def all_gather(dst: "torch.Tensor", src: "torch.Tensor", *, team: Optional[Team] = None,
               stream: Any = None) -> None:
    """Every member's ``src`` into every member's ``dst`` at the member's index (``dst`` holds
    team-size times ``src``), as ``torch.distributed.all_gather_into_tensor``."""
    st = _coll_stream("all_gather", dst, src, stream)
    n = _nbytes(src)
    if _nbytes(dst) != n * _members(team):
        raise InvalidArgument(
            f"PE {my_pe()}: all_gather: dst has {_nbytes(dst)} bytes, needs {n} x "
            f"{_members(team)}"
        )
    _C.collective("fcollect", _team(team), dst.data_ptr(), src.data_ptr(), n, 0, 0, 0, st)


fcollect = all_gather


def alltoall(dst: "torch.Tensor", src: "torch.Tensor", *, team: Optional[Team] = None,
             stream: Any = None) -> None:
    """Block j of every member's ``src`` to member j, at the sender's index (as
    ``torch.distributed.all_to_all_single`` with equal splits)."""
    st = _coll_stream("alltoall", dst, src, stream)
    m = _members(team)
    if _nbytes(dst) != _nbytes(src) or _nbytes(src) % m:
        raise InvalidArgument(
            f"PE {my_pe()}: alltoall: dst and src must be equal and divide into {m} blocks"
        )
    _C.collective("alltoall", _team(team), dst.data_ptr(), src.data_ptr(), _nbytes(src) // m,
                  0, 0, 0, st)


def _red(op_name: str, t, op: Any) -> tuple[int, int]:
    name = str(t.dtype).replace("torch.", "")
    if name not in _RED_DTYPES:
        raise InvalidArgument(
            f"PE {my_pe()}: {op_name}: no reductions on {t.dtype} "
            f"(supported: {', '.join(_RED_DTYPES)})"
        )
    o = op if isinstance(op, int) else str(getattr(op, "name", op)).lower()
    o = {"product": "prod", "and": "band", "or": "bor", "xor": "bxor"}.get(o, o)
    return _DT_CODES[_RED_DTYPES[name]], _code(_REDUCE_OPS, op_name, "reduction", o)


def all_reduce(dst: "torch.Tensor", src: "Optional[torch.Tensor]" = None, op: Any = "sum", *,
               team: Optional[Team] = None, stream: Any = None) -> None:
    """Element-wise reduction (``'sum'``, ``'prod'``, ``'min'``, ``'max'``, ``'band'``,
    ``'bor'``, ``'bxor'`` or a ``torch.distributed.ReduceOp``) of every member's ``src`` into
    every member's ``dst``. ``src=None`` (or overlapping ``dst``) reduces ``dst`` in place,
    through a cached symmetric scratch tensor."""
    _tensor("all_reduce", "dst", dst)
    if src is not None:
        _tensor("all_reduce", "src", src)
    if src is None or _overlap(dst, src):
        scratch = _scratch_like(dst)
        scratch.copy_(dst if src is None else src)
        src = scratch
    st = _coll_stream("all_reduce", dst, src, stream)
    if dst.numel() != src.numel():
        raise InvalidArgument(f"PE {my_pe()}: all_reduce: dst and src differ in size")
    dt, red = _red("all_reduce", dst, op)
    _C.collective("reduce", _team(team), dst.data_ptr(), src.data_ptr(), dst.numel(), 0, dt,
                  red, st)


def reduce_scatter(dst: "torch.Tensor", src: "torch.Tensor", op: Any = "sum", *,
                   team: Optional[Team] = None, stream: Any = None) -> None:
    """Member i gets the reduction of block i (``dst``'s size) of every member's ``src``, as
    ``torch.distributed.reduce_scatter_tensor``."""
    st = _coll_stream("reduce_scatter", dst, src, stream)
    if src.numel() != dst.numel() * _members(team):
        raise InvalidArgument(
            f"PE {my_pe()}: reduce_scatter: src needs {_members(team)} x dst's elements"
        )
    dt, red = _red("reduce_scatter", dst, op)
    _C.collective("reducescatter", _team(team), dst.data_ptr(), src.data_ptr(), dst.numel(),
                  0, dt, red, st)
