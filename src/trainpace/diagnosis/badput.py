"""The job's largest badput category as a finding, with advice computed from its own figures.

For checkpoints (saves, and the progress lost to restarts) the advice is the interval that
maximizes goodput: Young's first-order optimum √(2 × save time × mean time between failures)
(J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9),
1974; J. T. Daly, FGCS 22(3), 2006, shows it holds to first order), from the measured save
time and the job's observed failures — or a mean time between failures the user gives
(``report --mtbf-hours``) when the job has seen too few. The goodput it would reach is the
same first-order model: a share save/τ of the time saving, and τ/2 redone per failure.
"""

from __future__ import annotations

import math
from typing import Any

from trainpace.diagnosis._context import Context, Outcome, severity_for, verdict
from trainpace.summary_goodput import GOODPUT_CATEGORIES, Goodput
from trainpace.units import format_duration as duration

LABELS = {
    "startup": "startup", "warmup_excess": "warm-up excess", "data_wait": "data wait",
    "evaluation": "evaluation", "checkpoint_save": "checkpoint saves",
    "checkpoint_load": "checkpoint loads", "lost_progress": "lost progress",
    "restart_gap": "the restart gap", "teardown": "teardown",
    "other": "time outside the steps that nothing named",
}


def job_goodput(ctx: Context) -> Outcome:
    """The largest badput category of a job (read by ``trainpace report JOB``), when it takes
    at least ``goodput_badput_info_pct`` of the job's wall time: its seconds, share and source,
    and advice from the job's own figures."""
    g = ctx.summary.goodput
    if g.pct is None or not g.wall_s:
        return Outcome(skipped="no job was read (`trainpace report JOB` reads one: its "
                       "runs, ledger and goodput)")
    shares = {name: g.shares_pct.get(name) for name in GOODPUT_CATEGORIES}
    lost = {name: share for name, share in shares.items() if share is not None and share > 0}
    if not lost:
        return Outcome(checked=f"goodput {g.pct:.1f}%: no time lost outside the kept steps")
    name = max(lost, key=lambda n: lost[n])
    pct = lost[name]
    seconds = float(getattr(g.categories, f"{name}_s") or 0.0)
    text = (f"goodput {g.pct:.1f}%; the largest loss, {LABELS[name]}, is {pct:.1f}% of the "
            "wall time")
    if pct < ctx.t.goodput_badput_info_pct:
        return Outcome(checked=text)
    severity = severity_for(pct, ctx.t.goodput_badput_warning_pct,
                            ctx.t.goodput_badput_critical_pct)
    advice, figures = _advice(name, ctx, g)
    evidence: dict[str, Any] = {
        "goodput_pct": g.pct, "wall_s": g.wall_s, "category": name, "category_s": seconds,
        "category_pct": pct, "source": g.sources.get(name) or g.other, "runs": len(g.runs),
        **figures}
    if name == "lost_progress":
        evidence["lost_steps"] = g.categories.lost_steps
    return verdict("goodput", severity,
                   f"Goodput {g.pct:.0f}%: {LABELS[name]} took {pct:.0f}% of the job's wall time "
                   f"({duration(seconds)})", evidence, advice)


def _advice(name: str, ctx: Context, g: Goodput) -> tuple[list[str], dict[str, Any]]:
    if name in ("checkpoint_save", "lost_progress"):
        return _checkpoint_advice(name, ctx, g)
    if name == "startup":
        return _startup_advice(g)
    if name == "warmup_excess":
        return _warmup_advice(g)
    seconds = duration(float(getattr(g.categories, f"{name}_s") or 0.0))
    return [{
        "data_wait": "the kept steps waited for their batches: see the data-loading finding "
                     "for the loader settings (num_workers, pin_memory, prefetch_factor)",
        "evaluation": f"evaluations took {seconds}: evaluate less often, on a fixed subset, "
                      "or in a separate process on the saved checkpoints",
        "checkpoint_load": f"loads took {seconds}: torch.load(..., mmap=True) from local "
                           "disk, or torch.distributed.checkpoint so each rank reads its part",
        "restart_gap": f"{seconds} passed between a run's end and the next run's start (the "
                       "scheduler requeueing, a node replaced): requeue on the same allocation "
                       "or keep a spare node ready",
        "teardown": f"the processes took {seconds} after their last step (a final save, "
                    "joining DataLoader workers, uploads): make them asynchronous or shorter",
        "other": f"{seconds} between steps that nothing named (logging, metrics read with "
                 ".item(), an evaluation no framework reported): the step-time breakdown and "
                 "the time-outside-steps finding show where",
    }[name]], {}


