"""pshmem.ep without a GPU: the LL buffer's size hint and layout, and the errors for shapes the
kernels refuse. The kernels themselves run in python/tests/workers/ep_ll.py (scripts/gpu-test.sh).
"""

import pytest

import pshmem._pshmem as C
from pshmem.ep import Buffer, EventOverlap


def test_the_size_hint_covers_two_buffers_of_the_documented_layout():
    lay = C.ep_ll_layout(128, 7168, 8, 64)
    msg = 16 + 2 * 7168  # the BF16 slot, the larger one
    assert lay["msg_bytes"] == msg
    assert lay["area_bytes"] == 64 * 128 * msg
    assert lay["send_offset"] == lay["sig_bytes"]
    assert lay["recv_offset"] == lay["sig_bytes"] + lay["area_bytes"]
    assert lay["buffer_bytes"] == lay["sig_bytes"] + 2 * lay["area_bytes"]
    assert Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 64) == 2 * lay["buffer_bytes"]
    # Independent of the rank count for a fixed expert count, as DeepEP's.
    assert C.ep_ll_layout(128, 7168, 16, 64)["area_bytes"] == lay["area_bytes"]


@pytest.mark.parametrize("args, words", [
    ((2048, 7168, 8, 64), "num_max_dispatch_tokens_per_rank"),
    ((128, 7000, 8, 64), "hidden"),
    ((128, 7168, 8, 60), "num_experts"),
    ((128, 7168, 0, 64), "ranks"),
])
def test_refused_shapes_say_why(args, words):
    with pytest.raises(ValueError, match=words):
        Buffer.get_low_latency_rdma_size_hint(*args)


def test_an_event_without_async_finish_waits_for_nothing():
    ev = EventOverlap()
    with ev:
        pass
    ev.current_stream_wait()
