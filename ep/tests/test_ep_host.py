"""pshmem.ep without a GPU: the LL buffer's size hint and layout, and the errors for shapes the
kernels refuse. The kernels themselves run in ep/tests/workers/ep_ll.py (scripts/gpu-test.sh).
"""

import os
import re

import pytest

import pshmem._pshmem as C
from pshmem.ep import Buffer, EventOverlap


def test_the_size_hint_covers_two_buffers_of_the_documented_layout():
    lay = C.ep_ll_layout(128, 7168, 8, 64)
    msg = 16 + 2 * 7168  # the BF16 slot, the larger one
    assert lay["msg_bytes"] == msg
    # The dispatch regions' headers (ll.h): 16 bytes reserved per expert.
    assert lay["area_bytes"] == 16 * 64 + 64 * 128 * msg
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


# ---- the normal (high-throughput) mode ---------------------------------------------------------

from pshmem.ep import Config  # noqa: E402


def test_the_normal_mode_layout_follows_the_documented_sizes():
    shape = dict(num_ranks=8, node_size=4, num_channels=12, nvl_slots=256, rdma_slots=128,
                 hidden=7168, num_topk=8, x_elem_bytes=1, num_scales=56, num_experts=256)
    lay = C.ep_ht_layout(shape)
    # Header, 8 ids, 8 weights (64 bytes), then the larger of FP8 + scales and a bf16 row.
    assert lay["slot_bytes"] == 16 + 64 + 2 * 7168
    assert lay["nodes"] == 2
    assert lay["msg_ints"] == 8 + 2 * 12 + 256 // 8
    assert lay["ctrl_words"] == 2 * 12 * 8 + 2 * 12 * 2 + 8
    rings = 2 * (12 * 8 * 256 + 12 * 2 * 128) * lay["slot_bytes"]  # slots and staging
    assert rings < lay["bytes"] < rings + (1 << 20)
    one_node = C.ep_ht_layout(dict(shape, node_size=8))
    assert one_node["nodes"] == 1
    assert one_node["bytes"] < lay["bytes"]  # no RDMA rings on one node


@pytest.mark.parametrize("change, words", [
    (dict(num_ranks=65), "ranks"),
    (dict(node_size=3), "ranks per node"),
    (dict(num_channels=0), "channels"),
    (dict(hidden=7000), "hidden"),
    (dict(num_topk=17), "top-k"),
    (dict(num_experts=250), "num_experts"),
    (dict(nvl_slots=0), "ring sizes"),
])
def test_refused_normal_mode_shapes_say_why(change, words):
    shape = dict(num_ranks=8, node_size=8, num_channels=12, nvl_slots=256, rdma_slots=128,
                 hidden=7168, num_topk=8, x_elem_bytes=1, num_scales=56, num_experts=256)
    with pytest.raises(ValueError, match=words):
        C.ep_ht_layout(dict(shape, **change))


def test_the_size_hints_cover_any_topk_and_split_nvl_and_rdma():
    cfg = Config(24, 32, 256, 32, 128)
    nvl, rdma = cfg.get_nvl_buffer_size_hint(2 * 7168, 8), cfg.get_rdma_buffer_size_hint(2 * 7168, 8)
    # Not initialized: nodes of up to 8 ranks, so 8 ranks are one node and need no RDMA rings.
    assert rdma == 0
    for k in (1, 8, 16):
        lay = C.ep_ht_layout(dict(num_ranks=8, node_size=8, num_channels=12, nvl_slots=256,
                                  rdma_slots=128, hidden=7168, num_topk=k, x_elem_bytes=1,
                                  num_scales=56, num_experts=256))
        assert lay["bytes"] <= nvl
    # 16 ranks: 2 nodes of 8, the RDMA rings and their staging copies.
    r16 = cfg.get_rdma_buffer_size_hint(2 * 7168, 16)
    slot = C.ep_ht_layout(dict(num_ranks=16, node_size=8, num_channels=12, nvl_slots=256,
                               rdma_slots=128, hidden=7168, num_topk=16, x_elem_bytes=2,
                               num_scales=0, num_experts=16 * 1024))["slot_bytes"]
    assert r16 == 2 * 12 * 2 * 128 * slot


@pytest.mark.parametrize("args", [(0,), (3,), (20, 0), (20, 8, -1)])
def test_a_bad_config_is_refused(args):
    with pytest.raises(ValueError):
        Config(*args)


