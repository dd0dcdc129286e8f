"""What the host was doing over some spans of the run: the sampler's readings (the machine's
busy CPU against this process's share of it, memory, the GPU's throttle flags), time-weighted.

Where the readings have ``job_cpu_pct`` (one of several ranks of a job on the host, see
:mod:`~trainpace.sampling.siblings`) other processes are the machine's busy CPU less the
job's share, not this process's: the sibling ranks' CPU is the job's own.

The slow phases, the step-time outliers and the drift name their cause from these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from trainpace.diagnosis._context import Context
from trainpace.diagnosis.thresholds import Thresholds

MAX_SPANS = 200  # host signs over at most this many spans (the longest): bounded work


@dataclass(frozen=True)
class HostSigns:
    """Time-weighted host readings over some spans of the run (None where not measured)."""

    readings: int
    system_cpu_pct: float | None  # the whole machine's busy share, 0–100
    process_cpu_pct: float | None  # this process and its workers, 100 = one core
    process_share_pct: float | None  # the same as a share of the machine, 0–100
    others_pct: float | None  # the machine's CPU busy with other processes (not the job's), 0–100
    memory_used_pct_max: float | None
    throttled_pct: float | None
    temperature_c_max: float | None
    rss_gb: float | None = None  # this process's resident memory (time-weighted)
    # the job's ranks on this host with their workers, 100 = one core, and their share of the
    # machine, 0–100 (None: a single process)
    job_cpu_pct: float | None = None
    job_share_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields; the job's only where known (a single process's are as they were)."""
        out = asdict(self)
        if self.job_cpu_pct is None:
            del out["job_cpu_pct"], out["job_share_pct"]
        return out

    @property
    def own_share_pct(self) -> float | None:
        """The share of the machine that is not others': the job's, else this process's."""
        return self.job_share_pct if self.job_share_pct is not None else self.process_share_pct

    def contended(self, t: Thresholds, baseline: HostSigns | None = None) -> bool:
        """Other processes took a large share of a busy CPU — more than in ``baseline``, or
        this process got clearly less of it (a saturated machine reads 100% busy either way)."""
        if self.others_pct is None or self.others_pct < t.cpu_others_pct:
            return False
        if (self.system_cpu_pct or 0.0) < t.cpu_contention_system_pct:
            return False
        if baseline is None or baseline.others_pct is None:
            return True
        more_others = self.others_pct - baseline.others_pct >= 0.5 * t.cpu_others_pct
        share, base_share = self.own_share_pct, baseline.own_share_pct
        less_mine = share is not None and base_share is not None and share <= 0.7 * base_share
        return more_others or less_mine

    def uncontended_text(self, t: Thresholds) -> str:
        """Why these readings are not contention (:meth:`contended` said no), in words that
        agree with it: a CPU with idle cores, one kept busy by this process, or readings that
        cannot tell whose work kept it busy."""
        if self.system_cpu_pct is None:
            return "no host CPU reading: contention not measured"
        if self.system_cpu_pct < t.cpu_contention_system_pct:
            return f"{self.text()}: cores were idle, no contention"
        if self.others_pct is None:
            return (f"{self.text()}: whether other processes took it is not known (no share "
                    "of this process in the machine's cores)")
        return (f"{self.text()}: other processes had {self.others_pct:.0f}%, under the "
                f"{t.cpu_others_pct:.0f}% that counts as contention")

    def text(self) -> str:
        """``the machine's CPU was 100% busy, this process had 48% of it``."""
        if self.system_cpu_pct is None:
            return "no host CPU reading"
        mine = (f", this process had {self.process_share_pct:.0f}% of it"
                if self.process_share_pct is not None else "")
        if self.job_share_pct is not None:
            mine += f", its job's ranks on this host {self.job_share_pct:.0f}%"
        return f"the machine's CPU was {self.system_cpu_pct:.0f}% busy{mine}"


def _weighted(values: np.ndarray, weights: np.ndarray) -> float | None:
    known = np.isfinite(values) & (weights > 0)
    if not known.any():
        return None
    return float((values[known] * weights[known]).sum() / weights[known].sum())


def host_signs(ctx: Context, spans: Sequence[tuple[float, float]]) -> HostSigns | None:
    """The sampler's host readings over ``spans`` ((start_s, stop_s), the run's clock).

    A row read at ``t_i`` covers ``(t_{i-1}, t_i]`` (its CPU figures are averages over it),
    and weighs by its overlap with the spans. None when no row overlaps them.
    """
    rows = ctx.host_rows
    t = rows["t_s"]
    if t.size == 0 or not spans:
        return None
    begin = np.concatenate(([t[0] - (t[1] - t[0]) if t.size > 1 else t[0]], t[:-1]))
    weights = np.zeros(t.size)
    for start, stop in sorted(spans, key=lambda s: s[0] - s[1])[:MAX_SPANS]:
        weights += np.clip(np.minimum(t, stop) - np.maximum(begin, start), 0.0, None)
    # a span shorter than the reading interval still takes the row it falls in
    if not (weights > 0).any():
        for start, stop in spans[:MAX_SPANS]:
            i = int(np.searchsorted(t, 0.5 * (start + stop)))
            if i < t.size:
                weights[i] += 1.0
    if not (weights > 0).any():
        return None
    system = _weighted(rows["system_cpu_pct"], weights)
    process = _weighted(rows["process_cpu_pct"], weights)
    job = _weighted(rows["job_cpu_pct"], weights)
    cores = ctx.cpu_count
    share = min(100.0, process / cores) if process is not None and cores else None
    job_share = min(100.0, job / cores) if job is not None and cores else None
    own = job_share if job_share is not None else share
    others = max(0.0, system - own) if system is not None and own is not None else None
    memory = rows["memory_used_pct"][weights > 0]
    temps = rows["temperature_c"][weights > 0]
    return HostSigns(
        readings=int((weights > 0).sum()),
        system_cpu_pct=system,
        process_cpu_pct=process,
        process_share_pct=share,
        others_pct=others,
        memory_used_pct_max=float(np.nanmax(memory)) if np.isfinite(memory).any() else None,
        throttled_pct=_weighted(rows["throttled"], weights),
        temperature_c_max=float(np.nanmax(temps)) if np.isfinite(temps).any() else None,
        rss_gb=_weighted(rows["rss_gb"], weights),
        job_cpu_pct=job,
        job_share_pct=job_share,
    )


def step_signs(ctx: Context, ix: np.ndarray) -> HostSigns | None:
    """The host readings over the time of the timed steps ``ix`` (indices into
    ``ctx.times``; None without sampler rows)."""
    times = ctx.times
    ends = times.t_s[ix]
    known = np.isfinite(ends)
    if not known.any():
        return None
    spans = [(float(e - s), float(e)) for e, s in zip(ends[known], times.step_s[ix][known],
                                                        strict=True)]
    return host_signs(ctx, spans)
