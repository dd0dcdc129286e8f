"""Time the dataset in the main process: one sample at a time, where the time goes, then
collate. This is what one worker does for each batch, without the worker around it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from trainpace.tune.loader_source import DatasetError, LoaderSource
from trainpace.tune.tune_clock import HOST_CLOCK, TuneClock
from trainpace.tune.tuning import Probe


def tensor_bytes(obj: Any, depth: int = 6) -> int:
    """Bytes of the tensors and arrays in a sample or a batch (dicts, lists, tuples looked into)."""
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and not isinstance(obj, (bytes, bytearray)):
        return nbytes  # torch.Tensor (2.1+) and numpy arrays
    if depth == 0:
        return 0
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, depth - 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, depth - 1) for v in obj)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    return 0


def _indices(source: LoaderSource) -> Iterator[Any]:
    kept = source.kept
    if "batch_sampler" in kept:
        return itertools.chain.from_iterable(iter(kept["batch_sampler"]))
    if "sampler" in kept:
        return iter(kept["sampler"])
    return iter(range(len(source.dataset)))


def gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB"


def probe(source: LoaderSource, *, max_s: float, memory_budget_bytes: float,
          clock: TuneClock = HOST_CLOCK) -> Probe:
    """Load up to one batch of samples in this process (stopping after ``max_s``, at least
    one sample), time each, and collate them.

    A sample that raises, or whose batch would not fit in the memory budget, is a
    :class:`DatasetError` naming the dataset and the item.
    """
    # Timed with the caller's torch threads as they are: a library call leaves the process's
    # settings alone (a worker runs torch on one thread; the trials measure real workers).
    batch = source.batch_size or 1
    wall: list[float] = []
    cpu: list[float] = []
    runq: list[float] = []
    samples: list[Any] = []
    sample_bytes = 0
    started = clock.wall()
    iterator: Iterator[Any] = (
        iter(source.dataset) if source.iterable else _indices(source))
    for position in range(batch):
        index: Any = position
        t0, c0, q0 = clock.wall(), clock.cpu(), clock.runq()
        try:
            if source.iterable:
                item = next(iterator)
            else:
                index = next(iterator)
                t0, c0, q0 = clock.wall(), clock.cpu(), clock.runq()
                item = source.dataset[index]
        except StopIteration:
            break
        except Exception as exc:
            raise DatasetError(f"{source.name}: item {index!r} raised {type(exc).__name__}: "
                               f"{exc}") from exc
        wall.append(clock.wall() - t0)
        cpu.append(clock.cpu() - c0)
        runq.append(clock.runq() - q0)
        size = tensor_bytes(item)
        if size * batch > memory_budget_bytes:
            raise DatasetError(
                f"{source.name}: item {index!r} holds {gb(size)} of tensors, so a batch of "
                f"{batch} is {gb(size * batch)}, over the memory budget of "
                f"{gb(memory_budget_bytes)}; use a smaller batch_size or raise memory_budget_gb")
        sample_bytes = max(sample_bytes, size)
        samples.append(item)
        if clock.wall() - started > max_s:
            break
    if not samples:
        raise DatasetError(f"{source.name}: the dataset is empty; nothing to load")
    t0 = clock.wall()
    try:
        collated = source.collate_fn(samples)
    except Exception as exc:
        raise DatasetError(f"{source.name}: collate_fn raised {type(exc).__name__} on a batch of "
                           f"{len(samples)} samples: {exc}") from exc
    collate_s = (clock.wall() - t0) * batch / len(samples)
    batch_bytes = round(tensor_bytes(collated) * batch / len(samples))
    # The first sample often opens files or builds caches: left out once there are others.
    steady = slice(1, None) if len(wall) >= 3 else slice(None)
    sample_s = sum(wall[steady]) / len(wall[steady])
    sample_cpu_s = sum(cpu[steady]) / len(cpu[steady])  # all threads: may exceed the wall
    sample_runq_s = sum(runq[steady]) / len(runq[steady])
    return Probe(samples=len(samples), sample_s=sample_s, sample_cpu_s=sample_cpu_s,
                 sample_runq_s=sample_runq_s,
                 collate_s=collate_s, batch_s=batch * sample_s + collate_s,
                 sample_bytes=sample_bytes, batch_bytes=batch_bytes)
