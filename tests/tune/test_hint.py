"""The tuner's advice for the Meter's data_wait finding, and the package's names."""

from __future__ import annotations

from trainpace.tune import advice_lines, tune_loader
from tune.fakes import ManualHost, ModelTrials, Timed
from tune.loaders import Sleepy


def test_advice_lines_from_a_tuning():
    # 2 ms a batch before a 30 ms step: no workers needed, a wait of 2/32
    host = ManualHost()
    result = tune_loader(Timed(host, 0.001), batch_size=2, step_s=0.03, budget_s=5,
                         clock=host.clock,
                         trial_runner=ModelTrials(host, batch_s=0.002, step_s=0.03))
    (line,) = advice_lines(result)
    assert line.startswith("measured: DataLoader(dataset, batch_size=2, num_workers=0")
    assert "keeps the wait at 6.2% of the step" in line


def test_tune_advice_runs_the_loader_and_never_raises():
    from torch.utils.data import DataLoader

    from trainpace.tune import tune_advice
    from tune.loaders import Faulty

    # real loaders on the host's clocks: which setting wins is the machine's, the line is ours
    good = tune_advice(DataLoader(Sleepy(sample_s=0.0), batch_size=2), step_s=0.03, budget_s=5)
    assert good[0].startswith("measured: DataLoader(dataset, batch_size=2, num_workers=")
    # 2 ms of loading against a 1 ms step: workers are tried whatever the load, and fail
    bad = tune_advice(DataLoader(Faulty(bad=0), batch_size=2, num_workers=1), step_s=0.001,
                      budget_s=5)
    assert bad[0].startswith("the DataLoader tuner could not run this loader: ")
    assert "item 0 raised ValueError" in bad[0]


def test_the_package_names_are_all_there():
    import trainpace.tune as tune

    assert sorted(tune.__all__) == sorted(tune._WHERE)
    for name in tune.__all__:
        assert getattr(tune, name) is not None
