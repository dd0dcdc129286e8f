"""The period search: slow steps that recur every N steps, among noise and unrelated stalls."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosis.helpers import ctx, records
from trainpace.diagnosis import anomalies
from trainpace.diagnosis import periodic as period_search
from trainpace.diagnosis.thresholds import Thresholds


def periodic(steps, first=1, last=None, extra=None):
    spikes = {s: (extra or {}).get(s, 1.0) for s in steps}
    return period_search.periodic(spikes, first, last or max(steps), Thresholds())


def test_period_tolerates_one_step_of_jitter():
    assert periodic([10, 20, 31, 40]) == (10, [10, 20, 31, 40])
    assert periodic([10, 20, 35, 40]) is None
    assert periodic([1, 2, 3]) is None


def test_period_survives_unrelated_stalls_and_keeps_one_step_per_cycle():
    assert periodic([10, 20, 27, 30, 40, 50, 60]) == (10, [10, 20, 30, 40, 50, 60])
    # the step after each slow step is slow too (cold caches): one per cycle, the nearest
    assert periodic([10, 11, 20, 21, 30, 31, 40, 41]) == (10, [10, 20, 30, 40])


def test_the_period_that_explains_the_most_time_wins():
    # big stalls every 10 steps, smaller slow steps clustered after each (cold caches)
    slow = [10, 13, 14, 20, 23, 24, 30, 33, 34, 40, 43, 44, 50, 53, 54]
    extra = {s: 0.25 if s % 10 == 0 else 0.015 for s in slow}
    assert periodic(slow, extra=extra) == (10, [10, 20, 30, 40, 50])


def test_noise_between_periodic_stalls_does_not_halve_the_period():
    # stalls every 10 steps; on a loaded machine, slow steps also fall on the 5s in between
    slow = list(range(5, 61, 5))
    extra = {s: 0.25 if s % 10 == 0 else 0.02 for s in slow}
    assert periodic(slow, extra=extra) == (10, [10, 20, 30, 40, 50, 60])


def test_a_period_must_fill_most_of_its_places_in_the_run():
    assert periodic([10, 20, 30], last=200) is None  # 3 of the 20 places every 10 steps
    assert periodic([10, 20, 30, 40, 60, 70, 80, 90, 100], last=100) == (10, [10, 20, 30, 40, 60, 70, 80, 90, 100])


def test_period_search_is_bounded_on_a_noisy_run(monkeypatch):
    # the work is bounded by the number of candidate periods tried, whatever the spikes
    tried = []
    best_residue = period_search._best_residue

    def counted(spikes, period, tolerance):
        tried.append(period)
        return best_residue(spikes, period, tolerance)

    monkeypatch.setattr(period_search, "_best_residue", counted)
    rng = random.Random(0)
    steps = sorted(rng.sample(range(1, 100_000), 3000))
    assert periodic(steps, last=100_000) is None
    assert 0 < len(tried) <= period_search.PERIOD_CANDIDATES * (1 + len(period_search.BIG_SHARES))


@given(period=st.integers(3, 200), offset=st.integers(0, 199), cycles=st.integers(4, 30),
       noise=st.lists(st.tuples(st.integers(1, 6000), st.floats(0.001, 0.05)), max_size=60))
@settings(max_examples=100, deadline=None)
def test_a_periodic_event_is_found_among_random_slow_steps(period, offset, cycles, noise):
    last = period * cycles
    events = dict.fromkeys(range(1 + offset % period, last + 1, period), 0.5)
    spikes = {s: extra for s, extra in noise if s <= last} | events
    found = period_search.periodic(spikes, 1, last, Thresholds())
    assert found is not None
    assert found[0] == period
    assert set(events) <= set(found[1])


def test_slow_steps_scattered_by_noise_are_no_period():
    # a loop with no periodic work on a busy machine: a third of the steps slow at random
    rng = random.Random(3)
    step_s = [0.1 + (rng.uniform(0.06, 0.2) if rng.random() < 0.35 else 0.0) for _ in range(70)]
    outcome = anomalies.step_outliers(ctx(steps=records(step_s)))
    assert all(v.finding.id != "periodic_stall" for v in outcome.verdicts), outcome
    # steps 3+14k on a lattice among as many others, all alike: chance fills its places
    noise = dict.fromkeys((3, 7, 9, 12, 17, 23, 27, 31, 37, 40, 45, 51, 55, 59, 65, 68), 0.1)
    on = [3, 17, 31, 45, 59]
    assert not period_search._stands_out(noise, on, period=14, tolerance=1, first=1, last=70)
    # the same steps, larger than the others: periodic work
    assert period_search._stands_out(noise | dict.fromkeys(on, 0.5), on, 14, 1, 1, 70)
    # alike, but the others are rare: the places are filled beyond chance
    assert period_search._stands_out(dict.fromkeys([*on, 40], 0.1), on, 14, 1, 1, 70)
    # the step after each event is part of it, not evidence against the period
    assert period_search._stands_out(dict.fromkeys([*on, 4, 18, 32], 0.1), on, 14, 1, 1, 70)
    # the real run that was called "periodic every 11 steps": 4 of 5 places, 2 events off
    real = {14: 8.2, 27: 12.4, 28: 0.6, 37: 8.5, 38: 0.25, 47: 8.3, 48: 0.23, 59: 16.5, 60: 83.4}
    assert not period_search._stands_out(real, [14, 37, 47, 59], 11, 1, 6, 60)
    assert periodic(sorted(real), first=6, last=60, extra=real) is None


def test_a_long_noisy_run_is_searched_in_floats():
    # 100,000 steps: a slow step every 20 (a save; one in ten places missed) and scattered
    # noise. The chance that noise fills that many of the lattice's 5,000 places is a binomial
    # tail whose exact integer terms do not fit a float (this raised OverflowError)
    rng = random.Random(3)
    saves = [s for i, s in enumerate(range(20, 100_001, 20)) if i % 10 != 9]
    noise = rng.sample(range(1, 100_001), 400)
    extra = dict.fromkeys(saves, 1.0) | {s: 0.9 for s in noise if s % 20}
    period, on = periodic(sorted(extra), last=100_000, extra=extra)
    assert period == 20 and set(saves) <= set(on)  # a missed place may hold a noisy step
