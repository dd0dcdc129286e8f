"""Gradient accumulation without a DataLoader: 4 backward() per optimizer step, 10 steps."""

import torch

ACCUMULATE = 4
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(8 * ACCUMULATE * 10, 16), torch.randn(8 * ACCUMULATE * 10, 1)
for i in range(ACCUMULATE * 10):
    batch = slice(8 * i, 8 * (i + 1))
    torch.nn.functional.mse_loss(model(x[batch]), y[batch]).backward()
    if (i + 1) % ACCUMULATE == 0:
        optimizer.step()
        optimizer.zero_grad()
print("script: done", flush=True)
