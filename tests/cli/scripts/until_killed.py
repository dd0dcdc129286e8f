"""Trains until it is killed; says when it has taken 20 steps (the file named by argv[1])."""

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

flag = Path(sys.argv[1])
loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while True:
    for (x,) in loader:
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        time.sleep(0.002)
        if step == 20:
            flag.write_text("20 steps")
