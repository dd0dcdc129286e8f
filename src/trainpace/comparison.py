"""Compare two runs: throughput, steps and time to a target, and the winner (data only); and,
given the jobs they belong to, the jobs' goodput and where their time went.

The winner is the run that reaches the target sooner (time to target, wall clock from the
run's start). A run that never reaches it counts as infinitely slow, as AlgoPerf scores a miss,
so a run that reaches it beats one that does not. Only when neither reaches the target, or no
target is known, is the winner the faster one by throughput — and the result says so. This is
what makes a larger batch that raises throughput but needs more samples come out right.
Rendering is :mod:`trainpace.report.compare`'s job.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainpace.errors import ConfigError
from trainpace.job.goodput import goodput
from trainpace.job.ledger import Job
from trainpace.measure.cost import Savings, check_price, cost_of_run, savings
from trainpace.measure.summarize import Goal, summary_for_run, target_progress
from trainpace.runlog import RunData
from trainpace.summary import Summary
from trainpace.summary_goodput import GOODPUT_CATEGORIES, Goodput
from trainpace.units import format_number
from trainpace.units import format_seconds as _secs

LABELS = ("A", "B")
THROUGHPUT_KEYS = ("tokens_per_s", "samples_per_s", "steps_per_s")


@dataclass(frozen=True)
class RunFigures:
    """One run's side of the comparison."""

    label: str
    path: str
    run_id: str | None
    samples_per_s: float | None
    tokens_per_s: float | None
    steps_per_s: float | None
    step_s_median: float | None
    wall_s: float | None
    steps_total: int
    batch_size: int | None
    reached_target: bool | None  # None when there is no target to reach
    steps_to_target: int | None
    samples_to_target: float | None
    time_to_target_s: float | None
    notes: list[str] = field(default_factory=list)  # what the reader left out (bad lines...)
    # with a price (compare --price-per-hour): what a run costs, from its steady figures
    usd_per_million_samples: float | None = None
    usd_per_million_tokens: float | None = None
    usd_to_target: float | None = None
    power_w_mean: float | None = None
    energy_source: str | None = None


@dataclass(frozen=True)
class Comparison:
    """Who wins, by what, and why; ``to_dict()`` is the ``compare --json`` object."""

    winner: str | None  # "A" | "B" | None (a tie, or nothing to compare)
    by: str  # "time_to_target" | "throughput"
    reason: str
    throughput_metric: str | None
    target: dict[str, Any] | None
    runs: list[RunFigures] = field(default_factory=list)
    # what the winner saves against the other run, at the price given (None without one)
    savings: dict[str, Any] | None = None
    # the two jobs' goodput and categories, side by side (None when no job was read)
    goodput: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``{winner, by, reason, throughput_metric, target, runs}``."""
        return asdict(self)


def _smoothing(runs: tuple[RunData, RunData]) -> float:
    values = set()
    for run in runs:
        config = run.meta.get("config")
        if isinstance(config, Mapping) and isinstance(config.get("smoothing"), (int, float)):
            values.add(float(config["smoothing"]))
    return values.pop() if len(values) == 1 else Goal(name="loss", value=0.0).smoothing


def _goal(summaries: list[Summary], runs: tuple[RunData, RunData],
          target_loss: float | None) -> Goal | None:
    if target_loss is not None:
        return Goal(name="loss", value=target_loss, smoothing=_smoothing(runs))
    target = summaries[0].time.target
    if target is None or any(s.time.target != target for s in summaries):
        return None  # none, or not the same: the runs cannot be timed to one target
    return Goal(name=target.name, value=target.value, higher_is_better=target.higher_is_better,
                smoothing=_smoothing(runs))


def _figures(label: str, run: RunData, summary: Summary, goal: Goal | None) -> RunFigures:
    reached = steps_to = samples_to = time_to = None
    if goal is not None:
        progress = target_progress(run.series, goal)
        time_to, steps_to = progress.time_to_target_s, progress.steps_to_target
        reached = time_to is not None
        if steps_to is not None:
            samples = run.series.column("samples")[run.series.column("step") <= steps_to]
            if bool(np.isfinite(samples).all()):
                samples_to = float(samples.sum())
    loader = run.meta.get("loader") if isinstance(run.meta.get("loader"), Mapping) else None
    batch = loader.get("batch_size") if loader else None
    tp, tm = summary.throughput, summary.time
    return RunFigures(
        label=label, path=str(run.path), run_id=summary.run_id,
        samples_per_s=tp.samples_per_s, tokens_per_s=tp.tokens_per_s,
        steps_per_s=tp.steps_per_s, step_s_median=tm.step_s_median, wall_s=tm.wall_s,
        steps_total=summary.steps.total, batch_size=batch if isinstance(batch, int) else None,
        reached_target=reached, steps_to_target=steps_to, samples_to_target=samples_to,
        time_to_target_s=time_to, notes=list(run.notes),
    )


def _with_costs(result: Comparison, runs: tuple[RunData, RunData], price: float) -> Comparison:
    """Each run's cost at ``price``, and what the winner saves against the other."""
    costed: list[Summary] = []
    figures: list[RunFigures] = []
    for run, side in zip(runs, result.runs, strict=True):
        summary = summary_for_run(run)
        summary = dataclasses.replace(summary, time=dataclasses.replace(
            summary.time, time_to_target_s=side.time_to_target_s))
        cost = cost_of_run(summary, run.series.column("t_s"), run.system, price_per_hour=price)
        costed.append(dataclasses.replace(summary, cost=cost))
        figures.append(dataclasses.replace(
            side, usd_per_million_samples=cost.usd_per_million_samples,
            usd_per_million_tokens=cost.usd_per_million_tokens, usd_to_target=cost.usd_to_target,
            power_w_mean=cost.power_w_mean, energy_source=cost.energy_source))
    saved: dict[str, Any] | None = None
    if result.winner is not None:
        win = LABELS.index(result.winner)
        s = savings(costed[win], costed[1 - win])
        saved = {**dataclasses.asdict(s), "text": _savings_text(result.winner, s, price)}
    return dataclasses.replace(result, runs=figures, savings=saved)


