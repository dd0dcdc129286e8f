"""What each of the Meter's calls costs a CPU training loop, right after its step.

Right after a training step little of trainpace, or of torch's Python binding, is still in the
CPU's caches, and each call costs several times what it costs warm (a benchmark that calls the
Meter in a tight loop sees the warm cost only). This one runs a small convolutional network's
training steps on the CPU (an MNIST-style network, batch 16, Adadelta: steps of about 10 ms on
a 2-core machine) and times each of the Meter's calls where a loop makes it, with
``perf_counter_ns`` around it, in one process:

- ``fetch``: the batch's ``next()`` through ``meter.loader`` (bare: the same iterator's);
- ``enter``: ``meter.step(batch)`` and its ``__enter__`` (bare: a ``nullcontext``'s);
- ``observe``: ``meter.observe(loss=loss)`` right after the optimizer's step (bare: nothing;
  ``loss.item()`` alone is measured too, what a loop that reads its loss pays anyway);
- ``exit``: the step's ``__exit__`` (its end, the job's progress map).

Steps go in groups of eight: bare, metered, metered, bare (so that a drift falls on both
alike), then four bare steps, each followed by one probe where a metered step would observe:
the job's progress map's write (:class:`~trainpace.sinks.ledger.ProgressMap`'s ``step``), the
same record written with one ``struct.pack_into`` (the way it was written before), each twice
(ABBA). The first ``WARMUP_STEPS`` steps are left out. Each figure is a median over the
steps; the spread between processes (each lays out its memory anew) is about ±30%, so a
difference of a few microseconds is read within a run, never across runs.

    python benchmarks/cold_calls.py              # 1,600 steps (about 25 s)
    python benchmarks/cold_calls.py --quick      # 400 steps
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import mmap
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

WARMUP_STEPS = 50
CALLS = ("fetch", "enter", "observe", "exit")
PROBES = ("progress map", "struct.pack_into", "loss.item()")
# a group of eight steps: what each does beside its training step
GROUP = ("bare", "metered", "metered", "bare",
         "progress map", "struct.pack_into", "struct.pack_into", "progress map")
# the bare step after the metered pair reads its loss where a metered step observes it
READS_LOSS = 3


def medians_us(samples_ns: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Each kind's median in microseconds (kinds with no sample left out)."""
    return {kind: statistics.median(values) / 1e3 for kind, values in samples_ns.items()
            if values}


def cost_rows(metered_us: Mapping[str, float], bare_us: Mapping[str, float],
              step_ms: float) -> list[dict[str, Any]]:
    """A row per call: its median metered and bare, the difference and its share of the step;
    then their total."""
    rows = []
    for call in CALLS:
        extra = metered_us[call] - bare_us.get(call, 0.0)
        rows.append({"call": call, "metered_us": round(metered_us[call], 1),
                     "bare_us": round(bare_us.get(call, 0.0), 1), "extra_us": round(extra, 1),
                     "of_step_pct": round(100.0 * extra / (step_ms * 1e3), 3)})
    total = sum(metered_us[c] - bare_us.get(c, 0.0) for c in CALLS)
    rows.append({"call": "per step", "metered_us": round(sum(metered_us[c] for c in CALLS), 1),
                 "bare_us": round(sum(bare_us.get(c, 0.0) for c in CALLS), 1),
                 "extra_us": round(total, 1),
                 "of_step_pct": round(100.0 * total / (step_ms * 1e3), 3)})
    return rows


