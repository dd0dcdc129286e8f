"""A job's goodput: where its wall time went, category by category (a pure function of a Job).

Each run's time, from its process start to its end, is cut into parts that do not overlap:

- the timed events (evaluation, checkpoint save and load: ``duration_s`` in the ledger),
  taken out of whatever part of the run they fell in;
- **startup**: process start -> the first step's start, less the events in it;
- the **steps** (``step_s`` in steps.jsonl): a kept step's time is productive, less its
  **data wait** (``wait_s``) and, for a warm-up step, its **warm-up excess** (its time beyond
  the run's steady step, data wait excluded); a step done again after a restart (after the
  last save the next run resumed from) is **lost progress**, all of it;
- **teardown**: the last step's end -> the run's end, less the events in it;
- between the first and the last step, the time that is neither a step nor an event is
  **other** (the loop's own code between steps, logging, evaluations or saves nothing timed).

Between runs, the **restart gap**: a run's end -> the next run's process start. The job's wall
time is the runs' spans plus the gaps (first process start -> last end when no runs overlap),
so productive time and the categories sum to it. Goodput = productive / wall.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainpace.job import events as ev
from trainpace.job.ledger import KILLED, Job, JobRun
from trainpace.measure.summarize import warmup_steps
from trainpace.stats import median, share_pct
from trainpace.summary_goodput import GOODPUT_CATEGORIES, Goodput, GoodputCategories, GoodputRun

OTHER = ("time outside the steps that no event names: the loop's own code between steps, "
         "logging, and any evaluation, save or load that nothing timed (a category shown as "
         "unmeasured has its time here)")
SOURCES = {
    "startup": "job.jsonl run_start (the OS's process start) -> first_step",
    "warmup_excess": "steps.jsonl: the warm-up steps' time beyond the run's steady (median) "
                     "step, data wait excluded",
    "data_wait": "steps.jsonl wait_s of the kept steps",
    "evaluation": "job.jsonl evaluation events",
    "checkpoint_save": "job.jsonl checkpoint_save events",
    "checkpoint_load": "job.jsonl checkpoint_load events",
    "lost_progress": "steps.jsonl steps after the save the next run resumed from "
                     "(job.jsonl checkpoint_load, else the run's last checkpoint_save)",
    "restart_gap": "a run's last record -> the next run's process start",
    "teardown": "the last step's end -> the run's end (job.jsonl run_end, else its last record)",
    "other": "the job's wall time less every other category and the productive time",
}
_TIMED = {ev.EVALUATION: "evaluation", ev.CHECKPOINT_SAVE: "checkpoint_save",
          ev.CHECKPOINT_LOAD: "checkpoint_load"}


@dataclass(frozen=True)
class _Cut:
    """Which of a run's steps were done again: those after ``step`` (None: not known)."""

    step: int | None
    resumed_from: str | None = None


