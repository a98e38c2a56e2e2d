"""MoE expert parallelism with DeepEP V1's ``Buffer`` interface: the low-latency mode and the
normal (high-throughput) mode.

A DeepEP user changes an import (``import pshmem.deep_ep as deep_ep``, or, unchanged, after
``python -m pshmem.deep_ep install``: see ``pshmem.deep_ep``)::

    from pshmem.ep import Buffer, EventOverlap      # was: from deep_ep import Buffer, EventOverlap

    buf = Buffer(group, num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(
        num_max_dispatch_tokens_per_rank, hidden, group.size(), num_experts),
        low_latency_mode=True, num_qps_per_rank=num_experts // group.size())
    recv_x, recv_count, handle, event, hook = buf.low_latency_dispatch(
        x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts, use_fp8=True)
    ...
    combined, event, hook = buf.low_latency_combine(y, topk_idx, topk_weights, handle)

The kernels (``pshmem-ep``) run on the current CUDA stream, one kernel per operation: a
low-latency dispatch or combine is one launch of its send and receive phases, or two with the
receive hook (the second runs the receive phase), as DeepEP's (also two when the grids are too
large to be resident at once: ``set_num_sms`` past two blocks an SM); profilers name them
``pshmem_ep::ll::dispatch`` and ``::combine``. Same-host peers are written over NVLink (CUDA
IPC); other peers through the proxy, where every count and flag is a *counted signal*: applied
only after all the data it announces has landed, on any fabric (no ordered delivery assumed).
``num_qps_per_rank`` sets how many GPU command rings the descriptors spread over (per-token
messages by destination rank; batched ones take ring 0, so that one proxy thread posts the few
large puts in turn), ``PSHMEM_GPU_PROXY_THREADS`` how many proxy threads drain them.

Differences from DeepEP, all documented: rows of one local expert are packed by source rank
(deterministic, whatever order the sources arrive in), not in arrival order; the receive
kernels clear the signal words they consumed (the buffer is clean for its next use with no
extra launch); ``dispatch_wait_recv_cost_stats`` counts nanoseconds, not cycles; errors are
``pshmem.InvalidArgument`` (a ``RuntimeError``, as DeepEP's C++ checks raise) where DeepEP
asserts; ``group=None`` means the
running pshmem job, and ``comm`` (an MPI communicator) must name the same ranks as the job
(launched by the MPI launcher, which pshmem joins); ``allow_mnnvl`` and ``use_fabric`` change
nothing (same-host peers are mapped through CUDA IPC; multi-node NVLink is not provided);
``destroy`` works without ``explicitly_destroy``; the low-latency dispatch gives UE8M0
scales (``use_ue8m0``). Not provided, raising ``NotImplementedError``: LogFMT, UE8M0 scales
as the normal mode's input (int32 scales) and rank masking (``enable_shrink``)
(``NotImplementedError`` is a ``RuntimeError`` too).
``per_token=False`` (the default) sends one message (and one flag) per destination rank to
peers reached through the proxy; ``per_token=True`` one per token.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import pshmem
from pshmem import _C, InvalidArgument

_FP8, _ROUND_SCALE, _PER_TOKEN, _ZERO_COPY, _UE8M0 = 0x1, 0x2, 0x4, 0x8, 0x10


def _torch():
    import torch

    return torch


class EventOverlap:
    """A CUDA event recorded after a call (``async_finish=True``), or nothing."""

    def __init__(self, event: Any = None, extra_tensors: Optional[tuple] = None) -> None:
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """Makes the current stream wait for the event."""
        if self.event is not None:
            _torch().cuda.current_stream().wait_event(self.event)

    def __enter__(self) -> "EventOverlap":
        return self

    def __exit__(self, *exc: object) -> None:
        self.current_stream_wait()


def _event(async_finish: bool, tensors: tuple) -> EventOverlap:
    if not async_finish:
        return EventOverlap()
    ev = _torch().cuda.Event()
    ev.record(_torch().cuda.current_stream())
    return EventOverlap(ev, tensors)


class Buffer:
    """The communication buffer of an expert-parallel group (DeepEP's ``deep_ep.Buffer``).

    ``group``: a ``torch.distributed`` process group whose ranks become the PEs (pshmem is
    initialized from it unless it already is), or ``None`` for the running pshmem job."""

    num_sms: int = 24

    def __init__(self, group: Any = None, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 use_fabric: bool = False, explicitly_destroy: bool = False,
                 enable_shrink: bool = False, comm: Any = None,
                 per_token: bool = False) -> None:
        torch = _torch()
        if enable_shrink:
            raise NotImplementedError("pshmem.ep: rank masking (enable_shrink) is not provided")
        if comm is not None and group is not None:
            raise InvalidArgument("Buffer: give a torch.distributed group or an MPI "
                                  "communicator (comm), not both")
        # allow_mnnvl, use_fabric: DeepEP's choices of how NVLink peers across nodes map
        # memory. pshmem maps same-host peers through CUDA IPC whatever their values, and
        # reaches other hosts through the proxy (multi-node NVLink is not provided).
        self.allow_mnnvl, self.use_fabric = allow_mnnvl, use_fabric
        self.group = group
        self.low_latency_mode = low_latency_mode
        self.num_nvl_bytes, self.num_rdma_bytes = int(num_nvl_bytes), int(num_rdma_bytes)
        self.explicitly_destroy = explicitly_destroy
        self.per_token = per_token
        if not pshmem.is_initialized():
            # Like DeepEP's settings of NVSHMEM: the heap must hold the buffer; one GPU ring
            # per queue pair asked for (capped); no NVLink for LL if refused.
            need = self.num_rdma_bytes + self.num_nvl_bytes + (256 << 20)
            cur = os.environ.get("PSHMEM_GPU_SYMMETRIC_SIZE")
            if cur is None or (cur.isdigit() and int(cur) < need):
                os.environ["PSHMEM_GPU_SYMMETRIC_SIZE"] = str(need)
            os.environ.setdefault("PSHMEM_GPU_RINGS", str(max(1, min(int(num_qps_per_rank), 64))))
            if low_latency_mode and not allow_nvlink_for_low_latency_mode:
                os.environ["PSHMEM_DISABLE_P2P"] = "1"
            # group=None: the pshmem job itself (pshmrun, torchrun's variables).
            pshmem.init(group=group, device=torch.cuda.current_device())
        elif low_latency_mode and not allow_nvlink_for_low_latency_mode \
                and os.environ.get("PSHMEM_DISABLE_P2P") != "1":
            raise InvalidArgument(
                "Buffer: allow_nvlink_for_low_latency_mode=False needs PSHMEM_DISABLE_P2P=1 "
                "before pshmem is initialized")
        self.rank, self.group_size = pshmem.my_pe(), pshmem.n_pes()
        if comm is not None and (comm.Get_rank(), comm.Get_size()) != (self.rank,
                                                                       self.group_size):
            raise InvalidArgument(
                f"Buffer: the communicator's rank {comm.Get_rank()} of {comm.Get_size()} is "
                f"not the pshmem job's PE {self.rank} of {self.group_size} (launch the program "
                f"with the MPI launcher, which pshmem joins)")
        # PEs sharing this GPU (CUDA MPS): the blocks that wait for peers must leave SMs to
        # the peers' send kernels, so every grid shrinks by that factor.
        local = int(os.environ.get("PSHMEM_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
        self._sharing = max(1, -(-local // max(1, torch.cuda.device_count())))
        # Blocks of one launch resident at once on this PE's share of the GPU: two per SM
        # (the kernels' launch bounds).
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        self._resident = max(1, 2 * sms // self._sharing)
        if group is not None and group.size() != self.group_size:
            raise InvalidArgument(
                f"Buffer: the group has {group.size()} ranks, the pshmem job "
                f"{self.group_size} PEs")
        # LL: the RDMA buffer. Normal mode: the NVL buffer, plus the RDMA one unless the LL
        # mode owns it (one symmetric buffer holds both, see _ht_layout).
        self._buf = pshmem.zeros(max(self.num_rdma_bytes, 1), dtype=torch.uint8, device="cuda") \
            if low_latency_mode else None
        ht_bytes = self.num_nvl_bytes + (0 if low_latency_mode else self.num_rdma_bytes)
        self._ht = pshmem.zeros(ht_bytes, dtype=torch.uint8, device="cuda") if ht_bytes else None
        self._destroyed = False
        self._idx = 0
        self._layouts: dict = {}
        self._nodes: Optional[int] = None  # ranks per node, found at the first normal-mode call
        # The kernels' module is loaded here, while nothing runs: a load waits for running
        # kernels and holds the driver meanwhile, so a first dispatch queued behind a barrier
        # waiting on the proxy would stall every PE until PSHMEM_OP_TIMEOUT.
        _C.ep_load()

    # ---- sizes and configuration -----------------------------------------------------------

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        """Sizes the LL kernels' grids (DeepEP: SMs of the normal kernels): the send phases
        use up to 6x this many blocks, the receive phases up to 2x. Divided by the number of
        PEs sharing the GPU (under CUDA MPS), since waiting blocks hold their SMs. Even, as
        DeepEP requires (the normal mode runs two SMs per channel)."""
        if new_num_sms <= 0 or new_num_sms % 2:
            raise ValueError(f"set_num_sms: {new_num_sms} SMs: the count must be positive "
                             "and even")
        Buffer.num_sms = int(new_num_sms)

    @staticmethod
    def is_sm90_compiled() -> bool:
        """True: the kernels are built for sm_90 (Hopper SASS, with compute_90 PTX for later
        GPUs), FP8 included (``kernels/build-support``)."""
        return True

    @staticmethod
    def capture() -> EventOverlap:
        """An event recorded on the current stream now, e.g. the ``previous_event`` of a
        later call."""
        return _event(True, ())

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int,
                                       num_ranks: int, num_experts: int) -> int:
        """Bytes of the symmetric buffer the LL mode needs (both buffers)."""
        return _C.ep_ll_layout(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
                               num_experts)["size_hint"]

    def _layout(self, tmax: int, hidden: int, num_experts: int) -> dict:
        key = (tmax, hidden, num_experts)
        if key not in self._layouts:
            lay = _C.ep_ll_layout(tmax, hidden, self.group_size, num_experts)
            if lay["size_hint"] > self.num_rdma_bytes:
                raise InvalidArgument(
                    f"Buffer: the LL mode for {tmax} tokens, hidden {hidden}, {num_experts} "
                    f"experts needs num_rdma_bytes >= {lay['size_hint']} "
                    f"(get_low_latency_rdma_size_hint), the buffer has {self.num_rdma_bytes}")
            self._layouts[key] = lay
        return self._layouts[key]

    def _areas(self, lay: dict, idx: int) -> dict:
        base = self._buf.data_ptr() + idx * lay["buffer_bytes"]
        return {"sig": base, "send": base + lay["send_offset"],
                "recv": base + lay["recv_offset"]}

    def _check_ll(self, op: str) -> None:
        if not self.low_latency_mode:
            raise InvalidArgument(f"Buffer.{op}: the buffer was not made with low_latency_mode=True")
        if self._destroyed:
            raise InvalidArgument(f"Buffer.{op}: the buffer was destroyed")

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int,
                                 num_experts: int) -> None:
        """Clears both LL buffers' signal words (collective: barrier, clear, barrier), e.g.
        after an aborted step."""
        self._check_ll("clean_low_latency_buffer")
        lay = self._layout(num_max_dispatch_tokens_per_rank, hidden, num_experts)
        stream = _torch().cuda.current_stream()
        pshmem.barrier(stream=stream)
        for idx in (0, 1):
            _C.ep_ll_clean(self._areas(lay, idx)["sig"], lay["sig_words"], stream.cuda_stream)
        pshmem.barrier(stream=stream)

    def check(self) -> None:
        """Raises the first error the kernels met (a wait that outlasted ``PSHMEM_OP_TIMEOUT``,
        a failed peer, a bad address); after one, results are not to be trusted. The kernels
        record errors instead of trapping, so call this (or ``destroy``) to learn of them."""
        _torch().cuda.synchronize()
        _C.ep_check()

    def destroy(self) -> None:
        """Frees the buffer (collective), after raising any error the kernels met."""
        if not self._destroyed:
            self.check()
            pshmem.barrier()
            for b in (self._buf, self._ht):
                if b is not None:
                    pshmem.free(b)
            self._buf = self._ht = None
            self._destroyed = True

    # ---- low-latency dispatch and combine --------------------------------------------------

    def _sms(self) -> int:
        return max(2, self.num_sms // self._sharing)

    @staticmethod
    def _ll_grids(kernel: str, T: int, H: int, E: int, N: int, sms: int) -> "tuple":
        """The LL kernel's grids for ``sms`` (this PE's share of ``num_sms``): ``(send,
        recv, recv_with_send)`` as ``_run`` takes them. Dispatch: send blocks cover every
        expert, split in parts when there is room; receive blocks are (local expert, part).
        Combine: receive blocks in a launch of their own are a warp per 256 channels of a
        token (16 a block), up to 2x ``sms``; beside the send phase a block per 16 tokens, as
        many waiting blocks in that launch made it several times slower (H200, EP 2, 48
        blocks: 400-480 us against 87-90 with 8; benches/results/efa-path)."""
        if kernel == "dispatch":
            El, budget = E // N, 6 * sms
            return (min(E, budget), max(1, budget // E)), (El, max(1, 2 * sms // El)), None
        units = T * (H // 256)
        return ((min(E, 6 * sms), 1), (max(1, min((units + 15) // 16, 2 * sms)), 1),
                (max(1, min((T + 15) // 16, sms)), 1))

    def _launch(self, kernel: str, send: Optional[tuple], recv: Optional[tuple],
                args: dict) -> None:
        _C.ep_ll_launch(kernel, send, recv, _torch().cuda.current_stream().cuda_stream, args)

    def _run(self, kernel: str, send: tuple, recv: tuple, args: dict, keep: tuple,
             deferred: bool, recv_with_send: Optional[tuple] = None) -> Callable[[], None]:
        """Runs ``kernel``'s send phase on the ``send`` grid and its receive phase on the
        ``recv`` grid (``recv_with_send`` when both phases share a launch, if given): in one
        launch, or (``deferred``) the receive phase as the returned hook's launch. One launch
        needs both grids resident at once on this PE's share of the GPU (a receive phase waits
        for every rank's send phase, this launch's later blocks included); past that the
        phases go in two launches. The hook keeps the inputs alive until it runs."""
        if deferred:
            self._launch(kernel, send, None, args)
            return lambda: (self._launch(kernel, None, recv, args), keep)[0]
        fused = recv_with_send or recv
        if max(send[0] * send[1], fused[0] * fused[1]) <= self._resident:
            self._launch(kernel, send, fused, args)
        else:
            self._launch(kernel, send, None, args)
            self._launch(kernel, None, recv, args)
        return lambda: None

    def low_latency_dispatch(self, x: Any, topk_idx: Any, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: Any = None,
                             dispatch_wait_recv_cost_stats: Any = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False,
                             async_finish: bool = False, return_recv_hook: bool = False):
        """Sends each token to the ranks of its top-k experts. Returns ``(recv_x,
        recv_count, handle, event, hook)``: ``recv_x`` is ``(fp8 [El, N*Tmax, H],
        scales [El, N*Tmax, H/128])`` (scales column-major) or bf16 ``[El, N*Tmax, H]``;
        ``recv_count[El]`` int32 rows per local expert; ``hook()`` runs the receive phase when
        ``return_recv_hook=True`` (else it is a no-op). ``use_ue8m0`` (with ``round_scale``,
        hidden a multiple of 512): the scales as their exponent bytes (UE8M0), four 128-channel
        groups to an int32, ``[El, N*Tmax, H/512]`` column-major. -1 in ``topk_idx`` masks an
        entry; a token that names an expert twice sends it one row, and the combine adds that
        row's output with both weights."""
        torch = _torch()
        self._begin("low_latency_dispatch", async_finish, return_recv_hook)
        if use_ue8m0 and not (use_fp8 and round_scale):
            raise InvalidArgument("low_latency_dispatch: use_ue8m0 needs use_fp8 and "
                                  "round_scale (UE8M0 holds powers of two)")
        if x.dim() != 2 or x.dtype != torch.bfloat16 or not x.is_cuda or not x.is_contiguous():
            raise InvalidArgument("low_latency_dispatch: x must be a contiguous CUDA bf16 "
                                  "tensor [tokens, hidden]")
        if topk_idx.dim() != 2 or topk_idx.size(0) != x.size(0) or topk_idx.dtype != torch.int64 \
                or not topk_idx.is_contiguous():
            raise InvalidArgument("low_latency_dispatch: topk_idx must be a contiguous int64 "
                                  "tensor [tokens, top-k]")
        tmax, (T, H), K = num_max_dispatch_tokens_per_rank, x.shape, topk_idx.size(1)
        if K > 16:
            raise InvalidArgument(f"low_latency_dispatch: top-k {K} > 16")
        if T > tmax:
            raise InvalidArgument(f"low_latency_dispatch: {T} tokens > "
                                  f"num_max_dispatch_tokens_per_rank={tmax}")
        if use_ue8m0 and H % 512:
            raise InvalidArgument(f"low_latency_dispatch: use_ue8m0 needs hidden {H} to be a "
                                  "multiple of 512")
        lay = self._layout(tmax, H, num_experts)
        N, E = self.group_size, num_experts
        El = E // N
        idx, self._idx = self._idx, self._idx ^ 1
        dev = x.device
        if use_fp8:
            recv_x = torch.empty((El, N * tmax, H), dtype=torch.float8_e4m3fn, device=dev)
            groups, sdt = (H // 512, torch.int32) if use_ue8m0 else (H // 128, torch.float32)
            scales = torch.empty((El, groups, N * tmax), dtype=sdt, device=dev).transpose(1, 2)
        else:
            recv_x = torch.empty((El, N * tmax, H), dtype=torch.bfloat16, device=dev)
            scales = None
        recv_count = torch.empty((El,), dtype=torch.int32, device=dev)
        src_info = torch.empty((El, N * tmax), dtype=torch.int32, device=dev)
        layout_range = torch.empty((El, N), dtype=torch.int64, device=dev)
        slot_map = torch.empty((T, K), dtype=torch.int32, device=dev)
        for name, t, n, dt in (("cumulative_local_expert_recv_stats",
                                cumulative_local_expert_recv_stats, El, torch.int32),
                               ("dispatch_wait_recv_cost_stats", dispatch_wait_recv_cost_stats,
                                N, torch.int64)):
            if t is not None and (not t.is_cuda or t.numel() != n or not t.is_contiguous()
                                  or t.dtype != dt):
                raise InvalidArgument(f"low_latency_dispatch: {name} must be a contiguous CUDA "
                                      f"{dt} tensor of {n} elements")
        flags = (_FP8 if use_fp8 else 0) | (_ROUND_SCALE if round_scale else 0) | \
            (_PER_TOKEN if self.per_token else 0) | (_UE8M0 if use_ue8m0 else 0)
        args = dict(self._areas(lay, idx), num_tokens=T, max_tokens=tmax, hidden=H,
                    num_topk=K, num_experts=E, num_ranks=N, flags=flags, x=x.data_ptr(),
                    topk_idx=topk_idx.data_ptr(), slot_map=slot_map.data_ptr(),
                    out_x=recv_x.data_ptr(),
                    out_scales=scales.data_ptr() if scales is not None else 0,
                    recv_count=recv_count.data_ptr(), src_info=src_info.data_ptr(),
                    layout_range=layout_range.data_ptr(),
                    cum_stats=cumulative_local_expert_recv_stats.data_ptr()
                    if cumulative_local_expert_recv_stats is not None else 0,
                    wait_stats=dispatch_wait_recv_cost_stats.data_ptr()
                    if dispatch_wait_recv_cost_stats is not None else 0)
        send, recv, _ = self._ll_grids("dispatch", T, H, E, N, self._sms())
        hook = self._run("dispatch", send, recv, args, (x, topk_idx), return_recv_hook)
        handle = (src_info, layout_range, tmax, H, E, slot_map)
        out = (recv_x, scales) if use_fp8 else recv_x
        return out, recv_count, handle, _event(async_finish, (x, topk_idx)), hook

    def _begin(self, op: str, async_finish: bool, return_recv_hook: bool) -> None:
        self._check_ll(op)
        if async_finish and return_recv_hook:
            raise InvalidArgument(f"{op}: async_finish and return_recv_hook are mutually "
                                  "exclusive")

    def _check_handle(self, op: str, handle: Any) -> tuple:
        if not isinstance(handle, tuple) or len(handle) != 6:
            raise InvalidArgument(f"{op}: handle must be the one low_latency_dispatch returned")
        return handle

    def get_next_low_latency_combine_buffer(self, handle: Any):
        """The bf16 ``[El, N*Tmax, H]`` view of the send area the next combine uses: write
        the expert outputs there and call ``low_latency_combine(..., zero_copy=True)``."""
        torch = _torch()
        self._check_ll("get_next_low_latency_combine_buffer")
        _, _, tmax, H, E, _ = self._check_handle("get_next_low_latency_combine_buffer", handle)
        lay = self._layout(tmax, H, E)
        N = self.group_size
        start = self._idx * lay["buffer_bytes"] + lay["send_offset"]
        n = (E // N) * N * tmax * H * 2
        return self._buf[start:start + n].view(torch.bfloat16).view(E // N, N * tmax, H)

    def low_latency_combine(self, x: Any, topk_idx: Any, topk_weights: Any, handle: Any,
                            use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False,
                            out: Any = None, combine_wait_recv_cost_stats: Any = None):
        """Sends each expert output back to its token's rank and reduces there:
        ``out[t] = sum_k topk_weights[t,k] * y[t,k]`` in FP32, bf16 out. Returns
        ``(combined_x, event, hook)``."""
        torch = _torch()
        self._begin("low_latency_combine", async_finish, return_recv_hook)
        if use_logfmt:
            raise NotImplementedError("pshmem.ep: LogFMT combine is not provided")
        src_info, layout_range, tmax, H, E, slot_map = self._check_handle(
            "low_latency_combine", handle)
        N = self.group_size
        El = E // N
        T, K = topk_idx.shape
        if tuple(slot_map.shape) != (T, K):
            raise InvalidArgument("low_latency_combine: topk_idx differs in shape from the "
                                  "dispatch's")
        if x.dtype != torch.bfloat16 or tuple(x.shape) != (El, N * tmax, H) or not x.is_contiguous():
            raise InvalidArgument(f"low_latency_combine: x must be a contiguous bf16 tensor "
                                  f"[{El}, {N * tmax}, {H}]")
        if topk_weights.dtype != torch.float32 or tuple(topk_weights.shape) != (T, K) \
                or not topk_weights.is_contiguous():
            raise InvalidArgument("low_latency_combine: topk_weights must be a contiguous "
                                  "float32 tensor [tokens, top-k]")
        lay = self._layout(tmax, H, E)
        idx = self._idx
        # zero_copy: the rows are already where get_next_low_latency_combine_buffer's view
        # lies, and are sent from there; x only gives the shape (DeepEP reads no more of it).
        # A view of this buffer elsewhere is a view taken before another call moved on.
        x_at = self._areas(lay, idx)["send"] if zero_copy else x.data_ptr()
        at, end = self._buf.data_ptr(), self._buf.data_ptr() + self._buf.numel()
        if zero_copy and at <= x.data_ptr() < end and x.data_ptr() != x_at:
            raise InvalidArgument("low_latency_combine: x is a combine buffer view from before "
                                  "another dispatch or combine: take it again with "
                                  "get_next_low_latency_combine_buffer(handle)")
        self._idx ^= 1
        if out is None:
            out = torch.empty((T, H), dtype=torch.bfloat16, device=x.device)
        elif out.dtype != torch.bfloat16 or tuple(out.shape) != (T, H) or not out.is_contiguous():
            raise InvalidArgument(f"low_latency_combine: out must be a contiguous bf16 tensor "
                                  f"[{T}, {H}]")
        flags = (_PER_TOKEN if self.per_token else 0) | (_ZERO_COPY if zero_copy else 0)
        args = dict(self._areas(lay, idx), num_tokens=T, max_tokens=tmax, hidden=H,
                    num_topk=K, num_experts=E, num_ranks=N, flags=flags, x=x_at,
                    topk_idx=topk_idx.data_ptr(), topk_weights=topk_weights.data_ptr(),
                    slot_map=slot_map.data_ptr(), out_x=out.data_ptr(),
                    layout_range=layout_range.data_ptr())
        keep = (x, topk_idx, topk_weights, slot_map, layout_range)
        send, recv, shared = self._ll_grids("combine", T, H, E, N, self._sms())
        hook = self._run("combine", send, recv, args, keep, return_recv_hook,
                         recv_with_send=shared)
        return out, _event(async_finish, keep), hook

    # ---- the normal (high-throughput) mode -------------------------------------------------

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> "Config":
        """The normal dispatch's configuration for ``num_ranks`` (DeepEP's name): ``num_sms``
        from ``set_num_sms``, chunks of 32 tokens, rings of 256 (NVLink) and 128 (RDMA)
        slots."""
        return Config(Buffer.num_sms, 32, 256, 32, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> "Config":
        """The normal combine's configuration (see ``get_dispatch_config``)."""
        return Config(Buffer.num_sms, 32, 256, 32, 128)

    def _channels(self, config: "Config", nodes: int) -> int:
        # Every block of every PE on this GPU waits for the others, so all must be resident:
        # two per SM at most, (2 or 3) roles a channel, shared with the PEs on this GPU.
        torch = _torch()
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        roles = 3 if nodes > 1 else 2
        return max(1, min(config.num_sms // 2, 2 * sms // (roles * self._sharing) - 1, 64))

    def _ht_layout(self, op: str, config: "Config", hidden: int, topk: int, elem: int,
                   scales: int, num_experts: int, channels: int) -> dict:
        shape = dict(num_ranks=self.group_size, node_size=self._node_size(),
                     num_channels=channels,
                     nvl_slots=config.num_max_nvl_chunked_recv_tokens,
                     rdma_slots=config.num_max_rdma_chunked_recv_tokens, hidden=hidden,
                     num_topk=topk, x_elem_bytes=elem, num_scales=scales,
                     num_experts=num_experts)
        key = tuple(sorted(shape.items()))
        if key not in self._layouts:
            try:
                lay = _C.ep_ht_layout(shape)
            except ValueError as e:
                raise InvalidArgument(f"Buffer.{op}: {e}") from None
            have = 0 if self._ht is None else self._ht.numel()
            if lay["bytes"] > have:
                raise InvalidArgument(
                    f"Buffer.{op}: the normal mode for hidden {hidden}, top-k {topk}, "
                    f"{channels} channels and this config needs num_nvl_bytes + num_rdma_bytes "
                    f">= {lay['bytes']} (config.get_nvl_buffer_size_hint + "
                    f"get_rdma_buffer_size_hint), the buffer has {have}")
            self._layouts[key] = (shape, lay)
        shape, lay = self._layouts[key]
        return dict(shape, buf=self._ht.data_ptr(), nvl_chunk=config.num_max_nvl_chunked_send_tokens,
                    rdma_chunk=config.num_max_rdma_chunked_send_tokens)

    def _ht_launch(self, kernel: str, blocks: int, args: dict) -> None:
        _C.ep_ht_launch(kernel, max(1, blocks), _torch().cuda.current_stream().cuda_stream, args)

    def _node_size(self) -> int:
        # Only the normal mode needs nodes of contiguous ranks: the low-latency mode works
        # whatever the ranks' placement, so it is not checked at construction.
        if self._nodes is None:
            self._nodes = _contiguous_node_size(self.rank, self.group_size)
        return self._nodes

    def _start_ht(self, op: str, previous_event: Any, async_finish: bool,
                  allocate_on_comm_stream: bool) -> "tuple[int, int, int]":
        """Every normal-mode call's start: the buffer is live, ``previous_event`` waited for;
        returns (ranks, ranks per node, nodes). ``allocate_on_comm_stream`` asks, as DeepEP
        does, for ``previous_event`` and ``async_finish``; it changes nothing else here: the
        kernels run on the current stream and the outputs are allocated there (no separate
        communication stream)."""
        if self._destroyed:
            raise InvalidArgument(f"Buffer.{op}: the buffer was destroyed")
        if allocate_on_comm_stream and (previous_event is None or not async_finish):
            raise InvalidArgument(f"{op}: allocate_on_comm_stream needs previous_event and "
                                  "async_finish")
        _wait(previous_event)
        N, G = self.group_size, self._node_size()
        return N, G, N // G

    def get_dispatch_layout(self, topk_idx: Any, num_experts: int, previous_event: Any = None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """Counts, on the GPU, where each token goes. Returns ``(num_tokens_per_rank [N],
        num_tokens_per_rdma_rank [nodes] or None with one node, num_tokens_per_expert [E],
        is_token_in_rank bool [T, N], event)`` (int32 counts; a token counts once per rank and
        once per node)."""
        torch = _torch()
        N, G, R = self._start_ht("get_dispatch_layout", previous_event, async_finish,
                                 allocate_on_comm_stream)
        if topk_idx.dim() != 2 or topk_idx.dtype != torch.int64 or not topk_idx.is_cuda \
                or not topk_idx.is_contiguous():
            raise InvalidArgument("get_dispatch_layout: topk_idx must be a contiguous CUDA int64 "
                                  "tensor [tokens, top-k]")
        if num_experts <= 0 or num_experts % N:
            raise InvalidArgument(f"get_dispatch_layout: num_experts={num_experts} must be a "
                                  f"positive multiple of the {N} ranks")
        if N > 64:
            raise InvalidArgument(f"get_dispatch_layout: {N} ranks > 64 (the normal mode's limit)")
        T, K = topk_idx.shape
        dev = topk_idx.device
        per_rank = torch.zeros((N,), dtype=torch.int32, device=dev)
        per_node = torch.zeros((R,), dtype=torch.int32, device=dev) if R > 1 else None
        per_expert = torch.zeros((num_experts,), dtype=torch.int32, device=dev)
        in_rank = torch.empty((T, N), dtype=torch.bool, device=dev)
        args = dict(num_tokens=T, num_topk=K, num_experts=num_experts, num_ranks=N, node_size=G,
                    topk_idx=topk_idx.data_ptr(), is_token_in_rank=in_rank.data_ptr(),
                    num_tokens_per_rank=per_rank.data_ptr(),
                    num_tokens_per_node=per_node.data_ptr() if per_node is not None else 0,
                    num_tokens_per_expert=per_expert.data_ptr())
        if T:
            self._ht_launch("layout", (T + 511) // 512, args)
        return per_rank, per_node, per_expert, in_rank, _event(async_finish, (topk_idx,))

    def dispatch(self, x: Any, handle: Any = None, num_tokens_per_rank: Any = None,
                 num_tokens_per_rdma_rank: Any = None, is_token_in_rank: Any = None,
                 num_tokens_per_expert: Any = None, topk_idx: Any = None, topk_weights: Any = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Any = None,
                 previous_event: Any = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False):
        """Sends each token once to every rank that holds one of its experts (across nodes:
        once per node, then over NVLink inside it). ``x``: bf16 ``[T, H]``, or ``(fp8 [T, H],
        float32 scales [T, S])``. Returns ``(recv_x, recv_topk_idx, recv_topk_weights,
        num_recv_tokens_per_expert_list, handle, event)``: rows grouped by source rank, each
        source's rows in token order; ``recv_topk_idx`` holds local expert ids (-1 for experts
        elsewhere, weights 0 there). With ``handle`` (a cached dispatch) the layout is reused
        and no top-k is sent (``recv_topk_*`` are None). With ``num_worst_tokens`` the outputs
        have that many rows (the rest padded with top-k -1), nothing waits on the host (the
        call can be captured in a CUDA graph, with ``capture_error_mode="thread_local"``:
        this PE's proxy thread keeps making CUDA calls meanwhile), and the per-expert list is
        empty."""
        torch = _torch()
        op = "dispatch"
        N, G, R = self._start_ht(op, previous_event, async_finish, allocate_on_comm_stream)
        xs = None
        if isinstance(x, tuple):
            x, xs = x
            if xs.dtype == torch.int32:
                raise NotImplementedError("pshmem.ep: UE8M0 (int32-packed) scales are not "
                                          "provided")
            if xs.dtype != torch.float32 or xs.dim() != 2 or xs.size(0) != x.size(0):
                raise InvalidArgument("dispatch: the scales must be a float32 tensor "
                                      "[tokens, groups]")
            # Any layout DeepEP takes (e.g. column-major, x.T.contiguous().T): the kernel
            # reads rows, so a strided tensor is copied, on the stream, into one.
            xs = xs.contiguous()
        if x.dim() != 2 or not x.is_cuda or not x.is_contiguous() or x.element_size() not in (1, 2):
            raise InvalidArgument("dispatch: x must be a contiguous CUDA tensor [tokens, hidden] "
                                  "of bf16 or FP8")
        T, H = x.shape
        cached = handle is not None
        if cached:
            h = _check_ht_handle(op, handle, T)
            if topk_idx is not None or topk_weights is not None:
                raise InvalidArgument("dispatch: a cached dispatch (handle given) takes no "
                                      "top-k")
            K, E, C = h.topk, h.num_experts, h.channels
            in_rank = h.is_token_in_rank
        else:
            if num_tokens_per_rank is None or is_token_in_rank is None \
                    or num_tokens_per_expert is None:
                raise InvalidArgument("dispatch: without a handle it needs num_tokens_per_rank, "
                                      "is_token_in_rank and num_tokens_per_expert "
                                      "(get_dispatch_layout)")
            if (topk_idx is None) != (topk_weights is None):
                raise InvalidArgument("dispatch: topk_idx and topk_weights come together, or "
                                      "neither")
            if topk_idx is None and num_worst_tokens:
                raise InvalidArgument("dispatch: num_worst_tokens needs topk_idx and "
                                      "topk_weights")
            if topk_idx is not None and (tuple(topk_idx.shape[:1]) != (T,) or topk_idx.dim() != 2
                                         or topk_idx.dtype != torch.int64
                                         or not topk_idx.is_contiguous()):
                raise InvalidArgument("dispatch: topk_idx must be a contiguous int64 tensor "
                                      "[tokens, top-k]")
            # Without top-k each token's slot still carries one id (-1, weight 0), unread.
            K = 1 if topk_idx is None else topk_idx.size(1)
            if topk_weights is not None and (topk_weights.dtype != torch.float32
                                             or tuple(topk_weights.shape) != (T, K)
                                             or not topk_weights.is_contiguous()):
                raise InvalidArgument("dispatch: topk_weights must be a contiguous float32 "
                                      "tensor [tokens, top-k]")
            if tuple(is_token_in_rank.shape) != (T, N) or is_token_in_rank.dtype != torch.bool \
                    or not is_token_in_rank.is_contiguous():
                raise InvalidArgument(f"dispatch: is_token_in_rank must be a contiguous bool "
                                      f"tensor [{T}, {N}]")
            E = num_tokens_per_expert.numel()
            C = self._channels(config or self.get_dispatch_config(N), R)
            in_rank = is_token_in_rank
        config = config or self.get_dispatch_config(N)
        ns = 0 if xs is None else xs.size(1)
        args = self._ht_layout(op, config, H, K, x.element_size(), ns, E, C)
        dev = x.device
        args.update(num_tokens=T, num_topk=K, num_experts=E, num_ranks=N, node_size=G,
                    expert_alignment=expert_alignment, is_token_in_rank=in_rank.data_ptr())
        if cached:
            counters, recv_prefix, recv_node_prefix = h.counters, h.recv_prefix, h.recv_node_prefix
            rank_prefix, channel_prefix, node_channel_prefix = h.rank_prefix, h.channel_prefix, \
                h.node_channel_prefix
            num_recv, num_fwd = h.num_recv, h.num_fwd
            per_expert_list = list(h.per_expert_list)
            self._ht_launch("reset", 1, args)
            pshmem.barrier(stream=torch.cuda.current_stream())
        else:
            El = E // N
            channel_prefix = torch.empty((N, C), dtype=torch.int32, device=dev)
            node_channel_prefix = torch.empty((max(R, 1), C), dtype=torch.int32, device=dev)
            rank_prefix = torch.empty((N, N), dtype=torch.int32, device=dev)
            recv_prefix = torch.empty((N * C + 1,), dtype=torch.int32, device=dev)
            recv_node_prefix = torch.zeros((R * C + 1,), dtype=torch.int32, device=dev)
            counters = torch.zeros((2 + El,), dtype=torch.int32, device=dev)
            args.update(num_tokens_per_rank=num_tokens_per_rank.data_ptr(),
                        num_tokens_per_expert=num_tokens_per_expert.data_ptr(),
                        channel_prefix=channel_prefix.data_ptr(),
                        node_channel_prefix=node_channel_prefix.data_ptr(),
                        rank_prefix=rank_prefix.data_ptr(), recv_prefix=recv_prefix.data_ptr(),
                        recv_node_prefix=recv_node_prefix.data_ptr(),
                        counters=counters.data_ptr())
            self._ht_launch("reset", 1, args)
            pshmem.barrier(stream=torch.cuda.current_stream())
            self._ht_launch("prefix", N, args)
            self._ht_launch("notify", 1, args)
            if num_worst_tokens:
                num_recv = num_fwd = None
                per_expert_list = []
            else:
                # The host round trip DeepEP makes too: the totals size the outputs. Into
                # pinned memory, waited for with an event: a pageable copy would hold the
                # driver while the barrier and notify before it wait for this PE's proxy,
                # whose CUDA calls it would block (a stall until PSHMEM_OP_TIMEOUT).
                host = torch.empty(counters.shape, dtype=counters.dtype, device="cpu",
                                   pin_memory=True)
                host.copy_(counters, non_blocking=True)
                done = torch.cuda.Event()
                done.record(torch.cuda.current_stream())
                done.synchronize()
                got = host.tolist()
                num_recv, num_fwd, per_expert_list = got[0], got[1], got[2:]
        rows = num_worst_tokens if num_worst_tokens else num_recv
        fwd = num_worst_tokens if num_worst_tokens else num_fwd
        recv_x = torch.empty((rows, H), dtype=x.dtype, device=dev)
        recv_scales = torch.empty((rows, ns), dtype=torch.float32, device=dev) if ns else None
        with_topk = topk_idx is not None
        recv_topk = torch.empty((rows, K), dtype=torch.int64, device=dev) if with_topk else None
        recv_w = torch.empty((rows, K), dtype=torch.float32, device=dev) if with_topk else None
        # A cached dispatch writes these too, anew: they equal the handle's (the same layout
        # gives the same rows and ring positions), which a later combine uses.
        recv_src = torch.empty((rows,), dtype=torch.int32, device=dev)
        send_head = torch.empty((T, N if R == 1 else R), dtype=torch.int32, device=dev)
        fwd_mask = torch.empty((max(1, fwd),), dtype=torch.int32, device=dev)
        args.update(counters=counters.data_ptr(), recv_prefix=recv_prefix.data_ptr(),
                    recv_node_prefix=recv_node_prefix.data_ptr(), max_recv=rows, max_fwd=fwd,
                    x=x.data_ptr(), x_scales=xs.data_ptr() if ns else 0,
                    topk_idx=topk_idx.data_ptr() if with_topk else 0,
                    topk_weights=topk_weights.data_ptr() if with_topk else 0,
                    recv_x=recv_x.data_ptr(), recv_scales=recv_scales.data_ptr() if ns else 0,
                    recv_topk_idx=recv_topk.data_ptr() if with_topk else 0,
                    recv_topk_weights=recv_w.data_ptr() if with_topk else 0,
                    recv_src_idx=recv_src.data_ptr(), send_head=send_head.data_ptr(),
                    fwd_mask=fwd_mask.data_ptr())
        self._ht_launch("dispatch", (3 if R > 1 else 2) * C, args)
        out_x = (recv_x, recv_scales) if ns else recv_x
        if cached:
            keep = (x, xs, in_rank, fwd_mask, send_head)
            return out_x, None, None, None, None, _event(async_finish, keep)
        new = _HtHandle((rank_prefix, channel_prefix, recv_prefix, recv_src, in_rank, send_head)
                        if R == 1 else
                        (in_rank, node_channel_prefix, channel_prefix, recv_node_prefix, None,
                         recv_prefix, None, recv_src, send_head, fwd_mask))
        new.__dict__.update(channels=C, topk=K, num_experts=E, num_tokens=T, hidden=H,
                            counters=counters, rank_prefix=rank_prefix,
                            channel_prefix=channel_prefix,
                            node_channel_prefix=node_channel_prefix, recv_prefix=recv_prefix,
                            recv_node_prefix=recv_node_prefix, is_token_in_rank=in_rank,
                            send_head=send_head, fwd_mask=fwd_mask, recv_src_idx=recv_src,
                            num_recv=rows, num_fwd=fwd, per_expert_list=per_expert_list)
        keep = (x, xs, topk_idx, topk_weights, in_rank, fwd_mask, send_head)
        return out_x, recv_topk, recv_w, per_expert_list, new, _event(async_finish, keep)

    def combine(self, x: Any, handle: Any, topk_weights: Any = None, bias: Any = None,
                config: Any = None, previous_event: Any = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        """Sends every received row back and sums, per token, the rows of every rank it went
        to (unweighted, FP32, once per node first across nodes), plus the optional bias
        tensor(s) bf16 ``[T, H]``. ``x``: bf16 rows as ``dispatch`` returned them. Returns
        ``(combined_x [T, H], combined_topk_weights [T, K] or None, event)``; the weights are
        the sums of ``topk_weights`` (the received ones: the original weights come back)."""
        torch = _torch()
        op = "combine"
        N, G, R = self._start_ht(op, previous_event, async_finish, allocate_on_comm_stream)
        h = _check_ht_handle(op, handle, None)
        rows, T, H = h.num_recv, h.num_tokens, x.size(-1)
        if x.dtype != torch.bfloat16 or x.dim() != 2 or x.size(0) != rows or not x.is_contiguous():
            raise InvalidArgument(f"combine: x must be a contiguous bf16 tensor [{rows}, hidden]")
        K = h.topk
        if topk_weights is not None and (topk_weights.dtype != torch.float32
                                         or tuple(topk_weights.shape) != (rows, K)
                                         or not topk_weights.is_contiguous()):
            raise InvalidArgument(f"combine: topk_weights must be a contiguous float32 tensor "
                                  f"[{rows}, {K}]")
        biases = bias if isinstance(bias, tuple) else (bias, None)
        for b in biases:
            if b is not None and (b.dtype != torch.bfloat16 or tuple(b.shape) != (T, H)
                                  or not b.is_contiguous()):
                raise InvalidArgument(f"combine: a bias must be a contiguous bf16 tensor "
                                      f"[{T}, {H}]")
        config = config or self.get_combine_config(N)
        args = self._ht_layout(op, config, H, K, 2, 0, h.num_experts, h.channels)
        out = torch.empty((T, H), dtype=torch.bfloat16, device=x.device)
        out_w = torch.empty((T, K), dtype=torch.float32, device=x.device) \
            if topk_weights is not None else None
        args.update(num_tokens=T, num_topk=K, num_experts=h.num_experts, num_ranks=N,
                    node_size=G, counters=h.counters.data_ptr(),
                    recv_prefix=h.recv_prefix.data_ptr(),
                    recv_node_prefix=h.recv_node_prefix.data_ptr(), max_recv=rows,
                    max_fwd=h.num_fwd, x=x.data_ptr(),
                    topk_weights=topk_weights.data_ptr() if topk_weights is not None else 0,
                    recv_x=out.data_ptr(),
                    recv_topk_weights=out_w.data_ptr() if out_w is not None else 0,
                    send_head=h.send_head.data_ptr(), fwd_mask=h.fwd_mask.data_ptr(),
                    bias0=biases[0].data_ptr() if biases[0] is not None else 0,
                    bias1=biases[1].data_ptr() if biases[1] is not None else 0)
        self._ht_launch("reset", 1, args)
        pshmem.barrier(stream=torch.cuda.current_stream())
        self._ht_launch("combine", (3 if R > 1 else 2) * h.channels, args)
        keep = (x, topk_weights, biases, h)
        return out, out_w, _event(async_finish, keep)


class Config:
    """DeepEP's ``Config`` of the normal mode: SMs (two per channel; the grid uses
    ``num_sms // 2`` channels, fewer when PEs share a GPU) and, per ring kind, the most tokens
    a producer publishes at once (``*_send_tokens``, at most 32 are used) and the slots of
    each ring (``*_recv_tokens``)."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 16,
                 num_max_nvl_chunked_recv_tokens: int = 256,
                 num_max_rdma_chunked_send_tokens: int = 16,
                 num_max_rdma_chunked_recv_tokens: int = 128) -> None:
        if num_sms <= 0 or num_sms % 2:
            raise ValueError(f"Config: num_sms={num_sms} must be positive and even")
        for name, v in (("num_max_nvl_chunked_send_tokens", num_max_nvl_chunked_send_tokens),
                        ("num_max_nvl_chunked_recv_tokens", num_max_nvl_chunked_recv_tokens),
                        ("num_max_rdma_chunked_send_tokens", num_max_rdma_chunked_send_tokens),
                        ("num_max_rdma_chunked_recv_tokens", num_max_rdma_chunked_recv_tokens)):
            if v <= 0:
                raise ValueError(f"Config: {name}={v} must be positive")
        self.num_sms = int(num_sms)
        self.num_max_nvl_chunked_send_tokens = int(num_max_nvl_chunked_send_tokens)
        self.num_max_nvl_chunked_recv_tokens = int(num_max_nvl_chunked_recv_tokens)
        self.num_max_rdma_chunked_send_tokens = int(num_max_rdma_chunked_send_tokens)
        self.num_max_rdma_chunked_recv_tokens = int(num_max_rdma_chunked_recv_tokens)

    def _sizes(self, hidden_bytes: int, num_ranks: int) -> dict:
        # The largest slot (bf16 rows, top-k 16) and notify messages for 1024 local experts.
        G = _node_size_hint(num_ranks)
        return _C.ep_ht_layout(dict(num_ranks=num_ranks, node_size=G,
                                    num_channels=max(1, self.num_sms // 2),
                                    nvl_slots=self.num_max_nvl_chunked_recv_tokens,
                                    rdma_slots=self.num_max_rdma_chunked_recv_tokens,
                                    hidden=max(8, hidden_bytes // 2), num_topk=16,
                                    x_elem_bytes=2, num_scales=0,
                                    num_experts=1024 * num_ranks))

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes of ``num_nvl_bytes`` this config needs (control words, notify messages and
        the NVL rings with their staging copies)."""
        lay = self._sizes(hidden_bytes, num_ranks)
        return lay["bytes"] - self.get_rdma_buffer_size_hint(hidden_bytes, num_ranks)

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes of ``num_rdma_bytes`` this config needs (the RDMA rings and their staging
        copies; 0 on one node)."""
        lay = self._sizes(hidden_bytes, num_ranks)
        if lay["nodes"] == 1:
            return 0
        C, S = max(1, self.num_sms // 2), self.num_max_rdma_chunked_recv_tokens
        return 2 * C * lay["nodes"] * S * lay["slot_bytes"]

    def __repr__(self) -> str:
        return (f"Config({self.num_sms}, {self.num_max_nvl_chunked_send_tokens}, "
                f"{self.num_max_nvl_chunked_recv_tokens}, {self.num_max_rdma_chunked_send_tokens}, "
                f"{self.num_max_rdma_chunked_recv_tokens})")


class _HtHandle(tuple):
    """A normal-mode dispatch's handle: DeepEP's tuple (intranode: rank prefix matrix, channel
    prefix matrix, receive prefix, receive source indices, is_token_in_rank, send head;
    across nodes the 10-tuple of the internode layout), with what combine and a cached
    dispatch need as attributes."""


def _check_ht_handle(op: str, handle: Any, tokens: Optional[int]) -> "_HtHandle":
    if not isinstance(handle, _HtHandle):
        raise InvalidArgument(f"{op}: handle must be the one a normal-mode dispatch returned")
    if tokens is not None and tokens != handle.num_tokens:
        raise InvalidArgument(f"{op}: the handle is for {handle.num_tokens} tokens, x has {tokens}")
    return handle


def _wait(previous_event: Any) -> None:
    if previous_event is not None:
        previous_event.current_stream_wait()


def _contiguous_node_size(rank: int, n: int) -> int:
    """Ranks per node (same host) of the running job; checks that every node is a contiguous
    block of that many ranks, as the normal mode's layout assumes."""
    g = pshmem.TEAM_NODE.n_pes()
    first = pshmem.TEAM_NODE.translate_pe(0, pshmem.TEAM_WORLD)
    if n % g or first != rank // g * g:
        raise InvalidArgument(f"Buffer: the {n} ranks are not in nodes of {g} contiguous ranks "
                              f"(rank {rank}'s node starts at {first})")
    return g


def _node_size_hint(num_ranks: int) -> int:
    if pshmem.is_initialized() and pshmem.n_pes() == num_ranks:
        return pshmem.TEAM_NODE.n_pes()
    return min(num_ranks, 8)

__all__ = ["Buffer", "Config", "EventOverlap"]
