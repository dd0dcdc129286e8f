"""The background sampler: a daemon thread that takes a reading every ``interval_s``.

The thread takes a reading as it starts (the baseline of the figures that are differences of
counters), then one every ``interval_s``. Each reading gives two things: a row for
``system.jsonl`` (``t_s`` added here, on the meter's clock) and flat numbers that feed a
:class:`~trainpace.sampling.aggregates.SeriesSet`, from which any window's time-weighted
aggregates are computed. Tests call :meth:`Sampler.sample_once` with a manual clock and no
thread. Between readings the thread waits in ``poll`` on a pipe that :meth:`Sampler.stop`
writes to (a lock with a timeout where there is no ``poll``): a wait that can be cut short
for the least CPU a cycle (``Event.wait`` runs a dozen lines of Python and a timed lock wait
costs a third more than ``poll``). A failing reading is logged once and sampling goes on;
:meth:`Sampler.stop` joins the thread and takes a last reading, so the aggregates reach the
end of the run. Rows wait for :meth:`Sampler.drain_rows` in a bounded buffer (an hour at
10 Hz); the aggregates do not depend on it.
"""

from __future__ import annotations

import logging
import math
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trainpace.errors import ConfigError
from trainpace.sampling.aggregates import Aggregate, SeriesSet

logger = logging.getLogger(__name__)

Reading = tuple[dict[str, Any], dict[str, float | None]]  # (row, flat numbers)


def is_positive_number(value: object) -> bool:
    """A finite int or float above zero (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and value > 0)


class Sampler:
    """Calls ``read()`` periodically; keeps the rows to drain and the series to aggregate."""

    def __init__(
        self,
        read: Callable[[], Reading],
        *,
        interval_s: float = 0.1,
        clock: Callable[[], float] = time.perf_counter,
        t0: float | None = None,
        max_buckets: int = 20_000,
        max_pending_rows: int = 36_000,
    ) -> None:
        if not is_positive_number(interval_s):
            raise ConfigError("interval_s", interval_s, "must be a number of seconds > 0")
        self._read = read
        self.interval_s = float(interval_s)
        self._clock = clock
        self._t0 = clock() if t0 is None else t0
        self._series = SeriesSet(max_buckets=max_buckets)
        self._series.start(self._clock() - self._t0)
        self._rows: deque[dict[str, Any]] = deque(maxlen=max_pending_rows)
        self.dropped_rows = 0  # rows nobody drained before the buffer was full
        self._lock = threading.Lock()
        self._wake = threading.Lock()  # no poll: held while the thread runs, released to stop it
        self._pipe: tuple[int, int] | None = None  # poll: written to stop the thread
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._failed = False
        self.readings = 0
        self.busy_s = 0.0  # wall time spent reading

    def set_t0(self, t0: float) -> None:
        """Move the zero of ``t_s`` (before the first reading: the run's start is known late)."""
        with self._lock:
            if self.readings:
                raise RuntimeError("t0 cannot move after the first reading")
            self._t0 = t0
            self._series.start(self._clock() - t0)

    def sample_once(self) -> dict[str, Any] | None:
        """Take one reading now; returns its row (None if the reading failed)."""
        return self._take()

    def _take(self) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            row, flat = self._read()
            t_s = self._clock() - self._t0
            row = {"t_s": t_s, **row}
            with self._lock:
                self._series.add(t_s, flat)
                if len(self._rows) == self._rows.maxlen:
                    self.dropped_rows += 1
                self._rows.append(row)
                self.readings += 1
        except Exception as exc:  # noqa: BLE001 - sampling must never break the training
            if not self._failed:
                self._failed = True
                logger.warning("trainpace: a device/host reading failed (%s: %s); sampling "
                               "goes on, further failures are not shown", type(exc).__name__, exc)
            return None
        finally:
            self.busy_s += time.perf_counter() - started
        return row

    def _loop(self) -> None:
        take, pipe = self._take, self._pipe
        # at once: the baseline of the figures that are differences between two readings (CPU
        # shares), so that the run's first period has them too
        take()
        if pipe is not None:
            poll = select.poll()
            poll.register(pipe[0], select.POLLIN)
            wait, ms = poll.poll, 1000.0 * self.interval_s
            while not wait(ms):
                take()
            return
        acquire, interval = self._wake.acquire, self.interval_s
        while not acquire(timeout=interval):
            take()

    def start(self) -> None:
        """Start the thread (once; not again after :meth:`stop`)."""
        if self._thread is not None or self._stopped:
            return
        if hasattr(select, "poll"):
            self._pipe = os.pipe()
        else:
            self._wake.acquire()
        self._thread = threading.Thread(target=self._loop, name="trainpace-sampler", daemon=True)
        self._thread.start()

    def stop(self, *, final_reading: bool = True) -> None:
        """Stop and join the thread; then one last reading (the run's end is covered)."""
        thread, self._thread = self._thread, None
        self._stopped = True
        if thread is not None:
            pipe, self._pipe = self._pipe, None
            if pipe is not None:
                os.write(pipe[1], b"x")
            else:
                self._wake.release()
            thread.join()
            if pipe is not None:
                os.close(pipe[0])
                os.close(pipe[1])
            if final_reading:
                self.sample_once()

    @property
    def running(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def drain_rows(self) -> list[dict[str, Any]]:
        """The rows taken since the last call."""
        with self._lock:
            rows = list(self._rows)
            self._rows.clear()
        return rows

    def aggregate(self, name: str, t_start_s: float, t_end_s: float) -> Aggregate | None:
        """Time-weighted aggregate of one flat series over ``[t_start_s, t_end_s]``."""
        with self._lock:
            return self._series.aggregate(name, t_start_s, t_end_s)

    def window(self, t_start_s: float, t_end_s: float) -> dict[str, Aggregate]:
        """Time-weighted aggregates of every series known over ``[t_start_s, t_end_s]``."""
        with self._lock:
            return self._series.window(t_start_s, t_end_s)
