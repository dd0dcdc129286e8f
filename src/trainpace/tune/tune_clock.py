"""Where the tuner reads time and how it waits: the host's clocks, or a test's manual one.

Every figure the tuner reports is a difference of these readings, so a test that advances
a manual clock by known amounts (a sample "takes" 10 ms, a step "sleeps" 60 ms) gets exact
figures whatever else the machine is doing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

# The stand-in CPU step's unit of work: a float32 matrix product of this size (4 MFLOP,
# a fraction of a millisecond), so the step overruns its duration by less than that.
_PRODUCT_N = 128


def compute_for(seconds: float) -> None:
    """A CPU-bound training step's stand-in: matrix products on this thread, through torch's
    own thread pool as a step's ops go, for ``seconds`` of wall time. Unlike a sleep it keeps
    the cores that a CPU run's step keeps from the DataLoader workers."""
    matrix = torch.ones(_PRODUCT_N, _PRODUCT_N)
    deadline = time.perf_counter() + seconds
    while True:  # at least one product, however short the step
        torch.mm(matrix, matrix)
        if time.perf_counter() >= deadline:
            return


def thread_runq_s() -> float:
    """Time this thread has spent ready to run but waiting for a core (Linux schedstat)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0  # not Linux, or no schedstats: contention is then counted as waiting


@dataclass(frozen=True, kw_only=True)
class TuneClock:
    """The tuner's clocks (seconds) and its way to wait."""

    wall: Callable[[], float] = time.perf_counter
    cpu: Callable[[], float] = time.process_time   # this process, all its threads
    runq: Callable[[], float] = thread_runq_s       # this thread, ready but not running
    # the simulated training step: the host waits while an accelerator computes ...
    sleep: Callable[[float], None] = time.sleep
    # ... or computes itself, on a CPU run
    compute: Callable[[float], None] = compute_for


HOST_CLOCK = TuneClock()