def goodput(job: Job) -> Goodput:
    """The job's goodput and its categories (see the module's docstring)."""
    notes: list[str] = []
    missing = _missing(job)
    bounded = [e for e in job.events if e["event"] in _TIMED and e.get(ev.TIMING)
               and e.get("duration_s") is not None]
    if bounded:
        notes.append(f"{len(bounded)} timed event{'s are' if len(bounded) > 1 else ' is an'} "
                     f"upper bound{'s' if len(bounded) > 1 else ''} (the first: "
                     f"{bounded[0]['event']}, {bounded[0][ev.TIMING]})")
    cuts = [_cut(job, i, missing, notes) for i in range(len(job.runs))]
    job_start = job.runs[0].start_unix_s
    runs: list[GoodputRun] = []
    for i, run in enumerate(job.runs):
        previous_end = job.runs[i - 1].end_unix_s if i else None
        runs.append(_run(run, cuts[i], job_start, previous_end, missing, notes))
    wall_s = sum((r.end_unix_s or 0.0) - (r.start_unix_s or 0.0) for r in runs) + sum(
        r.categories.restart_gap_s or 0.0 for r in runs)
    productive_s = sum(r.productive_s or 0.0 for r in runs)
    totals: dict[str, Any] = {}
    for name in GOODPUT_CATEGORIES:
        key = f"{name}_s"
        values = [getattr(r.categories, key) for r in runs]
        known = [v for v in values if v is not None]
        totals[key] = math.fsum(known) if known and name not in missing else None
    lost = [r.categories.lost_steps for r in runs if r.categories.lost_steps is not None]
    totals["lost_steps"] = sum(lost) if "lost_progress" not in missing else None
    named = math.fsum(v for k, v in totals.items() if k.endswith("_s") and k != "other_s"
                      and v is not None)
    totals["other_s"] = wall_s - productive_s - named
    if totals["other_s"] < -1e-6 * max(wall_s, 1.0):
        notes.append(f"the timed parts exceed the wall time by {-totals['other_s']:.3f} s "
                     "(events timed inside steps, or clocks that disagree); 'other' is "
                     "negative by that much")
    categories = GoodputCategories(**totals)
    shares = {name: share_pct(getattr(categories, f"{name}_s"), wall_s)
              for name in GOODPUT_CATEGORIES}
    sources = {name: SOURCES[name] for name in GOODPUT_CATEGORIES if name not in missing}
    if not job.has_ledger:
        sources["startup"] = ("meta.json started_at (the Meter's start: the process's imports "
                              "before it are not seen without job.jsonl) -> the first step")
    saves = [e for e in job.events if e["event"] == ev.CHECKPOINT_SAVE]
    gaps = [b["unix_s"] - a["unix_s"] for run in job.runs
            for a, b in itertools.pairwise(run.timed(ev.CHECKPOINT_SAVE))]
    return Goodput(
        pct=share_pct(productive_s, wall_s), wall_s=wall_s, productive_s=productive_s,
        start_unix_s=job_start, categories=categories, shares_pct=shares, sources=sources,
        missing=missing, other=OTHER,
        failures=sum(1 for i, run in enumerate(job.runs) if run.status != ev.FINISHED
                     and (i < len(job.runs) - 1 or run.status != KILLED)),
        checkpoint_saves=len(saves) if job.has_ledger else None,
        checkpoint_save_s_mean=(math.fsum(e["duration_s"] for e in saves) / len(saves)
                                if saves else None),
        checkpoint_interval_s=median(gaps) if gaps else None,
        step_s_median=_steady_step_s(job, cuts),
        runs=runs, notes=[*job.notes, *notes])


def _missing(job: Job) -> dict[str, str]:
    """The categories the job cannot measure, each with the reason."""
    if not job.has_ledger:
        why = (f"no {ev.LEDGER_FILE} in the folder (a run written before jobs were recorded, "
               "or by a writer without the ledger): {what} were not timed; any such time is in "
               "'other'")
        return {"evaluation": why.format(what="evaluations"),
                "checkpoint_save": why.format(what="checkpoint saves"),
                "checkpoint_load": why.format(what="checkpoint loads")}
    seen = {e["event"] for e in job.events if e.get("duration_s", 0.0) is not None}
    untimed = {e["event"]: e for e in job.events if e.get("duration_s", 0.0) is None}
    missing = {}
    for event, name, what in ((ev.CHECKPOINT_SAVE, "checkpoint_save", "checkpoint save"),
                              (ev.CHECKPOINT_LOAD, "checkpoint_load", "checkpoint load"),
                              (ev.EVALUATION, "evaluation", "evaluation")):
        if event not in seen and event in untimed:
            missing[name] = (f"the {what}s in {ev.LEDGER_FILE} were not timed "
                             f"({untimed[event].get(ev.TIMING) or 'no reason given'}); "
                             "their time is in the part of the run they fell in")
        elif event not in seen:
            missing[name] = (f"no {what} in {ev.LEDGER_FILE}: none happened, or it was made "
                             "by a means trainpace does not time; any such time is in 'other'")
    return missing


