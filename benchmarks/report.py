"""What it costs to read a long run back: ``report --json``, ``report --html`` and ``compare``.

Builds a run folder of ``--steps`` steps (default 1e6: days of training at window 100) whose
``steps.jsonl`` lines are what the Meter writes (every StepRecord key; step times of ~30 ms
with noise, a data wait, a loss curve, a stall every 10k steps) and a ``system.jsonl`` of one
sampler row per 100 steps, then times, each in a fresh process:

- ``bare``: the floor: ``orjson.loads`` of each line of ``steps.jsonl``, nothing kept;
- ``report --json``, ``report --html FILE`` and ``compare RUN RUN`` (two copies of the run, so
  twice the lines), through ``trainpace.cli.main``;
- ``crashed --json`` and ``crashed --html``: the same steps in a run that crashed (issue 22): its
  ``summary.json`` from a window 40% before its last step, no ``finished_at``: the summary is
  behind, so every step is read, summarized and diagnosed again.

Each process times its own work (after its imports), in wall time and in CPU time (on a shared
machine the wall time swings with the other processes; the CPU time much less), and reports
its peak RSS (VmHWM) and its RSS after the imports; the figures printed are ratios to the bare
parse of the same lines measured in the same run (compare: to two bare parses), and the peak
RSS above the interpreter's after its imports. A last process runs ``report --html``'s parts
one by one (read, summary, diagnosis, page) to show where the time and memory go. Rounds alternate the commands and the median is kept. Targets (issue 9):
time within 3× the bare parse, memory within 150 MB for 1e6 steps.

    python benchmarks/report.py                 # 1e6 steps, 3 rounds
    python benchmarks/report.py --steps 100000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson

CHILD = r"""
import sys, time, os
mode, args = sys.argv[1], sys.argv[2:]
def status_mb(key):  # VmRSS now, VmHWM the peak of this process (its own, reset by exec)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1e3
    raise KeyError(key)
import orjson
if mode != "bare":
    import trainpace.cli, trainpace.cli._report, trainpace.cli._compare
    import trainpace.diagnosis, trainpace.measure.summarize, trainpace.report.run_html
    import trainpace.comparison, trainpace.report.console, trainpace.runlog
base = status_mb("VmRSS")
start, cpu_start = time.perf_counter(), time.process_time()
phases = {}
if mode == "bare":
    for path in args:
        with open(path, "rb") as f:
            for line in f:
                orjson.loads(line)
elif mode == "phases":  # report --html's parts, one after the other
    import dataclasses
    from trainpace.diagnosis import diagnose
    from trainpace.measure.summarize import summary_for_run
    from trainpace.report.run_html import run_page
    def phase(name, fn):
        t, c = time.perf_counter(), time.process_time()
        value = fn()
        phases[name] = (time.perf_counter() - t, time.process_time() - c,
                        status_mb("VmHWM") - base)
        return value
    run = phase("read_run", lambda: trainpace.runlog.read_run(args[0]))
    summary = phase("summary_for_run", lambda: summary_for_run(run))
    found = phase("diagnose", lambda: diagnose(summary, steps=run.series, system=run.system,
                                               meta=run.meta))
    summary = dataclasses.replace(summary, diagnosis=found)
    phase("run_page", lambda: run_page(summary, series=run.series, system=run.system))
else:
    devnull = open(os.devnull, "w")
    sys.stdout = devnull
    code = trainpace.cli.main(args)
    sys.stdout = sys.__stdout__
    assert code == 0, code
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
peak = status_mb("VmHWM")
print(orjson.dumps({"s": elapsed, "cpu_s": cpu, "base_mb": base, "peak_mb": peak, "phases": phases}).decode())
"""


def build_run(folder: Path, steps: int, seed: int = 0) -> None:
    """A run folder as the Meter leaves it: meta.json, steps.jsonl, system.jsonl (no summary,
    so the report rebuilds every figure from the steps, the costliest path)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    step_s = 0.03 * (1.0 + 0.05 * rng.standard_normal(steps)).clip(0.5)
    step_s[9_999::10_000] += 2.0  # a stall every 10k steps
    wait_s = step_s * 0.38 * (1.0 + 0.1 * rng.standard_normal(steps)).clip(0.0)
    t_s = np.cumsum(step_s)
    loss = 3.0 / (1.0 + np.arange(steps) / 5_000) + 0.05 * rng.standard_normal(steps)
    (folder / "meta.json").write_text(json.dumps({
        "schema": "trainpace.meta/1", "run_id": folder.name, "clock": "host",
        "config": {"warmup": "auto", "smoothing": 0.9, "window": 100},
        "loader": {"num_workers": 2, "batch_size": 64, "pin_memory": False}}))
    with open(folder / "steps.jsonl", "wb") as out:
        for i in range(steps):
            out.write(orjson.dumps({
                "step": i + 1, "t_s": float(t_s[i]), "step_s": float(step_s[i]),
                "wait_s": float(wait_s[i]), "exposed_wait_s": None, "h2d_s": None,
                "samples": 64, "tokens": None, "micro_batches": 1, "loss": float(loss[i]),
                "metric": None, "outside_s": 0.0, "loss_nonfinite": False}) + b"\n")
    with open(folder / "system.jsonl", "wb") as out:
        for t in t_s[::100]:
            out.write(orjson.dumps({"t_s": float(t), "device_util_pct": 60.0,
                                    "memory_used_pct": 40.0, "temperature_c": None,
                                    "bandwidth_util_pct": None, "host": {"cpu_pct": 80.0}})
                      + b"\n")