def _savings_text(winner: str, s: Savings, price: float) -> str:
    at = f"at ${price:g}/h"
    if s.usd_per_run is not None and s.sooner_pct is not None:
        text = (f"{winner} reaches the target {s.sooner_pct:.0f}% sooner: saves "
                f"${s.usd_per_run:.2f} per run {at}")
        return text + (f" and {s.kwh_per_run:.3g} kWh" if s.kwh_per_run is not None else "")
    for value, what in ((s.usd_per_million_tokens, "million tokens"),
                        (s.usd_per_million_samples, "million samples")):
        if value is not None:
            return f"{winner} saves ${value:.3g} per {what} {at}"
    return f"what {winner} saves is unknown: the runs' throughputs cannot be compared"


def _throughput_metric(runs: list[RunFigures]) -> str | None:
    for key in THROUGHPUT_KEYS:
        if all(getattr(r, key) is not None for r in runs):
            return key
    return None


def _ratio(fast: float, slow: float) -> str:
    return f"{slow / fast:.2f}×" if fast > 0 else "∞×"


def _by_throughput(a: RunFigures, b: RunFigures, metric: str | None, why: str) -> Comparison:
    if metric is None:
        return Comparison(None, "throughput", f"{why}; and no throughput to compare", None, None,
                          [a, b])
    va, vb = getattr(a, metric), getattr(b, metric)
    unit = metric.replace("_per_s", "/s")
    if va == vb:
        return Comparison(None, "throughput", f"{why}; both run at {format_number(va, unit)}",
                          metric, None, [a, b])
    win, lose = (a, b) if va > vb else (b, a)
    ratio = _ratio(getattr(lose, metric), getattr(win, metric))
    return Comparison(
        win.label, "throughput",
        f"{why}; by throughput {win.label} is faster: {format_number(getattr(win, metric), unit)}"
        f" against {format_number(getattr(lose, metric), unit)} ({ratio})",
        metric, None, [a, b],
    )


def check_target(target_loss: float | None) -> None:
    """Raise :class:`ConfigError` unless ``target_loss`` is None or a finite number."""
    if target_loss is not None and not math.isfinite(target_loss):
        raise ConfigError("target_loss", target_loss,
                          "must be a finite number (the loss both runs are timed to)")


def compare_runs(run_a: RunData, run_b: RunData, *, target_loss: float | None = None,
                 price_per_hour: float | None = None,
                 jobs: tuple[Job, Job] | None = None) -> Comparison:
    """Compare two run folders (read with :func:`trainpace.read_run`).

    Args:
        run_a: the first run (label ``A``).
        run_b: the second run (label ``B``).
        target_loss: time both runs to this loss (smoothed as the Meter smooths it); default:
            the target the runs were given, when both have the same one. NaN or infinite:
            :class:`ConfigError`.
        price_per_hour: the price of one device-hour: each run's cost and what the winner
            saves (per run to the target, per million tokens or samples, in kWh).
        jobs: the jobs the runs are the latest runs of (:func:`trainpace.job.ledger.read_job`):
            their goodput and categories are compared too (:func:`compare_goodput`).
    """
    check_target(target_loss)
    check_price("price_per_hour", price_per_hour)
    result = _compare(run_a, run_b, target_loss)
    if jobs is not None:
        result = dataclasses.replace(result, goodput=compare_goodput(
            goodput(jobs[0]), goodput(jobs[1])))
    if price_per_hour is None:
        return result
    return _with_costs(result, (run_a, run_b), price_per_hour)


