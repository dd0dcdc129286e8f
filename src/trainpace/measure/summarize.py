"""From step records to the figures: windows, warm-up, steady throughput, time to target.

Pure functions over a columnar store of ``steps.jsonl`` records. The live Meter and
``trainpace report`` (rebuilding a killed run's summary from its steps) use the same code, so a
figure means the same thing wherever it is shown.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainpace.records import StepRecord, WindowFigures
from trainpace.runlog import RunData
from trainpace.series import StepSeries
from trainpace.stats import linear_fit, median, percentile, percentile_sorted, steady_start
from trainpace.stepcolumns import StepColumns, columns_of
from trainpace.summary import (
    Data,
    RankEntry,
    Steps,
    Summary,
    Target,
    Throughput,
    Time,
)

ETA_FIT_POINTS = 100  # the recent trend an ETA extrapolates: about one default window
# Auto warm-up is looked for in the first steps only: past them it is not warm-up any more,
# and the detection's cost stays bounded however long the run is.
WARMUP_SEARCH_STEPS = 10_000


@dataclass(frozen=True, kw_only=True)
class Goal:
    """What the run is timed to: a loss or metric target, and how it is smoothed."""

    name: str  # "loss" or "metric"
    value: float
    higher_is_better: bool = False
    smoothing: float = 0.9


def warmup_steps(step_s: np.ndarray, setting: int | str) -> int:
    """How many leading steps are warm-up: a fixed count, or detected ("auto").

    "auto" always excludes at least the first step; while no steady state is visible yet
    (too few steps), only the first step is excluded.
    """
    n = len(step_s)
    if setting != "auto":
        return min(int(setting), n)
    if n == 0:
        return 0
    start = steady_start(step_s[:WARMUP_SEARCH_STEPS])
    return 1 if start is None else start


def window_figures(steps: StepColumns | Sequence[StepRecord], warmup: int) -> WindowFigures:
    """Figures of one window: its steps past warm-up. The same definitions as the summary's,
    in plain Python over the window's columns (a window is small, and this runs on the
    writer thread between two training steps): sums in step order, so each figure is what
    the records give to the last bit."""
    cols = steps if isinstance(steps, StepColumns) else columns_of(steps)
    n = cols.n
    step = cols.column("step")
    skip = bisect.bisect_right(step, warmup) if n else 0  # steps are in order
    measured = n - skip
    ordered = sorted(cols.column("step_s")[skip:])
    total_s = sum(ordered)
    ok = total_s > 0
    wait_s = sum(cols.column("wait_s")[skip:])
    return {
        "first_step": int(step[0]) if n else None,
        "last_step": int(step[-1]) if n else None,
        "steps": n,
        "measured_steps": measured,
        "warmup_steps": warmup,
        "measured_s": total_s if measured else None,
        "samples_per_s": _rate(cols, "samples", skip, total_s),
        "tokens_per_s": _rate(cols, "tokens", skip, total_s),
        "steps_per_s": measured / total_s if ok else None,
        "step_s_median": percentile_sorted(ordered, 50.0),
        "step_s_p90": percentile_sorted(ordered, 90.0),
        "step_s_mean": total_s / measured if measured else None,
        "wait_s_per_step": wait_s / measured if measured else None,
        "wait_pct": 100.0 * wait_s / total_s if ok else None,
        "exposed_wait_s_per_step": _mean_kept(cols, "exposed_wait_s", skip),
        "h2d_s_per_step": _mean_kept(cols, "h2d_s", skip),
        "outside_s": _sum_kept(cols, "outside_s"),
        "loss": _mean_kept(cols, "loss", 0),
        "loss_nonfinite_steps": cols.column("loss_nonfinite").count(1.0) if n else 0,
        "t_s": cols.column("t_s")[-1] if n else None,
    }


def _kept(cols: StepColumns, name: str, skip: int) -> list[float]:
    """The field's values from step ``skip`` on, nulls left out."""
    if cols.is_null(name):
        return []
    return [v for v in cols.column(name)[skip:] if v == v]  # NaN != NaN: a null


def _mean_kept(cols: StepColumns, name: str, skip: int) -> float | None:
    kept = _kept(cols, name, skip)
    return sum(kept) / len(kept) if kept else None


def _sum_kept(cols: StepColumns, name: str) -> float | None:
    kept = _kept(cols, name, 0)
    return sum(kept) if kept else None


def _rate(cols: StepColumns, name: str, skip: int, total_s: float) -> float | None:
    """Counts per second over ``total_s``; None unless every measured step was counted."""
    counts = cols.column(name)[skip:]
    if total_s <= 0 or not counts:
        return None
    total = sum(counts)
    return None if math.isnan(total) else total / total_s


