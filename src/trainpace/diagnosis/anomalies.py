"""Step-time anomalies, the expert's first look: stalls, periodic slow steps, drift.

They read the per-step records (``steps.jsonl``); a summary alone (a trace's) cannot show them,
and the rules say so.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import Context, Outcome, Verdict, severity_for, verdict
from trainpace.diagnosis.phases import HostSigns, find_phases, host_signs
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.stats import median
from trainpace.summary import Bottleneck, Severity
from trainpace.units import format_duration as duration

PERIOD_COVERAGE = 0.8  # a period holds when the slow steps fill 80% of its places in the run
PERIOD_CANDIDATES = 12  # the most frequent gaps tried as periods (bounds the work on noisy runs)
PERIOD_EXPLAINED = 0.8  # a multiple wins if it explains 80% of the best period's extra time
BIG_SHARES = (0.5, 0.25, 0.1)  # tiers of slow steps (share of the largest extra time)
PERIOD_CHANCE = 0.001  # a lattice that scattered slow steps fill this likely is no period


def _best_residue(spikes: Mapping[int, float], period: int, tolerance: int) -> int:
    """The residue mod ``period`` with the most extra time within ``tolerance`` of it."""
    pairs = sorted((s % period, extra) for s, extra in spikes.items())
    wrapped = ([(r - period, e) for r, e in pairs] + pairs + [(r + period, e) for r, e in pairs])
    keys = [r for r, _ in wrapped]
    cumulative = list(itertools.accumulate((e for _, e in wrapped), initial=0.0))

    def weight(r: int) -> float:
        return (cumulative[bisect.bisect_right(keys, r + tolerance)]
                - cumulative[bisect.bisect_left(keys, r - tolerance)])

    return max((r for r, _ in pairs), key=weight)


def _on_lattice(spikes: Mapping[int, float], period: int, residue: int, tolerance: int,
                first: int, last: int) -> dict[int, tuple[float, int, int]]:
    """cycle -> (-extra time, distance to its place, step) of the slowest step near each place
    ``residue + k·period`` inside [first, last]."""
    chosen: dict[int, tuple[float, int, int]] = {}
    for s, extra in spikes.items():
        cycle, offset = divmod(s - residue + tolerance, period)
        if offset > 2 * tolerance or not first <= residue + cycle * period <= last:
            continue  # off the lattice, or its place is outside the measured steps
        key = (-extra, abs(offset - tolerance), s)
        if cycle not in chosen or key < chosen[cycle]:
            chosen[cycle] = key
    return chosen


def _candidates(steps: Sequence[int]) -> set[int]:
    """The most frequent gaps between slow steps one and two apart (two apart skips one
    unrelated slow step in between)."""
    gaps = Counter(b - a for a, b in itertools.pairwise(steps))
    gaps.update(c - a for a, c in zip(steps, steps[2:], strict=False))
    return {g for g, _ in gaps.most_common(PERIOD_CANDIDATES) if g >= 2}


def periodic(
    spikes: Mapping[int, float], first: int, last: int, t: Thresholds
) -> tuple[int, list[int]] | None:
    """(period, the steps on it) when slow steps recur every N steps over [first, last].

    ``spikes`` maps each slow step to its extra time over the median step. Candidate periods
    come from the gaps between all slow steps, and between the big ones alone (tiers of
    :data:`BIG_SHARES` of the largest extra time). A candidate holds when at
    least ``spike_min_count`` slow steps sit on one lattice ``r + k·N`` (within
    ``period_tolerance_pct`` of N, at least one step; one per cycle, the slowest) and fill
    :data:`PERIOD_COVERAGE` of the lattice's places in the run. The best candidate explains
    the most extra time (then sits most exactly, then is the shorter); a multiple of it that
    explains :data:`PERIOD_EXPLAINED` as much wins over it (the longest such).
    """
    steps = sorted(spikes)
    largest = max(spikes.values())
    candidates = _candidates(steps)
    for share in BIG_SHARES:  # the big events alone show their period among many small ones
        candidates |= _candidates([s for s in steps if spikes[s] >= share * largest])
    found: list[tuple[float, int, int, list[int]]] = []  # (explained, -distance, period, on)
    for period in sorted(candidates):
        tolerance = min(max(1, int(period * t.period_tolerance_pct / 100.0)), (period - 1) // 2)
        residue = _best_residue(spikes, period, tolerance)
        chosen = _on_lattice(spikes, period, residue, tolerance, first, last)
        if chosen:  # centre the lattice on the events themselves, then choose again
            residue = Counter(s % period for _, _, s in chosen.values()).most_common(1)[0][0]
            chosen = _on_lattice(spikes, period, residue, tolerance, first, last)
        on = sorted(s for _, _, s in chosen.values())
        places = len(range(first + (residue - first) % period, last + 1, period))
        if (len(on) >= t.spike_min_count and len(on) >= PERIOD_COVERAGE * places
                and _stands_out(spikes, on, period, tolerance, first, last)):
            found.append((sum(spikes[s] for s in on), -sum(d for _, d, _ in chosen.values()),
                          period, on))
    if not found:
        return None
    best = max(found, key=lambda f: (f[0], f[1], -f[2]))
    # A divisor of the events' period explains them plus whatever noise fills its other
    # places: a multiple of the best that explains nearly as much is the events' own period.
    _, _, period, on = max((f for f in found if f[2] % best[2] == 0
                            and f[0] >= PERIOD_EXPLAINED * best[0]), key=lambda f: (f[2], f[1]))
    return period, on


def _stands_out(spikes: Mapping[int, float], on: list[int], period: int, tolerance: int,
                first: int, last: int) -> bool:
    """Whether the slow steps on a lattice are evidence of periodic work, not slow steps
    scattered over a noisy run (some lattice always catches those, the shorter the period
    the more easily). Only slow steps of their size count (at least half their median extra
    time), and a run of adjacent ones is one event (a cold cache after it). Either no such
    event lies off the lattice, or chance would rarely fill as many of its places: events
    scattered at their density d over the run fill a place (2·tolerance + 1 steps) with
    probability q = 1 − (1 − d)^width, and :data:`PERIOD_CHANCE` bounds the binomial chance
    of ``len(on)`` or more of the places."""
    size = 0.5 * (median([spikes[s] for s in on]) or 0.0)
    big = {s for s in spikes if first <= s <= last and spikes[s] >= size}
    starts = {s for s in big if s - 1 not in big}  # one per event
    chosen = set(on)
    if all(s in chosen or s - 1 in big for s in starts):
        return True
    places = len(range(min(on) - (min(on) - first) // period * period, last + 1, period))
    density = min(1.0, len(starts) / max(1, last - first + 1))
    q = 1.0 - (1.0 - density) ** (2 * tolerance + 1)
    tail = sum(math.comb(places, k) * q**k * (1.0 - q) ** (places - k)
               for k in range(min(len(on), places), places + 1))
    return tail <= PERIOD_CHANCE


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
    signs = None if in_loader else _signs_of(ctx, ix)
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
            measured = (f"{signs.text()}: no contention" if signs is not None
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
    checked = ["not in the data wait"]
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


def _signs_of(ctx: Context, ix: np.ndarray) -> HostSigns | None:
    """The host readings over the slow steps' own time (None without sampler rows)."""
    times = ctx.times
    ends = times.t_s[ix]
    known = np.isfinite(ends)
    if not known.any():
        return None
    spans = [(float(e - s), float(e)) for e, s in zip(ends[known], times.step_s[ix][known],
                                                        strict=True)]
    return host_signs(ctx, spans)


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


