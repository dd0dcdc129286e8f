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
  /dev/null), background sampler at its rate for the CPU (once a second), FLOPs counted on
  the first step. A fresh Meter per block, so its sampler thread runs only during its own
  blocks.
- ``trainpace@base``: the same, imported from ``--baseline-src PATH`` (another checkout's
  ``src``, e.g. today's main), measured in the same run as this tree's; the ``÷ base`` column
  is this tree's overhead over it. Only with ``--baseline-src``.
- ``floor``: the least any step timer can do: three clock reads, the batch's length and a
  small record per step, appended to a list. What it costs is what this machine charges for
  *any* instrumentation.
- ``lightning``: Lightning Fabric's ``ThroughputMonitor``, ``update`` + ``compute_and_log``
  every step (its documented use).
- ``traceml``: TraceML's ``trace_step`` with its aggregator (``traceml serve``). TraceML is
  initialised once per process, so its background threads also run during the bare blocks
  of its process: its figure is its per-step cost, not its background cost.

Each tool runs in its own process; the first tenth of each block (imports, set-up, warm-up)
is left out. Overhead = the median over rounds of (tool block − bare block), per step, with
a distribution-free 90% interval for that median and a 20% trimmed mean of the differences
beside it; a target is called met (or missed) only when the whole interval is on one side
of it. Beside the wall time, the training thread's own CPU time per step (``thread_time``,
tool − bare): what the tool runs on the loop's thread, which a loaded machine disturbs less.
The load average is printed with the figures. Lightning and TraceML are optional
(``pip install lightning traceml-ai``).

    python benchmarks/overhead.py                # 12 rounds per tool and step length
    python benchmarks/overhead.py --quick        # 6 rounds, shorter blocks
    python benchmarks/overhead.py --tools floor,trainpace --steps-scale 2  # longer blocks
    python benchmarks/overhead.py --step spin    # or torch
    python benchmarks/overhead.py --step none    # no work: µs per step against the floor
    python benchmarks/overhead.py --loader same  # one batch tensor over and over: worst case
    python benchmarks/overhead.py --baseline-src ../base/src --tools trainpace,trainpace@base
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

TOOLS = ("floor", "trainpace", "trainpace@base", "lightning", "traceml")
SRC = Path(__file__).resolve().parent.parent / "src"  # this tree's trainpace
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


def timed_block(run: Callable[[Callable[[], None]], None],
                step: Callable[[], None]) -> tuple[float, float, float]:
    """Mean cycle (s) of the steps ``run`` drives, the first tenth left out, and over the same
    steps the CPU time per step of the training thread (``time.thread_time``) and of the
    process's other threads (``time.process_time`` less the training thread's: the tool's
    writer and sampler threads)."""
    ends: list[float] = []
    cpu: list[float] = []
    process: list[float] = []
    thread_time, process_time, clock = time.thread_time, time.process_time, time.perf_counter

    def step_and_mark() -> None:
        step()
        ends.append(clock())
        cpu.append(thread_time())
        process.append(process_time())

    started = clock()
    run(step_and_mark)
    cycles = [b - a for a, b in zip([started, *ends[:-1]], ends, strict=True)]
    skip = len(cycles) // 10
    counted = len(cpu) - 1 - skip
    if counted <= 0:
        return statistics.fmean(cycles[skip:]), math.nan, math.nan
    cpu_s = (cpu[-1] - cpu[skip]) / counted
    others_s = (process[-1] - process[skip]) / counted - cpu_s
    return statistics.fmean(cycles[skip:]), cpu_s, others_s


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
    if tool in ("trainpace", "trainpace@base"):  # which one: the worker's PYTHONPATH
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
    timed_block(tooled, step)
    figures: dict[str, list[float]] = {f"{name}_{kind}": [] for name in ("bare", "tool")
                                       for kind in ("s", "cpu_s", "others_cpu_s")}

    def block(name: str, run: Callable[[Callable[[], None]], None]) -> None:
        wall, cpu, others = timed_block(run, step)
        figures[f"{name}_s"].append(wall)
        figures[f"{name}_cpu_s"].append(cpu)
        figures[f"{name}_others_cpu_s"].append(others)

    for r in range(rounds):  # ABBA order: a drift of the machine cancels out of the pairs
        if r % 2 == 0:
            block("bare", bare)
            block("tool", tooled)
        else:
            block("tool", tooled)
            block("bare", bare)
    if tool.startswith("trainpace"):
        import trainpace

        print(f"    {tool}: {Path(trainpace.__file__).parent}", file=sys.stderr)
    return figures


