"""One candidate setting against a simulated training step.

The consumer is honest: between two fetches it spends the step's duration as the training
thread does, so workers get the cores and the GIL exactly as in training: asleep while an
accelerator computes, computing on a CPU run (a sleep there would free the cores that the
step takes from the workers). The wait is the time blocked in ``next()``. Worker processes
are found with psutil (children that appeared with ``iter()``), their CPU time and memory
read over the steady window, and they are always shut down before the trial returns.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any

import psutil

from trainpace.stats import share_pct
from trainpace.tune.loader_source import (
    DatasetError,
    LoaderSource,
    dead_workers,
    failed_item,
    killed_item,
)
from trainpace.tune.tune_clock import HOST_CLOCK, TuneClock
from trainpace.tune.tuning import Setting, Trial


def _children() -> dict[int, psutil.Process]:
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _cpu_s(procs: list[psutil.Process]) -> float | None:
    total = 0.0
    try:
        for proc in procs:
            times = proc.cpu_times()
            total += times.user + times.system
    except psutil.Error:
        return None
    return total


def _memory(procs: list[psutil.Process]) -> tuple[float | None, float | None]:
    rss = uss = 0.0
    try:
        for proc in procs:
            info = proc.memory_full_info()
            rss += info.rss
            uss += getattr(info, "uss", info.rss)
    except psutil.AccessDenied:
        try:
            rss = float(sum(p.memory_info().rss for p in procs))
        except psutil.Error:
            return None, None
        return rss / 1e9, None
    except psutil.Error:
        return None, None
    return rss / 1e9, uss / 1e9


def _dead_soon(loader: Any, wait_s: float = 2.0) -> bool:
    """Whether a worker died. A killed process closes its pipes before it shows as dead (a
    zombie), and a loaded machine widens that gap: a broken pipe waits a moment for it."""
    deadline = time.monotonic() + wait_s
    while not dead_workers(loader):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _fault(source: LoaderSource, setting: Setting, loader: Any, exc: Exception) -> DatasetError:
    where = f"with {setting.label()}"
    item = failed_item(exc)
    if item is not None:
        return DatasetError(f"{source.name}: item {item[0]} raised {item[1]} in a DataLoader "
                            f"worker ({where})")
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # A worker killed while handing over a batch can also surface as a broken pipe (EOFError,
    # ConnectionResetError) in this process, before torch notices the death.
    if ("exited unexpectedly" in text or "killed by signal" in text
            or (isinstance(exc, (EOFError, ConnectionError)) and _dead_soon(loader))):
        index = killed_item(loader, exc)
        on = f" while loading item {index}" if index is not None else ""
        return DatasetError(f"{source.name}: a DataLoader worker died{on} ({where}): {text}; "
                            "a worker killed by the system is often out of memory (dmesg says)")
    if "timed out" in text:
        return DatasetError(f"{source.name}: no batch came in time ({where}): {text}; a worker "
                            "is stuck (a lock, a network read) or a sample is very slow")
    return DatasetError(f"{source.name}: loading raised {type(exc).__name__} ({where}): {text}")


def _shutdown(loader: Any, iterator: Any, spawned: dict[int, psutil.Process]) -> None:
    """Stop the workers of a trial, and make sure none is left behind."""
    for it in (iterator, getattr(loader, "_iterator", None)):
        stop = getattr(it, "_shutdown_workers", None)
        if stop is not None:
            # shutting down must not hide the trial's own outcome
            with contextlib.suppress(Exception):
                stop()
    procs = list(spawned.values())
    _, alive = psutil.wait_procs(procs, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


def run_trial(
    source: LoaderSource,
    setting: Setting,
    *,
    step_s: float | None,
    max_s: float,
    min_batches: int,
    timeout_s: float,
    batch_bytes: int,
    cpu_step: bool = False,
    clock: TuneClock = HOST_CLOCK,
) -> Trial:
    """Iterate a DataLoader with ``setting`` for up to ``max_s`` seconds, spending ``step_s``
    between fetches (computing on this thread when ``cpu_step``, else asleep); measure over
    the batches after the warm-up (the prefetched queue)."""
    spend_step = clock.compute if cpu_step else clock.sleep
    kwargs = setting.kwargs()
    before = _children()
    with warnings.catch_warnings():
        # trying more workers than cores is the point when loading waits on I/O
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loader = source.loader(kwargs, timeout_s=timeout_s)
    iterator: Any = None
    spawned: dict[int, psutil.Process] = {}
    # The queue the workers fill while the first batch is awaited hides the steady wait until
    # it is drained: the window opens after it (every batch it can hold, and the first), or
    # at the first fetch that blocked, which found it empty.
    queue = setting.num_workers * (setting.prefetch_factor or 0)
    blocked_s = max(0.003, 0.1 * (step_s or 0.0))
    warmup = 0
    started = clock.wall()
    try:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="This DataLoader will create")
                iterator = iter(loader)
            next(iterator)
        except StopIteration:
            raise DatasetError(f"{source.name}: the loader yields no batch (is the dataset "
                               "smaller than one batch with drop_last=True?)") from None
        startup_s = clock.wall() - started
        spawned = {pid: p for pid, p in _children().items() if pid not in before}
        workers = list(spawned.values())
        fetched = 1
        window = 0
        wait_s = 0.0
        cpu0: float | None = None
        window_t0 = 0.0
        while True:
            now = clock.wall()
            if window >= min_batches or (now - started > max_s and window >= 3):
                break
            if now - started > max_s * 1.5:  # a very slow loader: stop with what there is
                break
            if step_s:
                spend_step(step_s)
            t0 = clock.wall()
            try:
                next(iterator)
            except StopIteration:  # the end of an epoch: the next one's start is part of it
                iterator = iter(loader)
                next(iterator)
            waited = clock.wall() - t0
            fetched += 1
            if not warmup and (waited >= blocked_s or fetched > queue + 1):
                warmup = fetched - 1
                cpu0 = _cpu_s(workers) if workers else None
                window_t0 = t0 - (step_s or 0.0)
            if warmup:
                window += 1
                wait_s += waited
        window_s = clock.wall() - window_t0 if window else 0.0
        cpu1 = _cpu_s(workers) if workers else None
        rss_gb, uss_gb = _memory(workers) if workers else (None, None)
    except DatasetError:
        raise
    except Exception as exc:
        raise _fault(source, setting, loader, exc) from exc
    finally:
        _shutdown(loader, iterator, spawned or {
            pid: p for pid, p in _children().items() if pid not in before})
    wait_mean = wait_s / window if window else float("nan")
    cpu_per_batch = (cpu1 - cpu0) / window if cpu0 is not None and cpu1 is not None and window \
        else None
    queued = setting.num_workers * (setting.prefetch_factor or 0) * batch_bytes \
        if setting.num_workers else batch_bytes
    base = uss_gb if uss_gb is not None else rss_gb
    memory_gb = (base or 0.0) + queued / 1e9 if workers or not setting.num_workers else None
    return Trial(
        setting=setting, batches=window, warmup_batches=warmup or fetched, startup_s=startup_s,
        batches_per_s=window / window_s if window_s > 0 else 0.0,
        wait_s_per_batch=wait_mean,
        wait_pct=share_pct(wait_mean, wait_mean + step_s) if step_s and window else None,
        worker_cpu_s_per_batch=cpu_per_batch, worker_rss_gb=rss_gb, worker_uss_gb=uss_gb,
        memory_gb=memory_gb, duration_s=clock.wall() - started,
        complete=window >= min_batches)
