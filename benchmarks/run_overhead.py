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
out. Overhead = median over rounds of (block − the bare block next to it), per step; the figure
that matters is the ratio patched / meter (the issue's bound: 1.5×).

    python benchmarks/run_overhead.py              # 12 rounds, 1 ms steps
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


def make_loop(steps: int, step_ms: float) -> tuple[Callable[..., None], DataLoader[Any]]:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * BATCH, 32), torch.randint(0, 8, (steps * BATCH,)))
    loader = DataLoader(data, batch_size=BATCH)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
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


def block(variant: str, steps: int, step_ms: float, out: Path) -> float:
    """Seconds per step of one block, its first tenth left out."""
    body, loader = make_loop(steps, step_ms)
    marks: list[float] = []
    meter = None
    if variant != "bare":
        meter = trainpace.Meter(out / f"{variant}-{time.perf_counter_ns()}", console=False,
                                report=False)
    if variant == "meter":
        assert meter is not None
        for x, y in meter.loader(loader):
            with meter.step():
                meter.observe(loss=body(x, y))
            marks.append(time.perf_counter())
    elif variant == "patched":
        assert meter is not None
        with AutoPatch(meter):
            for x, y in loader:
                body(x, y)
                marks.append(time.perf_counter())
    else:
        for x, y in loader:
            body(x, y)
            marks.append(time.perf_counter())
    if meter is not None:
        meter.finish()
    skip = steps // 10
    return (marks[-1] - marks[skip]) / (len(marks) - 1 - skip)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=300, help="steps per block")
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (4 if args.quick else 12)
    torch.set_num_threads(1)
    overhead: dict[str, list[float]] = {"meter": [], "patched": []}
    bare_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="trainpace-run-overhead-") as tmp:
        out = Path(tmp)
        block("bare", args.steps, args.step_ms, out)  # warm the process up
        for r in range(rounds):
            order = ("meter", "patched") if r % 2 == 0 else ("patched", "meter")
            for variant in order:
                before = block("bare", args.steps, args.step_ms, out)
                tool = block(variant, args.steps, args.step_ms, out)
                after = block("bare", args.steps, args.step_ms, out)
                base = (before + after) / 2
                bare_s.append(base)
                overhead[variant].append(tool - base)
    step_s = statistics.median(bare_s)
    meter_us = statistics.median(overhead["meter"]) * 1e6
    patched_us = statistics.median(overhead["patched"]) * 1e6
    ratio = patched_us / meter_us if meter_us > 0 else float("nan")
    print(f"bare step {step_s * 1e3:.3f} ms ({args.step_ms:g} ms sleep + a small torch step), "
          f"{rounds} rounds of {args.steps} steps")
    print(f"  meter    {meter_us:7.1f} µs/step  ({100 * meter_us / 1e6 / step_s:.2f}% of the step)")
    print(f"  patched  {patched_us:7.1f} µs/step  ({100 * patched_us / 1e6 / step_s:.2f}% of the "
          "step)")
    print(f"  patched / meter = {ratio:.2f}×  (bound 1.5×: {'ok' if ratio <= 1.5 else 'OVER'})")
    if args.json:
        print(json.dumps({"bare_step_s": step_s, "meter_us": meter_us, "patched_us": patched_us,
                          "ratio": ratio, "rounds": rounds, "steps": args.steps,
                          "meter_each_us": [v * 1e6 for v in overhead["meter"]],
                          "patched_each_us": [v * 1e6 for v in overhead["patched"]]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