def _rates(series: StepSeries, lo: int) -> dict[str, Any]:
    """Throughput, step-time percentiles and data wait over ``series[lo:]``."""
    step_s = series.column("step_s")[lo:]
    total_s = float(step_s.sum()) if step_s.size else 0.0
    ok = total_s > 0
    tokens = series.column("tokens")[lo:]
    wait = series.column("wait_s")[lo:]
    exposed = series.column("exposed_wait_s")[lo:]
    h2d = series.column("h2d_s")[lo:]
    samples = series.column("samples")[lo:]
    return {
        "measured_s": total_s if step_s.size else None,
        # a step whose batch could not be counted makes samples/s unknown, not lower
        "samples_per_s": (float(samples.sum()) / total_s
                          if ok and np.isfinite(samples).all() else None),
        "tokens_per_s": (float(tokens.sum()) / total_s
                         if ok and tokens.size and np.isfinite(tokens).all() else None),
        "steps_per_s": step_s.size / total_s if ok else None,
        "step_s_median": median(step_s),
        "step_s_p90": percentile(step_s, 90),
        "step_s_mean": total_s / step_s.size if step_s.size else None,
        "wait_s_per_step": float(wait.mean()) if wait.size else None,
        "wait_pct": 100.0 * float(wait.sum()) / total_s if ok else None,
        "exposed_wait_s_per_step": _finite_mean(exposed),
        "h2d_s_per_step": _finite_mean(h2d),
    }


def _finite_mean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else None


@dataclass(frozen=True)
class TargetProgress:
    """Where the run stands against its goal."""

    time_to_target_s: float | None
    steps_to_target: int | None
    eta_s: float | None
    smoothed: float | None  # the latest smoothed value


