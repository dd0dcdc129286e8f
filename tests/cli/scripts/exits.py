"""Trains a few steps, then calls sys.exit(3)."""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x,) in enumerate(loader, start=1):
    model(x).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 12:
        print("script: leaving with 3", flush=True)
        sys.exit(3)
