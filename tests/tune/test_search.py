"""The tuner against datasets whose right answer is known, on whatever machine runs them.

Sleeping samples make the truth exact whatever the load: a batch of 16 samples of 10 ms takes
160 ms in a worker, so a 60 ms step needs 3 workers (53 ms a batch), perhaps 4 on a busy
machine, and never 2 (80 ms a batch: the step waits 20 ms of 80) — more workers than this
2-core machine has, because sleeping workers leave the cores free. The step is long enough
that handing a batch over from a worker (1–4 ms on this VM under load) stays well under 10%.
"""

from __future__ import annotations

import math
import os
import time

import pytest

from trainpace.errors import ConfigError
from trainpace.tune import TARGET_WAIT_PCT, tune_loader
from tune.helpers import children, loop_wait_pct
from tune.loaders import Busy, Sleepy

CORES = len(os.sched_getaffinity(0))


@pytest.mark.slow
def test_io_bound_needs_more_workers_than_cores_and_the_loop_agrees():
    dataset = Sleepy(sample_s=0.010)
    budget_s = 40.0
    t0 = time.perf_counter()
    result = tune_loader(dataset, batch_size=16, step_s=0.060, budget_s=budget_s)
    elapsed = time.perf_counter() - t0
    assert elapsed < budget_s + 5  # the budget holds (measured here, not by the tuner)
    assert result.elapsed_s <= elapsed
    assert result.reachable is True
    assert result.bound == "io"
    assert result.recommended.num_workers in (3, 4)
    assert result.recommended.persistent_workers is True
    assert result.wait_pct is not None
    assert result.wait_pct < TARGET_WAIT_PCT
    tried = {t.setting.num_workers for t in result.trials}
    assert {0, 1, 2, 4} <= tried  # doubled from none
    two = [t for t in result.trials if t.setting.num_workers == 2 and t.setting.prefetch_factor == 2]
    assert two[0].wait_pct is not None
    assert two[0].wait_pct > TARGET_WAIT_PCT
    assert result.probe.sample_s >= 0.010
    assert result.probe.cpu_share < 0.5
    # the recommendation in an independent training loop
    measured = loop_wait_pct(dataset, batch_size=16, step_s=0.060,
                             **result.recommended.kwargs())
    assert measured < TARGET_WAIT_PCT
    assert "num_workers=" in result.code
    assert children() == []


@pytest.mark.slow
def test_cpu_bound_stops_at_the_cores_and_says_unreachable():
    # 16 samples of 1 ms CPU: 16 ms of CPU per batch; a step that asks for two cores more
    # than the machine has cannot be fed, however many workers.
    dataset = Busy(sample_s=0.001)
    step_s = 0.016 / (CORES + 2)
    result = tune_loader(dataset, batch_size=16, step_s=step_s, budget_s=20)
    assert result.reachable is False
    assert result.bound == "cpu"
    assert max(t.setting.num_workers for t in result.trials) <= CORES
    assert result.wait_pct is not None
    assert result.wait_pct > TARGET_WAIT_PCT
    assert "no setting tried brings the wait under 10%" in result.verdict
    assert any("CPU work" in line and "cores" in line for line in result.advice)
    assert result.probe.cpu_share > 0.5
    assert children() == []


@pytest.mark.slow
def test_cpu_bound_reachable_with_at_most_the_cores():
    # 8 ms of CPU per batch against a 64 ms step: one worker delivers one in time, even when
    # other processes leave it an eighth of a core.
    result = tune_loader(Busy(sample_s=0.001), batch_size=8, step_s=0.064, budget_s=20)
    assert result.bound == "cpu"
    assert max(t.setting.num_workers for t in result.trials) <= CORES
    if result.reachable:
        assert 1 <= result.recommended.num_workers <= CORES
    else:  # other engineers' jobs left less than that: the tuner must say so, with the share
        assert any(line.startswith("the machine is busy: a sample waited")
                   for line in result.advice)


