"""Step-time anomalies, the expert's first look: stalls, periodic slow steps (their period
found by :mod:`trainpace.diagnosis.periodic`), a loss gone NaN; the drift is
:mod:`trainpace.diagnosis.drift`'s.

They read the per-step records (``steps.jsonl``); a summary alone (a trace's) cannot show them,
and the rules say so.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import Context, Outcome, Verdict, severity_for, verdict
from trainpace.diagnosis.host_signs import step_signs
from trainpace.diagnosis.periodic import periodic
from trainpace.diagnosis.phases import find_phases
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.stats import median
from trainpace.summary import Bottleneck
from trainpace.units import format_duration as duration

# A rank "waits clearly more" than rank 0 for its data: twice its share, and a percentage
# point more (two ranks' shares of a few tenths of a percent differ by noise alone).
RANK_WAIT_RATIO = 2.0
RANK_WAIT_MORE_PP = 1.0


def too_few_steps(ctx: Context, need: int, what: str) -> Outcome | None:
    """A skip outcome when there are no step records or fewer measured steps than ``need``."""
    if ctx.steps is None:
        return Outcome(skipped=f"no per-step records (steps.jsonl) for the {what} check")
    n = len(ctx.times)
    if n < need:
        return Outcome(skipped=f"only {n} measured steps; the {what} check needs {need}")
    return None


def _outliers(ctx: Context, chosen: list[int], period: int | None) -> Verdict:
    """The finding for a set of slow steps (indices into ``ctx.times``)."""
    t, times = ctx.t, ctx.times
    med = median(times.step_s) or 0.0
    wait_med = median(times.wait_s) or 0.0
    ix = np.asarray(chosen, dtype=np.int64)
    slow = times.step_s[ix]
    lost_s = float((slow - med).sum())
    lost_pct = 100.0 * lost_s / float(times.step_s.sum())
    in_wait_s = float(np.maximum(0.0, times.wait_s[ix] - wait_med).sum())
    in_loader = in_wait_s >= 0.5 * lost_s
    severity = severity_for(lost_pct, t.outlier_warning_pct, t.outlier_critical_pct)
    worst = int(ix[int(np.argmax(slow))])
    evidence: dict[str, Any] = {
        "measured_steps": len(times),
        "step_s_median": med,
        "count": len(chosen),
        "period_steps": period,
        "outlier_steps": [int(s) for s in times.step[ix[:20]]],
        "outlier_step_s_median": median(slow),
        "worst_step": int(times.step[worst]),
        "worst_step_s": float(times.step_s[worst]),
        "lost_s": lost_s,
        "lost_pct": lost_pct,
        "in_data_wait_pct": 100.0 * in_wait_s / lost_s if lost_s > 0 else None,
    }
    signs = None if in_loader else step_signs(ctx, ix)
    if signs is not None:
        evidence["host_signs"] = signs.to_dict()
    each, gain = duration(lost_s / len(chosen)), adv.gain_text(lost_pct)
    cause = None
    if period:
        kind = "stall" if float(slow.max()) > t.stall_factor * med else "slow step"
        title = (f"Periodic {kind} every {period} steps: {len(chosen)} steps took "
                 f"{duration(median(slow) or 0.0)} instead of {duration(med)} "
                 f"({lost_pct:.1f}% of the time)")
        cause, advice = _periodic_cause(ctx, period, in_loader, each, gain,
                                        excess_s=lost_s / len(chosen))
        evidence["cause"] = cause
        if cause == "trainpace_window":
            title += ": trainpace's own window boundary"
            severity = "info"
    else:
        title = (f"{len(chosen)} stall{'s' if len(chosen) > 1 else ''} over "
                 f"{t.stall_factor:g}× the median step: worst "
                 f"{duration(float(times.step_s[worst]))} at step {int(times.step[worst])} "
                 f"({lost_pct:.1f}% of the time)")
        if in_loader:
            advice = ("the stalls are in the data wait: a slow read or a slow sample (check "
                      f"storage and samples that decode slowly) — {gain}")
        elif signs is not None and signs.contended(t):
            cause = "cpu_contention"  # the machine's, not the code's: no bottleneck named
            evidence["cause"] = cause
            advice = (f"the stalls are outside the loader, while {signs.text()}: other "
                      f"processes took the CPU — run where the cores are free — {gain}")
        else:
            cause = "unknown"
            evidence["cause"] = cause
            measured = (signs.uncontended_text(t) if signs is not None
                        else "no host readings (system.jsonl) for them")
            if signs is not None and signs.memory_used_pct_max is not None:
                measured += f", memory {signs.memory_used_pct_max:.0f}% used at most"
            trace = adv.setting(ctx.made_by, "profile_steps", "START:STOP")
            advice = (f"the recorded signs do not tell the cause: the stalls are outside the "
                      f"loader, {measured}; a profiler trace over a stall ({trace}) shows "
                      "where the time went (in the loop: a garbage-collection pass, or a "
                      f"synchronizing call such as .item() behind queued work) — {gain}")
    category: Bottleneck | None = (None if severity == "info" or cause == "cpu_contention" else
                                   "data_loading" if in_loader or cause == "worker_restart"
                                   else "host_overhead")
    outcome = verdict("periodic_stall" if period else "stalls", severity, title, evidence,
                      [advice], bottleneck=category, lost_pct=lost_pct)
    return outcome.verdicts[0]


def _near(period: int, length: int, t: Thresholds) -> bool:
    """Whether ``period`` is ``length`` within the period tolerance."""
    return abs(period - length) <= max(1, int(length * t.period_tolerance_pct / 100.0))


def _loader_end_spacing(ends: list[int] | None) -> int | None:
    """The steps between the windows a loader ended, when they are regular (at least three
    ends, every gap the same): an epoch's length in steps; else None."""
    if ends is None or len(ends) < 3:
        return None
    gaps = {b - a for a, b in itertools.pairwise(ends)}
    return gaps.pop() if len(gaps) == 1 else None


