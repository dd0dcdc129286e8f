"""The search against loaders whose right answer is known, on a manual clock.

Samples "take" known time on the clock and the DataLoader is a model whose workers deliver
a batch every ``batch_s`` each (tune/fakes.py), so which settings are tried, the one
recommended and the time spent follow from the numbers exactly. How real DataLoaders fare
on a real machine is measured by ``benchmarks/tune.py``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from trainpace.errors import ConfigError
from trainpace.tune import tune_loader
from trainpace.tune.loader_source import as_source
from trainpace.tune.probe import probe as run_probe
from trainpace.tune.search import search
from tune.fakes import ManualHost, ModelTrials, Timed
from tune.helpers import children
from tune.loaders import Sleepy


def _tuned(host, dataset, *, batch_size, step_s, budget_s, cores=2, memory_budget_gb=1.0,
           **workers):
    """search() as tune_loader calls it, with the host's cores given."""
    started = host.wall_s
    source = as_source(dataset, batch_size=batch_size, collate_fn=None)
    probe = run_probe(source, max_s=min(0.15 * budget_s, 10.0), memory_budget_bytes=1e12,
                      clock=host.clock)
    trials = ModelTrials(host, batch_s=probe.batch_s, step_s=step_s, **workers)
    return search(source, probe, trials, step_s=step_s, budget_s=budget_s,
                  budget_gb=memory_budget_gb, cores=cores, pin_memory=False, clock=host.clock,
                  started_s=started, report_progress=lambda *_: None, step_source=None)


def _tried(result):
    return [(t.setting.num_workers, t.setting.prefetch_factor) for t in result.trials]


def test_io_bound_needs_more_workers_than_cores():
    # 16 samples of 10 ms waiting on I/O: 160 ms a batch in a worker. A 60 ms step needs 3
    # workers (53 ms a batch), on 2 cores; 2 give 80 ms a batch, a wait of 20 ms in 80.
    host = ManualHost()
    result = tune_loader(Timed(host, 0.010), batch_size=16, step_s=0.060, budget_s=40,
                         clock=host.clock,
                         trial_runner=ModelTrials(host, batch_s=0.160, step_s=0.060))
    assert _tried(result) == [(0, None), (1, 2), (2, 2), (4, 2), (3, 2), (2, 4)]
    waits = [t.wait_pct for t in result.trials]
    assert waits == pytest.approx([100 * 0.16 / 0.22, 100 * 0.10 / 0.16, 25.0, 0.0, 0.0, 25.0])
    assert result.reachable is True
    assert result.bound == "io"
    assert result.recommended.num_workers == 3
    assert result.recommended.prefetch_factor == 2
    assert result.recommended.persistent_workers is True
    assert result.wait_pct == 0.0
    assert result.probe.sample_s == pytest.approx(0.010)
    assert result.probe.cpu_share == 0.0
    # the budget is the probe and the trials, on the clock
    assert result.elapsed_s == pytest.approx(0.160 + sum(t.duration_s for t in result.trials))
    assert result.elapsed_s <= 40
    assert result.verdict.startswith("w=3 pf=2 hides the loading: the wait is 0.0% of a "
                                     "60 ms step (target under 10%)")
    assert result.code == ("DataLoader(dataset, batch_size=16, num_workers=3, "
                           "prefetch_factor=2, persistent_workers=True, pin_memory=False)")


def test_cpu_bound_stops_at_the_cores_and_says_unreachable():
    # 16 samples of 1 ms CPU: 16 ms of CPU per batch, a 4 ms step: four cores' worth, two here
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.001, cpu_s=0.001), batch_size=16, step_s=0.004,
                    budget_s=20, cores=2, worker_cpu_s_per_batch=0.016)
    assert _tried(result) == [(0, None), (1, 2), (2, 2)]
    assert result.bound == "cpu"
    assert result.reachable is False
    assert result.recommended.num_workers == 2
    assert result.wait_pct == pytest.approx(50.0)  # 8 ms a batch from two: 4 ms wait in 8
    assert "no setting tried brings the wait under 10% of a 4 ms step" in result.verdict
    assert result.advice[0].startswith("loading is CPU work: 16 ms of CPU per batch, one "
                                       "batch needed every 4 ms: about 4 cores' worth, "
                                       "2 usable")
    assert result.probe.cpu_share == pytest.approx(1.0)


def test_cpu_bound_reachable_with_at_most_the_cores():
    # 8 ms of CPU per batch against a 64 ms step: one worker delivers in time
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.001, cpu_s=0.001), batch_size=8, step_s=0.064,
                    budget_s=20, cores=2, worker_cpu_s_per_batch=0.008)
    assert _tried(result) == [(0, None), (1, 2)]
    assert result.bound == "cpu"
    assert result.reachable is True
    assert result.recommended.num_workers == 1
    assert result.advice == []


