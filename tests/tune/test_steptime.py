"""The step to simulate, from a run folder: the median step outside the loader."""

from __future__ import annotations

import pytest

from report.folders import steps, write_run
from trainpace.errors import RunFolderError
from trainpace.summary import Data, Summary, Time
from trainpace.tune.steptime import step_from_run


def test_median_of_measured_steps_without_their_wait(tmp_path):
    records = steps(9, step_s=0.050, samples=8, wait_s=0.020)
    records[0].update(step_s=5.0)                   # warm-up (Meter(warmup=1)): left out
    records[1].update(step_s=0.200, wait_s=0.020)   # one slow step: the median ignores it
    run = write_run(tmp_path / "r", records, meta={"config": {"warmup": 1}})
    step_s, how = step_from_run(run)
    assert step_s == pytest.approx(0.030)
    assert "median of 8 measured steps, data wait excluded" in how


def test_falls_back_to_the_summary(tmp_path):
    summary = Summary(time=Time(step_s_median=0.1), data=Data(wait_s_per_step=0.04))
    run = write_run(tmp_path / "r", [], summary=summary)
    step_s, how = step_from_run(run)
    assert step_s == pytest.approx(0.06)
    assert "summary median step" in how


def test_no_steps_is_an_error_naming_the_fix(tmp_path):
    run = write_run(tmp_path / "r", [])
    with pytest.raises(RunFolderError, match=r"no measured step times .* pass --step-ms"):
        step_from_run(run)


def test_not_a_run_folder(tmp_path):
    with pytest.raises(RunFolderError, match="no such folder"):
        step_from_run(tmp_path / "nothing")


def test_the_runs_device_says_how_its_step_is_simulated(tmp_path):
    from trainpace.tune.steptime import step_device_of_run

    records = steps(3, step_s=0.05, samples=8, wait_s=0.0)
    assert step_device_of_run(write_run(tmp_path / "cpu", records,
                                        meta={"device": {"kind": "cpu"}})) == "cpu"
    assert step_device_of_run(write_run(tmp_path / "gpu", records,
                                        meta={"device": {"kind": "cuda", "index": 0}})) == "cuda"
    assert step_device_of_run(write_run(tmp_path / "old", records, meta={})) is None
