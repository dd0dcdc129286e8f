"""pytorch/examples' DDP tutorial's epoch: at its start, the batch size is read from a batch
of a throwaway iterator (fetched, never trained on), then the epoch's own loop."""

import torch
from torch.utils.data import DataLoader, TensorDataset

EPOCHS, STEPS, BATCH = 3, 5, 8
torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(BATCH * STEPS, 16), torch.randn(BATCH * STEPS, 1)),
                   batch_size=BATCH)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(EPOCHS):
    b_sz = len(next(iter(train))[0])
    print(f"script: epoch {epoch} | batch size {b_sz} | steps {len(train)}")
    for x, y in train:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