def test_the_default_configs_use_the_sms_set():
    Buffer.set_num_sms(16)
    try:
        assert Buffer.get_dispatch_config(8).num_sms == 16
        assert Buffer.get_combine_config(8).num_sms == 16
        assert "Config(16, " in repr(Buffer.get_dispatch_config(8))
    finally:
        Buffer.set_num_sms(24)


# ---- launch arguments by name: checked before anything runs (no init, no GPU needed) -------


def _ll_args(**over):
    """Every name the combine kernel reads, zero, with `over` applied (None removes a name)."""
    names = ["sig", "send", "recv", "num_tokens", "max_tokens", "hidden", "num_topk",
             "num_experts", "num_ranks", "flags", "x", "topk_idx", "slot_map", "out_x",
             "layout_range", "topk_weights"]
    args = {n: 0 for n in names}
    for k, v in over.items():
        if v is None:
            args.pop(k)
        else:
            args[k] = v
    return args


@pytest.mark.parametrize("over, words", [
    ({"num_topks": 8}, 'no argument "num_topks"'),
    ({"my_rank": 0}, 'no argument "my_rank"'),
    ({"topk_weights": None}, "missing argument(s) topk_weights"),
])
def test_ll_launch_refuses_unknown_owned_and_missing_names(over, words):
    with pytest.raises(C.InvalidArgument, match=re.escape(words)):
        C.ep_ll_launch("combine", (1, 1), (1, 1), 0, _ll_args(**over))


def test_ll_launch_refuses_values_that_do_not_fit_their_field():
    with pytest.raises(C.InvalidArgument, match="x = -1 is not an address"):
        C.ep_ll_launch("combine", (1, 1), None, 0, _ll_args(x=-1))


@pytest.mark.parametrize("kernel, send, recv, words", [
    ("combine", None, None, "at least one block"),
    ("combine", (0, 1), (1, 1), "at least one block"),
    ("combine", (1, 1), (4, 0), "at least one block"),
    ("combine_send", (1, 1), None, "combine_send"),  # the kernels before one per operation
    ("combine", (4, 2), None, "rows, not 1"),  # the combine's phases are one row of blocks
    ("combine", (4, 1), (2, 3), "rows, not 1"),
])
def test_ll_launch_refuses_a_launch_that_runs_nothing_or_no_kernel(kernel, send, recv, words):
    with pytest.raises(C.InvalidArgument, match=words):
        C.ep_ll_launch(kernel, send, recv, 0, _ll_args())


def test_ll_dispatch_receive_grid_has_a_column_per_local_expert():
    args = dict(_ll_args(), num_experts=8, num_ranks=2, out_scales=0, recv_count=0,
                src_info=0, cum_stats=0, wait_stats=0)
    args.pop("topk_weights")
    with pytest.raises(C.InvalidArgument, match=r"3 columns, one per local expert \(4\)"):
        C.ep_ll_launch("dispatch", (8, 1), (3, 2), 0, args)


def test_ht_launch_and_layout_refuse_unknown_and_missing_names():
    shape = dict(num_ranks=2, node_size=2, num_channels=2, nvl_slots=64, rdma_slots=64,
                 hidden=1024, num_topk=2, x_elem_bytes=2, num_scales=0, num_experts=8)
    assert C.ep_ht_layout(shape)["bytes"] > 0
    with pytest.raises(C.InvalidArgument, match='no argument "buf"'):
        C.ep_ht_layout(dict(shape, buf=0))
    with pytest.raises(C.InvalidArgument, match=re.escape("missing argument(s) hidden")):
        C.ep_ht_layout({k: v for k, v in shape.items() if k != "hidden"})
    with pytest.raises(C.InvalidArgument, match=re.escape("missing argument(s) buf")):
        C.ep_ht_launch("reset", 1, 0, dict(shape, nvl_chunk=8, rdma_chunk=8, num_tokens=4))
    with pytest.raises(C.InvalidArgument, match='no argument "ctrl"'):
        C.ep_ht_launch("reset", 1, 0, dict(shape, buf=0, nvl_chunk=8, rdma_chunk=8,
                                           num_tokens=4, ctrl=0))


# ---- the MoE test workers' shared checks (ep/tests/workers/epcheck.py) --------------------


