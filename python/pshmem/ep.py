"""MoE expert parallelism with DeepEP's ``Buffer`` interface, low-latency mode.

A DeepEP user changes an import::

    from pshmem.ep import Buffer, EventOverlap      # was: from deep_ep import Buffer, EventOverlap

    buf = Buffer(group, num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(
        num_max_dispatch_tokens_per_rank, hidden, group.size(), num_experts),
        low_latency_mode=True, num_qps_per_rank=num_experts // group.size())
    recv_x, recv_count, handle, event, hook = buf.low_latency_dispatch(
        x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts, use_fp8=True)
    ...
    combined, event, hook = buf.low_latency_combine(y, topk_idx, topk_weights, handle)

The kernels (``pshmem-ep``) run on the current CUDA stream. Same-host peers are written over
NVLink (CUDA IPC); other peers through the proxy, where every count and flag is a *counted
signal*: applied only after all the data it announces has landed, on any fabric (no ordered
delivery assumed). ``num_qps_per_rank`` sets how many GPU command rings the descriptors spread
over (by local expert), ``PSHMEM_GPU_PROXY_THREADS`` how many proxy threads drain them.

Differences from DeepEP, all documented: rows of one local expert are packed by source rank
(deterministic, whatever order the sources arrive in), not in arrival order; the receive
kernels clear the signal words they consumed (the buffer is clean for its next use with no
extra launch); ``dispatch_wait_recv_cost_stats`` counts nanoseconds, not cycles; the normal
(high-throughput) mode, LogFMT, UE8M0 scales and rank masking are not provided yet and raise
``NotImplementedError``. ``per_token=False`` (the default) sends one message per (expert,
destination) to peers reached through the proxy; ``per_token=True`` one per token.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import pshmem
from pshmem import _C, InvalidArgument

_FP8, _ROUND_SCALE, _PER_TOKEN, _ZERO_COPY = 0x1, 0x2, 0x4, 0x8


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
                 explicitly_destroy: bool = False, enable_shrink: bool = False,
                 per_token: bool = False) -> None:
        torch = _torch()
        if enable_shrink:
            raise NotImplementedError("pshmem.ep: rank masking (enable_shrink) is not provided")
        self.group = group
        self.low_latency_mode = low_latency_mode
        self.num_nvl_bytes, self.num_rdma_bytes = int(num_nvl_bytes), int(num_rdma_bytes)
        self.explicitly_destroy = explicitly_destroy
        self.per_token = per_token
        if not pshmem.is_initialized():
            # Like DeepEP's settings of NVSHMEM: the heap must hold the buffer; one GPU ring
            # per queue pair asked for (capped); no NVLink for LL if refused.
            need = max(self.num_rdma_bytes, self.num_nvl_bytes) + (256 << 20)
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
        # PEs sharing this GPU (CUDA MPS): the blocks that wait for peers must leave SMs to
        # the peers' send kernels, so every grid shrinks by that factor.
        local = int(os.environ.get("PSHMEM_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
        self._sharing = max(1, -(-local // max(1, torch.cuda.device_count())))
        if group is not None and group.size() != self.group_size:
            raise InvalidArgument(
                f"Buffer: the group has {group.size()} ranks, the pshmem job "
                f"{self.group_size} PEs")
        nbytes = max(self.num_rdma_bytes, 1)
        self._buf = pshmem.zeros(nbytes, dtype=torch.uint8, device="cuda")
        self._idx = 0
        self._layouts: dict = {}
        # The kernels' module is loaded here, while nothing runs: a load waits for running
        # kernels and holds the driver meanwhile, so a first dispatch queued behind a barrier
        # waiting on the proxy would stall every PE until PSHMEM_OP_TIMEOUT.
        if low_latency_mode:
            _C.ep_load()

    # ---- sizes and configuration -----------------------------------------------------------

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        """Sizes the LL kernels' grids (DeepEP: SMs of the normal kernels): the send phases
        use up to 6x this many blocks, the receive phases up to 2x. Divided by the number of
        PEs sharing the GPU (under CUDA MPS), since waiting blocks hold their SMs."""
        if new_num_sms <= 0:
            raise ValueError("set_num_sms: must be positive")
        Buffer.num_sms = int(new_num_sms)

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
        if self._buf is None:
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
        if self._buf is not None:
            self.check()
            pshmem.barrier()
            pshmem.free(self._buf)
            self._buf = None

    # ---- low-latency dispatch and combine --------------------------------------------------

    def _sms(self) -> int:
        return max(2, self.num_sms // self._sharing)

    def _launch(self, kernel: str, grid: tuple, args: dict) -> None:
        _C.ep_ll_launch(kernel, grid[0], grid[1], _torch().cuda.current_stream().cuda_stream,
                        args)

    def low_latency_dispatch(self, x: Any, topk_idx: Any, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: Any = None,
                             dispatch_wait_recv_cost_stats: Any = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False,
                             async_finish: bool = False, return_recv_hook: bool = False):
        """Sends each token to the ranks of its top-k experts. Returns ``(recv_x,
        recv_count, handle, event, hook)``: ``recv_x`` is ``(fp8 [El, N*Tmax, H],
        scales [El, N*Tmax, H/128])`` (scales column-major) or bf16 ``[El, N*Tmax, H]``;
        ``recv_count[El]`` int32 rows per local expert; ``hook()`` runs the receive phase when
        ``return_recv_hook=True`` (else it is a no-op)."""
        torch = _torch()
        self._begin("low_latency_dispatch", async_finish, return_recv_hook)
        if use_ue8m0:
            raise NotImplementedError("pshmem.ep: UE8M0 scales are not provided")
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
        lay = self._layout(tmax, H, num_experts)
        N, E = self.group_size, num_experts
        El = E // N
        idx, self._idx = self._idx, self._idx ^ 1
        dev = x.device
        if use_fp8:
            recv_x = torch.empty((El, N * tmax, H), dtype=torch.float8_e4m3fn, device=dev)
            scales = torch.empty((El, H // 128, N * tmax), dtype=torch.float32,
                                 device=dev).transpose(1, 2)
        else:
            recv_x = torch.empty((El, N * tmax, H), dtype=torch.bfloat16, device=dev)
            scales = None
        recv_count = torch.empty((El,), dtype=torch.int32, device=dev)
        src_info = torch.empty((El, N * tmax), dtype=torch.int32, device=dev)
        layout_range = torch.empty((El, N), dtype=torch.int64, device=dev)
        slot_map = torch.empty((T, K), dtype=torch.int32, device=dev)
        for name, t, n in (("cumulative_local_expert_recv_stats",
                            cumulative_local_expert_recv_stats, El),
                           ("dispatch_wait_recv_cost_stats", dispatch_wait_recv_cost_stats, N)):
            if t is not None and (not t.is_cuda or t.numel() != n or not t.is_contiguous()):
                raise InvalidArgument(f"low_latency_dispatch: {name} must be a contiguous CUDA "
                                      f"tensor of {n} elements")
        flags = (_FP8 if use_fp8 else 0) | (_ROUND_SCALE if round_scale else 0) | \
            (_PER_TOKEN if self.per_token else 0)
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
        budget = 6 * self._sms()  # send blocks: every expert, split in parts when there is room
        self._launch("dispatch_send", (min(E, budget), max(1, budget // E)), args)
        keep = (x, topk_idx)

        def recv() -> None:
            self._launch("dispatch_recv", (El, max(1, 2 * self._sms() // El)), args)

        hook = self._hook(recv, keep, return_recv_hook)
        handle = (src_info, layout_range, tmax, H, E, slot_map)
        out = (recv_x, scales) if use_fp8 else recv_x
        return out, recv_count, handle, _event(async_finish, (x, topk_idx)), hook

    def _begin(self, op: str, async_finish: bool, return_recv_hook: bool) -> None:
        self._check_ll(op)
        if async_finish and return_recv_hook:
            raise InvalidArgument(f"{op}: async_finish and return_recv_hook are mutually "
                                  "exclusive")

    @staticmethod
    def _hook(recv: Callable[[], None], keep: tuple, deferred: bool) -> Callable[[], None]:
        """The receive phase now (returning a no-op hook), or as the hook (which keeps the
        inputs alive until it runs)."""
        if deferred:
            return lambda: (recv(), keep)[0]
        recv()
        return lambda: None

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
        if zero_copy:
            want = self._buf.data_ptr() + idx * lay["buffer_bytes"] + lay["send_offset"]
            if x.data_ptr() != want:
                raise InvalidArgument("low_latency_combine: zero_copy=True needs x to be the "
                                      "tensor get_next_low_latency_combine_buffer returned")
        self._idx ^= 1
        if out is None:
            out = torch.empty((T, H), dtype=torch.bfloat16, device=x.device)
        elif out.dtype != torch.bfloat16 or tuple(out.shape) != (T, H) or not out.is_contiguous():
            raise InvalidArgument(f"low_latency_combine: out must be a contiguous bf16 tensor "
                                  f"[{T}, {H}]")
        flags = (_PER_TOKEN if self.per_token else 0) | (_ZERO_COPY if zero_copy else 0)
        args = dict(self._areas(lay, idx), num_tokens=T, max_tokens=tmax, hidden=H,
                    num_topk=K, num_experts=E, num_ranks=N, flags=flags, x=x.data_ptr(),
                    topk_idx=topk_idx.data_ptr(), topk_weights=topk_weights.data_ptr(),
                    slot_map=slot_map.data_ptr(), out_x=out.data_ptr(),
                    layout_range=layout_range.data_ptr())
        self._launch("combine_send", (min(E, 6 * self._sms()), 1), args)
        keep = (x, topk_idx, topk_weights, slot_map, layout_range)

        def recv() -> None:
            blocks = max(1, min((T + 15) // 16, self._sms()))
            self._launch("combine_recv", (blocks, 1), args)

        hook = self._hook(recv, keep, return_recv_hook)
        return out, _event(async_finish, keep), hook

    # ---- the normal (high-throughput) mode: not provided yet -------------------------------

    def get_dispatch_layout(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("pshmem.ep: the normal (high-throughput) mode is not provided")

    def dispatch(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("pshmem.ep: the normal (high-throughput) mode is not provided")

    def combine(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("pshmem.ep: the normal (high-throughput) mode is not provided")


__all__ = ["Buffer", "EventOverlap"]
