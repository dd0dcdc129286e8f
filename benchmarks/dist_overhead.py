"""What it costs a 2-rank DDP job to be watched: step time with trainpace / without.

Two processes (gloo on the CPU, one torch thread each) train a small MLP with DDP. Inside
each process, blocks of steps alternate: bare, then under a fresh ``trainpace.Meter`` (run
folder, sampler, the window exchange through the job's store and rank 0's merge), so a
metered block is compared with a bare block that ran a moment earlier on the same processes
and tensors. DDP makes both ranks' step times equal; rank 0 reports. The first tenth of each
block is left out. Ratio = median over rounds of (metered block's median step / bare
block's): medians, because on a shared machine a preempted step is noise, not cost. On a
loaded machine the wall-clock ratio swings both ways; the CPU-time ratios (the training
thread's CPU seconds per step, and the whole process's: the writer, sampler and exchange
included) are what preemption does not distort.

    python benchmarks/dist_overhead.py              # 10 rounds of 400 steps
    python benchmarks/dist_overhead.py --quick      # 3 rounds of 200 steps
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import ddp_procs

TARGET_RATIO = 1.01


def _block(model: nn.Module, opt: torch.optim.Optimizer, steps: int, meter: object | None,
           width: int, cpu: list[float]) -> list[float]:
    """The step times past the first tenth; ``cpu``: their CPU seconds per step, the training
    thread's and all threads' (the writer, sampler and exchange included)."""
    kept_from = steps // 10
    cpu_start = [0.0, 0.0]

    def at_step(i: int) -> None:
        if i == kept_from:
            cpu_start[:] = [time.thread_time(), time.process_time()]

    times = ddp_procs.block(model, opt, steps, meter, width, at_step)
    kept = steps - kept_from
    cpu[:] = [(time.thread_time() - cpu_start[0]) / kept,
              (time.process_time() - cpu_start[1]) / kept]
    return times[kept_from:]


def _worker(rank: int, world: int, port: int, rounds: int, steps: int, width: int,
            out: str) -> None:
    ddp_procs.join(rank, world, port)
    import trainpace

    model = ddp_procs.mlp(width, world)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ddp_procs.block(model, opt, steps // 4, None, width)  # warm-up of the process and the group
    ratios, bare_ms, thread_ratios, process_ratios = [], [], [], []
    for r in range(rounds):
        bare_cpu: list[float] = []
        watched_cpu: list[float] = []
        ddp_procs.barrier(world)
        bare = statistics.median(_block(model, opt, steps, None, width, bare_cpu))
        ddp_procs.barrier(world)
        meter = trainpace.Meter(Path(out) / f"round{r}", console=False, report=False)
        watched = statistics.median(_block(model, opt, steps, meter, width, watched_cpu))
        meter.finish()
        ratios.append(watched / bare)
        bare_ms.append(bare * 1e3)
        thread_ratios.append(watched_cpu[0] / bare_cpu[0])
        process_ratios.append(watched_cpu[1] / bare_cpu[1])
    if rank == 0:
        merged = json.loads((Path(out) / "round0" / "summary.json").read_text())
        result = {
            "bench": "dist_overhead", "world_size": world, "backend": "gloo", "rounds": rounds,
            "steps_per_block": steps, "bare_step_ms_median": statistics.median(bare_ms),
            "ratio_median": statistics.median(ratios), "ratios": ratios,
            "thread_cpu_ratio_median": statistics.median(thread_ratios),
            "process_cpu_ratio_median": statistics.median(process_ratios),
            "target_ratio": TARGET_RATIO,
            "merged_world_size": merged["world_size"],
            "merged_ranks": len(merged["ranks"]),
            "cpu_count": os.cpu_count(), "load_1min": os.getloadavg()[0],
        }
        print(json.dumps(result))
        from results import write_result

        write_result("dist_overhead", quick=rounds < 10, figures={
            k: v for k, v in result.items() if k not in ("bench", "ratios", "cpu_count")})
    ddp_procs.leave(world)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--width", type=int, default=256, help="MLP width (sets the step time)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 3, 200
    with tempfile.TemporaryDirectory(prefix="tp-dist-bench-") as out:
        ddp_procs.spawn(_worker, 2, args.rounds, args.steps, args.width, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
