"""The statistics of ``real_scripts.py``'s steady measures, apart from the running of scripts.

From the ends of a script's steps (and the CPU time of watched threads at each): what the
Meter's hooks cost a step (:func:`step_cost`, from steps alternating watched and bare in
groups of four), what the watched threads delayed the steps (:func:`thread_delay`), the
checks that steps held up by the machine fall on both kinds alike (:func:`more_than_chance`,
:func:`poisson_above_chance`), and the pooling of several processes' estimates
(:func:`pooled`, with Student's t: :func:`t_95`). Pure functions of the numbers they are
given; the tests feed them made-up steps of known cost.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable

# A step this many times the process's median step was held up by the machine (another
# process, the hypervisor: word_lm's quiet processes had one such step in 800, others a dozen,
# 3-4 times its length, in watched and bare steps alike), not by a cost of tens of
# microseconds: a group of four that holds one is left out. Were the Meter to cause such steps,
# they would come in its steps more often than in the bare ones: step_cost counts both, and
# steady() gives no "met" where the watched ones are more than chance allows; likewise
# thread_delay for the steps the threads ran in.
DISTURBED = 1.5


# For the threads' delay, a step held up is one over this many times the median step: higher
# than DISTURBED, since a touched step's own excess (the threads' cost, up to a few
# milliseconds) must not push it over, or their cost would be left out with it. word_lm's
# held-up steps took 3-5 times the median.
HELD_UP = 2.0

# A step the watched threads ran in is compared with the steps they did not run in nearest to
# it: up to this many on each side, within NEIGHBOR_SPAN steps of it.
NEIGHBORS = 2
NEIGHBOR_SPAN = 8


def thread_delay(ends_s: list[float], threads_cpu_ends_s: list[float],
                 skip: Iterable[int] = ()) -> dict[str, float]:
    """What the watched threads' work cost the loop's steps, measured rather than assumed.

    From the ends of a run's steps and the threads' CPU time at each, after the first tenth:
    each step's excess over the mean of its nearest steps the threads took no CPU in
    (``NEIGHBORS`` each side, within ``NEIGHBOR_SPAN``). A step the threads ran in (a touched
    step) is likelier the longer it is (their work starts at times of their own, not at
    steps), so even work that cost nothing would pick steps that ran long: the excess such a
    choice gives is the untouched steps' excesses averaged with each step weighted by its
    length (as a point in time picks it), and the delay is the touched steps' excesses less
    that, summed, with twice its standard error, as a share of those steps' time. A touched
    step that cannot be compared (one of ``skip``, an epoch's first step, or one with no
    untouched step on a side) counts the threads' CPU in it in full, and so does one held up
    (over ``HELD_UP`` times the median step: the machine's excess, not theirs); a step held
    up is no one's neighbour. Steps the threads ran in are held up about as often as the
    time they span makes likely, if the threads do not hold them up: ``held_touched`` of them
    were, against ``held_touched_expected`` (the touched steps' rate per second of steps not
    held up, times the held-up steps' time)."""
    n = len(ends_s)
    step_s = [0.0] + [b - a for a, b in itertools.pairwise(ends_s)]  # step_s[i]: step i
    busy_s = [0.0] + [b - a for a, b in itertools.pairwise(threads_cpu_ends_s)]
    first = max(1, n // 10)
    left_out = set(skip)
    limit_s = HELD_UP * statistics.median(step_s[first:])
    held = [step_s[i] > limit_s for i in range(n)]
    quiet = [busy_s[i] <= 0 and i not in left_out and not held[i] for i in range(n)]

    def nearest(i: int) -> list[int]:
        before = [j for j in range(i - 1, max(first, i - NEIGHBOR_SPAN) - 1, -1) if quiet[j]]
        after = [j for j in range(i + 1, min(n, i + NEIGHBOR_SPAN + 1)) if quiet[j]]
        return before[:NEIGHBORS] + after[:NEIGHBORS] if before and after else []

    touched: list[float] = []
    chance: list[tuple[float, float]] = []  # an untouched step's (length, excess)
    whole_s = 0.0  # the threads' CPU in touched steps that could not be compared
    held_s = free_s = 0.0  # the time of the steps held up, and of the others
    held_touched = free_touched = 0
    for i in range(first, n):
        if held[i]:
            held_s += step_s[i]
            held_touched += busy_s[i] > 0
            whole_s += busy_s[i]
            continue
        free_s += step_s[i]
        free_touched += busy_s[i] > 0
        near = nearest(i) if i not in left_out else []
        if not near:
            whole_s += busy_s[i]
            continue
        excess = step_s[i] - statistics.fmean(step_s[j] for j in near)
        if quiet[i]:
            chance.append((step_s[i], excess))
        else:
            touched.append(excess)
    length_s = sum(length for length, _ in chance)
    by_chance_s = sum(length * excess for length, excess in chance) / length_s
    # its standard error: the untouched steps' excesses, each with its length's weight
    chance_se_s = (sum((length * (excess - by_chance_s)) ** 2 for length, excess in chance)
                   ** 0.5 / length_s)
    span_s = ends_s[-1] - ends_s[first - 1]
    delay_s = sum(touched) - len(touched) * by_chance_s + whole_s
    variance = (len(touched) * statistics.variance(touched) if len(touched) > 1 else 0.0) \
        + (len(touched) * chance_se_s) ** 2
    return {"delay_pct": 100 * delay_s / span_s, "interval_pct": 200 * variance ** 0.5 / span_s,
            "cpu_pct": 100 * sum(busy_s[first:]) / span_s, "touched": len(touched),
            "uncompared_cpu_pct": 100 * whole_s / span_s, "by_chance_us": 1e6 * by_chance_s,
            "held": sum(held[first:]), "held_touched": held_touched,
            "held_touched_expected": free_touched / free_s * held_s if free_s else 0.0}


def poisson_above_chance(observed: int, expected: float) -> bool:
    """Whether ``observed`` events are more than a Poisson count of mean ``expected`` gives
    (one-sided, at 5%)."""
    below = sum(math.exp(-expected) * expected ** k / math.factorial(k) for k in range(observed))
    return observed > 0 and 1 - below < 0.05


def step_cost(ends_s: list[float], skip: Iterable[int] = ()) -> dict[str, float]:
    """The metered steps' cost from the ends of ABBA steps (steps 1 and 2 of every 4
    metered): per group of four after the first tenth, the metered pair's mean step less the
    bare pair's; their mean, twice its standard error, and the bare steps' mean. A group that
    holds a step of ``skip`` (one that took an epoch's first batch) is left out, and one that
    holds a step over ``DISTURBED`` times the median step (``disturbed``; of those steps,
    ``disturbed_metered`` were metered and ``disturbed_bare`` bare)."""
    step_s = [b - a for a, b in itertools.pairwise(ends_s)]  # step_s[i - 1]: step i (i >= 1)
    first = max(4, len(ends_s) // 10 // 4 * 4)  # about the first tenth, in whole groups
    left_out = set(skip)
    limit_s = DISTURBED * statistics.median(step_s[first - 1:])
    costs, bares = [], []
    skipped = disturbed = disturbed_metered = disturbed_bare = 0
    for k in range(first, len(ends_s) - 3, 4):
        if left_out.intersection(range(k, k + 4)):
            skipped += 1
            continue
        d0, d1, d2, d3 = step_s[k - 1:k + 3]
        if max(d0, d1, d2, d3) > limit_s:
            disturbed += 1
            disturbed_metered += (d1 > limit_s) + (d2 > limit_s)
            disturbed_bare += (d0 > limit_s) + (d3 > limit_s)
            continue
        costs.append((d1 + d2 - d0 - d3) / 2)
        bares.append((d0 + d3) / 2)
    return {"bare_s": statistics.fmean(bares), "cost_s": statistics.fmean(costs),
            "interval_s": 2 * statistics.stdev(costs) / len(costs) ** 0.5, "groups": len(costs),
            "skipped": skipped, "disturbed": disturbed, "disturbed_metered": disturbed_metered,
            "disturbed_bare": disturbed_bare}


def more_than_chance(metered: int, bare: int) -> bool:
    """Whether ``metered`` of ``metered + bare`` disturbed steps is more than a fair coin
    gives (one-sided binomial test at 5%): the Meter's steps held up more often."""
    n = metered + bare
    tail = sum(math.comb(n, k) for k in range(metered, n + 1)) / 2 ** n
    return n > 0 and tail < 0.05


def weighted_mean(values: list[float], weights: list[float]) -> float:
    return sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)


# Student's t, its two-sided 95% point, by degrees of freedom: the spread between a few
# processes is itself a rough estimate (two from three processes), and twice its standard
# error would understate the interval (by 2.2 times with three processes). Between two
# entries, the lower one's (a wider interval); from 60 on, 2.0.
T_95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.0}


def t_95(degrees: int) -> float:
    """Student's t two-sided 95% point for ``degrees`` (at least 1) degrees of freedom."""
    return T_95[max(d for d in T_95 if d <= degrees)]


def pooled(values: list[float], intervals: list[float], weights: list[float]
           ) -> dict[str, float]:
    """Per-process estimates (each with its interval, twice its standard error: hundreds of
    groups each) as one: their mean weighted by ``weights`` (a process's groups or span), and
    the larger of two intervals, twice the standard error of the processes' own intervals,
    and the spread between the processes' estimates (their standard deviation over the square
    root of their number) times Student's t for as many processes less one (:func:`t_95`):
    where processes differ beyond their own intervals, the spread sets the interval."""
    total = sum(weights)
    mean = weighted_mean(values, weights)
    within = sum((w * i / 2) ** 2 for w, i in zip(weights, intervals, strict=True)) ** 0.5 / total
    between = (t_95(len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
               if len(values) > 1 else 0.0)
    return {"mean": mean, "interval": max(2 * within, between), "within": 2 * within,
            "between": between}
