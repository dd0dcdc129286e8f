"""What ``trainpace run``'s hooks cost per step, against the Meter written into the same loop.

The bound (issue 11): the per-step cost of the patched path within 1.5× of the Meter's.

One real training loop (a DataLoader over tensors in memory, a small model, ``backward()``,
an SGD step, ``zero_grad()``) is timed in three variants, inside one process:

- ``bare``: the loop as it is;
- ``meter``: the loop written for the Meter (``meter.loader``, ``with meter.step()``,
  ``meter.observe(loss=...)``);
- ``patched``: the bare loop under ``AutoPatch`` (what ``trainpace run`` does): the
  DataLoader's ``__iter__``, the global optimizer step hooks, ``torch.autograd.backward`` and
  ``GradScaler.scale``.

Three workloads: ``step`` (a two-layer model of width 32, batch 32, then a 1 ms sleep standing
for the device's work, the GIL free), ``tiny`` (width 1, batch 1, no sleep) and ``no-work``
(no model: one scalar weight times the item, fetched without collation; the least a step that
meets every hook can do, so the hooks' share is the largest).

How the timing is made robust on a shared, loaded machine:

- **the training thread's CPU time** (``time.thread_time``) per step is the main figure: the
  time other processes take the core is not counted in it (the wall time, which counts it, is
  printed too). The Meter's background threads (sampler, writer) are the same in both metered
  variants and are not in it;
- **many rounds of three short adjacent blocks** (200–300 steps, a fraction of a second: the
  load changes little within a round), one of each variant, in an order that goes through all
  six permutations, so a drift of the machine's load falls on every variant alike; a block is
  a workload's steps under a fresh Meter (its set-up, its first tenth and its ``finish()``
  left out; its window boundaries in);
- **the overhead of a variant in a round** is its block minus the bare block of that round;
  the figure is the **median over rounds**, and the ratio patched / meter the ratio of those
  medians; its spread is a bootstrap over rounds (the 5th and 95th percentiles). Load only
  ever adds time, so the fastest block of each variant (less the fastest bare block) is
  printed too;
- a figure no load disturbs comes last: Python function calls per step (cProfile, the loop
  of one block of each variant).

    python benchmarks/run_overhead.py              # 60 rounds per workload (about 4 min)
    python benchmarks/run_overhead.py --quick      # 12 rounds
    python benchmarks/run_overhead.py --json
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainpace
from trainpace.integrations.autopatch import AutoPatch

VARIANTS = ("bare", "meter", "patched")
# Per block: the mean step and the median step, on the thread's CPU clock and the wall clock.
CLOCKS = {"cpu": "CPU, mean", "cpu_step": "CPU, median step", "wall": "wall, mean",
          "wall_step": "wall, median step"}
BOUND = 1.5


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    width: int  # 0: no model, one scalar weight
    batch: int  # 0: the dataset's items as they are (batch_size=None: no collate)
    step_ms: float
    steps: int  # per block


WORKLOADS = (Workload(name="step", width=32, batch=32, step_ms=1.0, steps=200),
             Workload(name="tiny", width=1, batch=1, step_ms=0.0, steps=300),
             Workload(name="no-work", width=0, batch=0, step_ms=0.0, steps=300))


class Loop:
    """One workload's model, optimizer and data, shared by every block (the same memory)."""

    def __init__(self, workload: Workload) -> None:
        torch.manual_seed(0)
        width, steps = workload.width, workload.steps
        n = steps * max(workload.batch, 1)
        self.steps = steps
        self.data: Any = TensorDataset(torch.randn(n, max(width, 1)), torch.randint(0, 2, (n,)))
        self.batch = workload.batch or None
        self.model: Callable[[torch.Tensor], torch.Tensor]
        if width:
            model = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.ReLU(),
                                        torch.nn.Linear(2 * width, 2))
            self.model, params = model, list(model.parameters())
        else:  # no work: one weight times the input
            weight = torch.nn.Parameter(torch.ones(()))
            self.model, params = (lambda x: weight * x[0]), [weight]
        self.loss = torch.nn.functional.cross_entropy if width else (lambda out, y: out)
        self.optimizer = torch.optim.SGD(params, lr=0.01)
        self.pause = workload.step_ms / 1000.0

    def loader(self) -> DataLoader[Any]:
        return DataLoader(self.data, batch_size=self.batch)

    def body(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = self.loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        if self.pause:
            time.sleep(self.pause)  # the device's work: the host waits, the GIL free
        return loss


def block(variant: str, loop: Loop, out: Path, profile: Any = None) -> dict[str, float]:
    """Seconds per step of one block, its first tenth left out: the mean (``cpu``, ``wall``:
    the window boundaries spread over the steps) and the median step (``cpu_step``,
    ``wall_step``: the typical step, which a preemption of the thread does not move).

    ``profile`` (a cProfile.Profile) is enabled around the loop only.
    """
    marks: list[tuple[float, float]] = []
    mark = marks.append
    thread_time, perf_counter, body = time.thread_time, time.perf_counter, loop.body
    meter = None
    if variant != "bare":
        meter = trainpace.Meter(out / f"{variant}-{time.perf_counter_ns()}", console=False,
                                report=False)
    patch = AutoPatch(meter) if meter is not None and variant == "patched" else None
    if patch is not None:
        patch.install()
    # Profiled from the end of the first tenth (its one-offs, e.g. counting the FLOPs of the
    # first step, left out as they are from the times).
    start = loop.steps // 10 if profile is not None else -1
    if variant == "meter":
        assert meter is not None
        for x, y in meter.loader(loop.loader()):
            with meter.step():
                meter.observe(loss=body(x, y))
            mark((thread_time(), perf_counter()))
            if len(marks) == start:
                profile.enable()
    else:  # bare, or patched: the same loop
        for x, y in loop.loader():
            body(x, y)
            mark((thread_time(), perf_counter()))
            if len(marks) == start:
                profile.enable()
    if profile is not None:
        profile.disable()
    if patch is not None:
        patch.remove()
    if meter is not None:
        meter.finish()
    kept = marks[len(marks) // 10:]
    n = len(kept) - 1
    return {"cpu": (kept[-1][0] - kept[0][0]) / n, "wall": (kept[-1][1] - kept[0][1]) / n,
            "cpu_step": statistics.median(b[0] - a[0] for a, b in itertools.pairwise(kept)),
            "wall_step": statistics.median(b[1] - a[1] for a, b in itertools.pairwise(kept))}


def calls_per_step(variant: str, loop: Loop, out: Path) -> float:
    """Python function calls per step of one block (cProfile's count: deterministic)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    block(variant, loop, out, profile)
    profiled = loop.steps - loop.steps // 10
    return float(pstats.Stats(profile).total_calls) / profiled  # type: ignore[attr-defined]


def ratio_of_medians(patched: list[float], meter: list[float]) -> float:
    base = statistics.median(meter)
    return statistics.median(patched) / base if base > 0 else float("inf")


def bootstrap(patched: list[float], meter: list[float], draws: int = 2000) -> tuple[float, float]:
    """5th and 95th percentiles of the ratio of medians, rounds drawn with replacement."""
    rng = random.Random(0)
    n = len(meter)
    ratios = []
    for _ in range(draws):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(ratio_of_medians([patched[i] for i in picks], [meter[i] for i in picks]))
    ratios.sort()
    return ratios[int(0.05 * draws)], ratios[int(0.95 * draws) - 1]


def measure(workload: Workload, rounds: int, out: Path) -> dict[str, Any]:
    loop = Loop(workload)
    for variant in VARIANTS:  # warm the process up: imports, allocator, caches
        block(variant, loop, out)
    orders = list(itertools.permutations(VARIANTS))
    per_round: dict[str, dict[str, list[float]]] = {
        clock: {variant: [] for variant in VARIANTS} for clock in CLOCKS}
    for r in range(rounds):
        for variant in orders[r % len(orders)]:
            for clock, value in block(variant, loop, out).items():
                per_round[clock][variant].append(value)
    result: dict[str, Any] = {"workload": workload.name, "rounds": rounds,
                              "steps": workload.steps}
    for clock, values in per_round.items():
        bare = values["bare"]
        overhead = {variant: [t - b for t, b in zip(values[variant], bare, strict=True)]
                    for variant in ("meter", "patched")}
        low, high = bootstrap(overhead["patched"], overhead["meter"])
        # Load only ever adds time: the fastest block of each variant is the least disturbed.
        fastest = {v: (min(values[v]) - min(bare)) * 1e6 for v in ("meter", "patched")}
        result[clock] = {
            "bare_step_s": statistics.median(bare),
            "overhead_us": {v: statistics.median(o) * 1e6 for v, o in overhead.items()},
            "ratio": ratio_of_medians(overhead["patched"], overhead["meter"]),
            "ratio_p5": low, "ratio_p95": high,
            "fastest_us": fastest,
            "ratio_fastest": fastest["patched"] / fastest["meter"] if fastest["meter"] > 0
            else float("inf"),
            "each_overhead_us": {v: [x * 1e6 for x in o] for v, o in overhead.items()},
        }
    calls = {variant: calls_per_step(variant, loop, out) for variant in VARIANTS}
    extra = {variant: calls[variant] - calls["bare"] for variant in ("meter", "patched")}
    result["calls_per_step"] = calls
    result["calls_ratio"] = extra["patched"] / extra["meter"]
    return result


def show(result: dict[str, Any], print_: Callable[[str], None] = print) -> None:
    cpu, wall = result["cpu"], result["wall"]
    print_(f"{result['workload']}: {result['rounds']} rounds of {result['steps']} steps; bare "
           f"step {cpu['bare_step_s'] * 1e6:.0f} µs CPU on the training thread, "
           f"{wall['bare_step_s'] * 1e6:.0f} µs wall (means)")
    for clock, label in CLOCKS.items():
        figures = result[clock]
        meter, patched = (figures["overhead_us"][v] for v in ("meter", "patched"))
        ratio = figures["ratio"]
        verdict = "holds" if ratio <= BOUND else "DOES NOT HOLD"
        print_(f"  {label:17s} meter +{meter:6.1f} µs/step, patched +{patched:6.1f} µs/step: "
               f"{ratio:.2f}× (90% of resamples {figures['ratio_p5']:.2f}–"
               f"{figures['ratio_p95']:.2f}×); ≤ {BOUND}×: {verdict}; fastest blocks "
               f"{figures['ratio_fastest']:.2f}×")
    calls = result["calls_per_step"]
    print_(f"  Python calls per step: bare {calls['bare']:.0f}, meter "
           f"+{calls['meter'] - calls['bare']:.0f}, patched +{calls['patched'] - calls['bare']:.0f}"
           f": {result['calls_ratio']:.2f}×")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 rounds per workload")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--workload", choices=[w.name for w in WORKLOADS], action="append",
                        help="only this workload (repeatable; default: all)")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per block, for every workload (default: the workload's)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    rounds = args.rounds or (12 if args.quick else 60)
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory(prefix="trainpace-run-overhead-") as tmp:
        for workload in WORKLOADS:
            if args.workload and workload.name not in args.workload:
                continue
            if args.steps:
                workload = dataclasses.replace(workload, steps=args.steps)
            result = measure(workload, rounds, Path(tmp))
            show(result)
            results.append(result)
    from results import write_result

    write_result("run_overhead", quick=args.quick, rows=results)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
