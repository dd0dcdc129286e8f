"""Background threads for the Meter's output: the run folder's writer, and one thread per sink.

Two kinds, for two promises:

- :class:`BackgroundWriter` does the run folder's work (the crash-safe record) in order, off
  the training thread. Windows handed over faster than it writes them are taken together
  (coalesced), and the training thread may wait for it (:meth:`BackgroundWriter.wait_for`), so
  the lines on disk keep up with any step rate.
- :class:`SinkThread` feeds one user sink (``sinks=``, TensorBoard, the console line...) from
  a bounded queue: a slow sink loses its oldest records (counted, warned once), never holds
  the run folder back, and at the end gets a bounded time before it is abandoned. Its thread
  is a daemon, so the interpreter's exit never waits for it.

Whatever a job or a sink raises, ``BaseException`` included (a sink's ``SystemExit``), is
contained, reported once, and never reaches the training loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trainpace.runlog import Record
from trainpace.sinks.base import Sink

logger = logging.getLogger(__name__)

_STOP = object()
_WINDOW = object()  # a job that takes every window handed over so far
_IDLE = object()  # no job came for idle_s once armed

SINK_QUEUE_RECORDS = 64
"""Records a sink may have waiting (two or three per window; a window record holds its step
records, ~50 kB at window 100): beyond, the oldest are dropped."""
SINK_QUEUE_STEPS = 6_400
"""Step records a sink may have waiting in its window records (a window record of tiny steps
holds ~50 ms of them, thousands): beyond, the oldest records are dropped, so the memory a
slow sink holds stays that of 64 windows of 100 steps whatever the step rate."""


class BackgroundWriter:
    """Runs submitted calls one after another on a daemon thread; ``close()`` drains and joins.

    ``on_windows``, when given, takes the windows handed to :meth:`submit_window`: all those
    waiting when the thread gets to them, in one call (coalesced), in order. ``on_idle``,
    once :meth:`arm` was called, runs when no job came for ``idle_s`` (work left waiting
    elsewhere that must not wait for long).
    """

    def __init__(self, on_error: Callable[[BaseException], None], name: str = "trainpace-writer",
                 on_windows: Callable[[list[Any]], None] | None = None,
                 on_idle: Callable[[], None] | None = None, idle_s: float = 0.05) -> None:
        self._on_error = on_error
        self._on_windows = on_windows
        self._on_idle = on_idle
        self._idle_s = idle_s
        self._armed = False
        self._jobs: deque[Any] = deque()
        self._windows: list[Any] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self.windows_submitted = 0
        self.windows_written = 0
        self.waited_on = False  # the training thread is blocked in wait_for() now
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: later work must be done by the caller."""
        return self._closed

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)``; it runs after everything submitted before it."""
        with self._lock:
            self._jobs.append((fn, args))
            self._wake.notify()

    def submit_window(self, window: Any) -> int:
        """Hand over one window for ``on_windows``; returns its number (1, 2, ...)."""
        with self._lock:
            self._windows.append(window)
            self.windows_submitted += 1
            self._jobs.append(_WINDOW)
            self._wake.notify()
            return self.windows_submitted

    def arm(self) -> None:
        """Run ``on_idle`` once no job has come for ``idle_s`` (from now, or the last job)."""
        with self._lock:
            if not self._armed:
                self._armed = True
                self._wake.notify()

    def wait_for(self, window: int, timeout_s: float) -> bool:
        """Block until window number ``window`` is written (True), or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self.waited_on = True
            try:
                while self.windows_written < window and self._thread.is_alive():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._done.wait(left)
                return self.windows_written >= window
            finally:
                self.waited_on = False

    def close(self, timeout_s: float | None = None) -> bool:
        """Run everything still queued, then stop the thread (idempotent). False when the
        work did not end within ``timeout_s`` (the thread is then left to itself)."""
        if not self._closed:
            self._closed = True
            with self._lock:
                self._jobs.append(_STOP)
                self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._lock:
                job: Any = None
                while not self._jobs:
                    if not self._armed:
                        self._wake.wait()
                    elif not self._wake.wait(self._idle_s) and not self._jobs:
                        self._armed = False
                        job = _IDLE
                        break
                if job is None:
                    job = self._jobs.popleft()
                windows: list[Any] = []
                if job is _WINDOW:
                    windows, self._windows = self._windows, []
            if job is _STOP:
                return
            try:
                if job is _IDLE:
                    if self._on_idle is not None:
                        self._on_idle()
                elif job is _WINDOW:
                    if windows and self._on_windows is not None:
                        self._on_windows(windows)
                else:
                    fn, args = job
                    fn(*args)
            except BaseException as exc:  # noqa: BLE001 - the writer must outlive one bad job
                self._contain(exc)
            if windows:
                with self._lock:
                    self.windows_written += len(windows)
                    self._done.notify_all()

    def _contain(self, exc: BaseException) -> None:
        with contextlib.suppress(BaseException):  # reporting must not end the writer either
            self._on_error(exc)