def build_crashed(folder: Path, source: Path) -> None:
    """``source``'s steps in a run that crashed: a summary.json from an earlier window (it is
    behind the steps), written before them."""
    from trainpace.summary import Steps, Summary, Throughput, Time

    shutil.copytree(source, folder)
    with open(source / "steps.jsonl", "rb") as lines:
        total = sum(1 for _ in lines)
    early = int(total * 0.6)
    stale = Summary(run_id=folder.name, steps=Steps(total=early, warmup=50, measured=early - 50),
                    throughput=Throughput(samples_per_s=2000.0, steps_per_s=31.0),
                    time=Time(wall_s=early * 0.03, step_s_median=0.03))
    (folder / "summary.json").write_text(json.dumps(stale.to_dict()))
    written = (folder / "steps.jsonl").stat().st_mtime
    os.utime(folder / "summary.json", (written - 60, written - 60))


def child(mode: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, *args], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trainpace-report-bench-"))
    try:
        run_a, run_b = tmp / "a", tmp / "b"
        build_run(run_a, args.steps)
        shutil.copytree(run_a, run_b)
        crashed = tmp / "crashed"
        build_crashed(crashed, run_a)
        steps_file = str(run_a / "steps.jsonl")
        size_mb = (run_a / "steps.jsonl").stat().st_size / 1e6
        commands = {
            "bare": ("bare", steps_file),
            "report --json": ("cli", "report", str(run_a), "--json"),
            "report --html": ("cli", "report", str(run_a), "--html", str(tmp / "r.html")),
            "compare": ("cli", "compare", str(run_a), str(run_b)),
            "crashed --json": ("cli", "report", str(crashed), "--json"),
            "crashed --html": ("cli", "report", str(crashed), "--html", str(tmp / "c.html")),
        }
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
        parts: list[dict[str, Any]] = []
        load_before = os.getloadavg()
        for _ in range(args.rounds):
            for name, command in commands.items():
                results[name].append(child(*command))
            parts.append(child("phases", str(run_a))["phases"])
        load_after = os.getloadavg()
        bare_s = statistics.median(r["s"] for r in results["bare"])
        bare_cpu = statistics.median(r["cpu_s"] for r in results["bare"])
        print(f"{args.steps:,} steps, steps.jsonl {size_mb:.0f} MB; {args.rounds} rounds, "
              f"medians; bare orjson parse of the file: {bare_s:.2f} s wall, {bare_cpu:.2f} s CPU")
        print(f"{'command':<16}{'wall s':>8}{'× bare':>8}{'CPU s':>8}{'× bare':>8}"
              f"{'peak RSS above imports':>25}{'peak RSS':>10}")
        for name, rows in results.items():
            seconds = statistics.median(r["s"] for r in rows)
            cpu = statistics.median(r["cpu_s"] for r in rows)
            floor = 2 if name == "compare" else 1
            extra = statistics.median(r["peak_mb"] - r["base_mb"] for r in rows)
            peak = statistics.median(r["peak_mb"] for r in rows)
            print(f"{name:<16}{seconds:>8.2f}{seconds / (floor * bare_s):>7.2f}×{cpu:>8.2f}"
                  f"{cpu / (floor * bare_cpu):>7.2f}×{extra:>22.0f} MB{peak:>7.0f} MB")
        print("compare's ratio is to two bare parses (it reads both runs); targets: ≤ 3× and "
              "≤ 150 MB above imports for 1e6 steps")
        print(f"load average (1, 5, 15 min) before the rounds {_load(load_before)}, after "
              f"{_load(load_after)}; on {os.cpu_count()} CPUs")
        print("report --html by part (in one process, each after the one before; peak RSS "
              "above imports when the part ends):")
        for name in parts[0]:
            seconds = statistics.median(p[name][0] for p in parts)
            cpu = statistics.median(p[name][1] for p in parts)
            peak = statistics.median(p[name][2] for p in parts)
            print(f"  {name:<16}{seconds:>7.2f} s wall{cpu:>7.2f} s CPU ({cpu / bare_cpu:.2f}× "
                  f"the bare parse){peak:>8.0f} MB")
        from results import write_result

        med = statistics.median
        write_result("report", quick=args.steps < 1_000_000, load_before=load_before, rows=[
            {"command": name, "CPU × bare parse": med(r["cpu_s"] for r in runs)
             / ((2 if name == "compare" else 1) * bare_cpu),
             "wall × bare parse": med(r["s"] for r in runs)
             / ((2 if name == "compare" else 1) * bare_s),
             "peak RSS above imports, MB": med(r["peak_mb"] - r["base_mb"] for r in runs)}
            for name, runs in results.items() if name != "bare"],
            figures={"steps": args.steps, "bare parse, CPU s": bare_cpu})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
