"""One trial: the wait a step sees and the window it is measured over, on a manual clock
(a DataLoader model whose workers deliver at known times); faults named and no worker left
behind, with real DataLoaders and real worker processes."""

from __future__ import annotations

import os

import pytest

from trainpace.tune import DatasetError, Setting
from trainpace.tune.loader_source import as_source
from trainpace.tune.trial import run_trial
from tune.fakes import ManualHost, model_source
from tune.helpers import children
from tune.loaders import Faulty, Killed, Sleepy


def _setting(workers: int, prefetch: int = 2) -> Setting:
    return Setting(num_workers=workers, prefetch_factor=prefetch if workers else None,
                   pin_memory=False, persistent_workers=workers > 0)


def _model_trial(host, workers, *, batch_s, step_s, min_batches=30, max_s=60.0, cpu_step=False,
                 **loader):
    source = model_source(host, batch_s=batch_s, **loader)
    trial = run_trial(source, _setting(workers), step_s=step_s, max_s=max_s,
                      min_batches=min_batches, timeout_s=30, batch_bytes=256, cpu_step=cpu_step,
                      clock=host.clock)
    return trial, source


def test_without_workers_the_step_waits_for_the_whole_batch():
    # a batch loaded in the loop itself: 24 ms of wait before each 10 ms step
    trial, _ = _model_trial(ManualHost(), 0, batch_s=0.024, step_s=0.010)
    assert trial.batches == 30
    assert trial.complete
    assert trial.warmup_batches == 1  # the first fetch, before any step
    assert trial.startup_s == pytest.approx(0.024)
    assert trial.wait_s_per_batch == pytest.approx(0.024)
    assert trial.wait_pct == pytest.approx(100 * 0.024 / 0.034)
    assert trial.batches_per_s == pytest.approx(1 / 0.034)
    assert trial.duration_s == pytest.approx(0.024 + 30 * 0.034)
    assert trial.worker_cpu_s_per_batch is None
    assert trial.memory_gb == pytest.approx(256 / 1e9)  # the one batch in hand


def test_workers_hide_a_wait_the_step_covers():
    # one worker loads a batch in 8 ms; the 50 ms step leaves it ready before it is asked for
    trial, _ = _model_trial(ManualHost(), 1, batch_s=0.008, step_s=0.050, startup_s=0.3)
    assert trial.wait_s_per_batch == 0.0
    assert trial.wait_pct == 0.0
    assert trial.batches_per_s == pytest.approx(1 / 0.050)
    assert trial.startup_s == pytest.approx(0.3 + 0.008)  # iter() to the first batch
    assert trial.warmup_batches == 1 * 2 + 1  # the queue of two, and the first batch
    assert trial.batches == 30


def test_a_cpu_runs_step_is_spent_computing_on_the_training_thread_not_asleep():
    """On a CPU run the step keeps the cores from the workers: the stand-in computes for the
    step's duration (here the manual host's CPU clock runs with it) instead of sleeping."""
    host = ManualHost()
    trial, _ = _model_trial(host, 1, batch_s=0.008, step_s=0.050, startup_s=0.3,
                            cpu_step=True)
    assert host.slept == []
    assert host.computed == [0.050] * (trial.warmup_batches - 1 + trial.batches)
    assert host.cpu_s == pytest.approx(10.0 + 0.050 * len(host.computed))
    assert trial.wait_s_per_batch == 0.0  # the same figures as a sleeping step's, on this clock
    assert trial.batches_per_s == pytest.approx(1 / 0.050)
    asleep = ManualHost()
    _model_trial(asleep, 1, batch_s=0.008, step_s=0.050, startup_s=0.3)
    assert asleep.computed == [] and asleep.slept == host.computed


