"""Interval algebra on numpy arrays: sets of half-open ``[start, end)`` intervals.

A *set* is a pair ``(starts, ends)`` of float64 arrays, sorted, disjoint and not touching
(what :func:`union` returns). Every operation is vectorized: a trace with a million kernels
costs a few sorts, never a Python loop per interval.
"""

from __future__ import annotations

import numpy as np

IntervalSet = tuple[np.ndarray, np.ndarray]

_EMPTY = np.zeros(0, dtype=np.float64)


def empty() -> IntervalSet:
    """The empty set."""
    return _EMPTY, _EMPTY


def union(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """The union of any intervals, as a set (overlapping or touching intervals merge)."""
    if len(starts) == 0:
        return empty()
    order = np.argsort(starts, kind="stable")
    return union_sorted(np.asarray(starts, dtype=np.float64)[order],
                        np.asarray(ends, dtype=np.float64)[order])


def union_sorted(s: np.ndarray, e: np.ndarray) -> IntervalSet:
    """:func:`union` of intervals already sorted by start (float64 arrays)."""
    if len(s) == 0:
        return empty()
    reach = np.maximum.accumulate(e)
    first = np.empty(len(s), dtype=bool)
    first[0] = True
    first[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(first)
    return s[heads], np.maximum.reduceat(e, heads)


def measure(intervals: IntervalSet) -> float:
    """Total length of a set."""
    starts, ends = intervals
    return float((ends - starts).sum())


def _merged(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """Intervals already sorted and not overlapping (as a sweep yields them) as a set: what
    :func:`union` returns for them, without its sort (touching ones merge)."""
    n = len(starts)
    if n == 0:
        return empty()
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.greater(starts[1:], ends[:-1], out=first[1:])
    heads = np.flatnonzero(first)
    lasts = np.empty_like(heads)
    lasts[:-1] = heads[1:] - 1
    lasts[-1] = n - 1
    return starts[heads], ends[lasts]


_DELTAS = np.array([1.0, -1.0, 2.0, -2.0])


def _sweep(a: IntervalSet, b: IntervalSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The elementary segments between the sets' boundaries, in order, and each one's state:
    1 inside ``a`` only, 2 inside ``b`` only, 3 inside both, 0 outside (or of no length)."""
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    na, nb = len(a[0]), len(b[0])
    order = np.argsort(points, kind="stable")
    p = points[order]
    state = np.cumsum(np.repeat(_DELTAS, (na, na, nb, nb))[order])
    seg_s, seg_e = p[:-1], p[1:]
    return seg_s, seg_e, np.where(seg_e > seg_s, state[:-1], 0.0)


def _kept(segments: tuple[np.ndarray, np.ndarray, np.ndarray], kept: np.ndarray) -> IntervalSet:
    return _merged(segments[0][kept], segments[1][kept])


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Where both sets are."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return empty()
    sweep = _sweep(a, b)
    return _kept(sweep, sweep[2] == 3)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Where ``a`` is and ``b`` is not."""
    if len(a[0]) == 0:
        return empty()
    sweep = _sweep(a, b)
    return _kept(sweep, sweep[2] == 1)


def covered_before(intervals: IntervalSet, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``: the length of the set that lies before it."""
    starts, ends = intervals
    t = np.asarray(t, dtype=np.float64)
    if len(starts) == 0:
        return np.zeros(t.shape)
    before = np.concatenate([[0.0], np.cumsum(ends - starts)])
    last = np.searchsorted(starts, t, side="right") - 1
    safe = np.maximum(last, 0)
    inside = np.minimum(t, ends[safe]) - starts[safe]
    return np.where(last >= 0, before[safe] + inside, 0.0)


def paint(base: IntervalSet, layers: list[IntervalSet]) -> list[IntervalSet]:
    """Each moment of ``base`` given to the first layer that covers it, and the rest: the
    sets ``base & layers[0]``, ``base & layers[1] - layers[0]``, ..., ``base - all layers``;
    what a chain of :func:`intersect` and :func:`subtract` gives, from one sweep (a layer is
    a bit of each segment's state)."""
    n = len(layers)
    if n >= 62:
        raise ValueError("paint: at most 61 layers")
    sets = [base, *layers]
    counts = [len(x[0]) for x in sets for _ in (0, 1)]
    if counts[0] == 0:
        return [empty() for _ in range(n + 1)]
    bits = [1 << n, *(1 << r for r in range(n))]
    weights = np.repeat(np.array([w for b in bits for w in (b, -b)], dtype=np.int64), counts)
    points = np.concatenate([part for x in sets for part in x])
    order = np.argsort(points, kind="stable")
    p = points[order]
    state = np.cumsum(weights[order])[:-1]
    seg_s, seg_e = p[:-1], p[1:]
    covered = state & ((1 << n) - 1)
    lowest = covered & -covered  # the first layer's bit (a power of two, exact in float64)
    layer = np.where(covered > 0, np.log2(np.maximum(lowest, 1)), n).astype(np.int64)
    layer[(seg_e <= seg_s) | (state < (1 << n))] = -1  # no length, or outside base
    return [_merged(seg_s[layer == r], seg_e[layer == r]) for r in range(n + 1)]


def measure_within(intervals: IntervalSet, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window ``[lo[i], hi[i])``: the length of the set inside it."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.maximum(np.asarray(hi, dtype=np.float64), lo)
    if lo.ndim != 1:
        inside: np.ndarray = covered_before(intervals, hi) - covered_before(intervals, lo)
        return inside
    both = covered_before(intervals, np.concatenate([hi, lo]))  # one lookup for both ends
    out: np.ndarray = both[: len(lo)] - both[len(lo):]
    return out


def gaps(intervals: IntervalSet) -> IntervalSet:
    """The holes between the intervals of a set (from its first start to its last end)."""
    starts, ends = intervals
    return ends[:-1], starts[1:]
