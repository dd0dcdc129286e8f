"""Step-time anomalies, the expert's first look: stalls, periodic slow steps, drift.

They read the per-step records (``steps.jsonl``); a summary alone (a trace's) cannot show them,
and the rules say so.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence

from trainpace.diagnose import advice as adv
from trainpace.diagnose._context import Context, Outcome, Verdict, banded, verdict
from trainpace.diagnose.thresholds import Thresholds
from trainpace.stats import median
from trainpace.units import format_duration as duration

PERIOD_COVERAGE = 0.8  # a period holds when the slow steps fill 80% of its places in the run
PERIOD_CANDIDATES = 12  # the most frequent gaps tried as periods (bounds the work on noisy runs)
PERIOD_EXPLAINED = 0.8  # a multiple wins if it explains 80% of the best period's extra time
BIG_SHARES = (0.5, 0.25, 0.1)  # tiers of slow steps (share of the largest extra time)


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
        if len(on) >= t.spike_min_count and len(on) >= PERIOD_COVERAGE * places:
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


def too_few_steps(ctx: Context, need: int, what: str) -> Outcome | None:
    """A skip outcome when there are no step records or fewer measured steps than ``need``."""
    if ctx.steps is None:
        return Outcome(skipped=f"no per-step records (steps.jsonl) for the {what} check")
    n = len(ctx.times.step_s)
    if n < need:
        return Outcome(skipped=f"only {n} measured steps; the {what} check needs {need}")
    return None


def _outliers(ctx: Context, chosen: list[int], period: int | None) -> Verdict:
    """The finding for a set of slow steps (indices into ``ctx.times``)."""
    t, times = ctx.t, ctx.times
    med = median(times.step_s) or 0.0
    wait_med = median(times.wait_s) or 0.0
    lost_s = sum(times.step_s[i] - med for i in chosen)
    lost_pct = 100.0 * lost_s / sum(times.step_s)
    in_wait_s = sum(max(0.0, times.wait_s[i] - wait_med) for i in chosen)
    in_loader = in_wait_s >= 0.5 * lost_s
    severity = banded(lost_pct, t.outlier_warning_pct, t.outlier_critical_pct)
    slow = [times.step_s[i] for i in chosen]
    worst = max(chosen, key=lambda i: times.step_s[i])
    evidence = {
        "measured_steps": len(times.step_s),
        "step_s_median": med,
        "count": len(chosen),
        "period_steps": period,
        "outlier_steps": [times.step[i] for i in chosen[:20]],
        "outlier_step_s_median": median(slow),
        "worst_step": times.step[worst],
        "worst_step_s": times.step_s[worst],
        "lost_s": lost_s,
        "lost_pct": lost_pct,
        "in_data_wait_pct": 100.0 * in_wait_s / lost_s if lost_s > 0 else None,
    }
    each, gain = duration(lost_s / len(chosen)), adv.gain_text(lost_pct)
    if period:
        kind = "stall" if max(slow) > t.stall_factor * med else "slow step"
        title = (f"Periodic {kind} every {period} steps: {len(chosen)} steps took "
                 f"{duration(median(slow) or 0.0)} instead of {duration(med)} "
                 f"({lost_pct:.1f}% of the time)")
        advice = (
            f"the extra {each} each time is in the data wait: the loader runs dry every "
            f"{period} steps — an epoch boundary that restarts the workers "
            "(persistent_workers=True) or a prefetch queue too short for slow batches "
            f"(raise prefetch_factor) — {gain}"
            if in_loader
            else f"periodic work outside the loader costs {each} every {period} steps: a "
            "checkpoint save, an evaluation or a logging sync; save asynchronously "
            "(torch.distributed.checkpoint.async_save) or less often, evaluate less often "
            f"— {gain}"
        )
    else:
        title = (f"{len(chosen)} stall{'s' if len(chosen) > 1 else ''} over "
                 f"{t.stall_factor:g}× the median step: worst "
                 f"{duration(times.step_s[worst])} at step {times.step[worst]} "
                 f"({lost_pct:.1f}% of the time)")
        advice = (
            "the stalls are in the data wait: a slow read or a slow sample (check storage and "
            f"samples that decode slowly) — {gain}"
            if in_loader
            else "the stalls are outside the loader: garbage collection (gc.freeze() after "
            "setup), host memory swapping, a competing process, or a synchronizing call "
            f"(.item(), .cpu()) behind queued work — {gain}"
        )
    category = None if severity == "info" else "data_loading" if in_loader else "host_overhead"
    outcome = verdict("periodic_stall" if period else "stalls", severity, title, evidence,
                      [advice], bottleneck=category, lost_pct=lost_pct)
    return outcome.verdicts[0]


def step_outliers(ctx: Context) -> Outcome:
    """Periodic slow steps (> spike_factor × the median, every N steps) and other stalls
    (> stall_factor × the median)."""
    t, times = ctx.t, ctx.times
    short = too_few_steps(ctx, t.outlier_min_steps, "stall")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    spikes = [i for i, s in enumerate(times.step_s) if s > t.spike_factor * med]
    found = None
    if len(spikes) >= t.spike_min_count:
        extra = {times.step[i]: times.step_s[i] - med for i in spikes}
        found = periodic(extra, times.step[0], times.step[-1], t)
    on_period = set(found[1]) if found else set()
    periodic_ix = [i for i in spikes if times.step[i] in on_period]
    stalls = [i for i in spikes
              if times.step[i] not in on_period and times.step_s[i] > t.stall_factor * med]
    verdicts = []
    if found:
        verdicts.append(_outliers(ctx, periodic_ix, found[0]))
    if stalls:
        verdicts.append(_outliers(ctx, stalls, None))
    if verdicts:
        return Outcome(verdicts=tuple(verdicts))
    return Outcome(checked=f"no step over {t.stall_factor:g}× the median ({duration(med)}) "
                           f"in {len(times.step_s)} steps, no periodic slow step")


def drift(ctx: Context) -> Outcome:
    """Step time that grows (or falls) over the run: first quarter against last quarter."""
    t, times = ctx.t, ctx.times
    n = len(times.step_s)
    short = too_few_steps(ctx, t.drift_min_steps, "drift")
    if short is not None:
        return short
    med = median(times.step_s) or 0.0
    keep = [i for i, s in enumerate(times.step_s) if s <= t.stall_factor * med]
    quarter = max(1, len(keep) // 4)
    head, tail = keep[:quarter], keep[-quarter:]
    first = median([times.step_s[i] for i in head]) or 0.0
    last = median([times.step_s[i] for i in tail]) or 0.0
    if first <= 0:
        return Outcome(skipped="the first steps have no duration")
    drift_pct = 100.0 * (last / first - 1.0)
    wait_first = median([times.wait_s[i] for i in head]) or 0.0
    wait_last = median([times.wait_s[i] for i in tail]) or 0.0
    evidence = {
        "measured_steps": n,
        "first_quarter_step_s": first,
        "last_quarter_step_s": last,
        "drift_pct": drift_pct,
        "first_quarter_wait_s": wait_first,
        "last_quarter_wait_s": wait_last,
    }
    span = f"from {duration(first)} to {duration(last)} over {n} steps"
    if drift_pct >= t.drift_warning_pct:
        temps = ctx.system_values("temperature_c")
        if wait_last - wait_first >= 0.5 * (last - first):
            cause = "the growth is in the data wait: the loader slows down (a cache filling, "
            "files growing, workers leaking memory)"
        elif len(temps) >= 2 and temps[-1] - temps[0] >= 10:
            cause = (
                f"the device warmed from {temps[0]:.0f} to {temps[-1]:.0f} °C: "
                "check clocks and throttling"
            )
        else:
            cause = (
                "the growth is in the step itself: tensors kept across steps (summing losses "
                "without .item() or .detach() keeps their graphs alive), allocator "
                "fragmentation, or inputs that grow (sequence length)"
            )
        return verdict(
            "drift",
            "warning",
            f"Step time drifts up {drift_pct:.0f}% {span}",
            evidence,
            [cause],
        )
    if drift_pct <= -t.drift_warning_pct:
        return verdict(
            "drift",
            "info",
            f"Step time falls {-drift_pct:.0f}% {span}: warm-up may reach into the measured steps",
            evidence,
            [
                f"exclude more warm-up, e.g. Meter(warmup={ctx.summary.steps.warmup + n // 4}), "
                "or run longer so the steady window dominates"
            ],
        )
    return Outcome(checked=f"step time steady ({round(drift_pct):+d}% {span})")
