"""Time-weighted aggregates of sampled readings over any time window, in bounded memory.

A reading taken at ``t_i`` stands for the interval since the previous reading,
``(t_{i-1}, t_i]``: NVML utilization and CPU percentages are averages over the time before
the call, and a gauge (temperature) read at ``t_i`` is the best value known for it. The
time-weighted mean of a window ``[a, b]`` weighs each reading by how much of its interval
lies in the window; min and max are over the readings whose interval overlaps it. A reading
that is unknown (``None``) covers its interval with no value: it takes no weight.

Readings are kept as buckets ``(start, end, integral, covered, min, max)``. When a series
holds more than ``max_buckets``, neighbours are merged in pairs: memory stays bounded for
runs of any length (20,000 buckets at 10 Hz is 33 minutes at full resolution; a day of
readings ends up at ~8 s per bucket). A window edge that cuts a merged bucket takes the
bucket's share pro rata, and the bucket's extremes.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Aggregate:
    """Time-weighted mean, extremes and number of readings of one series over a window."""

    mean: float
    min: float
    max: float
    readings: int


class Series:
    """One metric's readings as mergeable time buckets."""

    def __init__(self, *, max_buckets: int = 20_000) -> None:
        if max_buckets < 2:
            raise ValueError(f"max_buckets must be >= 2, got {max_buckets}")
        self.max_buckets = max_buckets
        self._start = array("d")
        self._end = array("d")
        self._integral = array("d")  # value x covered seconds
        self._covered = array("d")  # seconds with a known value
        self._min = array("d")
        self._max = array("d")
        self._count = array("d")  # known readings merged into the bucket

    def __len__(self) -> int:
        return len(self._end)

    def add(self, start: float, end: float, value: float | None) -> None:
        """Add a reading covering ``(start, end]`` (``value`` None: covered, unknown)."""
        known = value is not None and math.isfinite(value)
        width = max(end - start, 0.0)
        self._start.append(start)
        self._end.append(end)
        self._integral.append(value * width if known else 0.0)  # type: ignore[operator]
        self._covered.append(width if known else 0.0)
        self._min.append(value if known else math.inf)  # type: ignore[arg-type]
        self._max.append(value if known else -math.inf)  # type: ignore[arg-type]
        self._count.append(1.0 if known else 0.0)
        if len(self._end) > self.max_buckets:
            self._halve()

    def _halve(self) -> None:
        """Merge neighbouring buckets in pairs (a trailing odd bucket stays as it is)."""
        n = len(self._end)
        pairs = n // 2
        columns = []
        for column, merge in (
            (self._start, "first"), (self._end, "last"), (self._integral, "sum"),
            (self._covered, "sum"), (self._min, "min"), (self._max, "max"), (self._count, "sum"),
        ):
            values = np.frombuffer(column, dtype=np.float64)
            head = values[: 2 * pairs].reshape(pairs, 2)
            if merge == "first":
                merged = head[:, 0]
            elif merge == "last":
                merged = head[:, 1]
            elif merge == "sum":
                merged = head.sum(axis=1)
            elif merge == "min":
                merged = head.min(axis=1)
            else:
                merged = head.max(axis=1)
            columns.append(np.concatenate((merged, values[2 * pairs:])))
        (self._start, self._end, self._integral, self._covered, self._min, self._max,
         self._count) = (array("d", c.tobytes()) for c in columns)

    def aggregate(self, t_start: float, t_end: float) -> Aggregate | None:
        """The aggregate over ``[t_start, t_end]``, or None if no known value overlaps it."""
        if not len(self._end) or t_end < t_start:
            return None
        start = np.frombuffer(self._start, dtype=np.float64)
        end = np.frombuffer(self._end, dtype=np.float64)
        width = end - start
        overlap = np.minimum(end, t_end) - np.maximum(start, t_start)
        # a zero-width reading (two at the same instant) counts when it lies in the window
        inside = (overlap > 0) | ((width == 0) & (end >= t_start) & (end <= t_end))
        count = np.frombuffer(self._count, dtype=np.float64)
        known = inside & (count > 0)
        if not known.any():
            return None
        share = np.clip(overlap, 0, None) / np.where(width > 0, width, 1.0)
        covered = float((np.frombuffer(self._covered, dtype=np.float64) * share)[known].sum())
        integral = float((np.frombuffer(self._integral, dtype=np.float64) * share)[known].sum())
        lows = np.frombuffer(self._min, dtype=np.float64)[known]
        highs = np.frombuffer(self._max, dtype=np.float64)[known]
        # only instantaneous readings in the window: their plain average
        mean = integral / covered if covered > 0 else float(((lows + highs) / 2).mean())
        return Aggregate(mean=mean, min=float(lows.min()), max=float(highs.max()),
                         readings=int(count[known].sum()))


class SeriesSet:
    """Named series fed from flat readings ``{name: value}`` taken at successive times."""

    def __init__(self, *, max_buckets: int = 20_000) -> None:
        self._max_buckets = max_buckets
        self._series: dict[str, Series] = {}
        self._last_t: float | None = None

    def start(self, t: float) -> None:
        """Set where the first reading's interval begins (when sampling started)."""
        self._last_t = t

    def add(self, t: float, values: dict[str, float | None]) -> None:
        """Add one reading of every named metric, taken at ``t``."""
        start = self._last_t if self._last_t is not None else t
        for name, value in values.items():
            series = self._series.get(name)
            if series is None:
                series = self._series[name] = Series(max_buckets=self._max_buckets)
            series.add(start, t, value)
        self._last_t = t

    def aggregate(self, name: str, t_start: float, t_end: float) -> Aggregate | None:
        """The aggregate of one series over a window (None: unknown there or never seen)."""
        series = self._series.get(name)
        return series.aggregate(t_start, t_end) if series is not None else None

    def names(self) -> list[str]:
        """The series seen so far."""
        return list(self._series)