def _epcheck():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "workers", "epcheck.py")
    spec = importlib.util.spec_from_file_location("epcheck", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_workers_calc_diff_and_digest_tell_tensors_apart():
    torch = pytest.importorskip("torch")
    ep = _epcheck()
    x = torch.arange(64, dtype=torch.float32).view(8, 8)
    assert ep.calc_diff(x, x) == pytest.approx(0.0, abs=1e-12)
    assert ep.calc_diff(x, -x) > 0.5
    assert ep.digest(x) == ep.digest(x.clone())
    y = x.clone()
    y[3, 5] += 1
    assert ep.digest(y) != ep.digest(x)
    assert ep.digest(None) == 0 and ep.digest(torch.zeros(0)) == 0


def test_the_workers_checks_record_and_name_failures(capsys):
    pytest.importorskip("torch")
    ep = _epcheck()
    c = ep.Checks(3)
    c.check(True, "fine")
    c.check(False, "rows differ")
    assert c.failures == ["rows differ"]
    assert "[PE 3] FAILED: rows differ" in capsys.readouterr().out


# ---- DeepEP's names: pshmem.deep_ep, and the deep_ep package it installs ---------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

import pshmem.deep_ep as deep_ep  # noqa: E402


def test_deep_ep_names_are_the_ones_deepep_exports():
    assert deep_ep.__all__ == ["Buffer", "Config", "EventOverlap", "topk_idx_t"]
    assert deep_ep.Buffer is Buffer and deep_ep.topk_idx_t is torch.int64
    assert deep_ep.Buffer.is_sm90_compiled() is True
    # DeepEP's intranode test: Config(num_sms, nvl send chunk, nvl recv slots).
    cfg = deep_ep.Config(24, 8, 256)
    assert (cfg.num_sms, cfg.num_max_nvl_chunked_send_tokens,
            cfg.num_max_nvl_chunked_recv_tokens) == (24, 8, 256)
    for arg in ("use_fabric", "comm", "explicitly_destroy", "allow_mnnvl", "enable_shrink"):
        assert arg in Buffer.__init__.__code__.co_varnames, arg


@pytest.mark.parametrize("n", [0, -2, 3])
def test_set_num_sms_takes_a_positive_even_count_as_deepep(n):
    with pytest.raises(ValueError, match="positive and even"):
        Buffer.set_num_sms(n)
    assert Buffer.num_sms % 2 == 0


def _deep_ep(args, target):
    return subprocess.run([sys.executable, "-m", "pshmem.deep_ep", *args, "--target",
                           str(target)], capture_output=True, text=True, timeout=120)


def test_the_installed_deep_ep_package_lets_deepep_programs_import_it_unchanged(tmp_path):
    for _ in range(2):  # installing again over our own is fine
        r = _deep_ep(["install"], tmp_path)
        assert r.returncode == 0, r.stderr
    prog = ("import deep_ep, pshmem.ep\n"
            "from deep_ep import Buffer, EventOverlap, Config\n"
            "import torch\n"
            "assert Buffer is pshmem.ep.Buffer and deep_ep.topk_idx_t is torch.int64\n"
            "print('ok')")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    r = _deep_ep(["uninstall"], tmp_path)
    assert r.returncode == 0 and not (tmp_path / "deep_ep").exists(), r.stderr
    r = _deep_ep(["uninstall"], tmp_path)
    assert r.returncode == 0 and "no deep_ep package" in r.stdout


def test_a_deep_ep_package_that_is_not_ours_is_left_alone(tmp_path):
    (tmp_path / "deep_ep").mkdir()
    (tmp_path / "deep_ep" / "__init__.py").write_text("# DeepEP itself\n")
    for action in ("install", "uninstall"):
        r = _deep_ep([action], tmp_path)
        assert r.returncode == 1 and "not made by pshmem" in r.stderr, (action, r)
    assert (tmp_path / "deep_ep" / "__init__.py").read_text() == "# DeepEP itself\n"


def test_the_ll_grids_at_the_benchmark_shape():
    # 128 tokens, hidden 7168, 2 ranks of 8 experts, DeepEP's num_sms 24 on a GPU of one's own.
    send, recv, shared = Buffer._ll_grids("dispatch", 128, 7168, 16, 2, 24)
    assert (send, recv, shared) == ((16, 9), (8, 6), None)
    # The combine's receive: 3584 slices of 256 channels, at most 48 blocks in a launch of
    # its own; a block per 16 tokens beside the send phase.
    send, recv, shared = Buffer._ll_grids("combine", 128, 7168, 16, 2, 24)
    assert (send, recv, shared) == ((16, 1), (48, 1), (8, 1))
    assert Buffer._ll_grids("combine", 16, 256, 4, 2, 24)[1:] == ((1, 1), (1, 1))
