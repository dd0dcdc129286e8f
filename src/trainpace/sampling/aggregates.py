"""Time-weighted aggregates of sampled readings over any time window, in bounded memory.

A reading taken at ``t_i`` stands for the interval since the previous reading,
``(t_{i-1}, t_i]``: NVML utilization and CPU percentages are averages over the time before
the call, and a gauge (temperature) read at ``t_i`` is the best value known for it. The
time-weighted mean of a window ``[a, b]`` weighs each reading by how much of its interval
lies in the window; min and max are over the readings whose interval overlaps it. A reading
that is unknown (``None``) covers its interval with no value: it takes no weight.

Every metric is read at the same instants, so the readings are rows of one table of
buckets: ``(start, end)`` and, per metric, ``(integral, covered, min, max, count)``. Adding
a reading is a handful of vector operations whatever the number of metrics. When the table
holds more than ``max_buckets`` rows, neighbours are merged in pairs: memory stays bounded
for runs of any length (20,000 rows at 10 Hz is 33 minutes at full resolution; a day ends up
at ~8 s per row). A window edge that cuts a merged row takes the row's share pro rata, and
the row's extremes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

PENDING_MAX = 256  # readings (25 s at 10 Hz) before they join the table unasked


@dataclass(frozen=True)
class Aggregate:
    """Time-weighted mean, extremes and number of readings of one metric over a window."""

    mean: float
    min: float
    max: float
    readings: int


class SeriesSet:
    """Named metrics fed from flat readings ``{name: value}`` taken at successive times."""

    def __init__(self, *, max_buckets: int = 20_000) -> None:
        if max_buckets < 2:
            raise ValueError(f"max_buckets must be >= 2, got {max_buckets}")
        self.max_buckets = max_buckets
        self._names: list[str] = []
        self._column: dict[str, int] = {}
        self._rows = 0
        capacity = 64
        self._start = np.empty(capacity)
        self._end = np.empty(capacity)
        self._stats = np.empty((5, capacity, 0))  # integral, covered, min, max, count
        self._last_t: float | None = None
        self._pending: list[tuple[float, float, Mapping[str, float | None]]] = []

    def __len__(self) -> int:
        self._flush()
        return self._rows

    def start(self, t: float) -> None:
        """Set where the first reading's interval begins (when sampling started)."""
        self._last_t = t

    def names(self) -> list[str]:
        """The metrics seen so far."""
        self._flush()
        return list(self._names)

    def _add_columns(self, names: list[str]) -> None:
        neutral = np.empty((5, self._stats.shape[1], len(names)))
        neutral[:] = np.array([0.0, 0.0, math.inf, -math.inf, 0.0])[:, None, None]
        self._stats = np.concatenate((self._stats, neutral), axis=2)
        for name in names:
            self._column[name] = len(self._names)
            self._names.append(name)

    def _grow(self) -> None:
        capacity = min(2 * self._start.size, self.max_buckets + 1)
        self._start = np.resize(self._start, capacity)
        self._end = np.resize(self._end, capacity)
        stats = np.empty((5, capacity, self._stats.shape[2]))
        stats[:, : self._rows] = self._stats[:, : self._rows]
        self._stats = stats

    def add(self, t: float, values: Mapping[str, float | None]) -> None:
        """Add one reading of the named metrics, taken at ``t`` (a metric left out: unknown).

        The reading waits in a list and joins the table in a block, when the figures are
        asked for or :data:`PENDING_MAX` readings wait: one vectorized pass over many readings
        costs the sampler thread a fraction of one per reading.
        """
        start = self._last_t if self._last_t is not None else t
        self._pending.append((start, t, values))
        self._last_t = t
        if len(self._pending) >= PENDING_MAX:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        new = {name for _, _, values in pending for name in values} - self._column.keys()
        if new:
            self._add_columns(sorted(new))
        names, nan = self._names, math.nan
        block = np.array([[nan if (v := values.get(name)) is None else v for name in names]
                          for _, _, values in pending], dtype=np.float64)
        starts = np.array([p[0] for p in pending], dtype=np.float64)
        ends = np.array([p[1] for p in pending], dtype=np.float64)
        done = 0
        while done < len(pending):
            room = self.max_buckets + 1 - self._rows
            take = min(len(pending) - done, max(room, 1))
            while self._rows + take > self._start.size:
                self._grow()
            self._write(starts[done:done + take], ends[done:done + take],
                        block[done:done + take])
            done += take
            if self._rows > self.max_buckets:
                self._halve()

    def _write(self, starts: np.ndarray, ends: np.ndarray, value: np.ndarray) -> None:
        rows = slice(self._rows, self._rows + len(starts))
        width = np.maximum(ends - starts, 0.0)[:, None]
        known = np.isfinite(value)
        self._start[rows] = starts
        self._end[rows] = ends
        stats = self._stats[:, rows]
        stats[0] = np.where(known, value * width, 0.0)
        stats[1] = np.where(known, width, 0.0)
        stats[2] = np.where(known, value, math.inf)
        stats[3] = np.where(known, value, -math.inf)
        stats[4] = known
        self._rows += len(starts)

    def _halve(self) -> None:
        """Merge neighbouring rows in pairs (a trailing odd row stays as it is)."""
        n = self._rows
        pairs = n // 2
        tail = slice(2 * pairs, n)
        merged = np.empty_like(self._stats)
        head = self._stats[:, : 2 * pairs].reshape(5, pairs, 2, -1)
        merged[0:2, :pairs] = head[0:2].sum(axis=2)
        merged[2, :pairs] = head[2].min(axis=1)
        merged[3, :pairs] = head[3].max(axis=1)
        merged[4, :pairs] = head[4].sum(axis=1)
        rest = n - 2 * pairs
        merged[:, pairs: pairs + rest] = self._stats[:, tail]
        self._stats = merged
        start, end = self._start.copy(), self._end.copy()
        self._start[:pairs] = start[0: 2 * pairs: 2]
        self._end[:pairs] = end[1: 2 * pairs: 2]
        self._start[pairs: pairs + rest] = start[tail]
        self._end[pairs: pairs + rest] = end[tail]
        self._rows = pairs + rest

    def aggregate(self, name: str, t_start: float, t_end: float) -> Aggregate | None:
        """The aggregate of one metric over ``[t_start, t_end]``; None if unknown there."""
        self._flush()
        if name not in self._column:
            return None
        return self.window(t_start, t_end).get(name)

    def window(self, t_start: float, t_end: float) -> dict[str, Aggregate]:
        """The aggregates of every metric known in ``[t_start, t_end]``, in one pass."""
        self._flush()
        n = self._rows
        if not n or t_end < t_start or not self._names:
            return {}
        # rows are in time order: only those between these two indices can overlap
        first = int(np.searchsorted(self._end[:n], t_start, side="left"))
        last = int(np.searchsorted(self._start[:n], t_end, side="right"))
        if first >= last:
            return {}
        start, end = self._start[first:last], self._end[first:last]
        width = end - start
        overlap = np.minimum(end, t_end) - np.maximum(start, t_start)
        # a zero-width reading (two at the same instant) counts when it lies in the window
        inside = (overlap > 0) | ((width == 0) & (end >= t_start) & (end <= t_end))
        if not inside.any():
            return {}
        share = np.where(inside, np.clip(overlap, 0, None) / np.where(width > 0, width, 1.0),
                         0.0)[:, None]
        integral, covered, lows, highs, count = self._stats[:, first:last]
        known = (count > 0) & inside[:, None]
        readings = np.where(known, count, 0.0).sum(axis=0)
        weight = (covered * share).sum(axis=0)
        total = (integral * share).sum(axis=0)
        low = np.where(known, lows, math.inf).min(axis=0)
        high = np.where(known, highs, -math.inf).max(axis=0)
        middles = (np.where(known, lows, 0.0) + np.where(known, highs, 0.0)).sum(axis=0) / 2
        found: dict[str, Aggregate] = {}
        for column in np.flatnonzero(readings > 0):
            # only instantaneous readings in the window: their plain average
            mean = (total[column] / weight[column] if weight[column] > 0
                    else middles[column] / known[:, column].sum())
            found[self._names[column]] = Aggregate(
                mean=float(mean), min=float(low[column]), max=float(high[column]),
                readings=int(readings[column]))
        return found
