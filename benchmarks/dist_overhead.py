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
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

TARGET_RATIO = 1.01


def _block(model: nn.Module, opt: torch.optim.Optimizer, steps: int, meter: object | None,
           width: int, cpu: list[float] | None = None) -> list[float]:
    x, y = torch.randn(64, width), torch.randn(64, 1)
    data = [(x, y)] * steps
    times: list[float] = []
    last = time.perf_counter()
    batches = meter.loader(data) if meter is not None else data  # type: ignore[attr-defined]
    cpu_start = [0.0, 0.0]
    for i, (xb, yb) in enumerate(batches):
        if i == steps // 10:
            cpu_start = [time.thread_time(), time.process_time()]
        if meter is not None:
            with meter.step((xb, yb)):  # type: ignore[attr-defined]
                nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
                opt.zero_grad()
        else:
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            opt.zero_grad()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    if cpu is not None:  # CPU seconds per step: the training thread's, and all threads'
        kept = steps - steps // 10
        cpu[:] = [(time.thread_time() - cpu_start[0]) / kept,
                  (time.process_time() - cpu_start[1]) / kept]
    return times[steps // 10:]


def _worker(rank: int, port: int, rounds: int, steps: int, width: int, out: str) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                       "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    import trainpace

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    _block(model, opt, steps // 4, None, width)  # warm-up of the process and the group
    ratios, bare_ms, thread_ratios, process_ratios = [], [], [], []
    for r in range(rounds):
        bare_cpu: list[float] = []
        watched_cpu: list[float] = []
        dist.barrier()
        bare = statistics.median(_block(model, opt, steps, None, width, bare_cpu))
        dist.barrier()
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
            "bench": "dist_overhead", "world_size": 2, "backend": "gloo", "rounds": rounds,
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
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--width", type=int, default=256, help="MLP width (sets the step time)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 3, 200
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="tp-dist-bench-") as out:
        mp.start_processes(_worker, args=(port, args.rounds, args.steps, args.width, out),
                           nprocs=2, start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
