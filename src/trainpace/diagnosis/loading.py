"""Data loading: does the step wait for its batch, and what in the loader to change.

The advice follows from the run's own figures (the wait, the step time, the loading's CPU
use as the sampler measured it) and carries the settings to use as data
(``evidence.recommended``), so a test, or a tool, can apply them and run again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import Context, Outcome, Verdict
from trainpace.stats import median
from trainpace.summary import Finding, Severity


def tune_command(meta: Mapping[str, Any] | None, step_s: float | None = None) -> str:
    """The ``trainpace tune-loader`` command for a run, from its ``meta.json``.

    A run folder cannot re-create the dataset, so the command names the one thing the user
    must supply (a function returning their dataset or DataLoader); the step is written out
    when its duration is known.
    """
    loader = (meta or {}).get("loader") or {}
    cls = loader.get("class") if isinstance(loader, Mapping) else None
    what = "your DataLoader" if cls else "your dataset or DataLoader"
    step = f"--step-ms {step_s * 1000:.3g}" if step_s is not None and step_s > 0 \
        else "--step-ms STEP_MS"
    return (f"trainpace tune-loader MODULE:FACTORY {step}  (FACTORY: a function in MODULE "
            f"that returns {what}; it finds the fewest workers that hide the wait)")


def data_wait(ctx: Context) -> Outcome:
    """Does the step wait for its batch? And does the host-to-device copy cost much?"""
    s, t = ctx.summary, ctx.t
    wait_pct, wait_s, step_s = s.data.wait_pct, s.data.wait_s_per_step, ctx.step_s
    if wait_pct is None:
        how = ("trainpace run meters the torch DataLoaders a script iterates for training; "
               "none was" if ctx.made_by == "run" else "wrap the DataLoader with meter.loader")
        return Outcome(skipped=f"no data wait measured ({how})")
    n = ctx.measured_steps
    if n < t.data_wait_min_steps_warning:
        return Outcome(skipped=f"only {n} measured steps for the data wait")
    verdicts: list[Verdict] = []
    if wait_pct >= t.data_wait_warning_pct:
        severity: Severity = "warning"
        note = ""
        if wait_pct >= t.data_wait_critical_pct:
            if n >= t.data_wait_min_steps_critical:
                severity = "critical"
            else:
                note = f" (only {n} steps measured: not enough to call it critical)"
        waits = ctx.times.wait_s
        mean_wait = float(np.mean(waits)) if waits.size else 0.0
        bursty = mean_wait > 0 and (median(waits) or 0.0) < 0.5 * mean_wait
        evidence: dict[str, Any] = {
            "wait_pct": wait_pct, "wait_s_per_step": wait_s, "step_s_median": step_s,
            "exposed_wait_s_per_step": s.data.exposed_wait_s_per_step,
            "measured_steps": n, "device_util_pct": s.device.util_pct,
            "loader": dict(ctx.loader) if ctx.loader else None, "bursty": bursty,
            "recommended": None, "loading": None,
        }
        if wait_s is not None and step_s:
            found = adv.loader_advice(
                wait_pct=wait_pct, wait_s=wait_s, step_s=step_s, loader=ctx.loader,
                device_kind=s.device.kind, cpu_count=ctx.cpu_count, bursty=bursty,
                headroom=t.loader_headroom, main_cpu_pct=s.host.main_process_cpu_pct,
                process_cpu_pct=s.host.process_cpu_pct, threads=s.host.cpu_threads,
                main_demand_pct=ctx.measured_mean("main_demand_pct"),
                workers_demand_pct=ctx.measured_mean("workers_demand_pct"),
            )
            advice = found.advice
            evidence["recommended"] = found.recommended
            evidence["loading"] = found.loading
        else:
            advice = [f"raise DataLoader num_workers — {adv.gain_text(wait_pct)}"]
        recommended = evidence["recommended"]
        if ctx.made_by == "demo" and recommended and recommended.get("num_workers"):
            advice = [*advice, "in the demo: "
                      + adv.setting("demo", "num_workers", recommended["num_workers"])]
        compute_s = step_s - wait_s if step_s and wait_s is not None else None
        command = tune_command(ctx.meta, compute_s)
        evidence["tune_command"] = command
        if not any("tune-loader" in line for line in advice):
            advice = [*advice, f"to measure the settings instead of computing them: {command}"]
        title = f"The step waits for data {wait_pct:.0f}% of the time{note}"
        verdicts.append(Verdict(Finding(id="data_wait", severity=severity, title=title,
                                        evidence=evidence, advice=advice),
                                "data_loading", wait_pct))
    h2d_s = s.data.h2d_s_per_step
    h2d_pct = 100.0 * h2d_s / step_s if h2d_s is not None and step_s else None
    if h2d_pct is not None and h2d_pct >= t.h2d_warning_pct:
        pinned = (ctx.loader or {}).get("pin_memory")
        verdicts.append(Verdict(Finding(
            id="h2d_copy", severity="warning",
            title=f"Host-to-device copies take {h2d_pct:.0f}% of the step",
            evidence={"h2d_s_per_step": h2d_s, "h2d_pct": h2d_pct, "pin_memory": pinned},
            advice=[("DataLoader(pin_memory=True) and " if not pinned else "")
                    + ".to(device, non_blocking=True) let the copy overlap compute — "
                    + adv.gain_text(h2d_pct)]),
            "data_loading", h2d_pct))
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    h2d_text = f", host-to-device {h2d_pct:.0f}%" if h2d_pct is not None else ""
    return Outcome(
        checked=f"data wait {wait_pct:.1f}% of the step (< {t.data_wait_warning_pct:g}%)"
        f"{h2d_text}"
    )