def _cut(job: Job, i: int, missing: dict[str, str], notes: list[str]) -> _Cut:
    """How many of run ``i``'s steps were kept: all, for a finished run or the last one;
    else up to the save the next run loaded (or the run's last save)."""
    run = job.runs[i]
    if run.status == ev.FINISHED or i == len(job.runs) - 1:
        if run.status != ev.FINISHED and i and run.steps:
            notes.append(f"run {run.number} ({run.run_id!r}) did not finish ({run.status}) and "
                         "no run follows it yet: its steps are counted as kept")
        return _Cut(step=None)
    loads = job.runs[i + 1].timed(ev.CHECKPOINT_LOAD)
    if loads:
        load = loads[0]
        by, at = load.get("saved_by_run"), load.get("saved_at_step")
        if by == run.number and at is not None:
            return _Cut(step=int(at), resumed_from=f"run {by}, step {at}")
        if isinstance(by, int) and by < run.number:
            notes.append(f"run {job.runs[i + 1].number} resumed from run {by}'s save, not run "
                         f"{run.number}'s: all of run {run.number}'s steps are counted lost")
            return _Cut(step=0, resumed_from=f"run {by}, step {at}")
    saves = run.timed(ev.CHECKPOINT_SAVE)
    if saves:
        step = saves[-1].get("step")
        if step is not None:
            return _Cut(step=int(step), resumed_from=f"run {run.number}, step {step} (its last "
                        "save; the next run's load did not say)")
    if "checkpoint_save" in missing and not loads:
        missing.setdefault("lost_progress", (
            f"run {run.number} did not finish and no checkpoint save or load is recorded: "
            "which of its steps were done again is not known (they are counted as kept)"))
        return _Cut(step=None)
    return _Cut(step=0, resumed_from=None)


def _run(run: JobRun, cut: _Cut, job_start: float, previous_end: float | None,
         missing: dict[str, str], notes: list[str]) -> GoodputRun:
    """One run's categories and bands."""
    start = run.start_unix_s
    end = max(run.end_unix_s, start)
    first, last = run.first_step_unix_s, run.last_step_end_unix_s
    if first is None or last is None:  # no step: all of it is startup (or a timed event)
        first = last = end
    timed = dict.fromkeys(_TIMED.values(), 0.0)
    pre = between = post = 0.0
    bands: list[dict[str, Any]] = []

    def band(category: str, lo: float, hi: float) -> None:
        if hi > lo:
            bands.append({"category": category, "start_s": lo - job_start,
                          "end_s": hi - job_start})

    for event in run.events:
        name = _TIMED.get(event["event"])
        if name is None:
            continue
        if event["duration_s"] is None:  # a load the framework gave no way to time
            notes.append(f"run {run.number}'s {event['event']} at {event['unix_s']:.3f} was "
                         f"not timed ({event.get(ev.TIMING) or 'no reason given'}): its time "
                         "is in the part of the run it fell in")
            continue
        at, duration = float(event["unix_s"]), float(event["duration_s"])
        timed[name] += duration
        band(name, at, at + duration)
        if at < first:
            pre += duration
        elif at >= last:
            post += duration
        else:
            between += duration
    gap = max(start - previous_end, 0.0) if previous_end is not None else None
    if previous_end is not None:
        band("restart_gap", previous_end, max(start, previous_end))
    band("startup", start, first)
    steps_s = wait_s = excess_s = lost_s = 0.0
    kept = lost = 0
    excess_known = True
    warmup = 0
    first_excess: float | None = None
    lost_from: float | None = None
    data = run.data
    if data is not None and len(data.series):
        series = data.series
        step = series.column("step")
        step_s = np.nan_to_num(series.column("step_s"))
        wait = np.nan_to_num(series.column("wait_s"))
        steps_s = float(step_s.sum())
        keep = step <= cut.step if cut.step is not None else np.ones(len(step), dtype=bool)
        kept, lost = int(keep.sum()), int((~keep).sum())
        wait_s = float(wait[keep].sum())
        lost_s = float(step_s[~keep].sum())
        compute = step_s - wait
        warmup = _warmup(run, step_s)
        steady = median(compute[warmup:]) if warmup < len(compute) else None
        if steady is None:
            excess_known = False
            if warmup:
                notes.append(f"run {run.number} ({run.run_id!r}): all of its {len(step)} steps "
                             "are warm-up, so its steady step time and warm-up excess are not "
                             "known; its warm-up steps are counted as training")
        else:
            head = np.arange(len(step)) < warmup
            excess_s = float(np.clip(compute[head & keep] - steady, 0.0, None).sum())
            first_excess = max(float(compute[0]) - steady, 0.0) if warmup else 0.0
        if lost and run.steps_zero_unix_s is not None:
            t_s = series.column("t_s")
            lost_from = run.steps_zero_unix_s + float(t_s[~keep][0] - step_s[~keep][0])
    tail = _unwritten_lost(run, cut)
    tail_s = 0.0
    if tail is not None:
        tail_steps, tail_from = tail
        tail_s = max(last - tail_from - math.fsum(
            float(e["duration_s"]) for e in run.events if e["event"] in _TIMED
            and e["duration_s"] is not None and tail_from <= float(e["unix_s"]) < last), 0.0)
        lost += tail_steps
        lost_from = tail_from if lost_from is None else min(lost_from, tail_from)
    band("training", first, lost_from if lost_from is not None else last)
    if lost_from is not None:
        band("lost_progress", lost_from, last)
    band("teardown", last, end)
    startup_s = max(first - start - pre, 0.0)
    teardown_s = max(end - last - post, 0.0)
    other_s = (last - first) - steps_s - between - tail_s
    productive_s = steps_s - lost_s - wait_s - excess_s
    categories = GoodputCategories(
        startup_s=startup_s, warmup_excess_s=excess_s if excess_known else None,
        data_wait_s=wait_s, evaluation_s=_known(timed["evaluation"], "evaluation", missing),
        checkpoint_save_s=_known(timed["checkpoint_save"], "checkpoint_save", missing),
        checkpoint_load_s=_known(timed["checkpoint_load"], "checkpoint_load", missing),
        lost_progress_s=lost_s + tail_s if cut.step is not None
        or "lost_progress" not in missing else None,
        lost_steps=lost if cut.step is not None or "lost_progress" not in missing else None,
        restart_gap_s=gap, teardown_s=teardown_s, other_s=other_s)
    return GoodputRun(
        run=run.number, run_id=run.run_id, status=run.status, start_unix_s=start,
        meter_start_unix_s=run.meter_start_unix_s, first_step_unix_s=run.first_step_unix_s,
        last_step_end_unix_s=run.last_step_end_unix_s,
        end_unix_s=end, steps=run.steps, kept_steps=kept, warmup_steps=warmup,
        first_step_excess_s=first_excess, productive_s=productive_s,
        resumed_from=cut.resumed_from, categories=categories, bands=bands)


