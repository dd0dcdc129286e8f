"""Steps slowed by other processes are not warm-up: injected step times and CPU readings."""

import subprocess
import sys

import numpy as np
import pytest

from trainpace.measure.contention import crowded_readings, host_columns, slowed_by_others
from trainpace.measure.summarize import summarize, warmup_steps
from trainpace.series import StepSeries

CORES = 2
FREE = {"system_cpu_pct": 100.0, "process_cpu_pct": 195.0}  # this process has the machine
CROWDED = {"system_cpu_pct": 100.0, "process_cpu_pct": 80.0}  # hogs took 60% of it


def run(own_warmup_s, hog_step_s, hog_steps, free_step_s, free_steps):
    """Step times: the process's own warm-up, then steps under hogs, then free steps; and a
    reading every 0.1 s saying which was which (the warm-up keeps its share: its own work)."""
    step_s = np.array(own_warmup_s + [hog_step_s] * hog_steps + [free_step_s] * free_steps)
    end_s = np.cumsum(step_s)
    hogs = (sum(own_warmup_s), sum(own_warmup_s) + hog_step_s * hog_steps)
    rows = []
    for t in np.arange(0.1, end_s[-1] + 0.2, 0.1):
        under_hogs = hogs[0] < t - 0.05 <= hogs[1]
        rows.append({"t_s": float(t), "host": dict(CROWDED if under_hogs else FREE)})
    return step_s, end_s, host_columns(rows)


def test_hogs_in_the_first_seconds_are_not_warm_up():
    step_s, end_s, columns = run([0.5, 0.3, 0.2], 0.05, 100, 0.02, 200)
    assert warmup_steps(step_s, "auto") == 103  # the step times alone: hogs look like warm-up
    slowed = slowed_by_others(step_s, end_s, columns, CORES)
    assert slowed is not None
    assert np.flatnonzero(slowed).tolist() == list(range(3, 103))
    assert warmup_steps(step_s, "auto", slowed) == 3


def test_a_machine_loaded_all_run_long_singles_out_no_step():
    step_s = np.array([0.5, 0.3, 0.2] + [0.05] * 300)
    end_s = np.cumsum(step_s)
    rows = [{"t_s": float(t), **CROWDED} for t in np.arange(0.1, end_s[-1] + 0.2, 0.1)]
    slowed = slowed_by_others(step_s, end_s, host_columns(rows), CORES)
    assert slowed is not None and not slowed.any()  # the process's usual share is this one
    assert warmup_steps(step_s, "auto", slowed) == 3


def test_slow_steps_that_keep_their_cpu_share_are_warm_up():
    # the first 30 steps are slow while other processes are busy too, but this process keeps
    # its share: its own warm-up, not the others'
    step_s = np.array([0.1] * 30 + [0.02] * 200)
    end_s = np.cumsum(step_s)
    rows = [{"t_s": float(t), "system_cpu_pct": 100.0,
             "process_cpu_pct": 150.0 if t <= 3.0 else 195.0}
            for t in np.arange(0.1, end_s[-1] + 0.2, 0.1)]
    slowed = slowed_by_others(step_s, end_s, host_columns(rows), CORES)
    assert slowed is not None and not slowed.any()  # 75% of the machine is over 0.7 × 97.5%
    assert warmup_steps(step_s, "auto", slowed) == 30


def test_no_cpu_readings_tell_nothing():
    step_s = np.array([0.1] * 10)
    end_s = np.cumsum(step_s)
    assert slowed_by_others(step_s, end_s, host_columns([]), CORES) is None
    rows = [{"t_s": 0.5, "host": {"system_cpu_pct": None, "process_cpu_pct": 50.0}}]
    assert slowed_by_others(step_s, end_s, host_columns(rows), CORES) is None
    assert slowed_by_others(step_s, end_s, host_columns([{"t_s": 0.5, **CROWDED}]), None) is None


def test_a_step_no_reading_covers_yet_is_not_slowed():
    columns = host_columns([{"t_s": 0.1, **FREE}, {"t_s": 0.2, **CROWDED}])
    assert crowded_readings(columns, CORES).tolist() == [False, True]
    slowed = slowed_by_others(np.array([0.1, 0.1, 0.1]), np.array([0.1, 0.2, 0.3]), columns,
                              CORES)
    assert slowed.tolist() == [False, True, False]


