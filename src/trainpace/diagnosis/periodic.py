"""Slow steps that recur every N steps: the period, and the steps on it.

Slow steps scattered over a noisy run always fit some lattice, the shorter its period the more
easily; a period is found only when its steps fill the lattice and stand out from chance.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence

from trainpace.diagnosis.thresholds import Thresholds
from trainpace.stats import binomial_tail, median

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
    return binomial_tail(places, min(len(on), places), q) <= PERIOD_CHANCE