def _grown_pct(ctx: Context, head: np.ndarray, tail: np.ndarray) -> float | None:
    """How much the work per step (tokens, else samples) grew, first quarter to last."""
    steps = ctx.all_steps
    if steps is None:
        return None
    for name in ("tokens", "samples"):
        work = steps.column(name)[ctx.times.index]
        first, last = median(work[head]), median(work[tail])
        if first is not None and last is not None and math.isfinite(first + last) and first > 0:
            return 100.0 * (last / first - 1.0)
    return None


MEMORY_GROWTH = 1.2  # the process's memory grew by a fifth: something is kept across steps
MEMORY_GROWTH_MIN_GB = 0.05  # ... and by more than the sampler's noise


def _drift_cause(ctx: Context, head: np.ndarray, tail: np.ndarray, drift_pct: float,
                 grown: float | None, wait_growth_s: float, step_growth_s: float,
                 evidence: dict[str, Any]) -> tuple[str, str]:
    """(cause, the advice) of a step time that grew: from the signs recorded in the first
    and last quarters; a cause the signs do not show is said as unknown, with them."""
    before, after = _signs_of(ctx, head), _signs_of(ctx, tail)
    evidence["first_quarter_signs"] = before.to_dict() if before is not None else None
    evidence["last_quarter_signs"] = after.to_dict() if after is not None else None
    if wait_growth_s >= 0.5 * step_growth_s:
        return "data_wait", ("the growth is in the data wait: the loader slows down (a cache "
                             "filling, files growing, workers leaking memory)")
    if after is not None and after.contended(ctx.t, before):
        was = f"; in the first quarter {before.text()}" if before is not None else ""
        return "cpu_contention", (
            f"the machine's, not the step's: other processes took the CPU in the last "
            f"quarter ({after.text()}{was}) — compare on a quiet machine; nothing in the "
            "code needs to change for it")
    temps = ctx.system_values("temperature_c")
    if len(temps) >= 2 and temps[-1] - temps[0] >= 10:
        return "thermal", (f"the device warmed from {temps[0]:.0f} to {temps[-1]:.0f} °C: "
                           "check clocks and throttling")
    if grown is not None and grown >= 0.5 * drift_pct:
        return "inputs", (f"the inputs grew: the work per step (tokens, else samples) rose "
                          f"{grown:.0f}% from the first quarter to the last, the step time "
                          f"{drift_pct:.0f}% — the step is as fast per unit of work")
    rss_before = before.rss_gb if before is not None else None
    rss_after = after.rss_gb if after is not None else None
    if (rss_before is not None and rss_after is not None
            and rss_after >= MEMORY_GROWTH * rss_before
            and rss_after - rss_before >= MEMORY_GROWTH_MIN_GB):
        return "memory_growth", (
            f"this process's memory grew from {rss_before:.2f} to {rss_after:.2f} GB as the "
            "step slowed: tensors kept across steps (summing losses without .item() or "
            ".detach() keeps their graphs alive)")
    seen = [f"the data wait did not grow ({duration(max(wait_growth_s, 0.0))} of "
            f"{duration(step_growth_s)})"]
    if after is not None:
        seen.append(f"in the last quarter {after.text()}: no more contention than in the first")
        if rss_after is not None:
            seen.append(f"this process's memory {rss_after:.2f} GB"
                        + (f" (from {rss_before:.2f})" if rss_before is not None else ""))
    else:
        seen.append("no host readings (system.jsonl) to tell the machine's part")
    if grown is not None:
        seen.append(f"the work per step changed {grown:+.0f}%")
    return "unknown", ("the recorded signs do not tell the cause: " + "; ".join(seen)
                       + " — a profiler trace of early and late steps "
                       f"({adv.setting(ctx.made_by, 'profile_steps', 'START:STOP')}) shows "
                       "where the time went")