def median_ci(values: list[float], confidence: float = 0.9) -> tuple[float, float]:
    """A distribution-free interval for the median: order statistics k and n-k+1, with k the
    largest for which P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2."""
    ordered = sorted(values)
    n = len(ordered)
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2**n  # P(Bin = k)
        if below > tail:
            break
        k += 1
    if k == 0:  # too few pairs for this confidence: the whole range
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def trimmed_mean(values: list[float], share: float = 0.2) -> float:
    """The mean of ``values`` with ``share`` of them cut off at each end."""
    ordered = sorted(values)
    cut = int(len(ordered) * share)
    return statistics.fmean(ordered[cut: len(ordered) - cut] or ordered)


def estimate(tool: list[float], bare: list[float]) -> dict[str, float]:
    """Per-step overhead from paired blocks: the median of the paired differences, its 90%
    interval, and a 20% trimmed mean of them (µs)."""
    diffs = [t - b for t, b in zip(tool, bare, strict=True)]
    low, high = median_ci(diffs)
    return {"median_us": statistics.median(diffs) * 1e6, "ci_low_us": low * 1e6,
            "ci_high_us": high * 1e6, "trimmed_us": trimmed_mean(diffs) * 1e6}


def verdict(low: float, high: float, target: float) -> str:
    """Whether the interval says the target is met: only when all of it is on one side."""
    if high <= target:
        return "meets"
    if low > target:
        return "MISSES"
    return "is not resolved against (its 90% interval spans)"


def _ratio(ours: float, base: float) -> str:
    """``ours`` over ``base`` as a ratio, or both figures when base is too small to divide by."""
    return f"{ours / base:.2f}x" if base > 0.05 else f"{ours:.1f} vs {base:.1f} µs"


