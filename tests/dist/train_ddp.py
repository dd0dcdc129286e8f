"""A tiny DDP job for the torchrun tests (gloo on the CPU, in-memory data).

Environment: OUT (run folder), STEPS, WINDOW, DDP (0: ranks train alone, no collective),
SLOW_RANK and DELAY_S (that rank's loader sleeps DELAY_S before each batch, and STALL_S more
before every STALL_EVERY-th),
KILL_RANK and KILL_STEP (that rank SIGKILLs itself after that step), STEP_SLEEP_S (every
rank sleeps that long between steps), WATCH_DDP=1 (time the gradient exchange),
IGNORE_SIGTERM=1 (the launcher's stop after a failed worker does not cut the loop short),
HANG_RANK and HANG_STEP (that rank hangs after that step), COMPUTE_RANK and COMPUTE_S
(that rank's forward, or every rank's with COMPUTE_RANK=all, takes COMPUTE_S longer),
WITH_METER=1 (the loop inside ``with meter:``),
AWAIT_JOB_WINDOWS=1 (rank 0, two steps after each window's last step, waits up to 10 s, between
steps, for the job's window to reach its dashboards; what came when: OUT/job_windows.json).
"""

import json
import os
import signal
import threading
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
compute_rank = env.get("COMPUTE_RANK", "-1")  # a rank, or "all"
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


stall_every = int(env.get("STALL_EVERY", "0"))
stall_s = float(env.get("STALL_S", "0"))


def batches():
    for i in range(1, steps + 1):
        if rank == slow_rank:
            time.sleep(delay_s + (stall_s if stall_every and i % stall_every == 0 else 0.0))
        yield x, y


window = int(env.get("WINDOW", "5"))
await_windows = env.get("AWAIT_JOB_WINDOWS") == "1" and rank == 0


class JobWindows:
    """A dashboard at rank 0: the last step of each job window it was given."""

    shows_job = True
    reads_steps = False

    def __init__(self):
        self.last_steps = []
        self.came = threading.Condition()

    def log(self, record):
        if record.kind == "window" and record.data["window"].get("ranks"):
            with self.came:
                self.last_steps.append(int(record.data["window"]["last_step"]))
                self.came.notify_all()

    def close(self):
        pass

    def wait_for(self, last_step, timeout_s):
        with self.came:
            return self.came.wait_for(lambda: last_step in self.last_steps, timeout_s)


job_windows = JobWindows() if await_windows else None
meter = trainpace.Meter(env["OUT"], window=window, warmup=2, console=False,
                        report=rank == 0, count_flops=False, sample_interval_s=0.05,
                        sinks=[job_windows] if job_windows is not None else ())
awaited = []  # (window's last step, came before rank 0's step after it)
if ddp and env.get("WATCH_DDP") == "1":
    from trainpace.dist import watch_ddp

    watch_ddp(model, meter)


def train():
    for step, (xb, yb) in enumerate(meter.loader(batches()), start=1):
        with meter.step((xb, yb)):
            if compute_rank in (str(rank), "all"):
                time.sleep(compute_s)  # a slower device: more time before the gradient exchange
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        time.sleep(step_sleep_s)
        if job_windows is not None and step > window and step % window == 2:
            # rank 0 goes no further (no boundary of its own) until the job's window is out
            awaited.append((step - 2, job_windows.wait_for(step - 2, 10.0)))
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
if job_windows is not None:
    with open(os.path.join(env["OUT"], "job_windows.json"), "w") as f:
        json.dump({"awaited": awaited, "shown": job_windows.last_steps}, f)
if ddp:
    dist.destroy_process_group()
