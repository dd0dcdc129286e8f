"""The AutoPatch tests' loop on a manual clock: samples that cost WAIT_S each to load, a tiny
model and its optimizer, a quiet Meter, and the rows it wrote (shared by test_autopatch*.py)."""

import json

import torch
from torch.utils.data import Dataset

import trainpace

BATCH = 4
WAIT_S = 0.001  # per sample, in the dataset: the step's data wait


class Timed(Dataset):
    """Samples that cost ``wait_s`` each on the manual clock."""

    def __init__(self, clock, n, wait_s=WAIT_S):
        self.clock, self.n, self.wait_s = clock, n, wait_s
        torch.manual_seed(0)
        self.x, self.y = torch.randn(n, 4), torch.randn(n, 1)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.clock.advance(self.wait_s)
        return self.x[i], self.y[i]


def meter_for(tmp_path, name, clock):
    return trainpace.Meter(tmp_path / name, console=False, report=False, clock=clock, window=5,
                           warmup=2, count_flops=False)


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def rows_of(meter):
    return [json.loads(line) for line in (meter.path / "steps.jsonl").read_text().splitlines()]