def available(tool: str) -> bool:
    module = {"floor": "torch", "trainpace": "trainpace", "trainpace@base": "trainpace",
              "lightning": "lightning",
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
    parser.add_argument("--tools", default=None,
                        help=f"the tools to measure, comma-separated (default: {','.join(TOOLS)}; "
                        "trainpace@base only with --baseline-src)")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="the src folder of another trainpace checkout, measured beside this "
                        "tree's as trainpace@base")
    parser.add_argument("--steps-scale", type=float, default=1.0,
                        help="longer (>1) or shorter blocks than the default")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--step-ms", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--iters", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds = args.rounds or (6 if args.quick else 12)
    if args.worker:
        print(json.dumps(worker(args.worker, args.step, args.step_ms, args.iters, args.steps,
                                rounds, Path(args.out), args.port, args.loader)))
        return 0

    step_ms = NO_WORK if args.step == "none" else STEP_MS
    steps_for = {1.0: 500 if args.quick else 1000, 10.0: 100 if args.quick else 300,
                 0.0: 5000 if args.quick else 20000}
    steps_for = {ms: max(20, round(n * args.steps_scale)) for ms, n in steps_for.items()}
    if args.baseline_src is not None and not (args.baseline_src / "trainpace").is_dir():
        parser.error(f"--baseline-src: {args.baseline_src} holds no trainpace package; give the "
                     "src folder of a checkout")
    default = [t for t in TOOLS if t != "trainpace@base" or args.baseline_src is not None]
    asked = [t for t in (args.tools.split(",") if args.tools else default) if t]
    if "trainpace@base" in asked and args.baseline_src is None:
        parser.error("--tools: trainpace@base needs --baseline-src PATH")
    unknown = [t for t in asked if t not in TOOLS]
    if unknown:
        parser.error(f"--tools: unknown tool(s) {', '.join(unknown)}; choose from {', '.join(TOOLS)}")
    tools = [t for t in asked if available(t)]
    missing = [t for t in asked if t not in tools]
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
                    src = args.baseline_src if tool == "trainpace@base" else SRC
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                        [str(Path(src).resolve()), os.environ.get("PYTHONPATH", "")])}
                    done = subprocess.run(
                        [sys.executable, __file__, "--worker", tool, "--step", args.step,
                         "--loader", args.loader,
                         "--step-ms", str(ms), "--iters", str(iters[ms]),
                         "--steps", str(steps_for[ms]), "--rounds", str(rounds),
                         "--out", str(out), "--port", str(port)],
                        check=True, capture_output=True, text=True, env=env)
                    sys.stderr.write(done.stderr)
                    line = done.stdout.strip().splitlines()[-1]
                    results[ms][tool] = json.loads(line)
        finally:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:  # a busy machine: do not lose the figures
                    server.kill()
                    server.wait(timeout=30)

    load = os.getloadavg()
    report: dict[str, Any] = {"rounds": rounds, "step": args.step, "loader": args.loader,
                              "missing": missing, "load_average": load, "steps": {}}
    print(f"\nPer-step overhead against the bare loop ({args.step} steps, {args.loader} "
          f"batches; {rounds} paired bare/tool blocks in one process, window work included; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs)")
    print("median: of the paired differences; 90% interval of that median (order statistics); "
          "trimmed: 20% trimmed mean; cpu: the training thread's own CPU time, tool - bare; "
          "others: the CPU time of the process's other threads (writer, sampler), tool - bare")
    print(f"{'step':>6} {'tool':>14} {'bare ms':>9} {'median µs':>10} {'90% interval µs':>17} "
          f"{'trimmed µs':>11} {'median %':>9} {'cpu µs':>7} {'others µs':>10} {'÷ trainpace':>12}"
          f"{' ÷ base':>8}")
    for ms in step_ms:
        rows: dict[str, dict[str, Any]] = {}
        for tool in tools:
            figures = results[ms][tool]
            bare = statistics.median(figures["bare_s"])
            est = estimate(figures["tool_s"], figures["bare_s"])
            cpu = estimate(figures["tool_cpu_s"], figures["bare_cpu_s"])
            others = estimate(figures["tool_others_cpu_s"], figures["bare_others_cpu_s"])
            rows[tool] = {"bare_ms": bare * 1e3, "overhead_us": est["median_us"],
                          "overhead_ci_us": [est["ci_low_us"], est["ci_high_us"]],
                          "overhead_trimmed_us": est["trimmed_us"],
                          "overhead_pct": est["median_us"] / 1e4 / bare,
                          "overhead_ci_pct": [est["ci_low_us"] / 1e4 / bare,
                                              est["ci_high_us"] / 1e4 / bare],
                          "thread_cpu_us": cpu["median_us"],
                          "others_cpu_us": others["median_us"],
                          "bare_thread_cpu_us": statistics.median(figures["bare_cpu_s"]) * 1e6}
        ours = rows.get("trainpace", {}).get("overhead_us")
        base = rows.get("trainpace@base", {}).get("overhead_us")
        for tool, row in rows.items():
            ratio = (row["overhead_us"] / ours
                     if tool not in ("trainpace", "trainpace@base", "floor") and ours and ours > 0
                     else None)
            row["overhead_x_trainpace"] = ratio
            over_base = ours / base if tool == "trainpace" and ours and base and base > 0 else None
            row["overhead_x_base"] = over_base
            low, high = row["overhead_ci_us"]
            print(f"{ms:>4g}ms {tool:>14} {row['bare_ms']:>9.3f} {row['overhead_us']:>10.1f} "
                  f"{f'[{low:.1f}, {high:.1f}]':>17} {row['overhead_trimmed_us']:>11.1f} "
                  f"{row['overhead_pct']:>8.3f}% {row['thread_cpu_us']:>7.1f} "
                  f"{row['others_cpu_us']:>10.1f} "
                  f"{(f'{ratio:.1f}x' if ratio else ''):>12}"
                  f"{(f'{over_base:.2f}x' if over_base else ''):>8}")
        if "trainpace" in rows and "trainpace@base" in rows:
            print("       trainpace ÷ base: " + ", ".join(
                f"{what} {_ratio(rows['trainpace'][key], rows['trainpace@base'][key])}"
                for what, key in (("wall", "overhead_us"), ("training thread cpu", "thread_cpu_us"),
                                  ("other threads cpu", "others_cpu_us"))))
        floor = rows.get("floor", {}).get("overhead_us")
        if ms == 0.0 and ours is not None:
            low, high = rows["trainpace"]["overhead_ci_us"]
            said = verdict(low, high, NO_WORK_TARGET_US)
            print(f"       trainpace {said} its target of <= {NO_WORK_TARGET_US:g} µs per step "
                  f"with no work" + (f"; {ours / floor:.1f}x the floor" if floor and floor > 0
                                     else ""))
            report["steps"]["none"] = rows
            continue
        if "trainpace" in rows:
            low, high = rows["trainpace"]["overhead_ci_pct"]
            said = verdict(low, high, TARGETS_PCT[ms])
            print(f"       trainpace {said} its target of <= {TARGETS_PCT[ms]}% at "
                  f"{ms:g} ms steps (90% interval {low:.2f}–{high:.2f}%)")
        report["steps"][f"{ms:g}ms"] = rows
    if missing:
        print(f"not measured: {', '.join(missing)} (pip install lightning traceml-ai)")
    from results import write_result

    # one file per kind of step: the default (sleeping steps) and e.g. overhead_none.json
    write_result("overhead" if args.step == "sleep" else f"overhead_{args.step}",
                 quick=args.quick, rows=[
        {"step, tool": f"{step} {tool}", **row}
        for step, by_tool in report["steps"].items() for tool, row in by_tool.items()])
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
