"""No DataLoader: the loop slices its own tensors."""

import torch

torch.manual_seed(0)
x, y = torch.randn(320, 8), torch.randn(320, 1)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for i in range(0, 320, 8):
    loss = torch.nn.functional.mse_loss(model(x[i:i + 8]), y[i:i + 8])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("script: done")