def test_the_window_opens_after_the_prefetched_queue():
    # Two workers of 80 ms a batch deliver two batches every 80 ms against a 30 ms step:
    # one of each pair waits 20 ms, 10 ms a batch, a quarter of the 40 ms cycle. The queue
    # filled while the first batch was awaited would hide it; the window opens at the first
    # fetch that blocked (the third).
    trial, _ = _model_trial(ManualHost(), 2, batch_s=0.080, step_s=0.030, min_batches=20)
    assert trial.warmup_batches == 2
    assert trial.batches == 20
    assert trial.wait_s_per_batch == pytest.approx(0.010)
    assert trial.wait_pct == pytest.approx(25.0)
    assert trial.batches_per_s == pytest.approx(1 / 0.040)


def test_a_short_budget_cuts_the_window():
    # 36 ms a cycle after a first 16 ms batch: past the 0.5 s limit at the 14th measured batch
    trial, _ = _model_trial(ManualHost(), 0, batch_s=0.016, step_s=0.020, min_batches=1000,
                            max_s=0.5)
    assert not trial.complete
    assert trial.batches == 14
    assert trial.duration_s == pytest.approx(0.016 + 14 * 0.036)


def test_a_very_slow_loader_stops_at_half_again_the_limit_with_what_there_is():
    # 0.6 s a batch, a 1 s limit: at 1.8 s, past 1.5 s, two measured batches (not three)
    trial, _ = _model_trial(ManualHost(), 0, batch_s=0.6, step_s=0.0, min_batches=30,
                            max_s=1.0)
    assert trial.batches == 2
    assert not trial.complete
    assert trial.duration_s == pytest.approx(1.8)
    assert trial.wait_s_per_batch == pytest.approx(0.6)
    assert trial.wait_pct is None  # no step given


def test_the_end_of_an_epoch_starts_the_next_and_its_start_is_counted():
    trial, source = _model_trial(ManualHost(), 0, batch_s=0.010, step_s=0.010, min_batches=10,
                                 epoch_batches=5)
    assert source.made[0].iterators == 3  # 1 + 10 batches, 5 an epoch
    assert trial.batches == 10
    assert trial.wait_s_per_batch == pytest.approx(0.010)


def test_a_real_worker_is_measured_and_shut_down():
    # What a real DataLoader gives (how long things took is the benchmark's; here only what
    # holds at any speed): workers found, their memory read, none left behind.
    source = as_source(Sleepy(sample_s=0.001), batch_size=8, collate_fn=None)
    trial = run_trial(source, _setting(1), step_s=0.005, max_s=60, min_batches=10,
                      timeout_s=60, batch_bytes=8 * 32)
    assert trial.batches == 10
    assert trial.worker_rss_gb is not None
    assert trial.worker_rss_gb > 0
    assert trial.memory_gb is not None
    assert trial.worker_uss_gb is not None
    assert trial.memory_gb >= trial.worker_uss_gb
    assert trial.startup_s > 0
    assert trial.worker_cpu_s_per_batch is not None
    assert trial.worker_cpu_s_per_batch >= 0
    assert children() == []


def test_an_item_that_raises_in_a_worker_is_named():
    source = as_source(Faulty(bad=37), batch_size=8, collate_fn=None)
    with pytest.raises(DatasetError) as caught:
        run_trial(source, _setting(2), step_s=0.001, max_s=60, min_batches=30, timeout_s=60,
                  batch_bytes=0)
    text = str(caught.value)
    assert "item 37 raised ValueError: corrupt record 37 in a DataLoader worker" in text
    assert "tune.loaders.Faulty" in text
    assert "w=2" in text
    assert children() == []


def test_a_killed_worker_is_named_and_none_is_left():
    source = as_source(Killed(sample_s=0.001), batch_size=8, collate_fn=None)
    with pytest.raises(DatasetError, match=r"Killed: a DataLoader worker died while loading item 40 \(with w=2"):
        run_trial(source, _setting(2), step_s=0.001, max_s=60, min_batches=30, timeout_s=60,
                  batch_bytes=0)
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
