"""The job's window figures (rank 0's window line under torchrun) and the replay window."""

from pathlib import Path

import pytest

from trainpace.dist.folders import MIN_WINDOWS, REPLAY_WINDOWS, replay_window
from trainpace.dist.merge import Merger, window_record
from trainpace.meter.distributed import job_figures
from trainpace.runlog import RunData
from trainpace.series import StepSeries


def steps(first, n, step_s, wait_s, samples=8):
    return [{"step": s, "step_s": step_s, "wait_s": wait_s, "samples": samples}
            for s in range(first, first + n)]


def record(rank, window, step_s, wait_s, util=None):
    first = (window - 1) * 4 + 1
    return window_record(rank=rank, window=window, steps=steps(first, 4, step_s, wait_s),
                         t_unix=100.0 + window, figures={"util_pct": util})


def test_a_scored_window_gives_the_jobs_figures_once():
    merger = Merger(2)
    merger.add(record(0, 1, 0.010, 0.001, util=40.0))
    assert merger.take_job_windows() == []  # rank 1 has not sent window 1 yet
    merger.add(record(1, 1, 0.020, 0.012, util=60.0))
    [job] = merger.take_job_windows()
    assert job == {
        "window": 1, "last_step": 4, "ranks": 2, "steps": 4,
        "samples_per_s": pytest.approx(64 / 0.080),  # 2 ranks × 4 × 8 samples / rank 1's 80 ms
        "tokens_per_s": None,
        "step_s_median": pytest.approx(0.020), "step_s_p90": pytest.approx(0.020),
        "wait_pct": pytest.approx(60.0), "device_util_pct": pytest.approx(50.0),
        "slowest_rank": 1,
    }
    assert merger.take_job_windows() == []  # taken once


def test_the_line_is_the_jobs_over_rank0s_own_figures():
    merger = Merger(2)
    merger.add(record(0, 1, 0.010, 0.001))
    merger.add(record(1, 1, 0.020, 0.012))
    [job] = merger.take_job_windows()
    own = {"last_step": 4, "samples_per_s": 800.0, "loss": 0.5, "measured_steps": 4,
           "wait_pct": 10.0}
    line = job_figures(job, own)
    assert line["samples_per_s"] == pytest.approx(800.0)  # the job's: Σ samples / slowest
    assert (line["wait_pct"], line["loss"], line["ranks"], line["slowest_rank"]) == (
        pytest.approx(60.0), 0.5, 2, 1)


@pytest.mark.parametrize(("steps_on_disk", "window", "expected"),
                         [(200, 100, 25), (2000, 100, 100), (5, 100, 1), (40, 10, 10),
                          (30, 10, 3), (8, 2, 2)])
def test_a_short_job_is_replayed_in_enough_windows(steps_on_disk, window, expected):
    run = RunData(path=Path("r"), meta={"config": {"window": window}},
                  series=StepSeries.from_records(steps(1, steps_on_disk, 0.01, 0.0)))
    assert replay_window([run]) == expected
    # its own windows when they are enough, else REPLAY_WINDOWS of them (as the steps allow)
    windows = steps_on_disk // expected
    assert windows >= MIN_WINDOWS or windows == min(REPLAY_WINDOWS, steps_on_disk)
