"""What ``trainpace run``'s hooks cost per step, against the Meter written into the same loop.

One small real training loop (a DataLoader over tensors in memory, a two-layer model,
``backward()``, an SGD step, then a sleep of ``--step-ms`` standing for the device's work,
the GIL free) is timed in alternating blocks inside one process:

- ``bare``: the loop as it is;
- ``meter``: the loop written for the Meter (``meter.loader``, ``with meter.step()``,
  ``meter.observe(loss=...)``);
- ``patched``: the bare loop under ``AutoPatch`` (what ``trainpace run`` does): the DataLoader's
  ``__iter__``, the global optimizer step hooks, a global forward pre-hook between steps, and
  ``torch.autograd.backward``.

Both metered variants use the same Meter settings (run folder, sampler at 10 Hz, FLOPs counted
on the first step; no console), a fresh Meter per block. The first tenth of each block is left
out. Each block is timed on the training thread's CPU clock (``time.thread_time``): on a shared,
loaded machine the wall clock of a block varies by more than the overheads measured (other
processes take the core), while the CPU time the loop's own thread spends does not count that;
the background threads (sampler, writer) are the same Meter's in both metered variants. The wall
clock is printed too. A figure no load disturbs comes last: Python function calls per step
(the loop of one profiled block of each variant, the Meter's set-up and finish() left out; the
window boundaries are in it). Overhead = median over rounds of (block − the bare blocks beside it), per
step; the figure that matters is the ratio patched / meter (the issue's bound: 1.5×).

    python benchmarks/run_overhead.py              # 12 rounds, 1 ms sleeps
    python benchmarks/run_overhead.py --quick      # 4 rounds
    python benchmarks/run_overhead.py --step-ms 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainpace
from trainpace.integrations.autopatch import AutoPatch

BATCH = 32


def make_loop(steps: int, step_ms: float, width: int) -> tuple[Callable[..., None], DataLoader[Any]]:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * BATCH, width), torch.randint(0, 8, (steps * BATCH,)))
    loader = DataLoader(data, batch_size=BATCH)
    model = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.ReLU(),
                                torch.nn.Linear(2 * width, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    pause = step_ms / 1000.0

    def body(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(pause)  # the device's work: the host waits, the GIL free
        return loss

    return body, loader


def block(variant: str, steps: int, step_ms: float, out: Path, width: int = 32,
          profile: Any = None) -> tuple[float, float]:
    """(thread CPU seconds, wall seconds) per step of one block, its first tenth left out.

    ``profile`` (a cProfile.Profile) is enabled around the loop only: the Meter's set-up and
    finish() are the same in both metered variants and vary with the measured times.
    """
    body, loader = make_loop(steps, step_ms, width)
    marks: list[tuple[float, float]] = []
    meter = None
    if variant != "bare":
        meter = trainpace.Meter(out / f"{variant}-{time.perf_counter_ns()}", console=False,
                                report=False)
    patch = AutoPatch(meter) if meter is not None and variant == "patched" else None
    if patch is not None:
        patch.install()
    if profile is not None:
        profile.enable()
    if variant == "meter":
        assert meter is not None
        for x, y in meter.loader(loader):
            with meter.step():
                meter.observe(loss=body(x, y))
            marks.append((time.thread_time(), time.perf_counter()))
    else:  # bare, or patched: the same loop
        for x, y in loader:
            body(x, y)
            marks.append((time.thread_time(), time.perf_counter()))
    if profile is not None:
        profile.disable()
    if patch is not None:
        patch.remove()
    if meter is not None:
        meter.finish()
    skip = steps // 10
    n = len(marks) - 1 - skip
    return (marks[-1][0] - marks[skip][0]) / n, (marks[-1][1] - marks[skip][1]) / n


def calls_per_step(variant: str, steps: int, out: Path, width: int) -> float:
    """Python function calls per step of one block (cProfile's count: deterministic)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    block(variant, steps, 0.0, out, width, profile)
    return float(pstats.Stats(profile).total_calls) / steps  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=300, help="steps per block")
    parser.add_argument("--step-ms", type=float, default=1.0, help="sleep per step")
    parser.add_argument("--width", type=int, default=32,
                        help="model width (8: the torch step is smallest, the hooks' share "
                             "largest)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (4 if args.quick else 12)
    torch.set_num_threads(1)
    cpu: dict[str, list[float]] = {"meter": [], "patched": []}
    wall: dict[str, list[float]] = {"meter": [], "patched": []}
    bare_cpu: list[float] = []
    bare_wall: list[float] = []
    blocks_cpu: dict[str, list[float]] = {"bare": [], "meter": [], "patched": []}
    with tempfile.TemporaryDirectory(prefix="trainpace-run-overhead-") as tmp:
        out = Path(tmp)
        block("bare", args.steps, args.step_ms, out, args.width)  # warm the process up
        for r in range(rounds):
            order = ("meter", "patched") if r % 2 == 0 else ("patched", "meter")
            for variant in order:
                before = block("bare", args.steps, args.step_ms, out, args.width)
                tool = block(variant, args.steps, args.step_ms, out, args.width)
                after = block("bare", args.steps, args.step_ms, out, args.width)
                base_cpu, base_wall = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
                bare_cpu.append(base_cpu)
                blocks_cpu["bare"] += [before[0], after[0]]
                blocks_cpu[variant].append(tool[0])
                bare_wall.append(base_wall)
                cpu[variant].append(tool[0] - base_cpu)
                wall[variant].append(tool[1] - base_wall)
        calls = {variant: calls_per_step(variant, 1000, out, args.width)
                 for variant in ("bare", "meter", "patched")}
    step_cpu, step_wall = statistics.median(bare_cpu), statistics.median(bare_wall)
    figures = {name: {variant: statistics.median(values[variant]) * 1e6
                      for variant in ("meter", "patched")}
               for name, values in (("cpu", cpu), ("wall", wall))}
    ratio = (figures["cpu"]["patched"] / figures["cpu"]["meter"]
             if figures["cpu"]["meter"] > 0 else float("nan"))
    print(f"bare step: {step_cpu * 1e3:.3f} ms CPU on the training thread, {step_wall * 1e3:.3f} "
          f"ms wall ({args.step_ms:g} ms of it a sleep); {rounds} rounds of {args.steps} steps")
    for variant in ("meter", "patched"):
        c, w = figures["cpu"][variant], figures["wall"][variant]
        print(f"  {variant:8s} {c:7.1f} µs/step CPU ({100 * c / 1e6 / step_cpu:.2f}%), "
              f"{w:7.1f} µs/step wall ({100 * w / 1e6 / step_wall:.2f}%)")
    print(f"  patched / meter (CPU) = {ratio:.2f}×  (bound 1.5×: "
          f"{'ok' if ratio <= 1.5 else 'OVER'})")
    # The fastest block of each variant is the least disturbed by the machine's other work.
    fastest = {variant: (min(blocks_cpu[variant]) - min(blocks_cpu["bare"])) * 1e6
               for variant in ("meter", "patched")}
    ratio_fastest = (fastest["patched"] / fastest["meter"] if fastest["meter"] > 0
                     else float("nan"))
    print(f"  fastest blocks: meter {fastest['meter']:.1f} µs/step, patched "
          f"{fastest['patched']:.1f} µs/step over the fastest bare block: {ratio_fastest:.2f}×")
    extra = {variant: calls[variant] - calls["bare"] for variant in ("meter", "patched")}
    print(f"  Python calls per step: bare {calls['bare']:.0f}, meter +{extra['meter']:.0f}, "
          f"patched +{extra['patched']:.0f}: {extra['patched'] / extra['meter']:.2f}× the "
          "meter's")
    if args.json:
        print(json.dumps({"bare_step_cpu_s": step_cpu, "bare_step_wall_s": step_wall,
                          "overhead_us": figures, "ratio_cpu": ratio, "rounds": rounds,
                          "fastest_us": fastest, "ratio_fastest": ratio_fastest,
                          "calls_per_step": calls,
                          "steps": args.steps,
                          "cpu_each_us": {k: [x * 1e6 for x in v] for k, v in cpu.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
