"""Real CPU hogs during the first part of a short run: the steps they slowed are classified
from the shares the sampler recorded, and warm-up does not take them. Asserted on the
classification given the recorded readings (system.jsonl), never on timings, so the verdict
does not depend on how loaded the machine is."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import trainpace
from trainpace.measure.contention import (
    BUSY_CPU_PCT,
    OTHERS_CPU_PCT,
    SHARE_DROP,
    crowded_readings,
    host_columns,
    slowed_by_others,
)
from trainpace.measure.summarize import summary_for_run, warmup_steps
from trainpace.runlog import read_run

HOG = "while True: pass"


def start_hogs(count):
    return [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(count)]


def stop(hogs):
    for hog in hogs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hog.pid, signal.SIGKILL)
        hog.wait()


@pytest.mark.slow
def test_steps_slowed_by_hogs_are_classified_from_the_recorded_shares(tmp_path):
    torch.set_num_threads(1)
    a, b = torch.randn(192, 192), torch.randn(192, 192)
    cores = len(os.sched_getaffinity(0))
    meter = trainpace.Meter(tmp_path / "run", window=50, console=False, report=False,
                            count_flops=False)
    hogs = start_hogs(3 * cores)
    start = time.perf_counter()
    stopped_at = None
    try:
        while True:
            with meter.step(a):
                for _ in range(4):
                    a @ b
            elapsed = time.perf_counter() - start
            if stopped_at is None and elapsed >= 3.0:
                stop(hogs)
                stopped_at = elapsed
            if stopped_at is not None and elapsed >= stopped_at + 3.0:
                break
    finally:
        stop(hogs)
    summary = meter.finish()
    run = read_run(tmp_path / "run")
    columns = host_columns(run.system)
    cpu_count = run.meta["cpu_count"]

    # each reading, judged by hand from its recorded shares
    share = np.minimum(100.0, columns["process_cpu_pct"] / cpu_count)
    known = np.isfinite(share) & np.isfinite(columns["system_cpu_pct"])
    assert known.sum() >= 4, "the sampler recorded too few CPU readings (about one a second)"
    usual = np.percentile(share[known], 90)
    expected = [bool(k and system >= BUSY_CPU_PCT and system - mine >= OTHERS_CPU_PCT
                     and mine <= SHARE_DROP * usual)
                for k, system, mine in zip(known, columns["system_cpu_pct"], share,
                                           strict=True)]
    assert crowded_readings(columns, cpu_count).tolist() == expected

    # each step takes the verdict of the reading that covers its middle
    step_s, end_s = run.series.column("step_s"), run.series.column("t_s")
    slowed = slowed_by_others(step_s, end_s, columns, cpu_count)
    for i in range(len(step_s)):
        covering = int(np.searchsorted(columns["t_s"], end_s[i] - step_s[i] / 2))
        assert slowed[i] == (covering < len(expected) and expected[covering])

    # the summary rebuilt from the run folder (as `trainpace report` does for a killed run):
    # warm-up from the step times with those steps excused, the steady span without them
    (tmp_path / "run" / "summary.json").unlink()
    rebuilt = summary_for_run(read_run(tmp_path / "run"))
    warmup = warmup_steps(step_s, "auto", slowed)
    assert rebuilt.steps.warmup == warmup
    assert rebuilt.steps.slowed_by_others == int(slowed[warmup:].sum())
    steady = np.ones(len(step_s), dtype=bool)
    steady[:warmup] = False
    steady &= ~slowed
    samples = run.series.column("samples")
    assert rebuilt.throughput.steady_samples_per_s == pytest.approx(
        samples[steady].sum() / step_s[steady].sum())
    # the live run judged its steps from the same kind of readings (all of them, not the
    # one a second the file keeps): it says how many it found slowed
    assert summary.steps.slowed_by_others is not None
