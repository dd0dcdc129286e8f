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
what a boundary cost must exceed to be resolved at all. DDP makes every rank's steps equal;
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


def figures(bare: list[list[float]], metered: list[list[float]], window: int,
            bare_cpu: list[list[float]], metered_cpu: list[list[float]]) -> dict[str, Any]:
    noise = [excess_at(bare, window, j) for j in range(2, window)]
    metered_free = [excess_at(metered, window, j) for j in range(2, window)]
    cpu_noise = [excess_at(bare_cpu, window, j) for j in range(2, window)]
    return {
        "bare_step_ms": statistics.median(t for b in bare for t in b[window:]) * 1e3,
        "metered_step_ms": statistics.median(t for b in metered for t in b[window:]) * 1e3,
        "boundary_excess_ms_metered": excess_at(metered, window, 1) * 1e3,
        "boundary_excess_ms_bare": excess_at(bare, window, 1) * 1e3,
        # the mid-window hand-over (the first half's steps to the writer): lighter, but there
        "half_excess_ms_metered": excess_at(metered, window, window // 2 + 1) * 1e3,
        "bare_noise_ms": max(abs(v) for v in noise) * 1e3,
        "metered_noise_ms": max(abs(v) for v in metered_free) * 1e3,
        "boundaries": sum(len(range(window, len(b), window)) for b in metered),
        "cpu_boundary_excess_ms_metered": excess_at(metered_cpu, window, 1) * 1e3,
        "cpu_half_excess_ms_metered": excess_at(metered_cpu, window, window // 2 + 1) * 1e3,
        "cpu_bare_noise_ms": max(abs(v) for v in cpu_noise) * 1e3,
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
          f"{'CPU: boundary, half, noise ms':>30}  verdict")
    for world in (int(w) for w in args.ranks.split(",")):
        row = run(world, args.rounds, args.steps, args.window, args.width)
        excess, noise = row["boundary_excess_ms_metered"], row["bare_noise_ms"]
        row["resolved"] = max(excess, row["half_excess_ms_metered"]) > noise
        rows.append(row)
        print(f"{world:>9} {row['bare_step_ms']:>8.2f} {excess:>19.3f} "
              f"{row['boundary_excess_ms_bare']:>17.3f} {row['half_excess_ms_metered']:>15.3f} "
              f"{noise:>14.3f} {row['cpu_boundary_excess_ms_metered']:>12.3f} "
              f"{row['cpu_half_excess_ms_metered']:>7.3f} {row['cpu_bare_noise_ms']:>9.3f}  "
              f"{'RESOLVED: the boundary costs a step' if row['resolved'] else 'not resolved'}",
              flush=True)
    from results import write_result

    write_result("boundary", quick=args.quick, rows=rows, load_before=load_before, figures={
        "window": args.window, "rounds": args.rounds, "steps_per_block": args.steps,
        "width": args.width})
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
