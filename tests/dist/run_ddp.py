"""A plain DDP script for ``trainpace run`` under torchrun (gloo on the CPU; no trainpace in it).

Environment: STEPS, SLOW_RANK and DELAY_S (that rank's dataset sleeps DELAY_S per batch),
KILL_RANK and KILL_STEP (that rank SIGKILLs itself after that step), STOP_RANK and STOP_STEP
(that rank SIGSTOPs itself after that step: the others time out in the collective after
GLOO_TIMEOUT_S), STEP_SLEEP_S (every rank sleeps that long after each step).
"""

import datetime
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

env = os.environ
rank = int(env["RANK"])
steps = int(env.get("STEPS", "40"))
slow_rank, delay_s = int(env.get("SLOW_RANK", "-1")), float(env.get("DELAY_S", "0"))
kill_rank, kill_step = int(env.get("KILL_RANK", "-1")), int(env.get("KILL_STEP", "0"))
stop_rank, stop_step = int(env.get("STOP_RANK", "-1")), int(env.get("STOP_STEP", "0"))
step_sleep_s = float(env.get("STEP_SLEEP_S", "0"))
torch.manual_seed(rank)
torch.set_num_threads(1)
dist.init_process_group(
    "gloo", timeout=datetime.timedelta(seconds=float(env.get("GLOO_TIMEOUT_S", "60"))))
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(),
                                                          nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
BATCH = 8


class Data(Dataset):
    def __len__(self):
        return steps * BATCH

    def __getitem__(self, index):
        if rank == slow_rank and index % BATCH == 0:
            time.sleep(delay_s)  # this rank's input pipeline is slow
        return torch.ones(16) * index / len(self), torch.zeros(1)


for step, (x, y) in enumerate(DataLoader(Data(), batch_size=BATCH), start=1):
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(step_sleep_s)
    if rank == kill_rank and step == kill_step:
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == stop_rank and step == stop_step:
        os.kill(os.getpid(), signal.SIGSTOP)
dist.destroy_process_group()
