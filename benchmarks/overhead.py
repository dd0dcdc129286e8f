"""What it costs a training loop to be watched: the Meter against the bare loop and the anchors.

A tight loop of fixed-length steps (a spin of exactly 1 ms or 10 ms, so the step itself has
no noise of its own) is run bare, under ``trainpace.Meter`` (run folder, console line,
background sampler: the defaults), under Lightning Fabric's ``ThroughputMonitor`` (update +
compute_and_log every step, its documented use), and under TraceML's ``trace_step`` (with its
aggregator, ``traceml serve``), when those are installed. Each repetition of each variant runs
in a fresh process, the variants alternating, so no tool's threads or patches leak into
another's figures. The figure per repetition is the mean step cycle over all steps (window
boundaries included); the table shows the median over repetitions and the overhead against
the bare loop measured in the same run.

    python benchmarks/overhead.py            # 5 repetitions
    python benchmarks/overhead.py --quick    # 2 repetitions, fewer steps
    pip install lightning traceml-ai         # the anchors (optional)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("bare", "trainpace", "lightning", "traceml")
STEP_MS = (1.0, 10.0)
TARGETS_PCT = {1.0: 2.0, 10.0: 0.5}


def spin(seconds: float) -> None:
    """Busy-wait: a step of exactly known length that does not sleep."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def worker(variant: str, step_ms: float, steps: int, out: Path, port: int) -> dict[str, float]:
    """One repetition of one variant, in this process; returns its cycle statistics."""
    import torch

    step_s = step_ms / 1000.0
    batch = torch.zeros(32, 16)
    batches = [batch] * steps
    cycles: list[float] = []

    if variant == "bare":
        last = time.perf_counter()
        for _ in batches:
            spin(step_s)
            now = time.perf_counter()
            cycles.append(now - last)
            last = now
    elif variant == "trainpace":
        import trainpace

        with open(os.devnull, "w") as devnull:
            meter = trainpace.Meter(out / "run", stream=devnull, report=False)
            last = time.perf_counter()
            for b in meter.loader(batches):
                with meter.step(b):
                    spin(step_s)
                now = time.perf_counter()
                cycles.append(now - last)
                last = now
            meter.finish()
    elif variant == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.utilities.throughput import ThroughputMonitor

        fabric = Fabric(accelerator="cpu", devices=1)
        monitor = ThroughputMonitor(fabric, window_size=100)
        t0 = last = time.perf_counter()
        for i, b in enumerate(batches, start=1):
            spin(step_s)
            monitor.update(time=time.perf_counter() - t0, batches=i, samples=i * b.shape[0])
            monitor.compute_and_log(step=i)
            now = time.perf_counter()
            cycles.append(now - last)
            last = now
    elif variant == "traceml":
        import traceml_ai

        traceml_ai.init(mode="manual", ui_mode="summary", aggregator_port=port,
                        logs_dir=str(out / "traceml"), on_missing_aggregator="raise")
        model = torch.nn.Linear(16, 16)
        last = time.perf_counter()
        for _ in batches:
            with traceml_ai.trace_step(model):
                spin(step_s)
            now = time.perf_counter()
            cycles.append(now - last)
            last = now
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    warm = cycles[len(cycles) // 10 :]  # every tool's first steps pay for imports and set-up
    return {"mean_s": statistics.fmean(warm), "median_s": statistics.median(warm)}


def available(variant: str) -> bool:
    module = {"bare": "torch", "trainpace": "trainpace", "lightning": "lightning",
              "traceml": "traceml_ai"}[variant]
    return importlib.util.find_spec(module) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_traceml(port: int, logs: Path) -> subprocess.Popen[bytes] | None:
    traceml = shutil.which("traceml") or str(Path(sys.executable).with_name("traceml"))
    proc = subprocess.Popen(
        [traceml, "serve", "--mode", "summary", "--aggregator-port", str(port),
         "--logs-dir", str(logs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.5)
    proc.kill()
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions, fewer steps")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--step-ms", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.step_ms, args.steps, Path(args.out), args.port)))
        return 0

    repeats = args.repeats or (2 if args.quick else 5)
    steps_for = {1.0: 1000 if args.quick else 3000, 10.0: 150 if args.quick else 400}
    variants = [v for v in VARIANTS if available(v)]
    missing = [v for v in VARIANTS if v not in variants]
    results: dict[float, dict[str, list[float]]] = {ms: {v: [] for v in variants} for ms in STEP_MS}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_traceml(port, Path(tmp) / "traceml-logs") if "traceml" in variants else None
        if "traceml" in variants and server is None:
            variants.remove("traceml")
            missing.append("traceml (its aggregator did not start)")
        try:
            for rep in range(repeats):
                for ms in STEP_MS:
                    order = variants[rep % len(variants):] + variants[: rep % len(variants)]
                    for variant in order:  # alternating, and the order rotates
                        out = Path(tmp) / f"{variant}-{ms}-{rep}"
                        out.mkdir()
                        line = subprocess.run(
                            [sys.executable, __file__, "--worker", variant, "--step-ms", str(ms),
                             "--steps", str(steps_for[ms]), "--out", str(out), "--port", str(port)],
                            check=True, capture_output=True, text=True,
                        ).stdout.strip().splitlines()[-1]
                        results[ms][variant].append(json.loads(line)["mean_s"])
                        print(f"  rep {rep + 1}/{repeats} {ms:g} ms {variant}: "
                              f"{results[ms][variant][-1] * 1e3:.4f} ms/step", file=sys.stderr)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)

    report: dict[str, object] = {"repeats": repeats, "missing": missing, "steps": {}}
    print(f"\nStep-cycle overhead vs the bare loop (median of {repeats} alternating runs; "
          "mean cycle per run, window work included)")
    print(f"{'step':>6} {'variant':>10} {'ms/step':>10} {'overhead µs':>12} {'overhead %':>11}"
          f" {'vs trainpace':>13}")
    for ms in STEP_MS:
        bare = statistics.median(results[ms]["bare"])
        ours = statistics.median(results[ms]["trainpace"]) - bare
        rows = {}
        for variant in variants:
            value = statistics.median(results[ms][variant])
            over = value - bare
            ratio = over / ours if variant != "trainpace" and ours > 0 else None
            rows[variant] = {"ms_per_step": value * 1e3, "overhead_us": over * 1e6,
                             "overhead_pct": 100 * over / bare,
                             "overhead_x_trainpace": ratio}
            print(f"{ms:>4g}ms {variant:>10} {value * 1e3:>10.4f} {over * 1e6:>12.1f} "
                  f"{100 * over / bare:>10.3f}% "
                  f"{(f'{ratio:.1f}x' if ratio is not None else ''):>13}")
        target = TARGETS_PCT[ms]
        verdict = "meets" if rows["trainpace"]["overhead_pct"] <= target else "MISSES"
        print(f"       trainpace {verdict} its target of <= {target}% at {ms:g} ms steps")
        report["steps"][f"{ms:g}ms"] = rows  # type: ignore[index]
    if missing:
        print(f"not measured: {', '.join(missing)} (pip install lightning traceml-ai)")
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
