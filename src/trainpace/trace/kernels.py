"""Device kernels by category, the top kernels, and the signs of a launch-bound step.

A step is launch-bound when the host cannot issue kernels as fast as the device runs them:
many kernels per step, most of them short (median of a few µs), and the device idle between
them (the idle breakdown's *host wait*). The launch lag is HTA's launch delay: from the end of
the launch call on the host to the start of the kernel on the device.
"""

from __future__ import annotations

import numpy as np

from trainpace.stats import median, percentile
from trainpace.trace import classify as cl
from trainpace.trace.arrays import distinct_inverse
from trainpace.trace.findings import CategoryRow, KernelBreakdown, KernelRow
from trainpace.trace.prepare import Prepared

SHORT_KERNEL_US = 10.0
TOP_KERNELS = 10


def hta_steps(p: Prepared) -> int:
    """The number of profiled steps inside HTA's window (all but the last when it filters)."""
    s = p.steps
    if not len(s):
        return 0
    return int((s.start < s.start.max()).sum()) if p.hta_filtered else len(s)


def kernel_breakdown(p: Prepared, *, top: int = TOP_KERNELS,
                     short_us: float = SHORT_KERNEL_US) -> KernelBreakdown | None:
    """None when the trace has no device events in HTA's window."""
    c = p.cols
    work = np.flatnonzero(p.hta_kept & p.device)
    if len(work) == 0:
        return None
    names, inverse = distinct_inverse(c.name[work])
    index = {category: i for i, category in enumerate(cl.CATEGORIES)}
    category_of_name = np.array(
        [index[k] for k in cl.kernel_categories([c.names[i] for i in names.tolist()])],
        dtype=np.int64)
    category = category_of_name[inverse]
    memory = cl.CATEGORIES.index("memory")
    category[(p.memcpy | p.memset)[work]] = memory
    dur = c.dur[work]
    all_us = float(dur.sum())

    def pct(x: float) -> float | None:
        return 100.0 * x / all_us if all_us > 0 else None

    counts = np.bincount(category, minlength=len(cl.CATEGORIES))
    sums = np.bincount(category, weights=dur, minlength=len(cl.CATEGORIES))
    categories = [
        CategoryRow(category=cl.CATEGORIES[i], count=int(counts[i]), total_us=float(sums[i]),
                    pct=pct(float(sums[i])))
        for i in np.argsort(-sums, kind="stable") if counts[i] > 0
    ]
    name_sum = np.bincount(inverse, weights=dur)
    name_count = np.bincount(inverse)
    rows = []
    for g in np.argsort(-name_sum, kind="stable")[:top]:
        mine = dur[inverse == g]
        rows.append(KernelRow(
            name=c.names[names[g]], category=cl.CATEGORIES[int(category[inverse == g][0])],
            count=int(name_count[g]), total_us=float(name_sum[g]),
            mean_us=float(mine.mean()), median_us=median(mine) or 0.0,  # mine is never empty
            max_us=float(mine.max()), pct=pct(float(name_sum[g])),
        ))
    kernels = np.flatnonzero(p.hta_kept & p.kernel)
    kdur = c.dur[kernels]
    steps = hta_steps(p)
    launch = p.launch[kernels]
    launched = launch >= 0
    launched[launched] = p.runtime[launch[launched]]
    lag = np.maximum(c.ts[kernels[launched]] - c.end[launch[launched]], 0.0)
    return KernelBreakdown(
        count=len(kernels),
        per_step=len(kernels) / steps if steps else None,
        median_us=percentile(kdur, 50),
        short_pct=100.0 * float((kdur < short_us).mean()) if len(kdur) else None,
        short_threshold_us=short_us,
        launch_lag_us=percentile(lag, 50),
        launch_lag_p90_us=percentile(lag, 90),
        categories=categories,
        top=rows,
    )
