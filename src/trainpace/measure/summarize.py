"""From step records to the figures: windows, warm-up, steady throughput, time to target.

Pure functions over a columnar store of ``steps.jsonl`` records. The live Meter and
``trainpace report`` (rebuilding a killed run's summary from its steps) use the same code, so a
figure means the same thing wherever it is shown.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainpace.measure.contention import host_columns, slowed_by_others
from trainpace.records import Figures
from trainpace.runlog import RunData
from trainpace.series import StepSeries
from trainpace.stats import Ema, linear_fit, median, per_s, percentile, share_pct, steady_start
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


def warmup_steps(step_s: np.ndarray, setting: int | str, slowed: np.ndarray | None = None) -> int:
    """How many leading steps are warm-up: a fixed count, or detected ("auto").

    "auto" always excludes at least the first step; while no steady state is visible yet
    (too few steps), only the first step is excluded. ``slowed``: the steps that ran while
    other processes took the CPU (:func:`~trainpace.measure.contention.slowed_by_others`);
    their slowness is not warm-up, so warm-up ends where the process's own does.
    """
    n = len(step_s)
    if setting != "auto":
        return min(int(setting), n)
    if n == 0:
        return 0
    search = slice(None, WARMUP_SEARCH_STEPS)
    excused = slowed[search] if slowed is not None and len(slowed) == n else None
    start = steady_start(step_s[search], excused=excused)
    return 1 if start is None else start


@dataclass(frozen=True)
class SteadySpan:
    """The measured steps without those other processes slowed (None: not known)."""

    samples_per_s: float | None
    tokens_per_s: float | None
    slowed: int | None  # measured steps slowed by other processes


def steady_rates(steps: StepSeries, warmup: int, slowed: np.ndarray | None) -> SteadySpan:
    """Samples and tokens per second over the steady span: the steps past the first
    ``warmup`` positions that other processes did not slow (``slowed``; None: no host CPU
    readings, and nothing known)."""
    if slowed is None or len(slowed) != len(steps):
        return SteadySpan(None, None, None)
    steady = ~slowed.copy()
    steady[:warmup] = False
    step_s = steps.column("step_s")[steady]
    total_s = float(step_s.sum())

    def total(name: str) -> float | None:
        return None if steps.null(name) else _total(steps.column(name)[steady])

    return SteadySpan(per_s(total("samples"), total_s), per_s(total("tokens"), total_s),
                      int(np.count_nonzero(slowed[warmup:])))


def figures(steps: StepSeries, warmup: int) -> Figures:
    """The figures of ``steps`` (a window's or the run's): throughput, step times and data
    wait over the steps past warm-up (those numbered after ``warmup``); the loss, the time
    outside the steps and the non-finite losses over them all."""
    step = steps.column("step")
    n = len(step)
    past = step > warmup
    skip = int(np.argmax(past)) if past.any() else n  # the warm-up steps lead
    measured = n - skip
    step_s = steps.column("step_s")[skip:]
    total_s = float(step_s.sum())
    wait_s = float(steps.column("wait_s")[skip:].sum())

    def values(name: str, first: int = 0) -> np.ndarray | None:
        """A column from step ``first`` on; None when it is all null (most are, in most
        runs: a window's figures then skip their arrays)."""
        return None if steps.null(name) else steps.column(name)[first:]

    nonfinite = values("loss_nonfinite")
    return {
        "first_step": int(step[0]) if n else None,
        "last_step": int(step[-1]) if n else None,
        "steps": n,
        "measured_steps": measured,
        "warmup_steps": warmup,
        "measured_s": total_s if measured else None,
        # a step whose batch could not be counted makes samples/s unknown, not lower
        "samples_per_s": per_s(_total(values("samples", skip)), total_s),
        "tokens_per_s": per_s(_total(values("tokens", skip)), total_s),
        "steps_per_s": per_s(measured, total_s),
        "step_s_median": median(step_s),
        "step_s_p90": percentile(step_s, 90.0),
        "step_s_mean": total_s / measured if measured else None,
        "wait_s_per_step": wait_s / measured if measured else None,
        "wait_pct": share_pct(wait_s, total_s),
        "exposed_wait_s_per_step": _finite_mean(values("exposed_wait_s", skip)),
        "h2d_s_per_step": _finite_mean(values("h2d_s", skip)),
        "outside_s": _finite_sum(values("outside_s")),
        "loss": _finite_mean(values("loss")),
        "loss_nonfinite_steps": (int(np.count_nonzero(nonfinite == 1.0))
                                 if nonfinite is not None else 0),
        "t_s": float(steps.column("t_s")[-1]) if n else None,
    }


def _total(counts: np.ndarray | None) -> float | None:
    """The sum of counts, None when a step's count is unknown (or there is none)."""
    if counts is None:
        return None
    total = float(counts.sum())
    return total if counts.size and math.isfinite(total) else None


def _finite_mean(values: np.ndarray | None) -> float | None:
    if values is None:
        return None
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else None


def _finite_sum(values: np.ndarray | None) -> float | None:
    if values is None:
        return None
    finite = values[np.isfinite(values)]
    return float(finite.sum()) if finite.size else None


@dataclass(frozen=True)
class TargetProgress:
    """Where the run stands against its goal."""

    time_to_target_s: float | None
    steps_to_target: int | None
    eta_s: float | None
    smoothed: float | None  # the latest smoothed value


class TargetTracker:
    """Follows a run toward its goal, a window of steps at a time.

    The value is smoothed by a bias-corrected EMA (:class:`trainpace.stats.Ema`); the target is
    reached the first time the smoothed value is at or past it. Until then the ETA
    extrapolates a straight line fitted to the last ``ETA_FIT_POINTS`` smoothed values against
    wall time; it is None when that trend does not move toward the target.
    """

    def __init__(self, goal: Goal) -> None:
        self.goal = goal
        self._sign = 1.0 if goal.higher_is_better else -1.0  # reached: sign·(v − target) ≥ 0
        self._ema = Ema(goal.smoothing)
        self._reached: tuple[float, int] | None = None
        self._recent: deque[tuple[float, float]] = deque(maxlen=ETA_FIT_POINTS)

    def add(self, steps: StepSeries) -> None:
        """The next steps (those with no value observed are passed over)."""
        values = steps.column(self.goal.name)
        kept = np.isfinite(values)
        if not kept.any():
            return
        smoothed = self._ema.extend(values[kept])
        t_s = steps.column("t_s")[kept]
        if self._reached is None:
            hit = np.flatnonzero(self._sign * (smoothed - self.goal.value) >= 0)
            if hit.size:
                self._reached = (float(t_s[hit[0]]), int(steps.column("step")[kept][hit[0]]))
        recent = slice(-ETA_FIT_POINTS, None)
        self._recent.extend(zip(t_s[recent].tolist(), smoothed[recent].tolist(), strict=True))

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
    tracker.add(series)
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
    slowed: np.ndarray | None = None,
    window_ends: list[int] | None = None,
) -> Summary:
    """The run's summary from its steps (the device, bandwidth and flops parts left empty).

    ``excluded``: the warm-up count when the caller already knows it (else from ``warmup``);
    ``progress``: toward ``goal``, when the caller follows it already (else computed);
    ``slowed``: per step, whether other processes took the CPU then (None: not known);
    ``window_ends``: where a loader ended a window (None: not known, as from steps alone).
    """
    step_s = series.column("step_s")
    n = len(series)
    if excluded is None:
        excluded = warmup_steps(step_s, warmup, slowed)
    steady = steady_rates(series, excluded, slowed)
    # the same figures as a window's, past the last warm-up step
    rates = figures(series, int(series.column("step")[excluded - 1]) if excluded else 0)
    t_s = series.column("t_s")
    if progress is None and goal is not None:
        progress = target_progress(series, goal)
    # Measured only when the loop pulls its batches through meter.loader() (see StepRecord);
    # then the time from the last step to the end of the run (a last evaluation) is too.
    outside_s = rates["outside_s"]
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
        outside_steps_pct=share_pct(outside_s, wall_s),
    )
    return Summary(
        run_id=run_id,
        steps=Steps(total=n, warmup=excluded, measured=n - excluded,
                    warmup_mode="auto" if warmup == "auto" else "fixed",
                    slowed_by_others=steady.slowed, window_ends=window_ends),
        throughput=Throughput(
            samples_per_s=rates["samples_per_s"],
            tokens_per_s=rates["tokens_per_s"],
            steps_per_s=rates["steps_per_s"],
            steady_samples_per_s=steady.samples_per_s,
            steady_tokens_per_s=steady.tokens_per_s,
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
    cpu_count = run.meta.get("cpu_count")
    rebuilt = summarize(
        series,
        warmup=config.get("warmup", "auto"),
        slowed=slowed_by_others(series.column("step_s"), series.column("t_s"),
                                host_columns(run.system),
                                cpu_count if isinstance(cpu_count, int) else None),
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
