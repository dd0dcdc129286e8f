"""Real loops for the data-loading tests: datasets that wait (I/O) or compute (CPU) per
sample, a model step of fixed CPU work, run through a real Meter and DataLoader."""

import time

import torch
from torch.utils.data import DataLoader, Dataset

import trainpace
from trainpace.diagnosis import diagnose
from trainpace.runlog import read_run


class SleepDataset(Dataset):
    """Each sample waits ``sleep_s`` (a read from slow storage): I/O-bound loading."""

    def __init__(self, n, sleep_s):
        self.n, self.sleep_s = n, sleep_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.sleep_s)
        return torch.full((64,), float(i))


class CpuDataset(Dataset):
    """Each sample burns ``work`` iterations of Python arithmetic: CPU-bound loading."""

    def __init__(self, n, work):
        self.n, self.work = n, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        total = 0
        for k in range(self.work):
            total += k * k % 7
        return torch.full((64,), float(total % 3 + i))


def run(out, dataset, *, batch_size, matmuls, **loader_settings):
    """Steps of ``matmuls`` 256² products over ``dataset``; the run folder's diagnosis
    (what ``trainpace report`` shows)."""
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    loader = DataLoader(dataset, batch_size=batch_size, **loader_settings)
    meter = trainpace.Meter(out, window=50, console=False, report=False, count_flops=False)
    for batch in meter.loader(loader):
        with meter.step(batch):
            for _ in range(matmuls):
                a @ a
    meter.finish()
    folder = read_run(out)
    return folder.summary, diagnose(folder.summary, steps=folder.steps, system=folder.system,
                                    meta=folder.meta)


def data_wait(diagnosis):
    return next((f for f in diagnosis.findings if f.id == "data_wait"), None)