def drift(ctx: Context) -> Outcome:
    """Step time that grows (or falls) over the run: first quarter against last quarter."""
    t, times = ctx.t, ctx.times
    n = len(times)
    short = too_few_steps(ctx, t.drift_min_steps, "drift")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    keep = np.flatnonzero(times.step_s <= t.stall_factor * med)
    quarter = max(1, len(keep) // 4)
    head, tail = keep[:quarter], keep[-quarter:]
    first = median(times.step_s[head]) or 0.0
    last = median(times.step_s[tail]) or 0.0
    if first <= 0:
        return Outcome(skipped="the first steps have no duration")
    drift_pct = 100.0 * (last / first - 1.0)
    wait_first = median(times.wait_s[head]) or 0.0
    wait_last = median(times.wait_s[tail]) or 0.0
    grown = _grown_pct(ctx, head, tail)
    evidence: dict[str, Any] = {
        "measured_steps": n,
        "first_quarter_step_s": first,
        "last_quarter_step_s": last,
        "drift_pct": drift_pct,
        "first_quarter_wait_s": wait_first,
        "last_quarter_wait_s": wait_last,
        "work_grown_pct": grown,
    }
    span = f"from {duration(first)} to {duration(last)} over {n} steps"
    if drift_pct >= t.drift_warning_pct:
        cause, text = _drift_cause(ctx, head, tail, drift_pct, grown, wait_last - wait_first,
                                   last - first, evidence)
        evidence["cause"] = cause
        # the machine's slowness (others took the CPU) is said, but is not the user's bug
        severity: Severity = "info" if cause == "cpu_contention" else "warning"
        return verdict("drift", severity, f"Step time drifts up {drift_pct:.0f}% {span}",
                       evidence, [text])
    if drift_pct <= -t.drift_warning_pct:
        return verdict(
            "drift",
            "info",
            f"Step time falls {-drift_pct:.0f}% {span}: warm-up may reach into the measured steps",
            evidence,
            [
                "exclude more warm-up, e.g. "
                f"{adv.setting(ctx.made_by, 'warmup', ctx.summary.steps.warmup + n // 4)}, "
                "or run longer so the steady window dominates"
            ],
        )
    return Outcome(checked=f"step time steady ({round(drift_pct):+d}% {span})")


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
