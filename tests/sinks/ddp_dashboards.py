"""A tiny DDP job (gloo on the CPU) that shows itself on the dashboards, for
test_ddp_dashboards.py. Each step sleeps STEP_S so that a window (5 steps) is one window
record on every rank; rank 1's loader waits DELAY_S more before each batch.

Environment: OUT, STEPS, TB (a TensorBoard folder), WANDB=1 (offline, in WANDB_DIR),
MLFLOW=1 (MLflow's tracking URI from MLFLOW_TRACKING_URI), PROM_PORT (rank 0 scrapes its
own exporter after the loop, once it shows a merged window, into SCRAPE_FILE), RANK_FIGURES=1.
"""

import os
import time
import urllib.request

import torch
import torch.distributed as dist
from torch import nn

import trainpace

env = os.environ
rank = int(env["RANK"])
steps = int(env.get("STEPS", "30"))
torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(4 + 4 * rank, 8), torch.randn(4 + 4 * rank, 1)  # rank 1: 8 samples a step


def batches():
    for _ in range(steps):
        if rank == 1:
            time.sleep(float(env.get("DELAY_S", "0")))
        yield x, y


options = {"tensorboard": env.get("TB") or None, "wandb": True if env.get("WANDB") else None,
           "mlflow": True if env.get("MLFLOW") else None,
           "prometheus": int(env["PROM_PORT"]) if env.get("PROM_PORT") else None,
           "rank_figures": env.get("RANK_FIGURES") == "1"}
meter = trainpace.Meter(env["OUT"], window=5, warmup=2, count_flops=False,
                        sample_interval_s=0.05, report=rank == 0, sink_timeout_s=60.0,
                        **options)
for xb, yb in meter.loader(batches()):
    with meter.step((xb, yb)):
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(float(env.get("STEP_S", "0.02")))
        meter.observe(loss=loss)

if rank == 0 and env.get("PROM_PORT"):
    # a window reaches the exporter once the merge has it from both ranks
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{env['PROM_PORT']}/metrics") as page:
            text = page.read().decode()
        if 'trainpace_step{rank="job"}' in text:
            break
        time.sleep(0.05)
    with open(env["SCRAPE_FILE"], "w") as file:
        file.write(text)
meter.finish()
dist.destroy_process_group()