def test_no_workers_when_loading_is_cheap():
    host = ManualHost()
    result = tune_loader(Timed(host, 0.0), batch_size=4, step_s=0.030, budget_s=10,
                         clock=host.clock, trial_runner=ModelTrials(host, batch_s=0.0,
                                                                    step_s=0.030))
    assert result.recommended.num_workers == 0
    assert result.reachable is True
    assert len(result.trials) == 1
    assert result.code == "DataLoader(dataset, batch_size=4, num_workers=0, pin_memory=False)"


def test_without_a_step_it_finds_the_fastest_loading_within_the_budget():
    # 16 ms a batch: each doubling of the workers doubles the batches a second (the model has
    # no ceiling), until the next trial would not fit in the 12 s budget
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.002), batch_size=8, step_s=None, budget_s=12)
    tried = [w for w, _ in _tried(result)]
    assert tried[:3] == [0, 1, 2]
    assert all(b == 2 * a for a, b in itertools.pairwise(tried[1:]))  # doubled from one
    assert result.reachable is None
    assert result.wait_pct is None
    speeds = {t.setting.num_workers: t.batches_per_s for t in result.trials}
    assert speeds[1] == pytest.approx(1 / 0.016)
    assert speeds[2] == pytest.approx(2 / 0.016)
    assert result.recommended.num_workers == max(tried)  # only the fastest is within 10% of it
    assert "no step time given" in result.verdict
    assert result.elapsed_s <= 12


def test_a_tight_budget_stops_the_search():
    # 320 ms a batch against a 5 ms step needs 64 workers; 4 s allow a few doublings
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.02), batch_size=16, step_s=0.005, budget_s=4)
    assert result.reachable is False
    assert any("the search stopped at" in line and "the time budget (4 s)" in line
               for line in result.advice)
    assert max(w for w, _ in _tried(result)) < 64


def test_the_memory_budget_caps_the_workers():
    # 80 ms a batch against a 30 ms step needs 3 workers; each holds 10 MB, 25 MB hold 2
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.005), batch_size=16, step_s=0.030, budget_s=30,
                    memory_budget_gb=0.025, worker_gb=0.010)
    assert _tried(result) == [(0, None), (1, 2), (2, 2)]
    assert result.recommended.num_workers == 2
    assert result.reachable is False
    assert result.wait_pct == pytest.approx(25.0)
    assert any("the memory budget (0.025 GB)" in line for line in result.advice)


def test_the_memory_budget_shrinks_a_doubling_to_what_fits():
    # 3 workers are needed (see the first test); the doubling to 4 of 10 MB each would pass
    # 35 MB, so 3 are tried instead
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.010), batch_size=16, step_s=0.060, budget_s=40,
                    memory_budget_gb=0.035, worker_gb=0.010)
    assert _tried(result) == [(0, None), (1, 2), (2, 2), (3, 2), (2, 4)]
    assert result.recommended.num_workers == 3
    assert result.reachable is True


def test_an_iterable_dataset_is_tuned_too():
    host = ManualHost()

    class Stream(Timed):
        def __iter__(self):
            for i in range(self.n):
                yield self[i]

    import torch.utils.data

    stream = type("TimedStream", (Stream, torch.utils.data.IterableDataset), {})(host, 0.002)
    result = _tuned(host, stream, batch_size=8, step_s=0.030, budget_s=10)
    assert result.probe.samples == 8
    assert result.probe.sample_s == pytest.approx(0.002)
    assert result.reachable is True
    assert result.recommended.num_workers == 1  # 16 ms a batch behind a 30 ms step


def test_a_busy_machine_is_said():
    # each sample waited a fifth of its time for a core
    host = ManualHost()
    result = _tuned(host, Timed(host, 0.005, runq_s=0.001), batch_size=8, step_s=0.030,
                    budget_s=10)
    assert result.advice[-1].startswith("the machine is busy: a sample waited 20% of its time "
                                        "for a core")


def test_progress_is_said_against_the_budget():
    host = ManualHost()
    said = []
    tune_loader(Timed(host, 0.010), batch_size=16, step_s=0.060, budget_s=40,
                clock=host.clock, trial_runner=ModelTrials(host, batch_s=0.160, step_s=0.060),
                progress=lambda message, spent, budget: said.append((message, spent, budget)))
    assert said[0] == ("timing samples in this process", 0.0, 40)
    assert said[1] == ("trying w=0", pytest.approx(0.160), 40)
    assert said[-1][0] == "done"


