"""A manual host for the tuner: clocks a test advances, datasets that "take" known time on
them, and a DataLoader model whose workers deliver batches on that clock.

Every figure then follows from the numbers the test chose, exactly, whatever the load on
the machine that runs it. What real DataLoaders do on a real machine is measured by
``benchmarks/tune.py``.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils.data import Dataset

from trainpace.tune import Setting, Trial
from trainpace.tune.trial import run_trial
from trainpace.tune.tune_clock import TuneClock


class ManualHost:
    """The wall clock, this process's CPU time and its time waiting for a core, by hand."""

    def __init__(self) -> None:
        self.wall_s = 100.0
        self.cpu_s = 10.0
        self.runq_s = 1.0
        self.slept: list[float] = []  # the steps spent asleep, and computing
        self.computed: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.wall_s += seconds
        self.slept.append(seconds)

    def compute(self, seconds: float) -> None:
        """A CPU-bound step: its wall time is this process's CPU time."""
        self.wall_s += seconds
        self.cpu_s += seconds
        self.computed.append(seconds)

    def work(self, wall_s: float, cpu_s: float = 0.0, runq_s: float = 0.0) -> None:
        self.wall_s += wall_s
        self.cpu_s += cpu_s
        self.runq_s += runq_s

    @property
    def clock(self) -> TuneClock:
        return TuneClock(wall=lambda: self.wall_s, cpu=lambda: self.cpu_s,
                         runq=lambda: self.runq_s, sleep=self.sleep, compute=self.compute)


class Timed(Dataset):
    """Each sample takes ``sample_s`` of wall time on the host, ``cpu_s`` of it on the CPU and
    ``runq_s`` waiting for a core; the rest is waiting on I/O."""

    def __init__(self, host: ManualHost, sample_s: float, *, cpu_s: float = 0.0,
                 runq_s: float = 0.0, n: int = 100_000) -> None:
        self.host, self.sample_s, self.cpu_s, self.runq_s, self.n = host, sample_s, cpu_s, runq_s, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        self.host.work(self.sample_s, self.cpu_s, self.runq_s)
        return torch.full((8,), float(index))


class ModelLoader:
    """A DataLoader on the manual clock.

    As torch's: ``iter()`` hands ``prefetch_factor`` batch indices to each worker; each batch
    taken from the loader hands out one more; a worker loads its batches in order, one every
    ``batch_s``. Without workers the batch is loaded in ``next()`` itself. ``epoch_batches``
    ends an epoch (StopIteration) after that many batches.
    """

    def __init__(self, host: ManualHost, *, batch_s: float, num_workers: int = 0,
                 prefetch_factor: int | None = None, startup_s: float = 0.0,
                 epoch_batches: int | None = None, **_ignored: Any) -> None:
        self.host, self.batch_s, self.workers = host, batch_s, num_workers
        self.queue = num_workers * (prefetch_factor or 0)
        self.startup_s, self.epoch_batches = startup_s, epoch_batches
        self.iterators = 0

    def __iter__(self) -> ModelLoader._Iterator:
        self.iterators += 1
        return ModelLoader._Iterator(self)

    class _Iterator:
        def __init__(self, loader: ModelLoader) -> None:
            self.loader = loader
            self.started_s = loader.host.wall_s + loader.startup_s
            self.taken_s: list[float] = []  # when each batch was taken from the loader
            self.ready_s: list[float] = []  # when each batch was ready

        def __next__(self) -> torch.Tensor:
            loader, host = self.loader, self.loader.host
            k = len(self.taken_s)
            if loader.epoch_batches is not None and k == loader.epoch_batches:
                raise StopIteration
            if not loader.workers:
                host.sleep(loader.batch_s)
            else:
                handed_s = self.started_s if k < loader.queue else self.taken_s[k - loader.queue]
                previous_s = self.ready_s[k - loader.workers] if k >= loader.workers else 0.0
                self.ready_s.append(max(handed_s, previous_s, self.started_s) + loader.batch_s)
                host.wall_s = max(host.wall_s, self.ready_s[k])
            self.taken_s.append(host.wall_s)
            return torch.zeros(8)


def model_source(host: ManualHost, *, batch_s: float, **loader: Any) -> Any:
    """What run_trial needs of a LoaderSource, handing out ModelLoaders."""
    made: list[ModelLoader] = []

    def make(settings: dict[str, Any], *, timeout_s: float) -> ModelLoader:
        made.append(ModelLoader(host, batch_s=batch_s, **loader, **settings))
        return made[-1]

    return SimpleNamespace(name="model", loader=make, made=made)


class ModelTrials:
    """A trial runner for the search: run_trial on ModelLoaders, the workers' memory and CPU
    given per worker and per batch (no real worker processes to read them from)."""

    def __init__(self, host: ManualHost, *, batch_s: float, step_s: float | None,
                 worker_gb: float = 0.0, worker_cpu_s_per_batch: float = 0.0) -> None:
        self.host, self.step_s = host, step_s
        self.source = model_source(host, batch_s=batch_s)
        self.worker_gb, self.worker_cpu_s_per_batch = worker_gb, worker_cpu_s_per_batch

    def __call__(self, setting: Setting, *, max_s: float, min_batches: int) -> Trial:
        trial = run_trial(self.source, setting, step_s=self.step_s, max_s=max_s,
                          min_batches=min_batches, timeout_s=30, batch_bytes=0,
                          clock=self.host.clock)
        if not setting.num_workers:
            return trial
        return dataclasses.replace(
            trial, memory_gb=self.worker_gb * setting.num_workers,
            worker_cpu_s_per_batch=self.worker_cpu_s_per_batch)
