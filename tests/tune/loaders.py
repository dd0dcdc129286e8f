"""Real datasets for the tuner's tests of real DataLoaders (faults, worker processes) and
factories for the CLI. Sleeping samples stand for I/O; no verdict depends on how long they
take (the search's figures are tested on a manual clock: tune/fakes.py)."""

from __future__ import annotations

import os
import signal
import time

import torch
from torch.utils.data import DataLoader, Dataset, SequentialSampler, get_worker_info


class Sleepy(Dataset):
    """Each sample waits ``sample_s`` (I/O-bound)."""

    def __init__(self, n: int = 100_000, sample_s: float = 0.005) -> None:
        self.n, self.sample_s = n, sample_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.sample_s:
            time.sleep(self.sample_s)
        return torch.full((8,), float(index))


class Faulty(Sleepy):
    """Raises on one item, in a worker only (the main-process probe passes)."""

    def __init__(self, bad: int = 37, **kwargs: float) -> None:
        super().__init__(sample_s=0.001)
        self.bad = bad

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.bad and get_worker_info() is not None:
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class Killed(Sleepy):
    """Its worker is killed (SIGKILL, as the OOM killer does) on one item."""

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 40 and get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


class Huge(Dataset):
    """Samples of 64 MB each (never allocated past the first: the tuner stops there)."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(16 * 1024 * 1024)  # float32: 64 MiB


def free() -> Sleepy:
    return Sleepy(sample_s=0.0)


def faulty() -> Faulty:
    return Faulty()


def killed() -> Killed:
    return Killed(sample_s=0.001)


def huge() -> Huge:
    return Huge()


def not_a_dataset() -> int:
    return 42


def raises() -> Sleepy:
    raise OSError("no such bucket: s3://nowhere")


def sleepy_loader() -> DataLoader:
    """A DataLoader whose own settings (batch 16, drop_last, a sampler) the tuner keeps."""
    data = Sleepy(n=4096, sample_s=0.001)
    return DataLoader(data, batch_size=16, sampler=SequentialSampler(data), drop_last=True)