@pytest.mark.parametrize(("key", "kwargs"), [
    ("budget_s", {"budget_s": 0}),
    ("budget_s", {"budget_s": math.inf}),
    ("step_s", {"step_s": -1.0}),
    ("memory_budget_gb", {"memory_budget_gb": 0.0}),
    ("batch_size", {"batch_size": 0}),
])
def test_bad_settings_name_the_key(key, kwargs):
    with pytest.raises(ConfigError, match=key):
        tune_loader(Sleepy(), **kwargs)


def test_result_json_has_the_contract_keys():
    host = ManualHost()
    result = tune_loader(Timed(host, 0.0), batch_size=2, step_s=0.02, budget_s=5,
                         clock=host.clock, trial_runner=ModelTrials(host, batch_s=0.0,
                                                                    step_s=0.02))
    data = result.to_dict()
    assert set(data["recommended"]) == {"num_workers", "prefetch_factor", "pin_memory",
                                        "persistent_workers"}
    for key, kind in (("wait_pct", float), ("reachable", bool), ("sample_s", float),
                      ("batch_s", float), ("trials", list), ("verdict", str)):
        assert isinstance(data[key], kind), key
    assert data["trials"][0]["setting"]["num_workers"] == 0
    assert data["step_device"] in ("cpu", "cuda", "mps")  # this machine's, said
    given = tune_loader(Timed(host, 0.0), batch_size=2, step_s=0.02, budget_s=5,
                        clock=host.clock, step_device="cpu",
                        trial_runner=ModelTrials(host, batch_s=0.0, step_s=0.02))
    assert given.to_dict()["step_device"] == "cpu"


def test_a_budget_too_short_for_one_batch_says_how_long_to_give():
    # the probe stops after 0.18 s (6 samples of 30 ms, past 15% of 1 s); a batch is 0.48 s
    host = ManualHost()
    with pytest.raises(ConfigError, match=r"budget_s must leave time to load a few batches: "
                                          r"one takes 0\.48 s in one process \(0\.03 s a "
                                          r"sample\); give at least 4 s, or a smaller "
                                          r"batch_size"):
        tune_loader(Timed(host, 0.03), batch_size=16, step_s=0.01, budget_s=1.0,
                    clock=host.clock, trial_runner=ModelTrials(host, batch_s=0.48,
                                                               step_s=0.01))


@pytest.mark.slow
def test_real_dataloaders_end_to_end():
    # Real worker processes on the host's clocks. How fast they are depends on the machine
    # (benchmarks/tune.py measures it); what holds at any load is checked here.
    result = tune_loader(Sleepy(sample_s=0.005), batch_size=8, step_s=0.030, budget_s=15)
    assert _tried(result)[0] == (0, None)
    assert result.recommended in [t.setting for t in result.trials]
    assert result.probe.sample_s >= 0.005  # a sleep lasts at least its time
    assert result.bound == "io"
    assert all(t.batches >= 3 for t in result.trials)
    assert "num_workers=" in result.code
    assert children() == []


def test_the_step_is_simulated_where_it_computes(monkeypatch):
    """step_device: "cpu" is CPU work on the training thread, an accelerator a sleep; by
    default, where PyTorch would train on this machine. Said in the result."""
    from trainpace.errors import ConfigError
    from trainpace.tune.search import _step_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert _step_device(None) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _step_device(None) == "cuda"
    assert _step_device("cpu") == "cpu"
    assert _step_device("cuda:1") == "cuda"
    with pytest.raises(ConfigError, match="step_device"):
        _step_device("tpu")


def test_a_cpu_step_is_computed_by_the_real_trials(monkeypatch):
    """tune_loader on a CPU run hands run_trial a computing step (the real trial runner)."""
    import trainpace.tune.search as search_module

    seen = []

    def trial(source, setting, **options):
        seen.append(options["cpu_step"])
        raise RuntimeError("enough")

    monkeypatch.setattr(search_module, "run_trial", trial)
    dataset = torch.utils.data.TensorDataset(torch.zeros(64, 2))
    for device, cpu_step in (("cpu", True), ("cuda", False)):
        with pytest.raises(RuntimeError, match="enough"):
            tune_loader(dataset, batch_size=4, step_s=0.01, budget_s=30, step_device=device)
        assert seen.pop() is cpu_step


def test_the_cpu_step_stand_in_computes_on_the_calling_thread():
    """compute_for: at least the step's wall time, spent as CPU time of this thread."""
    import time

    from trainpace.tune.tune_clock import compute_for

    wall0, cpu0 = time.perf_counter(), time.thread_time()
    compute_for(0.02)
    assert time.perf_counter() - wall0 >= 0.02
    assert time.thread_time() > cpu0  # work, not a sleep (a sleep takes no CPU time)
