"""Epochs with an evaluation between them, and work after each optimizer.step() (a sleep that
stands for zero_grad(), logging, a scheduler). ``--meter DIR``: the same loop written for the
Meter (the whole iteration in ``with meter.step()``), to compare with ``trainpace run``."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--steps", type=int, default=15, help="steps per epoch")
parser.add_argument("--tail-ms", type=float, default=20.0, help="after optimizer.step()")
parser.add_argument("--eval-ms", type=float, default=300.0, help="the evaluation's own time")
parser.add_argument("--meter", metavar="DIR", help="meter the loop by hand into DIR")
args = parser.parse_args()

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(8 * args.steps, 16), torch.randn(8 * args.steps, 1)),
                   batch_size=8)
test = DataLoader(TensorDataset(torch.randn(32, 16), torch.randn(32, 1)), batch_size=16)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
meter = None
if args.meter:
    import trainpace

    meter = trainpace.Meter(args.meter, console=False, report=False, window=10)


def iteration(x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(args.tail_ms / 1000)
    return loss


for epoch in range(args.epochs):
    if meter is None:
        for x, y in train:
            iteration(x, y)
    else:
        for x, y in meter.loader(train):
            with meter.step():
                meter.observe(loss=iteration(x, y))
    with torch.no_grad():
        total = sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in test)
        time.sleep(args.eval_ms / 1000)
    print(f"script: epoch {epoch} test loss {total / len(test):.3f}", flush=True)
if meter is not None:
    meter.finish()
