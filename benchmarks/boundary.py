"""What a window boundary costs the step that follows it: bare vs metered, 1 process and DDP.

At each window boundary the training thread hands the window's steps to the Meter's writer
thread, which then makes the records, the figures and the run folder's lines and, under DDP,
posts the window to the job's store (rank 0 merges). None of that may delay a training step:
this benchmark looks for it where it would show, in the step right after each boundary.

Each process (1, or 2 and 4 DDP ranks: gloo on the CPU, one torch thread each, real processes
started with ``torch.multiprocessing``) trains a small MLP in alternating blocks, bare and
under a fresh ``trainpace.Meter(window=W)``, timing every step with its own clock. In a block,
the *boundary steps* are the steps ``k*W + 1`` (k >= 1): the first of each window, the one
the hand-over and the writer's work fall into (the steps ``k*W + W/2 + 1``, after the
mid-window hand-over, are shown beside them). Their excess = the mean, over the boundary
steps of every block, of (the step's time - its block's median step). The same positions in
the bare blocks give the bare run's figure (no boundary there: noise). The bare run's
boundary-free noise is the spread of that same statistic at the other positions of a window
(``k*W + j``, j = 2..W-1, each a mean over as many steps): its largest absolute value is
what a boundary cost must exceed to be resolved at all. That excess over the median also
holds what the Meter costs every step alike (its writer's work, found wherever the loop is,
raises each position's mean above the median): the *boundary-specific* figure is the
boundary steps' excess minus the mean excess of the metered run's other positions, against
the bare run's spread of its positions' means around their mean (``bare_spread_ms``); its
verdict is ``resolved``, the first one ``resolved_over_median``. DDP makes every rank's steps equal;
rank 0's times are reported. The same figures of each step's CPU time on the training thread
(``cpu_*``) say what the step itself did more at a boundary: on a crowded machine the wall
times also hold the time other processes had the cores, which the CPU times do not.

    python benchmarks/boundary.py              # 1, 2, 4 processes; 4 rounds of 400 steps
    python benchmarks/boundary.py --quick      # 2 rounds of 200 steps
    python benchmarks/boundary.py --ranks 1,2  # some world sizes only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

import ddp_procs


def excess_at(blocks: list[list[float]], window: int, offset: int) -> float:
    """Mean over the blocks' steps ``k*window + offset`` (k >= 1, 1-based steps) of the step's
    time minus its block's median step, in seconds."""
    diffs = []
    for times in blocks:
        median = statistics.median(times[window:])
        diffs.extend(times[i] - median for i in range(window + offset - 1, len(times), window))
    return statistics.fmean(diffs)


def _spread(values: list[float]) -> float:
    """The largest distance of a value from their mean."""
    mean = statistics.fmean(values)
    return max(abs(v - mean) for v in values)


def figures(bare: list[list[float]], metered: list[list[float]], window: int,
            bare_cpu: list[list[float]], metered_cpu: list[list[float]]) -> dict[str, Any]:
    half = window // 2 + 1
    free = [j for j in range(2, window) if j != half]  # no hand-over falls before these
    noise = [excess_at(bare, window, j) for j in free]
    metered_free = [excess_at(metered, window, j) for j in free]
    cpu_noise = [excess_at(bare_cpu, window, j) for j in free]
    cpu_free = [excess_at(metered_cpu, window, j) for j in free]
    boundary, half_excess = excess_at(metered, window, 1), excess_at(metered, window, half)
    cpu_boundary = excess_at(metered_cpu, window, 1)
    cpu_half = excess_at(metered_cpu, window, half)
    return {
        "bare_step_ms": statistics.median(t for b in bare for t in b[window:]) * 1e3,
        "metered_step_ms": statistics.median(t for b in metered for t in b[window:]) * 1e3,
        "boundary_excess_ms_metered": boundary * 1e3,
        "boundary_excess_ms_bare": excess_at(bare, window, 1) * 1e3,
        # the mid-window hand-over (the first half's steps to the writer): lighter, but there
        "half_excess_ms_metered": half_excess * 1e3,
        "bare_noise_ms": max(abs(v) for v in noise) * 1e3,
        "metered_noise_ms": max(abs(v) for v in metered_free) * 1e3,
        # What the boundary step costs more than the metered run's other steps: the work
        # the Meter spreads over every position (found by the writer wherever the loop is)
        # raises each position's mean above the median alike, and is its overhead per step,
        # not the boundary's. Against the bare run's spread of the same means.
        "boundary_over_others_ms": (boundary - statistics.fmean(metered_free)) * 1e3,
        "half_over_others_ms": (half_excess - statistics.fmean(metered_free)) * 1e3,
        "bare_spread_ms": _spread(noise) * 1e3,
        "boundaries": sum(len(range(window, len(b), window)) for b in metered),
        "cpu_boundary_excess_ms_metered": cpu_boundary * 1e3,
        "cpu_half_excess_ms_metered": cpu_half * 1e3,
        "cpu_bare_noise_ms": max(abs(v) for v in cpu_noise) * 1e3,
        "cpu_boundary_over_others_ms": (cpu_boundary - statistics.fmean(cpu_free)) * 1e3,
        "cpu_bare_spread_ms": _spread(cpu_noise) * 1e3,
    }