def compare_goodput(a: Goodput, b: Goodput) -> dict[str, Any]:
    """Two jobs' goodput side by side: ``{pct, wall_s, productive_s, categories: {name: {s,
    pct, delta_s}}, lost_steps, better, text}``, each figure a pair ``[A, B]``; ``delta_s``
    is B − A, and ``text`` names the category that differs most."""
    categories: dict[str, Any] = {}
    for name in GOODPUT_CATEGORIES:
        sa, sb = (getattr(g.categories, f"{name}_s") for g in (a, b))
        categories[name] = {"s": [sa, sb], "pct": [a.shares_pct.get(name), b.shares_pct.get(name)],
                            "delta_s": sb - sa if sa is not None and sb is not None else None}
    better = None
    if a.pct is not None and b.pct is not None and a.pct != b.pct:
        better = "A" if a.pct > b.pct else "B"
    if a.pct is None or b.pct is None:
        text = "goodput is unknown for " + " and ".join(
            label for label, g in zip(LABELS, (a, b), strict=True) if g.pct is None)
    else:
        text = f"goodput: A {a.pct:.1f}% of {_secs(a.wall_s)}, B {b.pct:.1f}% of {_secs(b.wall_s)}"
        shares = {name: (c["pct"][0], c["pct"][1]) for name, c in categories.items()
                  if None not in c["pct"]}
        if shares:
            name = max(shares, key=lambda n: abs(shares[n][1] - shares[n][0]))
            pa, pb = shares[name]
            if pa != pb:
                text += (f"; the largest difference is {name.replace('_', ' ')}: "
                         f"{pa:.1f}% of A's wall time against {pb:.1f}% of B's")
    return {"pct": [a.pct, b.pct], "wall_s": [a.wall_s, b.wall_s],
            "productive_s": [a.productive_s, b.productive_s], "categories": categories,
            "lost_steps": [a.categories.lost_steps, b.categories.lost_steps],
            "runs": [len(a.runs), len(b.runs)], "better": better, "text": text}


def _compare(run_a: RunData, run_b: RunData, target_loss: float | None) -> Comparison:
    runs = (run_a, run_b)
    summaries = [summary_for_run(run) for run in runs]
    goal = _goal(summaries, runs, target_loss)
    a, b = (_figures(label, run, s, goal) for label, run, s in zip(LABELS, runs, summaries,
                                                                   strict=True))
    metric = _throughput_metric([a, b])
    if goal is None:
        why = ("no target given (--target-loss)" if all(s.time.target is None for s in summaries)
               else "the runs have no common target (--target-loss sets one)")
        return _by_throughput(a, b, metric, why)
    target = {"name": goal.name, "value": goal.value, "higher_is_better": goal.higher_is_better}
    relation = "≥" if goal.higher_is_better else "≤"
    what = f"{goal.name} {relation} {goal.value:g}"
    reached = [r for r in (a, b) if r.reached_target]
    if not reached:
        result = _by_throughput(a, b, metric, f"neither run reaches {what}")
        return Comparison(result.winner, result.by, result.reason, metric, target, [a, b])
    if len(reached) == 1:
        win = reached[0]
        lose = b if win is a else a
        reason = (f"only {win.label} reaches {what} (in {_secs(win.time_to_target_s)}); "
                  f"{lose.label} does not within its {_secs(lose.wall_s)}")
        return Comparison(win.label, "time_to_target", reason, metric, target, [a, b])
    ta, tb = a.time_to_target_s or 0.0, b.time_to_target_s or 0.0
    if ta == tb:
        return Comparison(None, "time_to_target", f"both reach {what} in {_secs(ta)}", metric,
                          target, [a, b])
    win, lose = (a, b) if ta < tb else (b, a)
    reason = (f"{win.label} reaches {what} in {_secs(win.time_to_target_s)} against "
              f"{_secs(lose.time_to_target_s)} for {lose.label} "
              f"({_ratio(win.time_to_target_s or 0.0, lose.time_to_target_s or 0.0)} sooner)")
    if metric is not None and (getattr(lose, metric) or 0.0) > (getattr(win, metric) or 0.0):
        unit = metric.replace("_per_s", "/s")
        reason += (f", although {lose.label} has the higher throughput "
                   f"({format_number(getattr(lose, metric), unit)} against "
                   f"{format_number(getattr(win, metric), unit)}): "
                   f"it needs more {'samples' if win.samples_to_target else 'steps'} to get there")
    return Comparison(win.label, "time_to_target", reason, metric, target, [a, b])
