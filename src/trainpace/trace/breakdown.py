"""Where a rank's time went: HTA's temporal breakdown and torch-tb-profiler's step breakdown.

Both tools' definitions are reproduced exactly (see /work/shared/research/trace_anchors.md,
§1.3 and §2.3), so a figure here can be put next to the same figure from either tool.
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainpace.stats import percentile
from trainpace.trace import classify as cl
from trainpace.trace import intervals as iv
from trainpace.trace.arrays import among, distinct
from trainpace.trace.findings import ROLES, StepRow, StepsBreakdown
from trainpace.trace.prepare import Prepared, spans


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole > 0 else None


class Temporal(msgspec.Struct, frozen=True):  # built in C: no import-time cost
    """HTA 0.5's ``get_temporal_breakdown`` and ``get_comm_comp_overlap`` for one rank."""

    window: tuple[float, float]
    busy: iv.IntervalSet  # all device events of the window, merged
    compute: iv.IntervalSet
    communication: iv.IntervalSet
    idle_us: float
    compute_us: float
    non_compute_us: float
    overlap_pct: float | None
    exposed_communication_us: float

    @property
    def window_us(self) -> float:
        return self.window[1] - self.window[0]


def hta_device_events(p: Prepared) -> np.ndarray:
    """The events HTA's temporal breakdown counts: kept by its filter, with a stream."""
    out: np.ndarray = p.hta_kept & (p.cols.stream != -1)
    return out


def temporal(p: Prepared) -> Temporal | None:
    """HTA's temporal breakdown; None without device events."""
    k = hta_device_events(p)
    if not k.any():
        return None
    busy = spans(p, k)
    window = (float(busy[0][0]), float(busy[1][-1]))
    comp_mask = k & (p.hta_type == cl.HTA_TYPES.index(cl.HTA_COMPUTATION))
    comm_mask = k & (p.hta_type == cl.HTA_TYPES.index(cl.HTA_COMMUNICATION))
    compute = spans(p, comp_mask)
    comm = spans(p, comm_mask)
    window_us = window[1] - window[0]
    idle_us = window_us - iv.measure(busy)
    compute_us = iv.measure(compute)
    comm_us = iv.measure(comm)
    overlap = None
    if comm_mask.any() and comm_us > 0:
        overlap = round(100.0 * iv.measure(iv.intersect(compute, comm)) / comm_us, 2)
    return Temporal(
        window=window, busy=busy, compute=compute, communication=comm,
        idle_us=idle_us, compute_us=compute_us,
        non_compute_us=window_us - compute_us - idle_us, overlap_pct=overlap,
        exposed_communication_us=iv.measure(iv.subtract(comm, compute)),
    )


def temporal_pcts(t: Temporal) -> tuple[float | None, float | None, float | None]:
    """Idle, compute and non-compute as % of the window, rounded as HTA rounds them."""
    w = t.window_us
    return _pct(t.idle_us, w), _pct(t.compute_us, w), _pct(t.non_compute_us, w)


# ---- steps (torch-tb-profiler's overview) ---------------------------------------------------


def _device_steps(p: Prepared) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Each step's span extended to the device work it launched (``_find_device_steps`` and
    ``_update_steps_duration``), and the tail steps dropped because the profiler stopped
    before their kernels were recorded."""
    c, s = p.cols, p.steps
    start, end = s.start.copy(), s.end.copy()
    n = len(s)
    device_kind = p.kernel | p.memcpy | p.memset
    launched = device_kind & (p.launch >= 0)
    rt = p.launch[launched]
    rt_ok = p.runtime[rt]
    dev = np.flatnonzero(launched)[rt_ok]
    rt = rt[rt_ok]
    step_of = np.searchsorted(s.start, c.ts[rt], side="right") - 1
    inside = (step_of >= 0) & (c.end[rt] <= s.end[np.maximum(step_of, 0)])
    dev, step_of = dev[inside], step_of[inside]
    if len(dev) == 0:
        return start, end, []
    matched = np.bincount(step_of, minlength=n)
    dev_min, dev_max = _grouped_min_max(step_of, c.ts[dev], c.end[dev], n)
    prev_end = float(start[0])
    if matched[0] > 0:
        unmatched = device_kind.copy()
        unmatched[dev] = False
        before = unmatched & (c.end < dev_min[0])
        if before.any():
            prev_end = max(prev_end, float(c.end[before].max()))
    for i in range(n):
        start[i] = max(prev_end, start[i])
        end[i] = max(end[i], start[i]) if matched[i] == 0 else max(end[i], dev_max[i], start[i])
        prev_end = float(end[i])
    last = np.flatnonzero(matched > 0)
    keep = n
    if n > 1 and len(last):
        i = int(last[-1])
        keep = i + 1
        if i > 0 and matched[i - 1] * 0.8 > matched[i]:
            keep = i
    return start[:keep], end[:keep], list(s.names[keep:])


def _grouped_min_max(group: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group 0..n-1: the least ``lo`` and the greatest ``hi`` of its members (inf and
    -inf for a group with none): ``np.minimum.at``/``np.maximum.at``, which are slow on floats.
    """
    least, most = np.full(n, np.inf), np.full(n, -np.inf)
    if len(group) == 0:
        return least, most
    order = np.argsort(group, kind="stable")
    g = group[order]
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    least[g[heads]] = np.minimum.reduceat(lo[order], heads)
    most[g[heads]] = np.maximum.reduceat(hi[order], heads)
    return least, most


