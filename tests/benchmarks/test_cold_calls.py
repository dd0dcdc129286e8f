"""The cold-calls benchmark's table (``benchmarks/cold_calls.py``): each call's cost beyond the
bare loop's, and its share of the step, from medians whose values are known."""

from __future__ import annotations

from typing import Any

import pytest
from tests.benchmarks.loading import benchmark_module

cold_calls: Any = benchmark_module("cold_calls")


def test_each_call_is_its_median_less_the_bare_loops_and_the_total_adds_them():
    medians = cold_calls.medians_us({"fetch": [3000, 1000, 2000], "enter": [4000],
                                     "observe": [], "exit": [6000, 8000]})
    assert medians == {"fetch": 2.0, "enter": 4.0, "exit": 7.0}  # no sample: left out
    metered = {"fetch": 20.0, "enter": 5.0, "observe": 22.0, "exit": 14.0}
    bare = {"fetch": 2.0, "enter": 4.0, "exit": 2.0}  # the bare loop observes nothing
    rows = cold_calls.cost_rows(metered, bare, step_ms=10.0)
    assert [(r["call"], r["extra_us"], r["of_step_pct"]) for r in rows] == [
        ("fetch", 18.0, 0.18), ("enter", 1.0, 0.01), ("observe", 22.0, 0.22),
        ("exit", 12.0, 0.12), ("per step", 53.0, 0.53)]
    assert (rows[-1]["metered_us"], rows[-1]["bare_us"]) == (61.0, 8.0)


def test_too_few_steps_is_refused_with_the_least_that_works(capsys):
    with pytest.raises(SystemExit) as exited:
        cold_calls.main(["--steps", "60"])
    assert exited.value.code == 2
    assert "--steps: 60 leaves too few steps after the warm-up; use at least 82" in \
        capsys.readouterr().err
