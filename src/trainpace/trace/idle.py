"""Why the device sat idle: HTA's per-stream causes, and the long gaps with what the host did.

HTA (``get_idle_time_breakdown``) splits each stream's gaps between consecutive kernels into
*host wait* (the next kernel's launch call started after the previous kernel ended: the host
was late), *kernel wait* (launched in time, a gap under 30 µs: launch overhead) and *other*.

The gaps here are stretches with no device work on any stream, as long as a threshold or
longer; each is attributed to the host activity that covers most of it.
"""

from __future__ import annotations

import numpy as np

from trainpace.trace import intervals as iv
from trainpace.trace.arrays import distinct
from trainpace.trace.findings import Gap, IdleBreakdown, StreamIdle
from trainpace.trace.prepare import Prepared, spans

KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay
GAP_THRESHOLD_US = 1000.0
TOP_GAPS = 10
# Host activity during a gap, in priority order (a moment counts for the first that covers it).
CAUSES: tuple[str, ...] = ("data_loading", "synchronize", "launch", "optimizer", "cpu_ops",
                           "python", "host_idle")


def _stream_idle(p: Prepared, kernel_wait_us: float) -> list[StreamIdle]:
    c = p.cols
    idx = np.flatnonzero(p.hta_kept & p.device & (c.stream != -1))
    if len(idx) == 0:
        return []
    idx = idx[np.lexsort((c.ts[idx], c.stream[idx]))]
    stream = c.stream[idx]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = stream[1:] != stream[:-1]
    prev_end = np.empty(len(idx))
    prev_end[1:] = c.end[idx[:-1]]
    gap = c.ts[idx] - prev_end
    launch = p.launch[idx]
    launch_ts = np.where(launch >= 0, c.ts[np.maximum(launch, 0)], -np.inf)
    host_wait = ~first & (launch_ts > prev_end)
    kernel_wait = ~first & ~host_wait & (gap < kernel_wait_us)
    other = ~first & ~host_wait & ~kernel_wait
    out = []
    for s in distinct(stream):
        mine = stream == s
        out.append(StreamIdle(
            stream=int(s),
            host_wait_us=float(gap[mine & host_wait].sum()),
            kernel_wait_us=float(gap[mine & kernel_wait].sum()),
            other_us=float(gap[mine & other].sum()),
            gaps=int((mine & ~first).sum()),
        ))
    return out


def _cause_sets(p: Prepared, step: np.ndarray) -> list[iv.IntervalSet]:
    """Host activity by cause, made exclusive in the order of :data:`CAUSES`."""
    sync = p.synchronize & (p.runtime | p.cpu_op)
    optimizer = p.optimizer & p.cpu_op
    masks = [
        p.dataloader,
        sync,
        p.runtime & ~sync,
        optimizer,
        p.host & ~p.python & ~step & ~p.runtime,
        p.python,
    ]
    # each moment to the first cause covering it (all time is the base: nothing is left out)
    return iv.paint(_ALL_TIME, [spans(p, mask) for mask in masks])[:-1]


_ALL_TIME = (np.array([-np.inf]), np.array([np.inf]))


def _top_ops(p: Prepared, step: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             limit: int = 3) -> list[list[dict[str, object]]]:
    """For each gap ``[lo[i], hi[i])`` (disjoint, in any order): the host operators that
    overlap it most (not the ProfilerStep spans), with the time they overlap it."""
    c = p.cols
    if len(lo) == 0:
        return []
    order = np.argsort(lo, kind="stable")
    glo, ghi = lo[order], hi[order]
    host = np.flatnonzero(p.host & ~step)
    ts, end = c.ts[host], c.end[host]
    # the gaps each event overlaps (ts < hi and end > lo): a run of the sorted gaps
    first = np.searchsorted(ghi, ts, side="right")
    count = np.maximum(np.searchsorted(glo, end, side="left") - first, 0)
    event = np.repeat(np.arange(len(host)), count)  # event by event: sums keep their order
    gap = first[event] + np.arange(len(event)) - np.repeat(np.cumsum(count) - count, count)
    overlap = np.minimum(end[event], ghi[gap]) - np.maximum(ts[event], glo[gap])
    n = len(c.names)
    totals = np.bincount(gap * n + c.name[host][event], weights=overlap,
                         minlength=len(lo) * n).reshape(len(lo), n)
    best = np.argsort(-totals, axis=1, kind="stable")[:, :limit]
    rows = [[{"name": c.names[i], "us": float(totals[g, i])} for i in best[g].tolist()
             if totals[g, i] > 0] for g in range(len(lo))]
    out: list[list[dict[str, object]]] = [[] for _ in range(len(lo))]
    for g, i in enumerate(order.tolist()):
        out[i] = rows[g]
    return out


def idle_breakdown(
    p: Prepared,
    busy: iv.IntervalSet,
    *,
    gap_threshold_us: float = GAP_THRESHOLD_US,
    kernel_wait_us: float = KERNEL_WAIT_US,
    top: int = TOP_GAPS,
) -> IdleBreakdown:
    """Idle time by cause, per stream and as long gaps (``busy``: the device's busy set)."""
    streams = _stream_idle(p, kernel_wait_us)
    lo, hi = iv.gaps(busy)
    long = (hi - lo) >= gap_threshold_us
    lo, hi = lo[long], hi[long]
    step = p.step_named  # the ProfilerStep spans
    per_cause = [iv.measure_within(s, lo, hi) for s in _cause_sets(p, step)]
    covered = np.sum(per_cause, axis=0) if per_cause and len(lo) else np.zeros(len(lo))
    per_cause.append(np.maximum((hi - lo) - covered, 0.0))
    table = np.vstack(per_cause) if len(lo) else np.zeros((len(CAUSES), 0))
    cause = table.argmax(axis=0) if len(lo) else np.zeros(0, dtype=np.int64)
    window_start = float(busy[0][0]) if len(busy[0]) else 0.0
    window_us = float(busy[1][-1] - busy[0][0]) if len(busy[0]) else 0.0
    s = p.steps
    step_at = np.searchsorted(s.start, lo, side="right") - 1
    gaps = []
    longest = np.argsort(-(hi - lo), kind="stable")[:top]
    top_ops = _top_ops(p, step, lo[longest], hi[longest])
    for j, i in enumerate(longest):
        k = int(step_at[i])
        in_step = k >= 0 and lo[i] < s.end[k]
        gaps.append(Gap(
            start_us=float(lo[i] - window_start),
            duration_us=float(hi[i] - lo[i]),
            step=s.names[k] if in_step else None,
            cause=CAUSES[int(cause[i])],
            host_us={CAUSES[j]: float(table[j, i]) for j in range(len(CAUSES))},
            top_ops=top_ops[j],
        ))
    total = float((hi - lo).sum())
    return IdleBreakdown(
        host_wait_us=sum(x.host_wait_us for x in streams),
        kernel_wait_us=sum(x.kernel_wait_us for x in streams),
        other_us=sum(x.other_us for x in streams),
        kernel_wait_threshold_us=kernel_wait_us,
        streams=streams,
        gap_threshold_us=gap_threshold_us,
        gaps_count=len(lo),
        gaps_total_us=total,
        gaps_pct=100.0 * total / window_us if window_us > 0 else None,
        gaps_by_cause_us={CAUSES[j]: float(table[j].sum()) for j in range(len(CAUSES))},
        gaps=gaps,
    )
