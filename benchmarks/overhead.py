"""What it costs a training loop to be watched: the Meter against the bare loop and the anchors.

A tight loop of fixed steps is timed bare and under a tool, in alternating blocks inside one
process, so the bare loop it is compared with ran on the same process, tensors and core a
moment earlier (process-to-process differences of a percent or more would otherwise drown the
figures). The step is, by ``--step``: ``sleep`` (default: the host waits through the step, as
it waits for a GPU), ``torch`` (matrix products calibrated to the step length on one torch
thread; the GIL is free inside them, but their speed varies by a few percent between blocks on
a shared machine), ``spin`` (a pure-Python busy wait: the worst case for any tool with a
background thread, which then competes with the step for the GIL) or ``none`` (no work at all:
what watching costs per step laid bare, the writer thread's work included, since it then
needs the GIL the loop holds). Each step gets a new batch
tensor by default (``--loader slices``: a slice of data in memory, as any loader yields a new
batch); ``--loader same`` yields one tensor over and over, so that no torch code runs between
two steps and any read of the batch finds torch out of the CPU's caches (a worst case no real
loader produces). The tools:

- ``trainpace``: ``trainpace.Meter`` with its defaults: run folder, console line (to
  /dev/null), background sampler at 10 Hz, FLOPs counted on the first step. A fresh Meter per
  block, so its sampler thread runs only during its own blocks.
- ``floor``: the least any step timer can do: three clock reads, the batch's length and a
  small record per step, appended to a list. What it costs is what this machine charges for
  *any* instrumentation.
- ``lightning``: Lightning Fabric's ``ThroughputMonitor``, ``update`` + ``compute_and_log``
  every step (its documented use).
- ``traceml``: TraceML's ``trace_step`` with its aggregator (``traceml serve``). TraceML is
  initialised once per process, so its background threads also run during the bare blocks
  of its process: its figure is its per-step cost, not its background cost.

Each tool runs in its own process; the first tenth of each block (imports, set-up, warm-up)
is left out. Overhead = median over rounds of (tool block − bare block), per step. Lightning
and TraceML are optional (``pip install lightning traceml-ai``).

    python benchmarks/overhead.py                # 6 rounds per tool and step length
    python benchmarks/overhead.py --quick        # 3 rounds, shorter blocks
    python benchmarks/overhead.py --step spin    # or torch
    python benchmarks/overhead.py --step none    # no work: µs per step against the floor
    python benchmarks/overhead.py --loader same  # one batch tensor over and over: worst case
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOOLS = ("floor", "trainpace", "lightning", "traceml")
STEP_MS = (1.0, 10.0)
TARGETS_PCT = {1.0: 2.0, 10.0: 0.5}
NO_WORK = (0.0,)  # --step none: steps of no work, the cost per step laid bare
NO_WORK_TARGET_US = 10.0
MATRIX = 192  # one product: ~0.1 ms on one thread of a current CPU core


def make_step(kind: str, step_ms: float, iters: int) -> Callable[[], None]:
    """The work of one step: ``iters`` matrix products, a wait of ``step_ms``, or nothing."""
    import torch

    if kind == "none":
        def nothing() -> None:
            pass

        return nothing
    if kind == "sleep":
        seconds = step_ms / 1000.0

        def wait() -> None:
            time.sleep(seconds)  # the host waits for the device, the GIL free

        return wait
    if kind == "spin":
        seconds = step_ms / 1000.0

        def spin() -> None:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass

        return spin
    a = torch.randn(MATRIX, MATRIX)
    out = torch.empty(MATRIX, MATRIX)

    def products() -> None:
        for _ in range(iters):
            torch.mm(a, a, out=out)

    return products


def calibrate(step_ms: float) -> int:
    """Matrix products per step for ``step_ms`` on one torch thread (best of several tries)."""
    import torch

    torch.set_num_threads(1)
    probe = make_step("torch", step_ms, 50)
    probe()
    best = math.inf
    for _ in range(7):
        started = time.perf_counter()
        probe()
        best = min(best, (time.perf_counter() - started) / 50)
    return max(1, round(step_ms / 1000.0 / best))


def timed_block(run: Callable[[Callable[[], None]], None], step: Callable[[], None]) -> float:
    """Mean cycle (s) of the steps ``run`` drives, the first tenth left out."""
    ends: list[float] = []

    def step_and_mark() -> None:
        step()
        ends.append(time.perf_counter())

    started = time.perf_counter()
    run(step_and_mark)
    cycles = [b - a for a, b in zip([started, *ends[:-1]], ends, strict=True)]
    return statistics.fmean(cycles[len(cycles) // 10 :])


class Batches:
    """The loop's loader: ``steps`` batches of 32 samples. ``slices`` (default) yields a new
    tensor per step, a slice of data held in memory, as any loader yields a new batch (and
    runs torch code to make it); ``same`` yields one tensor over and over, which no loader
    does: nothing then runs torch between two steps, the worst case for a tool that reads
    the batch."""

    def __init__(self, steps: int, kind: str) -> None:
        import torch

        self.steps, self.kind = steps, kind
        self.data = torch.zeros(32 * steps, 16)

    def __iter__(self) -> Any:
        data = self.data
        if self.kind == "same":
            batch = data[:32]
            for _ in range(self.steps):
                yield batch
        else:
            for i in range(self.steps):
                yield data[32 * i: 32 * (i + 1)]


def tool_runner(tool: str, steps: int, out: Path, port: int,
                loader: str = "slices") -> Callable[[Callable[[], None]], None]:
    """A function that runs ``steps`` steps under ``tool`` (a fresh instance per call)."""
    import torch

    batches = Batches(steps, loader)
    counter = iter(range(1_000_000))

    if tool == "bare":
        def bare(step: Callable[[], None]) -> None:
            for _ in batches:
                step()
        return bare
    if tool == "floor":
        def floor(step: Callable[[], None]) -> None:
            clock, records = time.perf_counter, []
            previous = clock()
            iterator = iter(batches)
            while True:
                started = clock()
                try:
                    b = next(iterator)
                except StopIteration:
                    return
                waited = clock() - started
                step()
                now = clock()
                records.append((now - previous, waited, b.shape[0]))
                previous = now
        return floor
    if tool == "trainpace":
        import trainpace

        def metered(step: Callable[[], None]) -> None:
            with open(os.devnull, "w") as devnull:
                meter = trainpace.Meter(out / f"run{next(counter)}", stream=devnull, report=False)
                for b in meter.loader(batches):
                    with meter.step(b):
                        step()
                meter.finish()
        return metered
    if tool == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.utilities.throughput import ThroughputMonitor

        fabric = Fabric(accelerator="cpu", devices=1)

        def monitored(step: Callable[[], None]) -> None:
            monitor = ThroughputMonitor(fabric, window_size=100)
            t0 = time.perf_counter()
            for i, b in enumerate(batches, start=1):
                step()
                monitor.update(time=time.perf_counter() - t0, batches=i, samples=i * b.shape[0])
                monitor.compute_and_log(step=i)
        return monitored
    if tool == "traceml":
        import traceml_ai

        traceml_ai.init(mode="manual", ui_mode="summary", aggregator_port=port,
                        logs_dir=str(out / "traceml"), on_missing_aggregator="raise")
        model = torch.nn.Linear(16, 16)

        def traced(step: Callable[[], None]) -> None:
            for _ in batches:
                with traceml_ai.trace_step(model):
                    step()
        return traced
    raise SystemExit(f"unknown tool {tool!r}")


def worker(tool: str, kind: str, step_ms: float, iters: int, steps: int, rounds: int,
           out: Path, port: int, loader: str) -> dict[str, Any]:
    """Alternate bare and ``tool`` blocks in this process; the paired per-step differences."""
    import torch

    torch.set_num_threads(1)
    step = make_step(kind, step_ms, iters)
    bare = tool_runner("bare", steps, out, port, loader)
    tooled = tool_runner(tool, steps, out, port, loader)
    timed_block(bare, step)  # warm the caches and the allocator for both
    bare_s, tool_s = [], []
    for r in range(rounds):
        if r % 2 == 0:
            bare_s.append(timed_block(bare, step))
            tool_s.append(timed_block(tooled, step))
        else:
            tool_s.append(timed_block(tooled, step))
            bare_s.append(timed_block(bare, step))
    return {"bare_s": bare_s, "tool_s": tool_s}


def available(tool: str) -> bool:
    module = {"floor": "torch", "trainpace": "trainpace", "lightning": "lightning",
              "traceml": "traceml_ai"}[tool]
    return importlib.util.find_spec(module) is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_traceml(port: int, logs: Path) -> subprocess.Popen[bytes] | None:
    """``traceml serve`` in the background, once its port answers; None if it does not."""
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
    parser.add_argument("--quick", action="store_true", help="3 rounds, shorter blocks")
    parser.add_argument("--rounds", type=int, default=None, help="bare/tool block pairs")
    parser.add_argument("--step", choices=("sleep", "torch", "spin", "none"), default="sleep",
                        help="the step: a sleep (default: the host waiting for a GPU), matrix "
                        "products on one thread, a Python busy wait (holds the GIL), or no "
                        "work at all (what watching costs per step, the writer's work included)")
    parser.add_argument("--loader", choices=("slices", "same"), default="slices",
                        help="a new batch tensor per step (default, as any loader yields), or "
                        "one tensor over and over (nothing runs torch between steps: the "
                        "worst case for a tool that reads the batch)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--step-ms", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--iters", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 6)
    if args.worker:
        print(json.dumps(worker(args.worker, args.step, args.step_ms, args.iters, args.steps,
                                rounds, Path(args.out), args.port, args.loader)))
        return 0

    step_ms = NO_WORK if args.step == "none" else STEP_MS
    steps_for = {1.0: 500 if args.quick else 1000, 10.0: 100 if args.quick else 300,
                 0.0: 5000 if args.quick else 20000}
    tools = [t for t in TOOLS if available(t)]
    missing = [t for t in TOOLS if t not in tools]
    iters = ({ms: calibrate(ms) for ms in STEP_MS} if args.step == "torch"
             else dict.fromkeys(step_ms, 1))
    if args.step == "torch":
        print(f"calibrated: {iters[1.0]} and {iters[10.0]} products of {MATRIX}x{MATRIX} for "
              "1 ms and 10 ms steps", file=sys.stderr)
    results: dict[float, dict[str, dict[str, list[float]]]] = {ms: {} for ms in step_ms}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_traceml(port, Path(tmp) / "traceml-logs") if "traceml" in tools else None
        if "traceml" in tools and server is None:
            tools.remove("traceml")
            missing.append("traceml (its aggregator did not start)")
        try:
            for ms in step_ms:
                for tool in tools:
                    out = Path(tmp) / f"{tool}-{ms}"
                    out.mkdir()
                    print(f"  {ms:g} ms steps, {tool}: {rounds} rounds of "
                          f"{steps_for[ms]} steps", file=sys.stderr)
                    line = subprocess.run(
                        [sys.executable, __file__, "--worker", tool, "--step", args.step,
                         "--loader", args.loader,
                         "--step-ms", str(ms), "--iters", str(iters[ms]),
                         "--steps", str(steps_for[ms]), "--rounds", str(rounds),
                         "--out", str(out), "--port", str(port)],
                        check=True, capture_output=True, text=True,
                    ).stdout.strip().splitlines()[-1]
                    results[ms][tool] = json.loads(line)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)

    report: dict[str, Any] = {"rounds": rounds, "step": args.step, "loader": args.loader,
                              "missing": missing, "steps": {}}
    print(f"\nPer-step overhead against the bare loop ({args.step} steps, {args.loader} "
          f"batches; median over {rounds} paired bare/tool blocks in one process; window work "
          "included)")
    print(f"{'step':>6} {'tool':>10} {'bare ms':>9} {'overhead µs':>12} {'overhead %':>11} "
          f"{'÷ trainpace':>12}")
    for ms in step_ms:
        rows: dict[str, dict[str, float | None]] = {}
        for tool in tools:
            figures = results[ms][tool]
            diffs = [t - b for t, b in zip(figures["tool_s"], figures["bare_s"], strict=True)]
            bare = statistics.median(figures["bare_s"])
            over = statistics.median(diffs)
            rows[tool] = {"bare_ms": bare * 1e3, "overhead_us": over * 1e6,
                          "overhead_pct": 100 * over / bare}
        ours = rows.get("trainpace", {}).get("overhead_us")
        for tool, row in rows.items():
            ratio = (row["overhead_us"] / ours  # type: ignore[operator]
                     if tool not in ("trainpace", "floor") and ours and ours > 0 else None)
            row["overhead_x_trainpace"] = ratio
            print(f"{ms:>4g}ms {tool:>10} {row['bare_ms']:>9.3f} {row['overhead_us']:>12.1f} "
                  f"{row['overhead_pct']:>10.3f}% {(f'{ratio:.1f}x' if ratio else ''):>12}")
        floor = rows.get("floor", {}).get("overhead_us")
        if ms == 0.0 and ours is not None:
            verdict = "meets" if ours <= NO_WORK_TARGET_US else "MISSES"
            print(f"       trainpace {verdict} its target of <= {NO_WORK_TARGET_US:g} µs per step "
                  f"with no work" + (f"; {ours / floor:.1f}x the floor" if floor else ""))
            report["steps"]["none"] = rows
            continue
        if "trainpace" in rows:
            pct = rows["trainpace"]["overhead_pct"]
            assert pct is not None
            verdict = "meets" if pct <= TARGETS_PCT[ms] else "MISSES"
            print(f"       trainpace {verdict} its target of <= {TARGETS_PCT[ms]}% at "
                  f"{ms:g} ms steps")
        report["steps"][f"{ms:g}ms"] = rows
    if missing:
        print(f"not measured: {', '.join(missing)} (pip install lightning traceml-ai)")
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
