"""Gradient accumulation: 4 micro-batches of 8 per optimizer step; an evaluation under no_grad."""

import torch
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 4
torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(8 * ACCUMULATE * 10, 16), torch.randn(8 * ACCUMULATE * 10, 1)), batch_size=8)
test = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=16)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for i, (x, y) in enumerate(train):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if (i + 1) % ACCUMULATE == 0:
        optimizer.step()
        optimizer.zero_grad()
with torch.no_grad():
    total = sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in test)
print(f"script: test loss {total / len(test):.3f}")
