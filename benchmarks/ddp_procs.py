"""What the DDP benchmarks share: the processes of a job on this host, its model, its steps.

``benchmarks/boundary.py`` and ``benchmarks/dist_overhead.py`` each start ``world`` real
processes (``torch.multiprocessing``, spawned), join them into a gloo group on the CPU with one
torch thread each, and train the same small MLP in blocks, bare or under a Meter, timing every
step with the process's own clock.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def spawn(worker: Callable[..., None], world: int, *args: Any) -> None:
    """Run ``worker(rank, world, port, *args)`` in ``world`` spawned processes; returns when all
    have ended (a failed one raises here). ``port``: a free one on this host for the group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(world, port, *args), nprocs=world, start_method="spawn")


def join(rank: int, world: int, port: int) -> None:
    """This process as rank ``rank`` of ``world`` (gloo, this host; one torch thread). One
    process alone joins no group: the environment says it is not distributed."""
    torch.set_num_threads(1)
    if world > 1:
        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                           "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(port)})
        dist.init_process_group("gloo")


def leave(world: int) -> None:
    if world > 1:
        dist.destroy_process_group()


def barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def mlp(width: int, world: int) -> nn.Module:
    """The same small MLP on every rank (seeded), wrapped in DDP when there are ranks."""
    torch.manual_seed(0)
    net: nn.Module = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width),
                                   nn.ReLU(), nn.Linear(width, 1))
    return nn.parallel.DistributedDataParallel(net) if world > 1 else net


def block(model: nn.Module, opt: torch.optim.Optimizer, steps: int, meter: Any, width: int,
          at_step: Callable[[int], None] | None = None,
          cpu: list[float] | None = None) -> list[float]:
    """Each step's wall time (loader included), in order; bare when ``meter`` is None.
    ``at_step(i)`` runs before step ``i`` (0-based); ``cpu`` gets each step's CPU time on
    this thread (what other processes taking the cores does not lengthen)."""
    x, y = torch.randn(64, width), torch.randn(64, 1)
    data = [(x, y)] * steps
    times: list[float] = []
    batches = meter.loader(data) if meter is not None else data
    last, last_cpu = time.perf_counter(), time.thread_time()
    for i, (xb, yb) in enumerate(batches):
        if at_step is not None:
            at_step(i)
        if meter is not None:
            with meter.step((xb, yb)):
                _train(model, opt, xb, yb)
        else:
            _train(model, opt, xb, yb)
        now = time.perf_counter()
        times.append(now - last)
        last = now
        if cpu is not None:
            now_cpu = time.thread_time()
            cpu.append(now_cpu - last_cpu)
            last_cpu = now_cpu
    return times


def _train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
           y: torch.Tensor) -> None:
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
