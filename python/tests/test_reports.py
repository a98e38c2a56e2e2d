"""The multi-GPU run's report generators (benches/gpu/compare_report.py, multi_report.py) on
synthetic part folders: the figures they print must be the ones in the JSON, ratios the right
way round, failed runs and parts that did not run named. They run on GPU machines only after a
long run, so a regression here would otherwise show up only there."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU = os.path.join(ROOT, "benches", "gpu")


def run(script, *args):
    res = subprocess.run([sys.executable, os.path.join(GPU, script), *map(str, args)],
                         capture_output=True, text=True, check=True)
    return res.stdout


def runs(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def row(side, prog, pes, passed=True, wall=2.0, **figs):
    return {"side": side, "program": prog, "pes": pes, "rc": 0 if passed else 1,
            "passed": passed, "ok_lines": pes if passed else 0, "wall_s": wall, "figures": figs}


def test_compare_report_takes_medians_of_passed_runs_and_names_failures(tmp_path):
    runs(tmp_path / "compare.jsonl", [
        row("ours", "ping_pong", 2, p_latency_us=0.40, put_bw_GBps=100.0, rounds=1000),
        row("ours", "ping_pong", 2, p_latency_us=0.50, put_bw_GBps=120.0),
        row("ours", "ping_pong", 2, p_latency_us=0.45, put_bw_GBps=110.0),
        row("nvidia", "ping_pong", 2, p_latency_us=0.90, put_bw_GBps=55.0),
        row("nvidia", "ping_pong", 2, passed=False, p_latency_us=0.01),
        row("nvidia", "plugin", 2, passed=False),
        row("ours", "plugin", 2),
        row("ours", "team_split", 2, team=4, member=0),
        row("nvidia", "team_split", 2, team=6, member=0),
    ])
    (tmp_path / "builds.txt").write_text("ring nvidia built\nring-without-rdc nvidia failed: ptxas fatal\n")
    md = run("compare_report.py", tmp_path)
    # Medians over passed runs only (the failed NVIDIA run's 0.01 is ignored); ours / theirs.
    assert "| ping_pong | 2 | p_latency_us (µs) | 0.45 | 0.9 | 0.50 | lower |" in md
    assert "| ping_pong | 2 | put_bw_GBps (GB/s) | 110 | 55.0 | 2.00 | higher |" in md
    assert "rounds" not in md.split("## Figures")[1]
    assert "team_split" not in md.split("## Figures")[1].split("## Runs that")[0]
    assert "| ping_pong | 2 | 3 of 3 | 1 of 2 |" in md
    assert "| plugin | 2 | 1 of 1 | 0 of 1 |" in md
    assert "- nvidia plugin on 2 PEs: exit 1, 0 OK lines: `no message`" in md
    assert "| ring-without-rdc | failed: ptxas fatal |" in md


def coll_json(path, rows):
    with open(path, "w") as f:
        json.dump({"results": [{"test": t, "size": s, "median": m} for t, s, m in rows]}, f)


def test_multi_report_checks_the_collective_goals_and_lists_what_did_not_run(tmp_path):
    (tmp_path / "machine.txt").write_text("0, NVIDIA H200, 0:6, 580\n1, NVIDIA H200, 0:7, 580\n")
    coll = tmp_path / "coll"
    coll.mkdir()
    (coll / "coll.md").write_text("| collective | bytes per PE |\n")
    (coll / "coll-4pe.md").write_text("| fcollect_latency | 4096 | 9.00 | 27.00 | 3.00 |\n")
    # allreduce: 2.5x at 4 KiB but 1.5x at 64 KiB -> not met; fcollect small: 3x -> met;
    # fcollect large: 0.95x -> met; barrier 1.5 µs (the block form is faster) -> met.
    coll_json(coll / "pshmem-coll.json", [
        ("reduce_latency", 4096, 4.0), ("reduce_latency", 65536, 10.0),
        ("fcollect_latency", 4096, 3.0), ("fcollect_latency", 16 << 20, 100.0),
        ("barrier_latency", 0, 3.0)])
    coll_json(coll / "pshmem-coll-block.json", [("barrier_latency", 0, 1.5)])
    coll_json(coll / "nccl-coll.json", [
        ("reduce_latency", 4096, 10.0), ("reduce_latency", 65536, 15.0),
        ("fcollect_latency", 4096, 9.0), ("fcollect_latency", 16 << 20, 95.0),
        ("barrier_latency", 0, 20.0)])
    md = run("multi_report.py", tmp_path, "h200-x2")
    assert "# Multi-GPU runs — h200-x2" in md
    assert "One GPU" not in md
    assert "On 4 GPUs (world team of 4 PEs, NCCL with 4 ranks), same run:\n\n| fcollect_latency | 4096 |" in md
    assert "| allreduce ≤ 64 KiB ≥ 2× NCCL | NCCL / ours 1.50–2.50 (worst at 65536 B) | **no** |" in md
    assert "| fcollect ≤ 1 MiB ≥ 2× NCCL | NCCL / ours 3.00–3.00 (worst at 4096 B) | yes |" in md
    assert "| fcollect ≥ 16 MiB ≥ 0.9× NCCL | NCCL / ours 0.95–0.95 (worst at 16777216 B) | yes |" in md
    assert "| device barrier across 2 GPUs ≤ 2 µs | 1.50 µs | yes |" in md
    not_run = md.split("## Not run, and why")[1]
    for part in ("part `test`", "part `examples`", "part `ep`", "part `p2p`"):
        assert part in not_run
    assert "collectives beside NCCL" not in not_run


def test_multi_report_shows_our_collectives_when_nccls_run_left_nothing(tmp_path):
    # 2 H200s, 2026-11-26: NCCL's script died after ours had finished; ours must still show,
    # marked as without a baseline, and the missing side must be listed.
    (tmp_path / "machine.txt").write_text("0, NVIDIA H200, 0:6, 580\n1, NVIDIA H200, 0:7, 580\n")
    coll = tmp_path / "coll"
    coll.mkdir()
    coll_json(coll / "pshmem-coll.json", [("reduce_latency", 4096, 4.25), ("barrier_latency", 0, 3.0)])
    coll_json(coll / "pshmem-coll-block.json", [("reduce_latency", 4096, 2.5)])
    md = run("multi_report.py", tmp_path, "h200-x2")
    section = md.split("## 2.")[1].split("## 3.")[0]
    assert "**NCCL's side is missing**" in section
    assert "| reduce_latency | 4096 | 4.25 | 2.50 |" in section
    assert "| barrier_latency | 0 | 3.00 | — |" in section
    assert "NCCL's collectives (part `coll`): its run left no results" in md.split("## Not run, and why")[1]


# A filed folder keeps the point-to-point result as p2p/p2p.json only (the run's result.json is
# the same bytes, dropped by scripts/multi-gpu-report.sh): the report reads either.
@pytest.mark.parametrize("p2p_file", ["result.json", "p2p.json"])
def test_multi_report_lists_what_a_partial_run_lacks(tmp_path, p2p_file):
    (tmp_path / "machine.txt").write_text("0, NVIDIA H200, 0:6, 580\n1, NVIDIA H200, 0:7, 580\n")
    (tmp_path / "gpu-test-ring-ops").mkdir()
    (tmp_path / "gpu-test-ring-ops" / "gpu-tests.log").write_text("== a\ngpu-test: passed (log: x)\n")
    (tmp_path / "gpu-test-python").mkdir()
    (tmp_path / "p2p").mkdir()
    (tmp_path / "p2p" / p2p_file).write_text(json.dumps({"rows": [
        {"table": "nvlink", "runtime": "nvshmem"}, {"table": "nvlink", "runtime": "proxyshmem"},
        {"table": "nvlink", "runtime": "nccl"}]}))
    (tmp_path / "ep").mkdir()
    (tmp_path / "ep" / "ep-ll.json").write_text(json.dumps([{"pes": 2}, {"pes": 4}]))
    (tmp_path / "ep" / "ep-ht.json").write_text(json.dumps([{"pes": 2}]))
    (tmp_path / "examples").mkdir()
    runs(tmp_path / "examples" / "compare.jsonl", [row("ours", "ring", 2)])
    not_run = run("multi_report.py", tmp_path).split("## Not run, and why")[1]
    assert "the GPU test script's parts `perf`, `nvshmem`, `ep`, `ht`: not in this folder" in not_run
    assert ("point to point (`p2p`): ours through the network path, the copy engine, NCCL's socket "
            "transport, the proxy machinery: not in this folder") in not_run
    assert "MoE normal-mode at EP 4: not in this folder" in not_run
    assert "MoE low-latency" not in not_run
    assert "the NVSHMEM-compatible programs at 4 PEs: not in this folder" in not_run


def test_multi_report_on_one_gpu_says_why_nccl_did_not_run(tmp_path):
    (tmp_path / "machine.txt").write_text("0, NVIDIA H100 80GB HBM3, 0:7, 580\n")
    d = tmp_path / "gpu-test-all"
    d.mkdir()
    (d / "gpu-tests.log").write_text("== a\n== b\ngpu-test: passed (log: x)\n")
    md = run("multi_report.py", tmp_path)
    assert "**One GPU**" in md
    assert "- `gpu-test-all`: gpu-test: passed (log: x) — 2 steps" in md
    assert "Not run: needs 2 GPUs (NCCL runs one rank per GPU)." in md


def record(output, side="ours", pes=2, rc=0):
    res = subprocess.run([sys.executable, os.path.join(GPU, "compare_report.py"), "--record", side,
                          "ping_pong", str(pes), str(rc), "10.0", "12.5"],
                         input=output, capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def test_a_run_is_recorded_from_either_launchers_output():
    ours = ("[1] OK ping_pong pe=1 n=2 p_latency_us=0.4 put_bw_GBps=0.0\n"
            "[0] OK ping_pong pe=0 n=2 p_latency_us=0.492 put_bw_GBps=1321.0 blocks=32\n")
    r = record(ours)
    assert r["passed"] and r["ok_lines"] == 2 and r["wall_s"] == 2.5 and r["why"] == ""
    assert r["figures"] == {"p_latency_us": 0.492, "put_bw_GBps": 1321.0, "blocks": 32.0}
    # mpirun's lines carry no rank prefix; one PE missing its OK line fails the run.
    r = record("OK ping_pong pe=0 n=2 p_latency_us=0.8\n", side="nvidia")
    assert not r["passed"] and r["ok_lines"] == 1 and r["figures"] == {"p_latency_us": 0.8}
    r = record("x\n[/src/team.cu:64] Called NVSHMEM API not supported with limited MPG runs\n",
               side="nvidia", rc=255)
    assert not r["passed"] and r["why"].startswith("[/src/team.cu:64] Called NVSHMEM API not supported")


def test_the_reason_is_read_without_log_colours_and_names_a_busy_gpu():
    out = ("[1] common.h:34: cudaSetDevice(0): CUDA-capable device(s) is/are busy or unavailable\n"
           "[0] \x1b[2m2026-11-25T04:04:46Z\x1b[0m \x1b[31mERROR\x1b[0m rank 1 died\n")
    r = record(out, rc=2)
    assert r["why"] == "common.h:34: cudaSetDevice(0): CUDA-capable device(s) is/are busy or unavailable"
    assert "\x1b" not in record("[0] \x1b[31mERROR\x1b[0m rank 1 died\n", rc=2)["why"]


def test_startup_report_takes_the_slowest_pe_per_job_and_skips_failed_jobs(tmp_path):
    from datetime import datetime, timezone
    t0 = 1795564800.0  # 2026-11-25T00:00:00Z

    def at(secs):
        return datetime.fromtimestamp(t0 + secs, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def job(rep, pes, rc, wall, ctx_ms, floor):
        # Bootstrap done at 0.2 s, init at 0.5 s; the GPU part starts 0.1 s later and takes
        # ctx + 5 ms; the job ends `wall` ms after its start.
        lines = [f"[{pe}] {at(0.2)}  INFO pshmem: PE {pe}: the bootstrap took 2.5 ms" for pe in range(pes)]
        lines += [f"[{pe}] {at(0.5)}  INFO pshmem::startup: PE {pe}: init (after the bootstrap) "
                  f"took 300.0 ms: topology 100.0, provider 200.0" for pe in range(pes)]
        lines += [f"[{pe}] {at(0.6 + (ctx_ms[pe] + 5) / 1e3)}  INFO pshmem::startup: PE {pe}: GPU init took "
                  f"{ctx_ms[pe] + 5:.1f} ms: context {ctx_ms[pe]:.1f}, heap 5.0" for pe in range(pes)]
        lines.append(f"[0] OK done init_ms=100.0 gpu_init_ms={max(ctx_ms) + 5} finalize_ms=3.0 drop_ms=1.0")
        lines.append(f"JOB pes={pes} rep={rep} rc={rc} start={t0} end={t0 + wall / 1e3} wall_ms={wall}")
        lines.append(f"FLOOR pes={pes} wall_ms={floor} ok=1")
        (tmp_path / f"startup-{pes}-{rep}.log").write_text("\n".join(lines) + "\n")

    job(1, 2, 0, 1000.0, [300.0, 400.0], 250.0)
    job(2, 2, 0, 1200.0, [500.0, 100.0], 270.0)
    job(3, 2, 0, 1400.0, [200.0, 600.0], 260.0)
    job(4, 2, 1, 9000.0, [9000.0, 9000.0], 1.0)
    run("startup_report.py", tmp_path)
    md = (tmp_path / "startup.md").read_text()
    # The failed job (rep 4) is counted, not measured; each job's slowest PE: 400, 500, 600.
    assert "## 2 PEs (3 jobs, 1 failed)" in md
    assert "Job wall time 1200.0 ms; floor 260.0 ms." in md
    assert "| GPU init | context | 500.0 |" in md
    assert "| GPU init | total | 505.0 |" in md
    assert "| init (after the bootstrap) | provider | 200.0 |" in md
    assert "| test program | finalize_ms | 3.0 |" in md
    assert "| bootstrap | total | 2.5 |" in md
    # The timeline from the lines' times: the bootstrap ended 200 ms after launch; the GPU part
    # started 100 ms after init; the job ended wall - (600 + slowest GPU init) ms after it.
    assert "| timeline | launch to bootstrap | 200.0 |" in md
    assert "| timeline | init to GPU init | 100.0 |" in md
    # Per job: 1000 - 1005, 1200 - 1105, 1400 - 1205 -> median 95.
    assert "| timeline | last init to job end | 95.0 |" in md
    data = json.loads((tmp_path / "startup.json").read_text())
    assert data["2"]["jobs"] == 3 and data["2"]["wall_ms"] == 1200.0


def test_ep_reports_say_whether_ranks_shared_gpus(tmp_path):
    # The MoE reports once said "several PEs share one GPU under MPS" of every run, also of EP 2
    # on 2 H200s (one rank per GPU, over NVLink).
    sys.path.insert(0, os.path.join(ROOT, "ep", "bench"))
    import common

    assert common.sharing(tmp_path, [2]) == ""
    (tmp_path / "machine.txt").write_text("0, NVIDIA H200, 580\n1, NVIDIA H200, 580\n")
    assert common.sharing(tmp_path, [2]).startswith("One EP rank per GPU (2 GPUs)")
    assert common.sharing(tmp_path, [2, 4, 8]).startswith("At EP 4, 8 the ranks outnumber the 2 GPU(s)")
