"""An independent training loop: the wait a setting gives, measured without the tuner."""

from __future__ import annotations

import time
import warnings
from typing import Any

import psutil
from torch.utils.data import DataLoader


def loop_wait_pct(dataset: Any, *, batch_size: int, step_s: float, batches: int = 60,
                  **settings: Any) -> float:
    """Share of a sleeping step's cycle spent blocked in next(), after one round of workers."""
    with warnings.catch_warnings():  # more workers than cores is what is being checked
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loader = DataLoader(dataset, batch_size=batch_size, **settings)
        iterator = iter(loader)
    skip = settings.get("num_workers", 0) + 1
    waited = 0.0
    started = 0.0
    try:
        for n in range(skip + batches):
            if n == skip:
                waited, started = 0.0, time.perf_counter()
            time.sleep(step_s)
            t0 = time.perf_counter()
            next(iterator)
            waited += time.perf_counter() - t0
        return 100.0 * waited / (time.perf_counter() - started)
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def children() -> list[psutil.Process]:
    """Live child processes of this test process."""
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            # multiprocessing's resource tracker (and forkserver) live as long as the test
            # process once anything used the spawn context: they are not a loader's workers
            helper = any(name in " ".join(proc.cmdline())
                         for name in ("resource_tracker", "forkserver"))
            if proc.status() != psutil.STATUS_ZOMBIE and not helper:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive
