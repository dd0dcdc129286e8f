"""What it costs to read a long run back: ``report --json``, ``report --html`` and ``compare``.

Builds a run folder of ``--steps`` steps (default 1e6: days of training at window 100) whose
``steps.jsonl`` lines are what the Meter writes (every StepRecord key; step times of ~30 ms
with noise, a data wait, a loss curve, a stall every 10k steps) and a ``system.jsonl`` of one
sampler row per 100 steps, then times, each in a fresh process:

- ``bare``: the floor: ``orjson.loads`` of each line of ``steps.jsonl``, nothing kept;
- ``report --json``, ``report --html FILE`` and ``compare RUN RUN`` (two copies of the run, so
  twice the lines), through ``trainpace.cli.main``.

Each process times its own work (after its imports) and reports its peak RSS and its RSS after
the imports; the figures printed are ratios to the bare parse of the same lines measured in
the same run (compare: to two bare parses), and the peak RSS above the interpreter's
after its imports. Rounds alternate the commands and the median is kept. Targets (issue 9):
time within 3× the bare parse, memory within 150 MB for 1e6 steps.

    python benchmarks/report.py                 # 1e6 steps, 3 rounds
    python benchmarks/report.py --steps 100000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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
    import trainpace.diagnose, trainpace.measure.summarize, trainpace.report.run_html
    import trainpace.compare, trainpace.report.console, trainpace.runlog
base = status_mb("VmRSS")
start = time.perf_counter()
if mode == "bare":
    for path in args:
        with open(path, "rb") as f:
            for line in f:
                orjson.loads(line)
else:
    devnull = open(os.devnull, "w")
    sys.stdout = devnull
    code = trainpace.cli.main(args)
    sys.stdout = sys.__stdout__
    assert code == 0, code
elapsed = time.perf_counter() - start
peak = status_mb("VmHWM")
print(orjson.dumps({"s": elapsed, "base_mb": base, "peak_mb": peak}).decode())
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


def child(mode: str, *args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, *args], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


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
        steps_file = str(run_a / "steps.jsonl")
        size_mb = (run_a / "steps.jsonl").stat().st_size / 1e6
        commands = {
            "bare": ("bare", steps_file),
            "report --json": ("cli", "report", str(run_a), "--json"),
            "report --html": ("cli", "report", str(run_a), "--html", str(tmp / "r.html")),
            "compare": ("cli", "compare", str(run_a), str(run_b)),
        }
        results: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, command in commands.items():
                results[name].append(child(*command))
        bare_s = statistics.median(r["s"] for r in results["bare"])
        print(f"{args.steps:,} steps, steps.jsonl {size_mb:.0f} MB; {args.rounds} rounds, "
              f"medians; bare orjson parse of the file: {bare_s:.2f} s")
        print(f"{'command':<16}{'seconds':>9}{'× bare':>9}{'peak RSS above imports':>25}"
              f"{'peak RSS':>11}")
        for name, rows in results.items():
            seconds = statistics.median(r["s"] for r in rows)
            floor = bare_s * (2 if name == "compare" else 1)
            extra = statistics.median(r["peak_mb"] - r["base_mb"] for r in rows)
            peak = statistics.median(r["peak_mb"] for r in rows)
            print(f"{name:<16}{seconds:>9.2f}{seconds / floor:>8.2f}×{extra:>22.0f} MB"
                  f"{peak:>8.0f} MB")
        print("compare's ratio is to two bare parses (it reads both runs); targets: ≤ 3× and "
              "≤ 150 MB above imports for 1e6 steps")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