def _worker(rank: int, world: int, port: int, rounds: int, steps: int, window: int,
            width: int, out: str, result: str) -> None:
    ddp_procs.join(rank, world, port)
    import trainpace

    net = ddp_procs.mlp(width, world)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    ddp_procs.block(net, opt, steps // 4, None, width)  # warm-up of the process and the group
    bare: list[list[float]] = []
    metered: list[list[float]] = []
    bare_cpu: list[list[float]] = []
    metered_cpu: list[list[float]] = []
    for r in range(rounds):
        ddp_procs.barrier(world)
        bare_cpu.append([])
        bare.append(ddp_procs.block(net, opt, steps, None, width, cpu=bare_cpu[-1]))
        ddp_procs.barrier(world)
        meter = trainpace.Meter(Path(out) / f"round{r}", window=window, console=False,
                                report=False)
        metered_cpu.append([])
        metered.append(ddp_procs.block(net, opt, steps, meter, width, cpu=metered_cpu[-1]))
        meter.finish()
    if rank == 0:
        Path(result).write_text(json.dumps(figures(bare, metered, window, bare_cpu,
                                                   metered_cpu)))
    ddp_procs.leave(world)


def run(world: int, rounds: int, steps: int, window: int, width: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tp-boundary-") as out:
        result = Path(out) / "result.json"
        ddp_procs.spawn(_worker, world, rounds, steps, window, width, out, str(result))
        figures: dict[str, Any] = json.loads(result.read_text())
    return {"processes": world, **figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,2,4", help="world sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=400, help="steps per block")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--width", type=int, default=256, help="MLP width (sets the step time)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 200 steps")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 2, 200
    load_before = os.getloadavg()
    rows = []
    print(f"boundary step (steps k*{args.window}+1) minus the block's median step; bare noise: "
          f"the largest |excess| at the other positions of a window, bare "
          f"(load average {' '.join(f'{x:.1f}' for x in load_before)} on "
          f"{os.cpu_count()} CPUs)")
    print(f"{'processes':>9} {'bare ms':>8} {'boundary excess ms':>19} "
          f"{'bare, same steps':>17} {'half-window ms':>15} {'bare noise ms':>14} "
          f"{'over others ms':>15} {'bare spread ms':>15} "
          f"{'CPU: over others, spread ms':>28}  verdicts (over the median; over the others)")
    for world in (int(w) for w in args.ranks.split(",")):
        row = run(world, args.rounds, args.steps, args.window, args.width)
        excess, noise = row["boundary_excess_ms_metered"], row["bare_noise_ms"]
        row["resolved_over_median"] = max(excess, row["half_excess_ms_metered"]) > noise
        row["resolved"] = max(row["boundary_over_others_ms"],
                              row["half_over_others_ms"]) > row["bare_spread_ms"]
        rows.append(row)
        verdicts = "; ".join("RESOLVED" if row[key] else "not resolved"
                             for key in ("resolved_over_median", "resolved"))
        print(f"{world:>9} {row['bare_step_ms']:>8.2f} {excess:>19.3f} "
              f"{row['boundary_excess_ms_bare']:>17.3f} {row['half_excess_ms_metered']:>15.3f} "
              f"{noise:>14.3f} {row['boundary_over_others_ms']:>15.3f} "
              f"{row['bare_spread_ms']:>15.3f} {row['cpu_boundary_over_others_ms']:>14.3f} "
              f"{row['cpu_bare_spread_ms']:>13.3f}  {verdicts}", flush=True)
    from results import write_result

    write_result("boundary", quick=args.quick, rows=rows, load_before=load_before, figures={
        "window": args.window, "rounds": args.rounds, "steps_per_block": args.steps,
        "width": args.width})
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
