"""Time in DDP's gradient exchange, seen from a communication hook, without a sync.

``watch_ddp(model, meter)`` registers a hook that runs DDP's own all-reduce and reads the
host clock twice per backward: when the first gradient bucket is ready (the rank has done its
own work: data wait, forward, the start of backward) and when the last bucket's all-reduce is
done. Per iteration that splits the cycle into

- ``pre_s``: from the previous exchange's end to this one's start — the time before the
  collective, the part in which ranks differ (the gradient exchange makes step times equal);
- ``comm_s``: from the first bucket to the last all-reduce's end — communication, and waiting
  in it for slower ranks.

On the CPU (gloo) the all-reduce future completes when the data has arrived, so both are
true times. On CUDA (NCCL) a future completes when the work is queued on the stream, not when
the device has done it: the host clock would time the queueing, so the hook is not installed
there and the figures stay unknown (a profiler trace, ``trainpace analyze``, has them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class CollectiveTimer:
    """Accumulates ``pre_s`` and ``comm_s`` per backward; :meth:`take` drains them."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._first: float | None = None  # this backward's first bucket, host clock
        self._last_done: float | None = None
        self._pre_s = 0.0
        self._comm_s = 0.0
        self._iterations = 0

    def bucket_ready(self) -> None:
        """A gradient bucket is ready (called from the hook, on the autograd thread)."""
        if self._first is None:
            self._first = self._clock()

    def exchange_done(self) -> None:
        """The last bucket's all-reduce has completed."""
        now = self._clock()
        with self._lock:
            first, self._first = self._first, None
            if first is None:
                return
            if self._last_done is not None:  # the first iteration has no "before"
                self._pre_s += first - self._last_done
                self._comm_s += now - first
                self._iterations += 1
            self._last_done = now

    def take(self) -> tuple[float, float, int]:
        """(pre_s, comm_s, iterations) since the last call (the writer thread's)."""
        with self._lock:
            out = (self._pre_s, self._comm_s, self._iterations)
            self._pre_s = self._comm_s = 0.0
            self._iterations = 0
        return out


def install(model: Any, timer: CollectiveTimer) -> bool:
    """Register the timing hook on a DistributedDataParallel ``model`` (CPU only).

    Returns False (and logs why, once) when it cannot: a CUDA model, or a hook already set.
    """
    try:
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        device_type = getattr(model, "device_type", None) or next(model.parameters()).device.type
        if device_type != "cpu":
            logger.info("trainpace: collective timing needs device events on %s; not installed "
                        "(a profiler trace times the collectives)", device_type)
            return False

        # DDP checks a hook's annotations against its own types: these stay unannotated.
        def hook(group, bucket):  # type: ignore[no-untyped-def]
            timer.bucket_ready()
            future = allreduce_hook(group, bucket)
            if not bucket.is_last():
                return future

            def done(fut):  # type: ignore[no-untyped-def]
                timer.exchange_done()
                return fut.value()

            return future.then(done)

        model.register_comm_hook(getattr(model, "process_group", None) or dist.group.WORLD,
                                 hook)
    except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
        logger.warning("trainpace: timing DDP's collectives failed (%s: %s); the run is "
                       "measured without them", type(exc).__name__, exc)
        return False
    return True


def watch_ddp(model: Any, meter: Any) -> CollectiveTimer | None:
    """Time ``model``'s gradient exchange for ``meter``'s distributed figures (call it once,
    before the first step). Returns the timer, or None where it cannot be installed."""
    monitor = getattr(getattr(meter, "_job", None), "monitor", None)  # its JobRank's
    if monitor is None:
        logger.info("trainpace: watch_ddp: this is not one rank of a distributed run")
        return None
    timer = CollectiveTimer()
    if not install(model, timer):
        return None
    monitor.collectives = timer
    return timer