def measure(steps: int, folder: Path) -> dict[str, Any]:
    import torch
    from torch import nn
    from torch.nn import functional as F  # noqa: N812 - PyTorch's own spelling

    import trainpace
    from trainpace.sinks.ledger import STEP_LAYOUT, ProgressMap

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 12 * 12, 128), nn.ReLU(),
                        nn.Linear(128, 10))
    optimizer = torch.optim.Adadelta(net.parameters())
    images, labels = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    batches = [(images, labels)] * steps
    meter = trainpace.Meter(out=str(folder / "run"), console=False, report=False)
    # the two ways of writing the progress record, each into a map of its own
    progress = ProgressMap(folder, 1, 0.0)
    packed_map = mmap.mmap(-1, mmap.PAGESIZE)
    packed = functools.partial(STEP_LAYOUT.pack_into, packed_map, 0)
    probes = {"progress map": progress.step, "struct.pack_into": packed}

    source = iter(batches)
    metered = iter(meter.loader(source))
    clock = time.perf_counter_ns
    calls: dict[str, dict[str, list[int]]] = {"metered": {c: [] for c in CALLS},
                                               "bare": {c: [] for c in CALLS}}
    probed: dict[str, list[int]] = {p: [] for p in PROBES}
    step_ns: list[int] = []
    for index in range(steps):
        kind = GROUP[index % len(GROUP)]
        watched = kind == "metered"
        started = clock()
        batch = next(metered if watched else source)
        fetched = clock()
        context = meter.step(batch) if watched else contextlib.nullcontext()
        context.__enter__()
        entered = clock()
        optimizer.zero_grad()
        loss = F.cross_entropy(net(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        trained = clock()
        if watched:
            meter.observe(loss=loss)
        elif kind in probes:
            probes[kind](index, 1.0)
        elif index % len(GROUP) == READS_LOSS:
            loss.item()
        observed = clock()
        context.__exit__(None, None, None)
        ended = clock()
        if index < WARMUP_STEPS:
            continue
        if kind in ("bare", "metered"):
            times = calls[kind]
            times["fetch"].append(fetched - started)
            times["enter"].append(entered - fetched)
            times["exit"].append(ended - observed)
            if watched:
                times["observe"].append(observed - trained)
            elif index % len(GROUP) == READS_LOSS:
                probed["loss.item()"].append(observed - trained)
            else:
                times["observe"].append(observed - trained)
            if kind == "bare":
                step_ns.append(trained - entered)
        else:
            probed[kind].append(observed - trained)
    meter.finish()
    progress.close()
    packed_map.close()
    return {"metered": medians_us(calls["metered"]), "bare": medians_us(calls["bare"]),
            "probes": medians_us(probed), "step_ms": statistics.median(step_ns) / 1e6}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="400 steps")
    parser.add_argument("--steps", type=int, default=None, help="steps to run (default 1600)")
    args = parser.parse_args(argv)
    steps = args.steps or (400 if args.quick else 1600)
    if steps < WARMUP_STEPS + 4 * len(GROUP):
        parser.error(f"--steps: {steps} leaves too few steps after the warm-up; use at least "
                     f"{WARMUP_STEPS + 4 * len(GROUP)}")
    from results import write_result

    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        got = measure(steps, Path(tmp))
    rows = cost_rows(got["metered"], got["bare"], got["step_ms"])
    print(f"{steps} steps, bare training step {got['step_ms']:.2f} ms (median)")
    print(f"{'call':10s} {'metered µs':>11s} {'bare µs':>8s} {'extra µs':>9s} {'% of step':>10s}")
    for row in rows:
        print(f"{row['call']:10s} {row['metered_us']:11.1f} {row['bare_us']:8.1f} "
              f"{row['extra_us']:9.1f} {row['of_step_pct']:10.3f}")
    probes = got["probes"]
    print("right after a step, alone: " + ", ".join(f"{name} {probes[name]:.1f} µs"
                                                   for name in PROBES))
    ratio = probes["progress map"] / probes["struct.pack_into"]
    print(f"the progress map's write: {ratio:.2f}× one struct.pack_into of the same record")
    write_result("cold_calls", quick=args.quick, rows=rows, load_before=load_before,
                 figures={"steps": steps, "step_ms": round(got["step_ms"], 3),
                          **{f"{name}_us": round(value, 1) for name, value in probes.items()},
                          "progress_map_vs_pack_into": round(ratio, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