def _checkpoint_advice(name: str, ctx: Context, g: Goodput) -> tuple[list[str], dict[str, Any]]:
    save_s = g.checkpoint_save_s_mean
    failures = g.failures or 0
    figures: dict[str, Any] = {"save_s_mean": save_s, "failures": failures,
                               "interval_s": g.checkpoint_interval_s}
    if save_s is None or save_s <= 0:
        return ["no checkpoint save was timed, so the interval cannot be computed: trainpace "
                "times torch.save, torch.distributed.checkpoint and Lightning's and HF's "
                "checkpoint hooks; save through one of them"], figures
    if ctx.mtbf_s is not None:
        mtbf, mtbf_source = ctx.mtbf_s, "given with --mtbf-hours"
    elif failures >= ctx.t.mtbf_min_failures and g.wall_s:
        mtbf = g.wall_s / failures
        mtbf_source = f"observed: {failures} failures in {duration(g.wall_s)}"
    else:
        return [f"the job has seen {failures} failure{'s' if failures != 1 else ''}, too few to "
                "measure the time between failures: give your machines' mean time between "
                "failures (`trainpace report JOB --mtbf-hours H`) for the checkpoint interval "
                f"that maximizes goodput (saves take {duration(save_s)} each)"], figures
    tau = math.sqrt(2.0 * save_s * mtbf)
    now = ((g.categories.checkpoint_save_s or 0.0) + (g.categories.lost_progress_s or 0.0)) / (
        g.wall_s or 1.0)
    best = save_s / tau + tau / (2.0 * mtbf)
    reach = min((g.pct or 0.0) + 100.0 * (now - best), 100.0)
    steps = tau / g.step_s_median if g.step_s_median else None
    figures |= {"mtbf_s": mtbf, "mtbf_source": mtbf_source, "young_daly_interval_s": tau,
                "young_daly_steps": round(steps) if steps is not None else None,
                "goodput_at_interval_pct": reach}
    every = f"every {duration(tau)}" + (f" (about {steps:,.0f} steps)" if steps else "")
    rule = (f"the Young/Daly interval √(2 × {duration(save_s)} per save × {duration(mtbf)} "
            f"between failures, {mtbf_source})")
    if reach <= (g.pct or 0.0) + 0.5:
        advice = [f"the saves are already near {rule}, {every}; what is left is each save's "
                  "own time"]
    else:
        since = (f" instead of every {duration(g.checkpoint_interval_s)}"
                 if g.checkpoint_interval_s else "")
        advice = [f"save {every}{since}: {rule}; the job's goodput would be about "
                  f"{reach:.0f}% (first order: {duration(save_s)}/τ of the time saving, τ/2 "
                  "redone per failure)"]
    if name == "checkpoint_save":
        advice.append(f"a save blocks training for {duration(save_s)}: save asynchronously "
                      "(torch.distributed.checkpoint.async_save, Lightning's AsyncCheckpointIO)")
    return advice, figures


def _startup_advice(g: Goodput) -> tuple[list[str], dict[str, Any]]:
    """Startup's two parts: before the Meter opened (imports, building the model, loading
    data sets) and after it, up to the first step (the first batch, the workers starting)."""
    before = after = 0.0
    for run in g.runs:
        if run.meter_start_unix_s is None or run.start_unix_s is None:
            continue
        before += max(run.meter_start_unix_s - run.start_unix_s, 0.0)
        if run.first_step_unix_s is not None:
            after += max(run.first_step_unix_s - run.meter_start_unix_s
                         - (run.categories.checkpoint_load_s or 0.0), 0.0)
    figures = {"before_meter_s": before, "meter_to_first_step_s": after}
    advice = []
    if before >= after:
        advice.append(f"{duration(before)} passed before trainpace's Meter opened (imports, "
                      "building the model, opening data sets): import lazily, build the model "
                      "on the meta device and materialize it once, cache preprocessed data")
    else:
        advice.append(f"{duration(after)} passed between the Meter's start and the first "
                      "step (the first batch: DataLoader workers starting, files opened): "
                      "persistent_workers=True, a smaller prefetch at start, datasets opened "
                      "lazily")
    if len(g.runs) > 1:
        advice.append(f"startup is paid once per run: {len(g.runs)} runs paid it; fewer "
                      "restarts (the checkpoint advice) pay it less")
    return advice, figures


def _warmup_advice(g: Goodput) -> tuple[list[str], dict[str, Any]]:
    """What dominated the warm-up: the first step of each run (compilation, autotuning) or
    the steps after it."""
    first = sum(r.first_step_excess_s or 0.0 for r in g.runs)
    total = g.categories.warmup_excess_s or 0.0
    figures = {"first_steps_excess_s": first, "later_warmup_excess_s": max(total - first, 0.0)}
    if first >= total / 2:
        advice = [f"the first step of each run took {duration(first)} in all beyond the "
                  "steady step (compilation, autotuning), paid again at every restart: keep "
                  "torch.compile's caches between runs (TORCHINDUCTOR_FX_GRAPH_CACHE=1, "
                  "torch.compiler.save_cache_artifacts / load_cache_artifacts)"]
    else:
        advice = [f"the warm-up steps after the first took {duration(total - first)} beyond "
                  "the steady step (recompilation on new shapes, cudnn.benchmark trying "
                  "algorithms, the allocator growing): fix the input shapes (pad to buckets) "
                  "or mark dynamic dimensions"]
    return advice, figures