def _unwritten_lost(run: JobRun, cut: _Cut) -> tuple[int, float] | None:
    """The lost steps a killed run did past its steps.jsonl (a SIGKILL loses the window being
    written; the ledger's last ``progress`` says how far it got, and when that step ended):
    (how many, when the first of them began), or None (none, or not placed in time)."""
    if cut.step is None or run.last_step_end_unix_s is None:
        return None
    series = run.data.series if run.data is not None else None
    written = int(series.column("step").max()) if series is not None and len(series) else 0
    known = max([written, *(int(e["step"]) for e in run.timed(ev.PROGRESS)
                            if e.get("step") is not None)])
    if known <= max(written, cut.step):
        return None
    if cut.step <= written:  # they begin where steps.jsonl ends
        if series is None or not len(series) or run.steps_zero_unix_s is None:
            return None
        return known - written, run.steps_zero_unix_s + float(series.column("t_s").max())
    # they begin after the save the next run resumed from, which this run made
    saves = [e for e in run.timed(ev.CHECKPOINT_SAVE) if e.get("step") == cut.step]
    if not saves:
        return None
    return known - cut.step, float(saves[-1]["unix_s"]) + float(saves[-1]["duration_s"])


def _steady_step_s(job: Job, cuts: list[_Cut]) -> float | None:
    """The median step time of the job's kept steps past their run's warm-up."""
    parts = []
    for run, cut in zip(job.runs, cuts, strict=True):
        if run.data is None or not len(run.data.series):
            continue
        step_s = np.nan_to_num(run.data.series.column("step_s"))
        step = run.data.series.column("step")
        keep = step <= cut.step if cut.step is not None else np.ones(len(step), dtype=bool)
        parts.append(step_s[_warmup(run, step_s):][keep[_warmup(run, step_s):]])
    joined = np.concatenate(parts) if parts else np.empty(0)
    return median(joined) if joined.size else None


def _known(value: float, name: str, missing: dict[str, str]) -> float | None:
    return None if name in missing else value


def _warmup(run: JobRun, step_s: np.ndarray) -> int:
    """The run's warm-up steps: as its summary counted them, else as the Meter would."""
    data = run.data
    if data is not None and data.summary is not None and not data.summary_behind:
        return min(data.summary.steps.warmup, len(step_s))
    setting = ((data.meta.get("config") or {}).get("warmup", "auto")
               if data is not None else "auto")
    return warmup_steps(step_s, setting if isinstance(setting, (int, str)) else "auto")
