"""Which steps ran while other processes took the CPU: from the sampler's host readings.

A step is *slowed by others* when the reading that covers it says the machine's CPU was busy
(``BUSY_CPU_PCT``), other processes kept a large share of it busy (``OTHERS_CPU_PCT``), and
this process (with its DataLoader workers) got clearly less of it than it usually gets
(``SHARE_DROP`` of its usual share: the 90th percentile of its shares over the run, what it
gets when the machine is free for it). The last test is what tells such a step from the
process's own warm-up: compiling, growing the allocator or filling caches, the process keeps
its CPU share; crowded out, it loses it. On a machine loaded the same way all run long no
step is singled out, and warm-up is found from the step times alone.

*This process* is the job where the readings have ``job_cpu_pct`` (one of several ranks on
the host: this process, its sibling ranks and their workers, see
:mod:`~trainpace.sampling.siblings`): the job's own ranks are not other processes, and its
share of the machine is what others are judged against. Elsewhere it is ``process_cpu_pct``.

Pure functions of the readings: the Meter (live) and ``trainpace report`` (from
``system.jsonl``) get the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from trainpace.stats import percentile

# The machine counts as busy with under a fifth of its CPU idle, and as crowded when other
# processes keep 30% of it busy: the diagnosis's defaults for CPU contention (thresholds.py).
BUSY_CPU_PCT = 80.0
OTHERS_CPU_PCT = 30.0
# Crowded out: at most 70% of the share the process usually gets (a third of it lost at
# least; a process that keeps its share is doing its own work).
SHARE_DROP = 0.7
USUAL_SHARE_PERCENTILE = 90.0
# the columns of :func:`host_columns`
HOST_COLUMNS = ("t_s", "system_cpu_pct", "process_cpu_pct", "job_cpu_pct")


def host_columns(rows: Iterable[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """:data:`HOST_COLUMNS` of sampler rows as columns (see :func:`host_values`)."""
    values = [v for v in map(host_values, rows) if v is not None]
    if not values:
        return {name: np.empty(0, dtype=np.float64) for name in HOST_COLUMNS}
    table = np.array(values, dtype=np.float64)
    return {name: table[:, i] for i, name in enumerate(HOST_COLUMNS)}


def host_values(row: Mapping[str, Any]) -> tuple[float, ...] | None:
    """:data:`HOST_COLUMNS` of one sampler row, NaN where unknown (``job_cpu_pct`` is unknown
    in a single process's rows), None for a row without a time; a row of ``system.jsonl``
    nests the host readings under ``host``, a row kept by the Meter has them flat."""
    t_s = _number(row.get("t_s"))
    if math.isnan(t_s):
        return None
    host = row.get("host")
    readings = host if isinstance(host, Mapping) else row
    return (t_s, *(_number(readings.get(name)) for name in HOST_COLUMNS[1:]))


def _number(value: Any) -> float:
    """A finite number as a float, else NaN (unknown)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value) if math.isfinite(value) else math.nan


def crowded_readings(columns: Mapping[str, np.ndarray], cpu_count: int | None) -> np.ndarray | None:
    """Per reading: did other processes take the CPU from this one, or from its job where
    ``job_cpu_pct`` is known (see the module docstring)? None without CPU readings or a
    core count."""
    system, mine = columns["system_cpu_pct"], columns["process_cpu_pct"]
    job = columns.get("job_cpu_pct")
    if job is not None and np.isfinite(job).any():
        mine = np.where(np.isfinite(job), job, mine)
    known = np.isfinite(system) & np.isfinite(mine)
    if not cpu_count or not known.any():
        return None
    share = np.minimum(100.0, mine / cpu_count)  # of the whole machine, 0–100
    others = system - share
    usual = percentile(share[known], USUAL_SHARE_PERCENTILE) or 0.0  # known.any(): never None
    with np.errstate(invalid="ignore"):
        crowded = known & (system >= BUSY_CPU_PCT) & (others >= OTHERS_CPU_PCT) & (
            share <= SHARE_DROP * usual)
    return np.asarray(crowded, dtype=bool)


def slowed_by_others(step_s: np.ndarray, end_s: np.ndarray, columns: Mapping[str, np.ndarray],
                     cpu_count: int | None) -> np.ndarray | None:
    """Per step: did it run while other processes took the CPU? Judged by the reading that
    covers the step's middle (a reading at ``t_i`` covers ``(t_{i-1}, t_i]``); a step no
    reading covers yet is not. None when the readings cannot tell (no CPU figures)."""
    crowded = crowded_readings(columns, cpu_count)
    if crowded is None:
        return None
    t = columns["t_s"]
    middle = np.asarray(end_s, dtype=np.float64) - 0.5 * np.asarray(step_s, dtype=np.float64)
    covering = np.searchsorted(t, middle, side="left")
    inside = (covering < t.size) & np.isfinite(middle)
    out = np.zeros(middle.size, dtype=bool)
    out[inside] = crowded[covering[inside]]
    return out
