"""A 2-rank DDP job (gloo on the CPU) that checkpoints: rank 0 saves every SAVE_EVERY steps,
every rank resumes from the checkpoint on a restart, and rank 0 SIGKILLs itself after KILL_AT
steps in the first run (no checkpoint yet). For tests/job/test_torchrun_job.py.

Environment: OUT (the job's run folder), WORK (where the checkpoint lives), STEPS, SAVE_EVERY,
KILL_AT, STEP_SLEEP_S.
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
steps, save_every, kill_at = int(env["STEPS"]), int(env["SAVE_EVERY"]), int(env["KILL_AT"])
step_sleep_s = float(env.get("STEP_SLEEP_S", "0"))
checkpoint = os.path.join(env["WORK"], "ckpt.pt")
torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)
meter = trainpace.Meter(env["OUT"], window=5, warmup=2, console=False, report=False,
                        count_flops=False, sample_interval_s=0.05, checkpoints=True)
first_run = not os.path.exists(checkpoint)
done = 0
if not first_run:
    state = torch.load(checkpoint)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    done = state["step"]
for xb, yb in meter.loader([(x, y)] * (steps - done)):
    with meter.step((xb, yb)):
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        optimizer.zero_grad()
    done += 1
    time.sleep(step_sleep_s)
    if rank == 0 and done % save_every == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": done}, checkpoint)
    if rank == 0 and first_run and done == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
meter.finish()
dist.destroy_process_group()
