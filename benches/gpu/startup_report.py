"""Medians of scripts/startup-profile.sh's logs: the job's wall time, the floor (processes that
only create a CUDA context), each stage the test program times (init, GPU init, finalize) and
each phase the runtime logs (PSHMEM_LOG=info). Writes OUT/startup.json and OUT/startup.md.
Usage: python3 startup_report.py OUT"""

import json
import re
import statistics
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

# "PE 1: GPU init took 812.3 ms: context 301.2, heap 2.0, ..." (runtime/src/startup.rs)
PHASES = re.compile(r"PE (\d+): (.+?) took ([0-9.]+) ms: (.*)$")
BOOTSTRAP = re.compile(r"PE (\d+): the bootstrap took ([0-9.]+) ms")
FIELDS = re.compile(r"(\w+)=([0-9.]+)")


STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")


def stamp(line):
    """The log line's time (tracing's UTC timestamp) in seconds since the epoch, or None."""
    m = STAMP.search(line)
    if not m:
        return None
    return datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc).timestamp()


def timeline(stamps, job):
    """Where the job's wall time went around our init, from the log lines' times: launch to the
    end of the slowest bootstrap (launcher, process start, loading, bootstrap); between init and
    the GPU part (the application's own work, e.g. creating its CUDA context); the last init to
    the job's end (the program, finalize, exit)."""
    out = {}
    if "start" not in job or "end" not in job:
        return out
    start, end = float(job["start"]), float(job["end"])
    boot = stamps.get("bootstrap", [])
    if boot:
        out["launch to bootstrap"] = (max(boot) - start) * 1e3
    init, gpu = stamps.get("init", []), stamps.get("GPU init", [])
    if init and gpu:
        gpu_start = [t - ms / 1e3 for t, ms in gpu]
        out["init to GPU init"] = max(0.0, (max(gpu_start) - max(t for t, _ in init)) * 1e3)
    last = [t for t, _ in init + gpu]
    if last:
        out["last init to job end"] = (end - max(last)) * 1e3
    return out


def parse(text):
    """{(stage, phase): [ms per PE]}, {key: value} of the job's summary lines and the log
    times of the bootstrap's and each init's lines."""
    phases = defaultdict(list)
    lines = {}
    stamps = defaultdict(list)
    for line in text.splitlines():
        m = PHASES.search(line)
        if m:
            stage = m.group(2)
            t = stamp(line)
            if t is not None:
                key = "GPU init" if stage == "GPU init" else "init"
                stamps[key].append((t, float(m.group(3))))
            phases[(stage, "total")].append(float(m.group(3)))
            for part in m.group(4).split(", "):
                name, _, ms = part.rpartition(" ")
                phases[(stage, name)].append(float(ms))
            continue
        m = BOOTSTRAP.search(line)
        if m:
            phases[("bootstrap", "total")].append(float(m.group(2)))
            t = stamp(line)
            if t is not None:
                stamps["bootstrap"].append(t)
            continue
        for tag in ("JOB", "FLOOR"):
            if line.startswith(tag + " "):
                lines[tag] = dict(FIELDS.findall(line))
        if "OK done" in line:
            for k, v in FIELDS.findall(line):
                phases[("test program", k)].append(float(v))
    for k, ms in timeline(stamps, lines.get("JOB", {})).items():
        phases[("timeline", k)].append(ms)
    return phases, lines


def collect(out):
    by_pes = defaultdict(lambda: {"wall": [], "floor": [], "phases": defaultdict(list), "failed": 0})
    for log in sorted(Path(out).glob("startup-*-*.log")):
        phases, lines = parse(log.read_text(errors="replace"))
        job = lines.get("JOB")
        if not job:
            continue
        e = by_pes[int(job["pes"])]
        if job.get("rc") != "0":
            e["failed"] += 1
            continue
        e["wall"].append(float(job["wall_ms"]))
        if "FLOOR" in lines and lines["FLOOR"].get("ok") == "1":
            e["floor"].append(float(lines["FLOOR"]["wall_ms"]))
        # The slowest PE of each job: the job waits for it.
        for key, vals in phases.items():
            e["phases"][key].append(max(vals))
    result = {}
    for n, e in sorted(by_pes.items()):
        med = lambda v: round(statistics.median(v), 1) if v else None
        result[str(n)] = {
            "jobs": len(e["wall"]),
            "failed": e["failed"],
            "wall_ms": med(e["wall"]),
            "floor_ms": med(e["floor"]),
            "phases": [
                {"stage": s, "phase": p, "ms": med(v)} for (s, p), v in e["phases"].items()
            ],
        }
    return result


def markdown(result):
    out = ["# GPU job start-up", "",
           "Medians over the jobs that passed; each phase is the slowest PE's (the job waits "
           "for it). Floor: as many processes that only create a CUDA context, started together.",
           ""]
    for n, r in result.items():
        out += [f"## {n} PEs ({r['jobs']} jobs, {r['failed']} failed)", "",
                f"Job wall time {r['wall_ms']} ms; floor {r['floor_ms']} ms.", "",
                "| stage | phase | ms |", "|---|---|---:|"]
        out += [f"| {p['stage']} | {p['phase']} | {p['ms']} |" for p in r["phases"]]
        out.append("")
    return "\n".join(out)


def main():
    out = Path(sys.argv[1])
    result = collect(out)
    (out / "startup.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "startup.md").write_text(markdown(result) + "\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
