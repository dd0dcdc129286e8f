"""The writer side's run state: warm-up and the steady span from the sampler rows it kept."""

import numpy as np
import pytest
import torch

from trainpace.config import MeterConfig
from trainpace.meter.state import RunState
from trainpace.series import StepSeries


def test_steps_other_processes_slowed_are_not_warm_up_and_leave_the_steady_span():
    # 3 steps of the process's own warm-up, 100 steps at 0.05 s while hogs held the CPU
    # (this process had 40% of the 2 cores' machine, 97.5% usually), 200 free steps at 0.02 s
    step_s = [0.5, 0.3, 0.2] + [0.05] * 100 + [0.02] * 200
    end_s = np.cumsum(step_s)
    state = RunState(MeterConfig(), torch.device("cpu"), "r", cpu_count=2)
    state.series.append(StepSeries.from_records(
        [{"step": i + 1, "t_s": float(end_s[i]), "step_s": s, "wait_s": 0.0, "samples": 10}
         for i, s in enumerate(step_s)]))
    state.keep_system_rows([
        {"t_s": float(t), "host": {"system_cpu_pct": 100.0,
                                   "process_cpu_pct": 80.0 if 1.0 < t - 0.05 <= 6.0 else 195.0}}
        for t in np.arange(0.1, end_s[-1] + 0.2, 0.1)])
    summary = state.summary(final=True, end_s=float(end_s[-1]), t0=0.0, clock="host",
                            tokens_counted=None, vitals=None)
    assert (summary.steps.warmup, summary.steps.slowed_by_others) == (3, 100)
    assert summary.throughput.samples_per_s == pytest.approx(3000 / 9.0)
    assert summary.throughput.steady_samples_per_s == pytest.approx(500.0)


def test_window_ends_are_kept_in_order_once_each_and_dropped_beyond_the_bound(monkeypatch):
    state = RunState(MeterConfig(), torch.device("cpu"), "r", cpu_count=2)
    for step in (7, 7, 14, 3, 21):  # a repeat or an older step is not a new end
        state.window_ended(step)
    assert state.window_ends == [7, 14, 21]
    monkeypatch.setattr("trainpace.meter.state.WINDOW_ENDS_KEPT", 3)
    state.window_ended(28)  # one more than kept: not known any more, not a wrong list
    assert state.window_ends is None
    state.window_ended(35)
    assert state.window_ends is None


def test_the_kept_cpu_readings_are_the_rows_host_columns():
    from trainpace.measure.contention import host_columns

    state = RunState(MeterConfig(), torch.device("cpu"), "r", cpu_count=2)
    rows = [{"t_s": 0.5, "host": {"system_cpu_pct": 100.0, "process_cpu_pct": 80.0}},
            {"host": {"system_cpu_pct": 50.0}},  # no time: not a reading
            {"t_s": 1.0, "host": {"system_cpu_pct": 60.0, "job_cpu_pct": 120.0}}]
    state.keep_system_rows(rows[:1])
    state.keep_system_rows(rows[1:])
    expected = host_columns(rows)
    assert list(state._cpu_rows) == list(expected)
    for name, column in state._cpu_rows.items():
        np.testing.assert_array_equal(np.array(column), expected[name])
    assert [row["t_s"] for row in state.system_rows] == [0.5, None, 1.0]
