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
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.asarray(ends, dtype=np.float64)[order]
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


def _combine(a: IntervalSet, b: IntervalSet, keep: int) -> IntervalSet:
    """Sweep two sets (inside ``a`` counts 1, inside ``b`` 2); keep where the sum is ``keep``."""
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    if len(points) == 0:
        return empty()
    na, nb = len(a[0]), len(b[0])
    delta = np.concatenate([np.ones(na), -np.ones(na), np.full(nb, 2.0), np.full(nb, -2.0)])
    order = np.argsort(points, kind="stable")
    p = points[order]
    state = np.cumsum(delta[order])
    seg_s, seg_e, seg_state = p[:-1], p[1:], state[:-1]
    kept = (seg_state == keep) & (seg_e > seg_s)
    return union(seg_s[kept], seg_e[kept])


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Where both sets are."""
    return _combine(a, b, 3)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Where ``a`` is and ``b`` is not."""
    return _combine(a, b, 1)


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


def measure_within(intervals: IntervalSet, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window ``[lo[i], hi[i])``: the length of the set inside it."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.maximum(np.asarray(hi, dtype=np.float64), lo)
    inside: np.ndarray = covered_before(intervals, hi) - covered_before(intervals, lo)
    return inside


def gaps(intervals: IntervalSet) -> IntervalSet:
    """The holes between the intervals of a set (from its first start to its last end)."""
    starts, ends = intervals
    return ends[:-1], starts[1:]
