"""The host side of a trace with no device work: operators by self time, data loading, Python.

A CPU run's trace (``Meter(profile_steps=...)`` on a laptop) holds host spans only. Spans on one
thread nest; an operator's *self time* is its span less the spans nested directly in it, found
without a loop per event: an event's depth is the spans open when it starts (those started
before it, less those ended by then), and its parent the last span started before it one
level up. The window (the ProfilerStep spans) is split into data loading, operators and
Python (see :class:`~trainpace.trace.findings.HostBreakdown`).
"""

from __future__ import annotations

import numpy as np

from trainpace.trace import intervals as iv
from trainpace.trace.arrays import among, distinct, distinct_inverse
from trainpace.trace.findings import HostBreakdown, HostStepRow, OperatorRow
from trainpace.trace.prepare import Prepared, spans

TOP_OPERATORS = 10


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def self_times(ts: np.ndarray, end: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Each span's duration less the time of the spans nested directly in it (same thread).

    A span that overlaps its parent's end without nesting (a damaged or asynchronous trace) is
    counted only up to that end, and a self time never goes below zero.
    """
    n = len(ts)
    if n < 2:
        return np.asarray(end - ts, dtype=np.float64)
    _, thread_of = distinct_inverse(thread)
    # by thread, then start; of spans starting together the longer one encloses the other
    order = np.lexsort((-(end - ts), ts, thread_of))
    s, e, t = ts[order], end[order], thread_of[order]
    parent = np.full(n, -1, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(t)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n], strict=True):
        local = _parents(s[lo:hi], e[lo:hi])
        parent[lo:hi] = np.where(local >= 0, local + lo, -1)
    child = np.flatnonzero(parent >= 0)
    up = parent[child]
    inside = np.maximum(np.minimum(e[child], e[up]) - s[child], 0.0)
    nested = np.bincount(up, weights=inside, minlength=n)
    result = np.empty(n)
    result[order] = np.maximum((e - s) - nested, 0.0)
    return result


def _parents(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For spans of one thread sorted by start (longer first): each one's parent's position in
    this slice, or a negative number when it has none."""
    n = len(s)
    positive = (e > s).astype(np.int64)  # a zero-length span encloses nothing
    started = np.cumsum(positive) - positive  # positive spans started before each one
    ended = np.searchsorted(np.sort(e[e > s]), s, side="right")  # ... and ended by its start
    depth = np.maximum(started - ended, 0)
    candidates = np.flatnonzero(positive.astype(bool))
    keys = depth[candidates] * n + candidates  # sorted by depth, then position
    sort = np.argsort(keys, kind="stable")
    keys, candidates = keys[sort], candidates[sort]
    if len(candidates) == 0:
        return np.full(n, -1, dtype=np.int64)
    want = (depth - 1) * n + np.arange(n)  # the last candidate one level up, before it
    at = np.maximum(np.searchsorted(keys, want, side="left") - 1, 0)
    found = (depth > 0) & (keys[at] // n == depth - 1) & (keys[at] < want)
    return np.where(found, candidates[at], -1)


def _window(p: Prepared) -> tuple[iv.IntervalSet, str, np.ndarray]:
    """The host time to split and the threads it is split on: the ProfilerStep spans and
    their threads, else the busiest thread's span."""
    c, s = p.cols, p.steps
    if len(s):
        step = p.cpu_op & p.step_named
        return iv.union(s.start, s.end), "the ProfilerStep spans", distinct(c.thread[step])
    host = np.flatnonzero(p.host)
    threads, which = distinct_inverse(c.thread[host])
    busiest = int(np.bincount(which).argmax())
    main = host[which == busiest]
    span = (np.array([c.ts[main].min()]), np.array([c.end[main].max()]))
    thread = threads[busiest : busiest + 1]
    return span, f"thread {int(thread[0])}'s span (no ProfilerStep)", thread


def host_breakdown(p: Prepared, *, top: int = TOP_OPERATORS) -> HostBreakdown | None:
    """The host breakdown of one trace; None when it has no host events."""
    c = p.cols
    if not p.host.any():
        return None
    window, what, threads = _window(p)
    lo, hi = float(window[0][0]), float(window[1][-1])
    window_us = iv.measure(window)
    in_window = p.host & (c.ts >= lo) & (c.ts < hi)
    step_rows = p.steps
    main = in_window & among(c.thread, threads)
    operator = p.operator | p.runtime
    loading = iv.intersect(spans(p, p.dataloader & main), window)
    ops = iv.subtract(iv.intersect(spans(p, operator & main), window), loading)
    loading_us, ops_us = iv.measure(loading), iv.measure(ops)
    python_us = max(window_us - loading_us - ops_us, 0.0)
    rows = []
    if len(step_rows):
        start, end = step_rows.start, step_rows.end
        dl_in, op_in = iv.measure_within(loading, start, end), iv.measure_within(ops, start, end)
        rows = [HostStepRow(name=step_rows.names[i], duration_us=float(end[i] - start[i]),
                            dataloader_us=float(dl_in[i]), operators_us=float(op_in[i]),
                            python_us=float(max(end[i] - start[i] - dl_in[i] - op_in[i], 0.0)))
                for i in range(len(step_rows))]
    return HostBreakdown(
        window=what, window_us=window_us, steps=len(step_rows),
        dataloader_us=loading_us, dataloader_pct=_pct(loading_us, window_us),
        operators_us=ops_us, operators_pct=_pct(ops_us, window_us),
        python_us=python_us, python_pct=_pct(python_us, window_us),
        threads=len(distinct(c.thread[in_window])),
        operator_events=int((operator & in_window).sum()),
        python_function_events=int((p.python & in_window).sum()),
        top=_top(p, in_window, operator, loading, window_us, top),
        rows=rows,
    )


def _top(p: Prepared, in_window: np.ndarray, operator: np.ndarray, loading: iv.IntervalSet,
         window_us: float, top: int) -> list[OperatorRow]:
    """The operators with the most self time in the window."""
    c = p.cols
    nest = np.flatnonzero(in_window)  # every host span nests, annotations included
    own = self_times(c.ts[nest], c.end[nest], c.thread[nest])
    is_op = operator[nest]
    idx, own = nest[is_op], own[is_op]
    if len(idx) == 0:
        return []
    at = np.searchsorted(loading[0], c.ts[idx], side="right") - 1
    in_loading = (at >= 0) & (c.ts[idx] < loading[1][np.maximum(at, 0)]) if len(loading[0]) \
        else np.zeros(len(idx), dtype=bool)
    names, which = distinct_inverse(c.name[idx])
    self_sum = np.bincount(which, weights=own)
    total_sum = np.bincount(which, weights=c.dur[idx])
    count = np.bincount(which)
    loading_sum = np.bincount(which, weights=np.where(in_loading, own, 0.0),
                              minlength=len(names))
    best = np.lexsort((-total_sum, -self_sum))[:top]
    return [OperatorRow(name=c.names[int(names[g])], count=int(count[g]),
                        self_us=float(self_sum[g]), total_us=float(total_sum[g]),
                        self_pct=_pct(float(self_sum[g]), window_us),
                        in_dataloader_us=float(loading_sum[g]))
            for g in best]
