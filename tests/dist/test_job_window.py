"""The job's figures over one window, from hand-made rank records (exact values)."""

import pytest

from trainpace.dist.job_window import job_window
from trainpace.dist.merge import window_record


def record(rank, *, step_s, samples, wait_s=0.0, util=None, temperature=None, tokens=None):
    steps = [{"step": s, "step_s": step_s, "samples": samples, "wait_s": wait_s,
              "tokens": tokens} for s in range(11, 21)]
    return window_record(rank=rank, window=2, steps=steps, t_unix=0.0,
                         figures={"util_pct": util, "temperature_c": temperature})


def test_throughput_is_the_ranks_samples_over_the_slowest_ranks_time():
    records = {0: record(0, step_s=0.010, samples=8, wait_s=0.001, util=90.0, temperature=60.0),
               1: record(1, step_s=0.020, samples=4, wait_s=0.008, util=50.0, temperature=70.0)}
    job = job_window(records, world_size=2, own={"loss": 1.25, "warmup_steps": 3,
                                                  "samples_per_s": 800.0})
    assert job["samples_per_s"] == pytest.approx((80 + 40) / 0.2)  # 600, not 2 × rank 0's 800
    assert job["steps_per_s"] == pytest.approx(10 / 0.2)
    assert job["step_s_median"] == pytest.approx(0.020)  # the slowest rank's
    assert (job["slowest_rank"], job["waiting_rank"]) == (1, 1)
    assert job["wait_pct"] == pytest.approx(40.0)  # the worst: rank 1's 8 ms of 20
    assert job["device_util_pct"] == pytest.approx(70.0)  # the mean over ranks
    assert job["temperature_c"] == 70.0  # the hottest
    assert job["tokens_per_s"] is None  # no rank counted tokens
    assert (job["first_step"], job["last_step"], job["measured_steps"]) == (11, 20, 10)
    assert (job["ranks"], job["world_size"]) == (2, 2)
    assert (job["loss"], job["warmup_steps"]) == (1.25, 3)  # rank 0's own, as they are
    assert job["rank_figures"][0]["samples_per_s"] == pytest.approx(800.0)
    assert job["rank_figures"][1]["samples_per_s"] == pytest.approx(200.0)
    assert job["rank_figures"][1]["wait_pct"] == pytest.approx(40.0)


def test_a_rank_missing_from_the_window_is_counted_out():
    job = job_window({0: record(0, step_s=0.01, samples=8, tokens=100)}, world_size=4)
    assert (job["ranks"], job["world_size"]) == (1, 4)
    assert job["samples_per_s"] == pytest.approx(800.0)
    assert job["tokens_per_s"] == pytest.approx(10_000.0)
    assert "loss" not in job
