"""An MNIST-style classifier (the published example's network: two 3×3 convolutions, max
pooling, dropout, two linear layers; Adadelta with a step-decayed rate) on synthetic 28×28
images in memory, batch 16 (the example's is 64: a CPU step of tens of milliseconds) through a DataLoader in the main process."""

from __future__ import annotations

import torch
from _common import Watch, arguments
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the examples' spelling
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.drop1 = nn.Dropout(0.25)
        self.drop2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * 12 * 12, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.drop1(F.max_pool2d(x, 2)).flatten(1)
        x = self.drop2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def main() -> None:
    args = arguments(__doc__ or "", steps=120)
    torch.manual_seed(1)
    batch = 16
    images = torch.randn(batch * 40, 1, 28, 28)
    labels = torch.randint(0, 10, (batch * 40,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=batch, shuffle=True)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    watch = Watch(args)
    done = 0
    while done < args.steps:  # epochs until the steps are done
        model.train()
        for x, y in watch.loader(loader):
            with watch.step((x, y)):
                optimizer.zero_grad()
                loss = F.nll_loss(model(x), y)
                loss.backward()
                optimizer.step()
                watch.observe(loss)
            watch.tick()
            done += 1
            if done >= args.steps:
                break
        scheduler.step()
    watch.done()


if __name__ == "__main__":
    main()