def _periodic_cause(ctx: Context, period: int, in_loader: bool, each: str, gain: str, *,
                    excess_s: float) -> tuple[str, str]:
    """(cause, advice) of slow steps every ``period`` steps, from what the run recorded:
    trainpace's own window boundary, DataLoader workers restarting each epoch, the data wait;
    what none of them shows is said as not told, with what was checked."""
    t = ctx.t
    window = ctx.window_steps
    # trainpace hands its steps over at every window boundary and halfway through the window;
    # its writer's work then (and under DDP the window exchange) lands in the steps that follow,
    # one or a few of them. A period equal to either, with an excess each time no larger than
    # that work costs, is trainpace's, whatever the phase: never blamed on the user's loop. A
    # larger one is the loop's own (a checkpoint saved every window's length of steps).
    if window is not None and excess_s <= t.trainpace_boundary_max_s and (
            _near(period, window, t) or (window >= 4 and _near(period, window // 2, t))):
        flag = adv.setting(ctx.made_by, "window", 2 * window)
        return "trainpace_window", (
            f"the slow steps fall on trainpace's own window boundary (every {window} steps, "
            f"config.window): the {each} each time is trainpace's cost, its work at the "
            f"boundary, not the training's; a larger window ({flag}) makes it rarer")
    # Where epochs are shorter than the window, the loader that runs out ends trainpace's
    # window at the epoch's end where another epoch would not fit: its boundaries then come
    # every one or few epochs. Outside the data wait (an epoch's first batch is the loader's)
    # and no larger than its work there, a stall at that period is trainpace's too.
    spacing = _loader_end_spacing(ctx.window_ends)
    if (window is not None and spacing is not None and not in_loader
            and excess_s <= t.trainpace_boundary_max_s and _near(period, spacing, t)):
        return "trainpace_window", (
            f"the slow steps fall on trainpace's own window boundary: the loader runs out "
            f"every {spacing} steps, which ends trainpace's window there (steps.window_ends), "
            f"and the {each} each time is trainpace's cost, its work at the boundary, not the "
            "training's")
    loader = ctx.loader or {}
    workers = int(loader.get("num_workers") or 0)
    length = loader.get("length")
    restart = workers > 0 and not loader.get("persistent_workers")
    if restart and isinstance(length, int) and length > 1 and _near(period, length, t):
        return "worker_restart", (
            f"the period is the epoch ({length} batches) and the DataLoader's {workers} "
            f"workers restart every epoch (persistent_workers=False): the extra {each} is "
            "their start-up and first batches — `DataLoader(persistent_workers=True)` keeps "
            f"them — {gain}")
    if in_loader:
        why = ("an epoch boundary that restarts the workers (persistent_workers=True)"
               if restart or workers == 0 else "a slow first batch of each epoch (the workers "
               "persist already: shuffle cost or files opened per epoch)")
        return "data_wait", (
            f"the extra {each} each time is in the data wait: the loader runs dry every "
            f"{period} steps — {why} or a prefetch queue too short for slow batches (raise "
            f"prefetch_factor) — {gain}")
    wait = _data_wait_judged(ctx)
    if isinstance(length, int) and length > 1 and _near(period, length, t):
        return "epoch_boundary", (
            f"the period is the epoch ({length} batches): the extra {each} comes once per "
            f"epoch, {wait} — the loop's own work at each epoch's start or end (a new "
            "DataLoader iterator and its first batch, DistributedSampler.set_epoch's shuffle, "
            "epoch-end hooks: logging, validation or a checkpoint each epoch) — move it out "
            f"of the steps or make it cheaper — {gain}")
    checked = [wait]
    if window is not None:
        checked.append(f"not trainpace's window ({window} steps)")
    if isinstance(length, int) and length > 0:
        checked.append(f"not the epoch ({length} batches)")
    where = ("inside the step (time between steps, such as an evaluation, is kept out of it)"
             if _outside_known(ctx) else "outside the loader")
    return "unknown", (
        f"the recorded signs do not tell what costs {each} every {period} steps ("
        + ", ".join(checked) + f"): it is {where}; look in the loop for work every {period} "
        "steps — a checkpoint save (torch.distributed.checkpoint.async_save saves "
        f"asynchronously), a logging sync or an evaluation — {gain}")


def _data_wait_judged(ctx: Context) -> str:
    """"not in the data wait", as far as the steps diagnosed can tell. A job's diagnosis reads
    one rank's steps (``ctx.steps_rank``): a rank that waits for its data longer holds every
    rank at the gradient all-reduce, so that rank's own wait does not clear the job's."""
    waiting = _rank_waiting_more(ctx)
    if waiting is None:
        return "not in the data wait"
    rank, wait_pct = waiting
    return (f"not in rank {_shown(ctx)}'s data wait (the steps read here), but rank {rank} waits "
            f"{wait_pct:.0f}% of its time for data and every rank waits for it at the "
            f"gradient all-reduce: its rank{rank}/steps.jsonl shows whether its wait is what "
            "recurs")


def _shown(ctx: Context) -> int:
    """The rank whose steps are read (a job's merged meta says; rank 0 when it does not)."""
    return ctx.steps_rank if ctx.steps_rank is not None else 0


def _rank_waiting_more(ctx: Context) -> tuple[int, float] | None:
    """(rank, wait %) of the job's rank that waits most for data, when it waits clearly more
    than the rank whose steps a job's diagnosis reads; None for one process."""
    ranks = ctx.summary.ranks
    if ctx.summary.world_size <= 1 or len(ranks) < 2:
        return None
    shown = _shown(ctx)
    own = next((r.wait_pct for r in ranks if r.rank == shown), None) or 0.0
    known = [r for r in ranks if r.wait_pct is not None]
    if not known:
        return None
    most = max(known, key=lambda r: (r.wait_pct or 0.0, -r.rank))
    wait_pct = most.wait_pct or 0.0
    if most.rank == shown or wait_pct < max(RANK_WAIT_RATIO * own, own + RANK_WAIT_MORE_PP):
        return None
    return most.rank, wait_pct


def step_outliers(ctx: Context) -> Outcome:
    """Periodic slow steps (> spike_factor × the median, every N steps) and other stalls
    (> stall_factor × the median)."""
    t, times = ctx.t, ctx.times
    short = too_few_steps(ctx, t.outlier_min_steps, "stall")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    spikes = np.flatnonzero(times.step_s > t.spike_factor * med)
    in_phase = np.zeros(len(times), dtype=bool)
    for phase in find_phases(ctx):  # a stall inside a named slow phase is reported with it
        in_phase |= (times.step >= phase.start_step) & (times.step <= phase.stop_step)
    found = None
    if len(spikes) >= t.spike_min_count:
        extra = {int(times.step[i]): float(times.step_s[i]) - med for i in spikes}
        found = periodic(extra, int(times.step[0]), int(times.step[-1]), t)
    on_period = set(found[1]) if found else set()
    periodic_ix = [int(i) for i in spikes if int(times.step[i]) in on_period]
    stalls = [int(i) for i in spikes
              if int(times.step[i]) not in on_period and times.step_s[i] > t.stall_factor * med
              and not in_phase[i]]
    verdicts = []
    if found:
        verdicts.append(_outliers(ctx, periodic_ix, found[0]))
    if stalls:
        verdicts.append(_outliers(ctx, stalls, None))
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    return Outcome(checked=f"no step over {t.stall_factor:g}× the median ({duration(med)}) "
                           f"in {len(times)} steps, no periodic slow step")


def _outside_known(ctx: Context) -> bool:
    """Whether the records keep time between steps apart (``outside_s`` measured)."""
    steps = ctx.all_steps
    return steps is not None and bool(np.isfinite(steps.column("outside_s")).any())


def loss_finite(ctx: Context) -> Outcome:
    """A loss that became NaN or infinite: the run diverged, whatever its speed."""
    steps = ctx.all_steps
    if steps is None:
        return Outcome(skipped="no per-step records (steps.jsonl) for the loss check")
    flags = steps.column("loss_nonfinite")
    bad = np.flatnonzero(flags > 0)
    if bad.size == 0:
        known = np.isfinite(steps.column("loss")).sum()
        if not known and not np.isfinite(flags).any():
            return Outcome(skipped="no loss observed (meter.observe(loss=...))")
        return Outcome(checked=f"loss finite in every step ({int(known)} with a loss)")
    first = int(steps.step[bad[0]])
    finite_after = np.isfinite(steps.column("loss")[bad[0]:]).sum()
    return verdict(
        "loss_nonfinite", "critical",
        f"The loss stopped being finite at step {first} (NaN or inf in {bad.size} steps)",
        {"first_step": first, "nonfinite_steps": int(bad.size),
         "finite_steps_after": int(finite_after),
         "steps": [int(s) for s in steps.step[bad[:20]]]},
        ["the run diverged: its speed figures after that step train nothing; lower the "
         "learning rate or add warm-up, clip gradients (torch.nn.utils.clip_grad_norm_), "
         "and with float16 use a GradScaler (bf16 has float32's range)",
         "torch.autograd.set_detect_anomaly(True) on a rerun names the op that made the first "
         "NaN"],
    )
