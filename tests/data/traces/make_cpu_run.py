"""Record tests/data/traces/cpu_run/: what ``Meter(out=..., profile_steps=...)`` writes for a tiny
model on a CPU, with a DataLoader that takes a little time per sample.

    PYTHONPATH=src python tests/data/traces/make_cpu_run.py /tmp/cpu_run
    # then keep meta.json and profile/ in tests/data/traces/cpu_run/
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainpace import Meter


class SlowSamples(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.0002)  # reading a sample from a slow disk
        return torch.randn(32, generator=torch.Generator().manual_seed(i)), i % 4


def main(out: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(SlowSamples(), batch_size=16, num_workers=0)
    meter = Meter(out, window=5, profile_steps=(4, 9), console=False, report=False,
                  count_flops=False)
    for i, (x, y) in enumerate(meter.loader(loader)):
        with meter.step():
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if i == 12:
            break
    meter.finish()


if __name__ == "__main__":
    main(sys.argv[1])
