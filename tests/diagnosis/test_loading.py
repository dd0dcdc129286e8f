"""The data-loading advice followed: a real loop through a real Meter and DataLoader, the
settings the finding recommends applied, the loop run again — the wait it named is gone.

Sizes are chosen for a loaded 2-core machine: steps of 150–200 ms of compute, so the fixed
cost of receiving a batch from a worker (a few ms when the machine is crowded) stays small.
"""

import warnings

import pytest

from diagnosis.loops import CpuDataset, SleepDataset, data_wait, run

pytestmark = pytest.mark.slow


def follow(tmp_path, dataset, **sizes):
    summary, diagnosis = run(tmp_path / "first", dataset, **sizes)
    finding = data_wait(diagnosis)
    assert finding is not None, [f.title for f in diagnosis.findings]
    assert finding.evidence["wait_pct"] == summary.data.wait_pct >= 10.0
    recommended = finding.evidence["recommended"]
    assert set(recommended) == {"num_workers", "prefetch_factor", "pin_memory",
                                "persistent_workers"}
    with warnings.catch_warnings():  # torch warns about more workers than cores
        warnings.simplefilter("ignore", UserWarning)
        after, after_diagnosis = run(tmp_path / "second", dataset, **sizes, **recommended)
    return finding, after, after_diagnosis


def test_io_bound_loading_gets_more_workers_than_cores_and_the_wait_goes(tmp_path):
    # each sample waits 60 ms (slow storage): a batch of 4 takes 240 ms, the step ~200 ms;
    # 40 batches, so the workers' start-up stays well inside the 10% on a loaded machine
    finding, after, diagnosis = follow(tmp_path, SleepDataset(4 * 40, 0.06), batch_size=4,
                                       matmuls=128)
    loading = finding.evidence["loading"]
    assert loading["bound"] == "io", loading
    # the loop thread wanted a core for little of its wait
    assert loading["cpu_fraction"] < 0.3
    assert finding.evidence["recommended"]["num_workers"] >= 2
    assert finding.evidence["recommended"]["persistent_workers"] is True
    assert "waits on I/O" in " ".join(finding.advice)
    assert after.data.wait_pct < 10.0, after.data
    assert data_wait(diagnosis) is None


def test_cpu_bound_loading_stays_within_the_cores_and_the_wait_goes(tmp_path):
    # each sample computes ~5 ms in Python: a batch of 8 takes ~45 ms, the step ~180 ms.
    # A batch from a worker that computes in Python arrives a few ms late (the worker's
    # sending thread waits for its GIL): long steps keep that under the 10%.
    finding, after, diagnosis = follow(tmp_path, CpuDataset(8 * 36, 45000), batch_size=8,
                                       matmuls=240)
    loading = finding.evidence["loading"]
    assert loading["bound"] in ("cpu", "mixed"), loading
    # one core is the model's (torch.set_num_threads(1)), one is left for workers
    assert finding.evidence["recommended"]["num_workers"] == 1
    assert after.data.wait_pct < 10.0, after.data
    assert data_wait(diagnosis) is None

