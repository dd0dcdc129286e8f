"""Trains a few steps, then raises."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def train() -> None:
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x,) in enumerate(loader, start=1):
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == 10:
            raise ValueError("the script's own error at step 10")


train()
