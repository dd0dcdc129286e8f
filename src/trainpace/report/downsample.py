"""Long series made drawable: each pixel's extremes, a robust top, window means.

- **Downsampled by extremes**: a series longer than the plot has pixels keeps, per pixel
  bucket, its lowest and its highest point (:func:`extremes`), so a one-step spike in a
  million steps is still drawn, where an average would flatten it. The buckets are searched
  a chunk of :data:`CHUNK_POINTS` at a time, so a run of 1e6 steps is reduced with
  chunk-sized temporaries, not a full-length copy per step of the computation.
- **A robust top** (:func:`robust_top`): where a scale stops so that one 2 s stall cannot
  squash a 30 ms step into a strip: 1.5× the 95th percentile.
- **Window means** (:func:`window_means`): time-weighted readings as a level line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from trainpace.stats import percentile

BUCKETS = 700  # pixel buckets of a 720-wide plot: two points (min, max) each
CHUNK_POINTS = 1 << 16  # points handled at a time: bounds the temporaries of a long series
ROBUST_PCT = 95.0
ROBUST_HEADROOM = 1.5

Values = Sequence[float | None] | np.ndarray


def as_array(values: Values) -> np.ndarray:
    """``values`` as float64, a None as NaN (an array is not copied)."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def extreme_indices(ys: np.ndarray, buckets: int = BUCKETS) -> np.ndarray:
    """Indices that keep, per bucket of consecutive points, the lowest and the highest
    finite one (in order); every index when there are few points. A bucket with no finite
    point keeps its first index (a NaN there breaks the line, as the data does).

    The buckets are searched a whole number of them at a time (about :data:`CHUNK_POINTS`
    points): each bucket's extremes depend on its own points only, so the result is the
    same as over the whole series at once, with chunk-sized temporaries."""
    n = len(ys)
    if n <= 2 * buckets:
        return np.arange(n)
    size = -(-n // buckets)
    rows = -(-n // size)
    per = max(1, CHUNK_POINTS // size)  # buckets per chunk
    kept = [_bucket_extremes(ys, r0, min(rows, r0 + per), size) for r0 in range(0, rows, per)]
    return np.concatenate(kept)


def _bucket_extremes(ys: np.ndarray, r0: int, r1: int, size: int) -> np.ndarray:
    """:func:`extreme_indices` of buckets ``r0..r1-1`` (``size`` points each; the last one of
    the series may be short), in order, a bucket's index once when its lowest is its highest."""
    n = len(ys)
    lo, hi = r0 * size, min(r1 * size, n)
    block = np.asarray(ys[lo:hi], dtype=np.float64)
    if block.size < (r1 - r0) * size:  # the series' last bucket, short: pad it with gaps
        block = np.concatenate((block, np.full((r1 - r0) * size - block.size, np.nan)))
    grid = block.reshape(r1 - r0, size)
    finite = np.isfinite(grid)
    base = lo + np.arange(r1 - r0) * size
    low = base + np.where(finite, grid, np.inf).argmin(axis=1)
    high = base + np.where(finite, grid, -np.inf).argmax(axis=1)
    empty = ~finite.any(axis=1)
    low[empty] = high[empty] = np.minimum(base[empty], n - 1)
    pairs = np.sort(np.stack([low, high], axis=1), axis=1).ravel()
    return pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]


def extremes(xs: Values, ys: Values, buckets: int = BUCKETS) -> tuple[np.ndarray, np.ndarray]:
    """``(xs, ys)`` downsampled to each bucket's lowest and highest point
    (:func:`extreme_indices`)."""
    x, y = as_array(xs), as_array(ys)
    keep = extreme_indices(y, buckets)
    return x[keep], y[keep]


def robust_top(values: np.ndarray) -> float | None:
    """Where a robust scale stops: 1.5× the 95th percentile of the finite values, or None
    when the largest value is within that (nothing to clip)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None
    top = (percentile(finite, ROBUST_PCT) or 0.0) * ROBUST_HEADROOM
    return top if top > 0 and float(finite.max()) > top else None


def count_above(values: np.ndarray, top: float) -> int:
    """How many finite values exceed ``top`` (a chunk at a time: no full-length mask)."""
    count = 0
    for lo in range(0, values.size, CHUNK_POINTS):
        part = values[lo:lo + CHUNK_POINTS]
        count += int(np.count_nonzero((part > top) & (part < np.inf)))
    return count


def window_means(xs: Values, ys: Values, window: float) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted means of readings over consecutive windows of ``window`` (in x's unit)
    from the first reading, as a level line: each window's mean at its start and at its end
    (the last end is the last reading). Each reading stands for the interval since the one
    before it (the first, for the median interval). A window without a finite reading is NaN
    (a gap in the line). ``window`` 0: the readings as they are."""
    x, y = as_array(xs), as_array(ys)
    if x.size < 2 or not window > 0:
        return x, y
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    gaps = np.diff(x)
    weight = np.concatenate([[float(np.median(gaps))], gaps])
    known = np.isfinite(y) & (weight > 0)
    index = ((x - x[0]) // window).astype(np.int64)
    n = int(index[-1]) + 1
    total = np.bincount(index[known], weights=(weight * y)[known], minlength=n)
    weights = np.bincount(index[known], weights=weight[known], minlength=n)
    means = np.full(n, np.nan)
    np.divide(total, weights, out=means, where=weights > 0)
    starts = x[0] + np.arange(n) * window
    ends = np.minimum(starts + window, x[-1])
    return np.column_stack([starts, ends]).ravel(), np.repeat(means, 2)
