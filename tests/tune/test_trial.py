"""One trial: the wait a sleeping step sees, faults named, no worker left behind."""

from __future__ import annotations

import os

import pytest

from trainpace.tune import DatasetError, Setting
from trainpace.tune.source import as_source
from trainpace.tune.trial import run_trial
from tune.helpers import children
from tune.loaders import Faulty, Killed, Sleepy


def _setting(workers: int) -> Setting:
    return Setting(num_workers=workers, prefetch_factor=2 if workers else None,
                   pin_memory=False, persistent_workers=workers > 0)


def _trial(dataset, workers, *, step_s=0.02, batch=8, min_batches=30, max_s=5.0):
    source = as_source(dataset, batch_size=batch, collate_fn=None)
    return run_trial(source, _setting(workers), step_s=step_s, max_s=max_s,
                     min_batches=min_batches, timeout_s=30, batch_bytes=batch * 32)


def test_without_workers_the_step_waits_for_the_whole_batch():
    # 8 samples of 3 ms loaded in the loop itself: at least 24 ms of wait per batch.
    trial = _trial(Sleepy(sample_s=0.003), 0, step_s=0.01)
    assert trial.batches == 30
    assert trial.complete
    assert trial.wait_s_per_batch >= 0.024
    assert trial.wait_pct is not None
    assert trial.wait_pct == pytest.approx(
        100 * trial.wait_s_per_batch / (trial.wait_s_per_batch + 0.01))
    assert trial.worker_cpu_s_per_batch is None
    assert trial.batches_per_s <= 1 / (0.024 + 0.01)


def test_workers_hide_a_wait_the_step_covers():
    # 8 × 1 ms a batch in one worker, a 50 ms step: the batch is ready before it is asked for
    # (what is left is handing it over from the worker: 1–3 ms on this VM).
    trial = _trial(Sleepy(sample_s=0.001), 1, step_s=0.05)
    assert trial.wait_pct is not None
    assert trial.wait_pct < 10
    assert trial.batches_per_s == pytest.approx(1 / 0.05, rel=0.3)
    assert trial.worker_rss_gb is not None
    assert trial.worker_rss_gb > 0
    assert trial.memory_gb is not None
    assert trial.memory_gb >= trial.worker_uss_gb
    assert trial.startup_s > 0
    # a sleeping worker barely uses its core
    assert trial.worker_cpu_s_per_batch is not None
    assert trial.worker_cpu_s_per_batch < 0.008
    assert children() == []


def test_the_window_opens_after_the_prefetched_queue():
    # Two workers fill a queue of 4 batches while the first is awaited. A batch is 8 × 10 ms,
    # so two deliver one every 40 ms against a 30 ms step: ~10 ms of wait, a quarter of the
    # cycle. Measured from the start, the queued batches would hide part of it.
    trial = _trial(Sleepy(sample_s=0.010), 2, step_s=0.030, min_batches=20)
    assert trial.warmup_batches <= 2 * 2 + 1
    assert trial.wait_s_per_batch > 0.005
    assert trial.wait_pct is not None
    assert 12 < trial.wait_pct < 45


def test_a_short_budget_cuts_the_window():
    trial = _trial(Sleepy(sample_s=0.002), 0, step_s=0.02, min_batches=1000, max_s=0.5)
    assert not trial.complete
    assert 3 <= trial.batches < 1000


def test_an_item_that_raises_in_a_worker_is_named():
    with pytest.raises(DatasetError) as caught:
        _trial(Faulty(bad=37), 2, step_s=0.001)
    text = str(caught.value)
    assert "item 37 raised ValueError: corrupt record 37 in a DataLoader worker" in text
    assert "tune.loaders.Faulty" in text
    assert "w=2" in text
    assert children() == []


def test_a_killed_worker_is_named_and_none_is_left():
    with pytest.raises(DatasetError, match=r"Killed: a DataLoader worker died while loading item 40 \(with w=2"):
        _trial(Killed(sample_s=0.001), 2, step_s=0.001)
    assert children() == []


def test_a_loader_with_no_batch_is_an_error():
    source = as_source(Sleepy(n=3, sample_s=0.0), batch_size=4, collate_fn=None)
    source.kept["drop_last"] = True
    with pytest.raises(DatasetError, match="yields no batch"):
        run_trial(source, _setting(0), step_s=0.01, max_s=1, min_batches=5, timeout_s=5,
                  batch_bytes=0)


def test_a_broken_pipe_from_a_dead_worker_is_named_as_its_death():
    # A worker killed while handing a batch over can surface as EOFError in this process
    # before torch notices; the in-flight slots still say which worker and which item.
    import subprocess
    import sys
    from types import SimpleNamespace

    from trainpace.tune.trial import _fault

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    loader = SimpleNamespace(dataset=SimpleNamespace(inflight=[gone.pid, 40, -1, -1]))
    source = as_source(Killed(), batch_size=8, collate_fn=None)
    error = _fault(source, _setting(2), loader, EOFError())
    assert str(error).startswith(
        "tune.loaders.Killed: a DataLoader worker died while loading item 40 (with w=2 pf=2)")
    alive = SimpleNamespace(dataset=SimpleNamespace(inflight=[os.getpid(), 3, -1, -1]))
    assert "loading raised EOFError" in str(_fault(source, _setting(2), alive, EOFError()))