class SinkThread:
    """One sink behind its own daemon thread and a bounded queue (oldest dropped first).

    ``log`` never blocks for longer than a lock; ``close(timeout_s)`` lets the sink take what
    is queued and close within ``timeout_s``, then abandons it (with a warning).
    """

    def __init__(self, sink: Sink, *, capacity: int = SINK_QUEUE_RECORDS,
                 capacity_steps: int = SINK_QUEUE_STEPS) -> None:
        self.sink = sink
        self.name = type(sink).__name__
        self._queue: deque[tuple[Record, int]] = deque()  # (record, its step records)
        self._capacity = capacity
        self._capacity_steps = capacity_steps
        self._queued_steps = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._busy = False
        self._stopping = False
        self.dropped = 0
        self.delivered = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name=f"trainpace-sink-{self.name}",
                                        daemon=True)
        self._thread.start()

    def log(self, record: Record) -> None:
        """Queue one record for the sink; the oldest waiting one is dropped when full."""
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

    def flush(self, timeout_s: float) -> bool:
        """Wait until the sink has taken everything queued (True), or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while (self._queue or self._busy) and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def stop(self) -> None:
        """Ask the thread to finish what is queued, close the sink and end (no wait)."""
        with self._lock:
            self._stopping = True
            self._wake.notify()

    def join(self, timeout_s: float, configured_s: float | None = None) -> bool:
        """Wait for the thread to end after :meth:`stop`; False (and a warning): abandoned."""
        self._thread.join(max(timeout_s, 0.0))
        if not self._thread.is_alive():
            return True
        with self._lock:
            left = len(self._queue)
        logger.warning("trainpace: sink %s did not finish within sink_timeout_s=%gs; abandoned "
                       "with %d record(s) not delivered (the run folder is complete)",
                       self.name, configured_s if configured_s is not None else timeout_s, left)
        return False

    def close(self, timeout_s: float) -> bool:
        """:meth:`stop`, then :meth:`join`."""
        self.stop()
        return self.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._idle.notify_all()
                    self._wake.wait()
                if not self._queue:  # stopping, and everything delivered
                    break
                record, steps = self._queue.popleft()
                self._queued_steps -= steps
                self._busy = True
            self._call("log", self.sink.log, record)
            with self._lock:
                self._busy = False
                self.delivered += 1
        self._call("close", self.sink.close)
        with self._lock:
            self._idle.notify_all()

    def _call(self, action: str, fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - a sink's SystemExit is the sink's end only
            self.errors += 1
            if self.errors == 1:
                logger.warning("trainpace: sink %s.%s raised %s: %s; training goes on, further "
                               "errors of this sink are not shown", self.name, action,
                               type(exc).__name__, exc)


def close_all(threads: list[SinkThread], timeout_s: float) -> list[str]:
    """Stop every sink thread, then give them ``timeout_s`` together; the names abandoned."""
    for thread in threads:
        thread.stop()
    deadline = time.monotonic() + timeout_s
    return [thread.name for thread in threads
            if not thread.join(max(0.0, deadline - time.monotonic()), timeout_s)]
