"""The packed raw files of benches/results (scripts/results.sh): every folder is packed, the
archives extract, and the summaries other tools read (the MoE benchmarks' JSON, a multi-GPU
REPORT.md) are remade byte for byte from them by their generators. The raw files are otherwise
read only when someone regenerates a report, which is when a broken archive would be found."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "benches", "results")
SCRIPT = os.path.join(ROOT, "scripts", "results.sh")


def results(*args, check=True):
    return subprocess.run(["bash", SCRIPT, *map(str, args)], capture_output=True, text=True,
                          check=check)


def files(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def folders():
    return sorted(n for n in os.listdir(RESULTS) if os.path.isdir(os.path.join(RESULTS, n)))


@pytest.mark.parametrize("name", folders())
def test_no_raw_file_lies_outside_the_archive(tmp_path, name):
    # Packing a copy must find nothing to do: a log or per-run JSON added to the folder by hand
    # and committed unpacked fails here.
    copy = tmp_path / name
    shutil.copytree(os.path.join(RESULTS, name), copy)
    out = results("pack", copy).stdout
    assert "nothing to pack" in out, out
    assert files(copy) == files(os.path.join(RESULTS, name))


def generator(*args):
    return [sys.executable, *(os.path.join(ROOT, a) if a.endswith(".py") else a for a in args)]


# (folder, command run in the unpacked copy, what it writes there, the committed file to match).
# The MoE JSON are the EFA model's inputs; REPORT.md is built from nearly every kind of raw file a
# multi-GPU run leaves (the GPU test logs, collectives, the NVSHMEM comparison, the Python JSON).
REMADE = [
    ("ep-ll-h100", ["ep/bench/report.py", "raw"], "raw/ep-ll.json", "ep-ll.json"),
    ("ep-ht-h100", ["ep/bench/ht_report.py", "raw"], "raw/ep-ht.json", "ep-ht.json"),
    ("proxy-hold-h100", ["ep/bench/ab_report.py", "."], "ab.json", "ab.json"),
    ("h200-x2-multi", ["benches/gpu/multi_report.py", ".", "h200-x2-multi"], None, "REPORT.md"),
]


@pytest.mark.parametrize("name,cmd,made,committed", REMADE, ids=[r[0] for r in REMADE])
def test_a_summary_is_remade_from_the_archive(tmp_path, name, cmd, made, committed):
    assert os.path.isfile(os.path.join(RESULTS, name, "raw.tar.xz"))
    dest = tmp_path / name
    assert results("unpack", os.path.join(RESULTS, name), dest).stdout.strip() == str(dest)
    if made:
        # The copy of the committed file must not stand in for the generator's output.
        (dest / made).unlink(missing_ok=True)
    res = subprocess.run(generator(*cmd), cwd=dest, capture_output=True, check=True)
    got = read(dest / made) if made else res.stdout
    assert got == read(os.path.join(RESULTS, name, committed))


def test_packing_the_same_files_again_gives_the_same_archive(tmp_path):
    src = os.path.join(RESULTS, "ep-ll-h100")
    dest = tmp_path / "ep-ll-h100"
    results("unpack", src, dest)
    assert not (dest / "raw.tar.xz").exists() and (dest / "raw" / "machine.txt").exists()
    results("pack", dest)
    assert read(dest / "raw.tar.xz") == read(os.path.join(src, "raw.tar.xz"))
    assert files(dest) == files(src)


def test_a_damaged_archive_does_not_unpack(tmp_path):
    copy = tmp_path / "ep-ll-h100"
    shutil.copytree(os.path.join(RESULTS, "ep-ll-h100"), copy)
    data = bytearray(read(copy / "raw.tar.xz"))
    data[len(data) // 2] ^= 0xFF
    (copy / "raw.tar.xz").write_bytes(bytes(data))
    assert results("unpack", copy, tmp_path / "out", check=False).returncode != 0


def test_unpack_does_not_write_into_the_results(tmp_path):
    inside = os.path.join(RESULTS, "ep-ll-h100", "unpacked")
    res = results("unpack", os.path.join(RESULTS, "ep-ll-h100"), inside, check=False)
    assert res.returncode != 0 and "inside the results" in res.stderr
    assert not os.path.exists(inside)