def test_no_workers_when_loading_is_cheap():
    result = tune_loader(Sleepy(sample_s=0.0), batch_size=4, step_s=0.030, budget_s=10)
    assert result.recommended.num_workers == 0
    assert result.reachable is True
    assert len(result.trials) == 1
    assert result.code == "DataLoader(dataset, batch_size=4, num_workers=0, pin_memory=False)"


@pytest.mark.slow
def test_without_a_step_it_finds_the_fastest_loading():
    result = tune_loader(Sleepy(sample_s=0.002), batch_size=8, budget_s=12)
    assert result.reachable is None
    assert result.wait_pct is None
    assert result.recommended.num_workers >= 2
    fastest = max(t.batches_per_s for t in result.trials)
    chosen = [t for t in result.trials if t.setting == result.recommended]
    assert chosen[0].batches_per_s >= 0.9 * fastest
    assert "no step time given" in result.verdict


def test_a_tight_budget_stops_the_search():
    t0 = time.perf_counter()
    result = tune_loader(Sleepy(sample_s=0.02), batch_size=16, step_s=0.005, budget_s=4)
    elapsed = time.perf_counter() - t0
    assert elapsed < 4 + 5
    assert result.reachable is False
    assert any("time budget" in line for line in result.advice)


@pytest.mark.parametrize(("key", "kwargs"), [
    ("budget_s", {"budget_s": 0}),
    ("budget_s", {"budget_s": math.inf}),
    ("step_s", {"step_s": -1.0}),
    ("memory_budget_gb", {"memory_budget_gb": 0.0}),
    ("batch_size", {"batch_size": 0}),
])
def test_bad_settings_name_the_key(key, kwargs):
    with pytest.raises(ConfigError, match=key):
        tune_loader(Sleepy(), **kwargs)


def test_result_json_has_the_contract_keys():
    result = tune_loader(Sleepy(sample_s=0.0), batch_size=2, step_s=0.02, budget_s=5)
    data = result.to_dict()
    assert set(data["recommended"]) == {"num_workers", "prefetch_factor", "pin_memory",
                                        "persistent_workers"}
    for key, kind in (("wait_pct", float), ("reachable", bool), ("sample_s", float),
                      ("batch_s", float), ("trials", list), ("verdict", str)):
        assert isinstance(data[key], kind), key
    assert data["trials"][0]["setting"]["num_workers"] == 0


@pytest.mark.slow
def test_the_memory_budget_caps_the_workers():
    # Each worker holds ~10 MB of its own (measured, unique memory); 3 are needed (see the
    # top), a budget of 25 MB holds at most 2 of them.
    budget_gb = 0.025
    result = tune_loader(Sleepy(sample_s=0.005), batch_size=16, step_s=0.030, budget_s=30,
                         memory_budget_gb=budget_gb)
    chosen = [t for t in result.trials if t.setting == result.recommended]
    assert chosen[0].memory_gb is not None
    assert chosen[0].memory_gb <= budget_gb
    assert result.recommended.num_workers <= 2
    assert result.reachable is False
    assert any("the memory budget (0.025 GB)" in line for line in result.advice)
    assert children() == []


@pytest.mark.slow
def test_an_iterable_dataset_is_tuned_too():
    from tune.loaders import Stream

    result = tune_loader(Stream(sample_s=0.002), batch_size=8, step_s=0.030, budget_s=10)
    assert result.probe.samples == 8
    assert result.probe.sample_s >= 0.002
    assert result.reachable is True
    assert result.recommended.num_workers >= 1
    assert children() == []


def test_a_budget_too_short_for_one_batch_says_how_long_to_give():
    with pytest.raises(ConfigError, match=r"budget_s must leave time to load a few batches: "
                                          r"one takes 0\.\d+ s in one process"):
        tune_loader(Sleepy(sample_s=0.03), batch_size=16, step_s=0.01, budget_s=1)
    assert children() == []
