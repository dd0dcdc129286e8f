"""One small sink interface and the fan-out the Meter sees.

Every output (the console line, TensorBoard, W&B, MLflow, Prometheus, ``sinks=``) is a
:class:`Sink`. The Meter writes the run folder itself, on its writer thread, and gives the
records to one :class:`FanOut`, which hands each sink its copy through a bounded queue drained
by the sink's own daemon thread: a slow sink loses its oldest records (counted, warned once), a
failing one is reported once, and neither holds back the run folder or another sink. One
thread per sink because a sink's ``log`` may block (a network call) and nothing can interrupt
it; a sink that sleeps must not delay the console line.

Whatever a sink raises, ``BaseException`` included (a sink's ``SystemExit``), is contained,
reported once, and never reaches the training loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from trainpace.runlog import Record

logger = logging.getLogger(__name__)

SINK_QUEUE_RECORDS = 64
"""Records a sink may have waiting (two or three per window; a window record holds its step
records, ~50 kB at window 100): beyond, the oldest are dropped."""
SINK_QUEUE_STEPS = 6_400
"""Step records a sink may have waiting in its window records: beyond, the oldest records are
dropped, so the memory a slow sink holds stays that of 64 windows of 100 steps whatever the
step rate."""


@runtime_checkable
class Sink(Protocol):
    """Receives records; must not block the training loop for long.

    A sink whose class sets ``reads_steps = False`` reads only a window record's figures: the
    Meter then gives it window records whose ``"steps"`` list is empty. Without it,
    ``"steps"`` holds the window's step records. A sink with a true ``shows_summary`` shows
    the mid-run summary as it comes (a live panel): the Meter then refreshes it from the first
    window on, not only after the first 10 s of run.
    """

    def log(self, record: Record) -> None:
        """Take one record (see :class:`trainpace.runlog.Record` for the kinds)."""

    def close(self) -> None:
        """Flush and release resources; called once, at the end of the run."""


class FanOut:
    """Sends each record to every sink, each behind its own bounded queue and thread.

    ``log`` never blocks for longer than a lock per sink; ``flush`` and ``close`` wait at most
    the time they are given, then abandon what is left (with a warning).
    """

    def __init__(self, sinks: Iterable[Sink], *, capacity: int = SINK_QUEUE_RECORDS,
                 capacity_steps: int = SINK_QUEUE_STEPS) -> None:
        self._queues = [_Queue(sink, capacity, capacity_steps) for sink in sinks]

    @property
    def empty(self) -> bool:
        """True when there is no sink: nothing would read a record."""
        return not self._queues

    @property
    def reads_steps(self) -> bool:
        """True when some sink reads the step records of a window record."""
        return any(getattr(q.sink, "reads_steps", True) for q in self._queues)

    @property
    def shows_summary(self) -> bool:
        """True when some sink shows the mid-run summary as it comes."""
        return any(getattr(q.sink, "shows_summary", False) for q in self._queues)

    def log(self, record: Record) -> None:
        """Queue ``record`` for every sink."""
        for queue in self._queues:
            queue.put(record)

    def counts(self) -> dict[str, dict[str, int]]:
        """Each sink's records delivered and dropped, by its class name."""
        return {q.name: {"delivered": q.delivered, "dropped": q.dropped} for q in self._queues}

    def close(self, timeout_s: float) -> list[str]:
        """Let every sink take what is queued and close, ``timeout_s`` for all together; the
        names of those abandoned (each warned about)."""
        for queue in self._queues:
            queue.stop()
        deadline = time.monotonic() + timeout_s
        return [q.name for q in self._queues
                if not q.join(max(0.0, deadline - time.monotonic()), timeout_s)]


class _Queue:
    """One sink's bounded queue (oldest dropped first) and the daemon thread that drains it."""

    def __init__(self, sink: Sink, capacity: int, capacity_steps: int) -> None:
        self.sink = sink
        self.name = type(sink).__name__
        self._queue: deque[tuple[Record, int]] = deque()  # (record, its step records)
        self._capacity = capacity
        self._capacity_steps = capacity_steps
        self._queued_steps = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self.dropped = 0
        self.delivered = 0
        self._errors = 0
        self._thread = threading.Thread(target=self._run, name=f"trainpace-sink-{self.name}",
                                        daemon=True)
        self._thread.start()

    def put(self, record: Record) -> None:
        with self._lock:
            if self._stopping:
                return
            steps = len(record.data.get("steps", ())) if record.kind == "window" else 0
            while self._queue and (len(self._queue) >= self._capacity or
                                   self._queued_steps + steps > self._capacity_steps):
                self._queued_steps -= self._queue.popleft()[1]
                self.dropped += 1
                if self.dropped == 1:
                    logger.warning(
                        "trainpace: sink %s is slower than the run (%d records waiting); its "
                        "oldest records are dropped (counted in meta.json; the run folder has "
                        "them all)", self.name, len(self._queue) + 1)
            self._queue.append((record, steps))
            self._queued_steps += steps
            self._wake.notify()

    def stop(self) -> None:
        """Ask the thread to deliver what is queued, close the sink and end (no wait)."""
        with self._lock:
            self._stopping = True
            self._wake.notify()

    def join(self, timeout_s: float, configured_s: float) -> bool:
        self._thread.join(max(timeout_s, 0.0))
        if not self._thread.is_alive():
            return True
        with self._lock:
            left = len(self._queue)
        logger.warning("trainpace: sink %s did not finish within sink_timeout_s=%gs; abandoned "
                       "with %d record(s) not delivered (the run folder is complete)",
                       self.name, configured_s, left)
        return False

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if not self._queue:  # stopping, and everything delivered
                    break
                record, steps = self._queue.popleft()
                self._queued_steps -= steps
            self._call("log", self.sink.log, record)
            with self._lock:
                self.delivered += 1
        self._call("close", self.sink.close)

    def _call(self, action: str, fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - a sink's SystemExit is the sink's end only
            self._errors += 1
            if self._errors == 1:
                logger.warning("trainpace: sink %s.%s raised %s: %s; training goes on, further "
                               "errors of this sink are not shown", self.name, action,
                               type(exc).__name__, exc)