def _roles(p: Prepared) -> list[iv.IntervalSet]:
    """torch-tb-profiler's role ranges, merged, in its priority order (:data:`ROLES`)."""
    c = p.cols
    comm_ext = distinct(c.external_id[p.comm_op & (c.external_id != -1)])
    comm_kernel = p.kernel & among(c.external_id, comm_ext) & (c.external_id != -1)
    masks = [
        p.kernel & ~comm_kernel,
        p.memcpy,
        p.memset,
        comm_kernel | p.comm_op,
        p.runtime & ~_tb_foreign_runtime(p),
        p.dataloader,
        p.cpu_op & ~p.dataloader & ~p.comm_op & ~_step_spans(p),
    ]
    return [spans(p, m) for m in masks]


def _tb_foreign_runtime(p: Prepared) -> np.ndarray:
    # torch-tb-profiler maps "cuda_runtime" but not "cuda_driver"; driver calls still count
    # as launches for the step spans above, but not in its Runtime role.
    cats = np.array([x.lower() == "cuda_driver" for x in p.cols.cats], dtype=bool)
    out: np.ndarray = cats[p.cols.cat]
    return out


def _step_spans(p: Prepared) -> np.ndarray:
    if len(p.steps):
        return p.step_span
    return np.zeros(len(p.cols), dtype=bool)


def steps(p: Prepared) -> StepsBreakdown:
    """The per-step breakdown (torch-tb-profiler's roles) and its averages; a step's device
    figures count all its device work (HTA's filter does not apply per step)."""
    c = p.cols
    if len(p.steps) == 0:
        return StepsBreakdown()
    start, end, dropped = _device_steps(p)
    if len(start) == 0:
        return StepsBreakdown(dropped=dropped)
    roles = _roles(p)
    # each moment of the steps to the first role covering it (kernels counted in full)
    costs = [roles[0], *iv.paint(iv.union(start, end), roles)[1:]]
    per_role = [iv.measure_within(cost, start, end) for cost in costs]
    duration = end - start
    host = p.steps.end[: len(start)] - p.steps.start[: len(start)]
    dl_spans = spans(p, p.dataloader)
    work = p.device
    computation = work & (p.hta_type == cl.HTA_TYPES.index(cl.HTA_COMPUTATION))
    busy_in = iv.measure_within(spans(p, work), start, end)
    compute_in = iv.measure_within(spans(p, computation), start, end)
    dl_in = iv.measure_within(dl_spans, start, end)
    rows = [
        StepRow(
            name=p.steps.names[i], start_us=float(start[i] - start[0]),
            duration_us=float(duration[i]), host_us=float(host[i]),
            **{f"{role}_us": float(per_role[r][i]) for r, role in enumerate(ROLES)},
            device_busy_us=float(busy_in[i]), compute_us=float(compute_in[i]),
            dataloader_span_us=float(dl_in[i]),
        )
        for i in range(len(start))
    ]
    mean_step = float(duration.mean())
    kernels = p.kernel
    span = float(end[-1] - start[0])
    util = None
    devices = distinct(c.device[kernels])
    if kernels.any() and span > 0:
        util = max(
            iv.measure(iv.intersect(spans(p, kernels & (c.device == d)),
                                     (np.array([start[0]]), np.array([end[-1]]))))
            for d in devices
        ) / span * 100.0
    return StepsBreakdown(
        count=len(start),
        origin_us=float(start[0]),
        dropped=dropped,
        duration_us_mean=mean_step,
        duration_us_median=percentile(duration, 50),
        duration_us_p90=percentile(duration, 90),
        roles_us_mean={role: float(per_role[r].mean()) for r, role in enumerate(ROLES)},
        gpu_util_pct=util,
        dataloader_pct=100.0 * float(per_role[ROLES.index("dataloader")].mean()) / mean_step
        if mean_step > 0 else None,
        dataloader_span_pct=100.0 * float(dl_in.mean()) / mean_step if mean_step > 0 else None,
        rows=rows,
    )