def test_the_summary_gives_the_whole_measured_run_and_the_steady_span():
    step_s, end_s, columns = run([0.5, 0.3, 0.2], 0.05, 100, 0.02, 200)
    records = [{"step": i + 1, "t_s": float(end_s[i]), "step_s": float(s), "wait_s": 0.0,
                "samples": 10} for i, s in enumerate(step_s)]
    series = StepSeries.from_records(records)
    slowed = slowed_by_others(step_s, end_s, columns, CORES)
    s = summarize(series, warmup="auto", slowed=slowed)
    assert (s.steps.warmup, s.steps.measured, s.steps.slowed_by_others) == (3, 300, 100)
    # whole measured run: 300 steps of 10 samples in 100·0.05 + 200·0.02 = 9 s
    assert s.throughput.samples_per_s == pytest.approx(3000 / 9.0)
    # steady span: the 200 free steps, 2000 samples in 4 s
    assert s.throughput.steady_samples_per_s == pytest.approx(500.0)
    assert s.throughput.steady_tokens_per_s is None  # no tokens counted
    unknown = summarize(series, warmup="auto")
    assert unknown.steps.slowed_by_others is None
    assert unknown.throughput.steady_samples_per_s is None
    assert unknown.steps.warmup == 103


def test_judging_readings_imports_nothing_on_the_writer_thread():
    # numpy's percentile and median import numpy.ma (12 ms, holding the GIL) on their first
    # call: on the writer thread mid-run that lands on a training step.
    code = (
        "import sys, numpy as np\n"
        "from trainpace.measure.contention import crowded_readings\n"
        "columns = {'system_cpu_pct': np.array([90.0, 95.0]), 'process_cpu_pct': np.array([60.0, 20.0])}\n"
        "crowded_readings(columns, 2)\n"
        "print('numpy.ma' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# One of two ranks of a job on a 2-core machine (each reading: system %, this process %, the
# job's % on this host: this rank and its sibling rank).
ALONE = {"system_cpu_pct": 100.0, "process_cpu_pct": 195.0, "job_cpu_pct": 200.0}
BOTH_RANKS = {"system_cpu_pct": 100.0, "process_cpu_pct": 100.0, "job_cpu_pct": 200.0}
UNRELATED = {"system_cpu_pct": 100.0, "process_cpu_pct": 100.0, "job_cpu_pct": 100.0}


def test_a_jobs_own_ranks_are_not_other_processes():
    # this rank usually had the machine (its sibling waited); then each rank had 50% of it:
    # the job's own load, not others'
    rows = [{"t_s": 0.1 * (i + 1), **ALONE} for i in range(9)]
    assert crowded_readings(host_columns([*rows, {"t_s": 1.0, **BOTH_RANKS}]),
                            CORES).tolist() == [False] * 10
    # the same 50% while an unrelated process takes the other half: others took the CPU
    assert crowded_readings(host_columns([*rows, {"t_s": 1.0, **UNRELATED}]),
                            CORES).tolist() == [False] * 9 + [True]
    # without the job column (a single process's readings) the sibling counted as others
    single = [{k: v for k, v in row.items() if k != "job_cpu_pct"}
              for row in [*rows, {"t_s": 1.0, **BOTH_RANKS}]]
    assert crowded_readings(host_columns(single), CORES).tolist() == [False] * 9 + [True]


def test_steps_a_sibling_rank_slowed_are_the_jobs_own_and_an_unrelated_hogs_are_not():
    step_s = np.array([0.5, 0.3, 0.2] + [0.05] * 100 + [0.02] * 200)
    end_s = np.cumsum(step_s)

    def readings(then):  # ``then`` from 1 s to 6 s (steps 4–103), ALONE otherwise
        return host_columns([{"t_s": float(t), "host": then if 1.0 < t - 0.05 <= 6.0 else ALONE}
                             for t in np.arange(0.1, end_s[-1] + 0.2, 0.1)])

    slowed = slowed_by_others(step_s, end_s, readings(BOTH_RANKS), CORES)
    assert slowed is not None and not slowed.any()
    slowed = slowed_by_others(step_s, end_s, readings(UNRELATED), CORES)
    assert np.flatnonzero(slowed).tolist() == list(range(3, 103))
    assert warmup_steps(step_s, "auto", slowed) == 3


def test_a_rows_host_values_are_its_columns_nan_where_unknown():
    from trainpace.measure.contention import host_values

    nested = {"t_s": 1.5, "host": {"system_cpu_pct": 90, "process_cpu_pct": None}}
    flat = {"t_s": 2.0, "system_cpu_pct": float("inf"), "process_cpu_pct": 150.0,
            "job_cpu_pct": True}  # a bool is no reading
    values = [host_values(row) for row in (nested, flat, {"host": {}}, {"t_s": "x"})]
    assert values[2:] == [None, None]  # no time: no reading
    assert np.array(values[:2], dtype=float) == pytest.approx(np.array(
        [[1.5, 90.0, np.nan, np.nan], [2.0, np.nan, 150.0, np.nan]]), nan_ok=True)
    columns = host_columns([nested, {"host": {}}, flat])
    np.testing.assert_array_equal(
        np.array([columns[name] for name in ("t_s", "process_cpu_pct")]),
        [[1.5, 2.0], [np.nan, 150.0]])
    assert {len(column) for column in host_columns([]).values()} == {0}
