"""Diagnosis: pure rules over a summary (and the per-step records) → the bottleneck and findings.

``diagnose(summary, steps=..., system=..., meta=...)`` runs every rule of
:data:`~trainpace.diagnosis.rules.RULES` in the expert's order and returns a
:class:`~trainpace.summary.Diagnosis`. The bottleneck is the category of the most severe
finding that points at one (ties: the larger share of time lost, then the earlier rule);
``none`` when nothing does. The last finding, ``checks``, always says what was checked and
what could not be (which source was missing), so a healthy run says why it is healthy. A data
wait that one straggling rank explains is said on the ``data_wait`` finding
(:func:`~trainpace.diagnosis.communication.attribute_rank_wait`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from trainpace.diagnosis._context import Context, Outcome, StepColumnSource, Verdict
from trainpace.diagnosis.communication import attribute_rank_wait
from trainpace.diagnosis.rules import RULES
from trainpace.diagnosis.thresholds import SOURCES, Thresholds, threshold_table
from trainpace.summary import SEVERITIES, Diagnosis, Finding, Summary

__all__ = ["SOURCES", "Thresholds", "diagnose", "threshold_table"]

# The rules that read one rank's step records and sampler rows: in a job's diagnosis their
# findings are that rank's (``dist.steps_rank``), and say so.
STEP_RULES = ("slow phases", "step-time outliers", "step-time drift", "loss", "host overhead")


def _on_rank(outcome: Outcome, rank: int) -> Outcome:
    """``outcome`` with each finding naming the rank whose steps it was read from."""
    return dataclasses.replace(outcome, verdicts=tuple(
        dataclasses.replace(v, finding=dataclasses.replace(
            v.finding, title=f"{v.finding.title} (on rank {rank}'s steps)",
            evidence={**v.finding.evidence, "steps_rank": rank}))
        for v in outcome.verdicts))


def _bottleneck(verdicts: Sequence[Verdict]) -> Verdict | None:
    candidates = [(i, v) for i, v in enumerate(verdicts) if v.bottleneck is not None]
    if not candidates:
        return None
    _, best = max(
        candidates,
        key=lambda iv: (
            SEVERITIES.index(iv[1].finding.severity),
            iv[1].lost_pct if iv[1].lost_pct is not None else -1.0,
            -iv[0],
        ),
    )
    return best


def diagnose(
    summary: Summary,
    *,
    steps: Sequence[Mapping[str, Any]] | StepColumnSource | None = None,
    system: Sequence[Mapping[str, Any]] | None = None,
    meta: Mapping[str, Any] | None = None,
    thresholds: Thresholds | None = None,
    mtbf_s: float | None = None,
) -> Diagnosis:
    """The bottleneck and the findings, from whatever sections and records are present.

    Args:
        summary: the run's figures (a Meter's, a run folder's, or one built from a trace).
        steps: the step records: a :class:`~trainpace.series.StepSeries` (columns; a long
            run is never turned into one object per step) or a list of ``steps.jsonl``
            records, or None. Warm-up steps are left out of the steady figures; the
            slow-phase check reads them too.
        system: the ``system.jsonl`` rows, or None.
        meta: ``meta.json`` (DataLoader settings under ``loader``, ``host.cpu_count``), or None.
        thresholds: the rules' thresholds (:class:`Thresholds` defaults when None).
        mtbf_s: the machines' mean time between failures, in seconds, for the checkpoint
            interval advice where the job has seen too few failures (None: not given).
    """
    t = thresholds or Thresholds()
    ctx = Context(summary, steps, system, meta or {}, t, mtbf_s)
    verdicts: list[Verdict] = []
    checked: list[str] = []
    not_checked: list[str] = []
    for name, rule in RULES:
        outcome = rule(ctx)
        if name in STEP_RULES and ctx.steps_rank is not None:
            outcome = _on_rank(outcome, ctx.steps_rank)
        verdicts.extend(outcome.verdicts)
        if outcome.skipped:
            not_checked.append(f"{name}: {outcome.skipped}")
        else:
            found = ", ".join(v.finding.id for v in outcome.verdicts)
            checked.append(f"{name}: {outcome.checked or 'found ' + found}")
    best = _bottleneck(verdicts)
    bottleneck = best.bottleneck if best is not None and best.bottleneck else "none"
    # no timed step: "no bottleneck found" would read as a healthy run
    nothing_timed = not summary.steps.measured and ctx.step_s is None
    if bottleneck == "none" and nothing_timed:
        title = "Nothing was measured: no step was timed, so no bottleneck can be named"
        advice = ["a step is timed from one optimizer step (or meter.step()) to the next"]
    elif bottleneck == "none":
        title = f"No bottleneck found in what was measured ({len(checked)} checks)"
        advice = ["nothing measured here holds the run back"]
    else:
        title = f"Bottleneck: {bottleneck.replace('_', ' ')} ({best.finding.id if best else ''})"
        advice = []
    if bottleneck == "none" and not_checked:
        advice.append("some checks could not run; their sources are listed as not checked")
    checks = Finding(
        id="checks",
        severity="info",
        title=title,
        evidence={
            "bottleneck_finding": best.finding.id if best is not None else None,
            "nothing_measured": nothing_timed,
            "checked": checked,
            "not_checked": not_checked,
        },
        advice=advice,
    )
    return attribute_rank_wait(
        Diagnosis(bottleneck=bottleneck, findings=[v.finding for v in verdicts] + [checks]), t)
