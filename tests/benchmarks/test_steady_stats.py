"""The steady measures' statistics (``benchmarks/steady_stats.py``) on made-up steps of known
cost."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
from tests.benchmarks.loading import benchmark_module

steady_stats: Any = benchmark_module("steady_stats")
thread_delay = steady_stats.thread_delay


def run(steps_s: list[float], busy_s: dict[int, float]) -> tuple[list[float], list[float]]:
    """Step ends and the threads' CPU at each, from each step's time and the threads' CPU
    in the steps they ran in (step i ends at ends[i])."""
    ends, cpu = [0.0], [0.0]
    for i, step_s in enumerate(steps_s, start=1):
        ends.append(ends[-1] + step_s)
        cpu.append(cpu[-1] + busy_s.get(i, 0.0))
    return ends, cpu


def test_the_delay_is_what_the_touched_steps_took_beyond_their_neighbours() -> None:
    steps = [0.010] * 200
    busy = {50: 0.0002, 90: 0.0003, 150: 0.0001}
    for i, extra_s in ((50, 0.001), (90, 0.002), (150, 0.0)):
        steps[i - 1] += extra_s
    ends, cpu = run(steps, busy)
    delay = thread_delay(ends, cpu)
    span_s = ends[-1] - ends[200 // 10 - 1]  # after the first tenth
    assert delay["touched"] == 3
    assert delay["by_chance_us"] == pytest.approx(0.0, abs=1e-9)  # untouched steps alike
    assert delay["delay_pct"] == pytest.approx(100 * 0.003 / span_s)
    assert delay["cpu_pct"] == pytest.approx(100 * 0.0006 / span_s)
    assert delay["uncompared_cpu_pct"] == 0.0


def test_a_touched_step_that_cannot_be_compared_counts_the_threads_cpu_in_full() -> None:
    steps = [0.010] * 100
    steps[59] = 0.200  # an epoch's first step: waits for the loader's workers
    ends, cpu = run(steps, {60: 0.004, 70: 0.001})
    delay = thread_delay(ends, cpu, skip=[60])
    span_s = ends[-1] - ends[100 // 10 - 1]
    assert delay["touched"] == 1  # step 70; step 60 is left out of the comparison
    assert delay["uncompared_cpu_pct"] == pytest.approx(100 * 0.004 / span_s)
    assert delay["delay_pct"] == pytest.approx(100 * 0.004 / span_s)  # step 70: no excess


def test_a_step_is_compared_only_with_untouched_steps_on_both_sides() -> None:
    steps = [0.010] * 100
    busy = dict.fromkeys(range(80, 101), 0.0001)  # touched from step 80 to the end
    ends, cpu = run(steps, busy)
    delay = thread_delay(ends, cpu)
    span_s = ends[-1] - ends[100 // 10 - 1]
    assert delay["touched"] == 0
    assert delay["uncompared_cpu_pct"] == pytest.approx(100 * 21 * 0.0001 / span_s)


def wakes(seed: int, cost_s: float) -> tuple[list[float], list[float], float]:
    """Steps of 10 ms with a long tail; a thread wakes every 0.33 s (at times of its own)
    and adds ``cost_s`` to the step it wakes in: the step ends, the CPU, the true delay %."""
    rng = random.Random(seed)
    ends, cpu = [0.0], [0.0]
    next_wake_s, touched_after_first_tenth = 0.2, 0
    for i in range(20_000):
        step_s = 0.010 * rng.lognormvariate(0, 0.3)
        busy_s = 0.0
        if ends[-1] + step_s > next_wake_s:
            step_s += cost_s
            busy_s, next_wake_s = 1e-4, next_wake_s + 0.33
            touched_after_first_tenth += i + 1 >= 2_000
        ends.append(ends[-1] + step_s)
        cpu.append(cpu[-1] + busy_s)
    span_s = ends[-1] - ends[len(ends) // 10 - 1]
    return ends, cpu, 100 * cost_s * touched_after_first_tenth / span_s


def _by_chance_us(sigma: float, held: float) -> float:
    """What picking 10 ms lognormal steps (``sigma``) by a point in time gives beyond their
    neighbours' mean, among the steps under ``held`` times the median (the others are held
    up, no one's neighbour): E[L^2] / E[L] - E[L] over those, from E[e^(k sigma Z); Z < z] =
    e^((k sigma)^2 / 2) Phi(z - k sigma)."""
    z = math.log(held) / sigma
    phi = statistics.NormalDist().cdf
    first = math.exp(sigma ** 2 / 2) * phi(z - sigma)
    second = math.exp(2 * sigma ** 2) * phi(z - 2 * sigma)
    return 1e4 * (second / first - first / phi(z))


# about 860 µs (without the held-up steps left out it would be 10 ms × (e^0.09 - 1), 940 µs)
BY_CHANCE_US = _by_chance_us(0.3, steady_stats.HELD_UP)


@pytest.mark.parametrize("cost_s", [0.0, 0.001])
def test_long_steps_picked_by_chance_are_not_counted_as_the_threads_cost(cost_s: float) -> None:
    # A step is likelier to hold a wake the longer it is: without the correction the touched
    # steps' excess alone would read about 0.3% on a thread that cost nothing.
    for seed in range(3):
        ends, cpu, truth_pct = wakes(seed, cost_s)
        delay = thread_delay(ends, cpu)
        assert delay["by_chance_us"] == pytest.approx(BY_CHANCE_US, rel=0.1)
        assert abs(delay["delay_pct"] - truth_pct) <= delay["interval_pct"]
        assert delay["interval_pct"] < 0.15


pooled = steady_stats.pooled
t_95 = steady_stats.t_95


def test_processes_that_differ_beyond_their_intervals_widen_the_pooled_interval() -> None:
    # two processes of equal weight, +1% ± 0.2% and +3% ± 0.2%: the spread between them
    # (standard deviation 1.414, over the square root of 2: a standard error of 1.0, times
    # Student's t for one degree of freedom, 12.71) sets the interval, not their own (0.1
    # each: a standard error of 0.0707 for the mean)
    out = pooled([1.0, 3.0], [0.2, 0.2], [100.0, 100.0])
    assert out["mean"] == pytest.approx(2.0)
    assert out["between"] == pytest.approx(12.71)
    assert out["within"] == pytest.approx(0.2 / 2 ** 0.5)
    assert out["interval"] == pytest.approx(12.71)
    # six processes: 1, 2, 3 twice over (standard deviation 0.8944, standard error 0.3651,
    # t for five degrees of freedom 2.57)
    six = pooled([1.0, 2.0, 3.0] * 2, [0.2] * 6, [100.0] * 6)
    assert six["between"] == pytest.approx(2.57 * 0.8944272 / 6 ** 0.5)


def test_students_t_takes_the_lower_entry_between_two_of_its_table() -> None:
    assert (t_95(1), t_95(2), t_95(11), t_95(59), t_95(500)) == (12.71, 4.30, 2.23, 2.04, 2.0)


def test_processes_that_agree_are_pooled_by_their_weights_and_own_intervals() -> None:
    # equal estimates: no spread; the weights (a process's groups) weigh the mean and its
    # standard error: (3 * 0.3 + 1 * 0.6) / 4 for the mean's half-width
    out = pooled([0.5, 0.5], [0.6, 1.2], [300.0, 100.0])
    assert out["mean"] == pytest.approx(0.5)
    assert out["between"] == 0.0
    assert out["interval"] == pytest.approx(2 * ((300 * 0.3) ** 2 + (100 * 0.6) ** 2) ** 0.5
                                            / 400)
    one = pooled([0.4], [0.3], [10.0])  # one process: its own estimate
    assert (one["mean"], one["interval"]) == (pytest.approx(0.4), pytest.approx(0.3))


def test_a_group_with_a_step_held_up_by_the_machine_is_left_out_and_counted_by_kind() -> None:
    step_cost = steady_stats.step_cost
    # 40 groups of 10 ms bare and 10.1 ms metered steps; in group 20 a bare step took 40 ms,
    # in group 30 a metered one 50 ms
    steps_s = [10.1e-3 if i % 4 in (1, 2) else 10e-3 for i in range(1, 161)]
    steps_s[80 - 1] = 40e-3  # step 80: place 0 of its group, bare
    steps_s[121 - 1] = 50e-3  # step 121: place 1, metered
    ends_s = [0.0]
    for step_s in steps_s:
        ends_s.append(ends_s[-1] + step_s)
    cost = step_cost(ends_s)
    assert cost["disturbed"] == 2
    assert (cost["disturbed_metered"], cost["disturbed_bare"]) == (1, 1)
    assert cost["cost_s"] == pytest.approx(0.1e-3)
    assert cost["groups"] == 36 - 2  # after the first tenth (groups from step 16 on)


def test_the_meters_steps_held_up_more_often_than_a_coin_allows_is_flagged() -> None:
    more_than_chance = steady_stats.more_than_chance
    assert not more_than_chance(0, 0)
    assert not more_than_chance(7, 5)
    assert not more_than_chance(5, 1)  # 7/64 = 0.109: within chance
    assert more_than_chance(6, 0)  # 1/64
    assert more_than_chance(15, 4)  # 0.0096


def test_a_step_held_up_by_the_machine_counts_the_threads_cpu_in_it_and_is_no_neighbour() -> None:
    # 100 steps of 10 ms; step 50 took 80 ms (held up) and the threads ran 0.2 ms in it; step 60
    # took 80 ms with no thread in it; the threads ran 0.1 ms in step 61, which took 10.5 ms
    steps = [0.010] * 100
    steps[50 - 1] = steps[60 - 1] = 0.080
    steps[61 - 1] = 0.0105
    ends, cpu = run(steps, {50: 0.0002, 61: 0.0001})
    delay = thread_delay(ends, cpu)
    span_s = ends[-1] - ends[100 // 10 - 1]
    assert (delay["held"], delay["held_touched"], delay["touched"]) == (2, 1, 1)
    # step 61 is compared with 58, 59 (before; 60 is held up) and 62, 63: 0.5 ms more
    assert delay["by_chance_us"] == pytest.approx(0.0)
    assert delay["delay_pct"] == pytest.approx(100 * (0.0005 + 0.0002) / span_s)
    assert delay["uncompared_cpu_pct"] == pytest.approx(100 * 0.0002 / span_s)
    # 1 touched step in 0.8005 s of steps not held up: 0.16 s held up holds 0.2 by chance
    free_s = sum(steps[10 - 1:]) - 0.160
    assert delay["held_touched_expected"] == pytest.approx(1 / free_s * 0.160)


def test_threads_in_held_up_steps_more_often_than_their_time_allows_are_flagged() -> None:
    poisson_above_chance = steady_stats.poisson_above_chance
    assert not poisson_above_chance(0, 0.0)
    assert not poisson_above_chance(1, 0.2)  # 1 - e^-0.2 = 0.18
    assert poisson_above_chance(2, 0.2)  # 0.0175
    assert not poisson_above_chance(7, 4.0)  # 0.11
    assert poisson_above_chance(9, 4.0)  # 0.021
