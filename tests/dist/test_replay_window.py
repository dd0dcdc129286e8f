"""The window a job's rank folders are replayed in (a short job: enough windows to score)."""

from pathlib import Path

import pytest

from trainpace.dist.folders import MIN_WINDOWS, REPLAY_WINDOWS, replay_window
from trainpace.runlog import RunData
from trainpace.series import StepSeries


def steps(first, n, step_s, wait_s, samples=8):
    return [{"step": s, "step_s": step_s, "wait_s": wait_s, "samples": samples}
            for s in range(first, first + n)]


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