class TargetTracker:
    """Follows a run toward its goal, one observed value at a time (O(1) each).

    The value is smoothed by a bias-corrected EMA (:func:`trainpace.stats.ema`); the target is
    reached the first time the smoothed value is at or past it. Until then the ETA
    extrapolates a straight line fitted to the last ``ETA_FIT_POINTS`` smoothed values against
    wall time; it is None when that trend does not move toward the target.
    """

    def __init__(self, goal: Goal) -> None:
        self.goal = goal
        self._sign = 1.0 if goal.higher_is_better else -1.0  # reached: sign·(v − target) ≥ 0
        self._acc = 0.0
        self._count = 0
        self._reached: tuple[float, int] | None = None
        self._recent: deque[tuple[float, float]] = deque(maxlen=ETA_FIT_POINTS)

    def add(self, t_s: float, step: int, value: float | None) -> None:
        """One step's observed value (None or NaN: nothing observed at that step)."""
        if value is None or not math.isfinite(value):
            return
        beta = self.goal.smoothing
        self._count += 1
        self._acc = beta * self._acc + (1.0 - beta) * value
        smoothed = self._acc / (1.0 - beta**self._count)
        if self._reached is None and self._sign * (smoothed - self.goal.value) >= 0:
            self._reached = (t_s, step)
        self._recent.append((t_s, smoothed))

    def add_records(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Steps as ``steps.jsonl`` records."""
        name = self.goal.name
        for record in records:
            self.add(record["t_s"], record["step"], record.get(name))

    def progress(self) -> TargetProgress:
        """Where the run stands now."""
        if not self._recent:
            return TargetProgress(None, None, None, None)
        latest = self._recent[-1][1]
        if self._reached is not None:
            return TargetProgress(self._reached[0], self._reached[1], 0.0, latest)
        fit = linear_fit([t for t, _ in self._recent], [v for _, v in self._recent])
        eta = None
        if fit is not None and self._sign * fit[0] > 0:
            eta = (self.goal.value - latest) / fit[0]
        return TargetProgress(None, None, eta if eta is not None and eta > 0 else None, latest)


def target_progress(series: StepSeries, goal: Goal) -> TargetProgress:
    """:class:`TargetTracker`'s verdict over a whole series."""
    tracker = TargetTracker(goal)
    values, t_s, steps = series.column(goal.name), series.column("t_s"), series.column("step")
    for i in np.flatnonzero(np.isfinite(values)):
        tracker.add(float(t_s[i]), int(steps[i]), float(values[i]))
    return tracker.progress()


def summarize(
    series: StepSeries,
    *,
    warmup: int | str,
    excluded: int | None = None,
    goal: Goal | None = None,
    progress: TargetProgress | None = None,
    run_id: str | None = None,
    wall_s: float | None = None,
    clock: str | None = None,
    tokens_counted: str | None = None,
    loader: dict[str, Any] | None = None,
    host: str | None = None,
) -> Summary:
    """The run's summary from its steps (the device, bandwidth and flops parts left empty).

    ``excluded``: the warm-up count when the caller already knows it (else from ``warmup``);
    ``progress``: toward ``goal``, when the caller follows it already (else computed).
    """
    step_s = series.column("step_s")
    n = len(series)
    if excluded is None:
        excluded = warmup_steps(step_s, warmup)
    rates = _rates(series, excluded)
    t_s = series.column("t_s")
    if progress is None and goal is not None:
        progress = target_progress(series, goal)
    outside = series.column("outside_s")
    outside = outside[np.isfinite(outside)]
    # Measured only when the loop pulls its batches through meter.loader() (see StepRecord);
    # then the time from the last step to the end of the run (a last evaluation) is too.
    outside_s = float(outside.sum()) if outside.size else None
    if outside_s is not None and wall_s is not None and n:
        outside_s += max(wall_s - float(t_s[-1]), 0.0)
    wall_s = wall_s if wall_s is not None else (float(t_s[-1]) if n else None)
    time = Time(
        wall_s=wall_s,
        measured_s=rates["measured_s"],
        step_s_median=rates["step_s_median"],
        step_s_p90=rates["step_s_p90"],
        step_s_mean=rates["step_s_mean"],
        warmup_s=float(step_s[:excluded].sum()) if n else None,
        time_to_target_s=progress.time_to_target_s if progress else None,
        steps_to_target=progress.steps_to_target if progress else None,
        eta_to_target_s=progress.eta_s if progress else None,
        target=(Target(name=goal.name, value=goal.value, higher_is_better=goal.higher_is_better)
                if goal is not None else None),
        clock=clock,
        outside_steps_s=outside_s,
        outside_steps_pct=(100.0 * outside_s / wall_s
                           if outside_s is not None and wall_s else None),
    )
    return Summary(
        run_id=run_id,
        steps=Steps(total=n, warmup=excluded, measured=n - excluded,
                    warmup_mode="auto" if warmup == "auto" else "fixed"),
        throughput=Throughput(
            samples_per_s=rates["samples_per_s"],
            tokens_per_s=rates["tokens_per_s"],
            steps_per_s=rates["steps_per_s"],
            tokens_counted=tokens_counted if rates["tokens_per_s"] is not None else None,
        ),
        time=time,
        data=Data(
            wait_s_per_step=rates["wait_s_per_step"],
            wait_pct=rates["wait_pct"],
            h2d_s_per_step=rates["h2d_s_per_step"],
            exposed_wait_s_per_step=rates["exposed_wait_s_per_step"],
            loader=loader,
        ),
        ranks=[RankEntry(rank=0, host=host, samples_per_s=rates["samples_per_s"],
                         step_s_median=rates["step_s_median"], wait_pct=rates["wait_pct"])],
    )


def summary_for_run(run: RunData) -> Summary:
    """The run's summary, rebuilt from ``steps.jsonl`` when summary.json is missing or behind.

    A run killed mid-way keeps its steps (flushed at each window) but may have a summary from
    an earlier window, or none; the rebuilt one keeps the device parts of the old one.
    """
    old = run.summary
    series = run.series
    if not len(series) or (old is not None and not run.summary_behind):
        if old is None:
            return Summary(run_id=run.meta.get("run_id"))
        return old
    config = run.meta.get("config") or {}
    goal = None
    target = old.time.target if old is not None else None
    if target is not None:
        goal = Goal(name=target.name, value=target.value, higher_is_better=target.higher_is_better,
                    smoothing=float(config.get("smoothing", 0.9)))
    elif config.get("target_loss") is not None:
        goal = Goal(name="loss", value=float(config["target_loss"]),
                    smoothing=float(config.get("smoothing", 0.9)))
    rebuilt = summarize(
        series,
        warmup=config.get("warmup", "auto"),
        goal=goal,
        run_id=run.meta.get("run_id"),
        clock=run.meta.get("clock"),
        tokens_counted=run.meta.get("tokens_counted"),
        loader=run.meta.get("loader"),
        host=run.meta.get("host"),
    )
    if old is None:
        return rebuilt
    return dataclasses.replace(
        old, steps=rebuilt.steps, throughput=rebuilt.throughput, time=rebuilt.time,
        data=rebuilt.data, ranks=rebuilt.ranks,
    )
