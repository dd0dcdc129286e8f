"""A tiny DDP job for the torchrun tests (gloo on the CPU, in-memory data).

Environment: OUT (run folder), STEPS, WINDOW, DDP (0: ranks train alone, no collective),
SLOW_RANK and DELAY_S (that rank's loader sleeps DELAY_S before each batch),
KILL_RANK and KILL_STEP (that rank SIGKILLs itself after that step), STEP_SLEEP_S (every
rank sleeps that long between steps), WATCH_DDP=1 (time the gradient exchange),
IGNORE_SIGTERM=1 (the launcher's stop after a failed worker does not cut the loop short),
HANG_RANK and HANG_STEP (that rank hangs after that step), COMPUTE_RANK and COMPUTE_S
(that rank's forward takes COMPUTE_S longer), WITH_METER=1 (the loop inside ``with meter:``).
"""

import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn

import trainpace

env = os.environ
rank = int(env["RANK"])
steps = int(env.get("STEPS", "30"))
ddp = env.get("DDP", "1") == "1"
slow_rank = int(env.get("SLOW_RANK", "-1"))
delay_s = float(env.get("DELAY_S", "0"))
kill_rank = int(env.get("KILL_RANK", "-1"))
kill_step = int(env.get("KILL_STEP", "0"))
step_sleep_s = float(env.get("STEP_SLEEP_S", "0"))
compute_rank = int(env.get("COMPUTE_RANK", "-1"))
compute_s = float(env.get("COMPUTE_S", "0"))
hang_rank = int(env.get("HANG_RANK", "-1"))
hang_step = int(env.get("HANG_STEP", "0"))
torch.manual_seed(0)
torch.set_num_threads(1)
if env.get("IGNORE_SIGTERM") == "1":  # as a script that checkpoints on SIGTERM: it ends its loop
    signal.signal(signal.SIGTERM, lambda *_: None)

model: nn.Module = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
if ddp:
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)


def batches():
    for _ in range(steps):
        if rank == slow_rank:
            time.sleep(delay_s)
        yield x, y


meter = trainpace.Meter(env["OUT"], window=int(env.get("WINDOW", "5")), warmup=2, console=False,
                        report=rank == 0, count_flops=False, sample_interval_s=0.05)
if ddp and env.get("WATCH_DDP") == "1":
    from trainpace.dist import watch_ddp

    watch_ddp(model, meter)


def train():
    for step, (xb, yb) in enumerate(meter.loader(batches()), start=1):
        with meter.step((xb, yb)):
            if rank == compute_rank:
                time.sleep(compute_s)  # a slower device: more time before the gradient exchange
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        time.sleep(step_sleep_s)
        if rank == kill_rank and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == hang_rank and step == hang_step:
            time.sleep(3600)  # hung: the test ends it


if env.get("WITH_METER") == "1":
    with meter:
        train()
else:
    train()
    meter.finish()
if ddp:
    dist.destroy_process_group()
