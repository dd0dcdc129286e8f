"""python -m tinypkg.train --steps N: a small loop, run as a module."""

import argparse
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
print(f"argv0 {sys.argv[0]} name {__name__} package {__package__}", flush=True)
loader = DataLoader(TensorDataset(torch.randn(args.steps * 4, 4)), batch_size=4)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    model(x).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
