"""The tuner's advice for the Meter's data_wait finding, and the package's names."""

from __future__ import annotations

from trainpace.tune import advice_lines, tune_loader
from tune.loaders import Sleepy


def test_advice_lines_from_a_tuning():
    result = tune_loader(Sleepy(sample_s=0.0), batch_size=2, step_s=0.03, budget_s=5)
    (line,) = advice_lines(result)
    assert line.startswith("measured: DataLoader(dataset, batch_size=2, num_workers=0")
    assert f"keeps the wait at {result.wait_pct:.1f}% of the step" in line


def test_tune_advice_runs_the_loader_and_never_raises():
    from torch.utils.data import DataLoader

    from trainpace.tune import tune_advice
    from tune.loaders import Faulty

    good = tune_advice(DataLoader(Sleepy(sample_s=0.0), batch_size=2), step_s=0.03, budget_s=5)
    assert good[0].startswith("measured: DataLoader(dataset, batch_size=2, num_workers=0")
    bad = tune_advice(DataLoader(Faulty(bad=0), batch_size=2, num_workers=1), step_s=0.03,
                      budget_s=5)
    assert bad[0].startswith("the DataLoader tuner could not run this loader: ")
    assert "item 0 raised ValueError" in bad[0]


def test_the_package_names_are_all_there():
    import trainpace.tune as tune

    assert sorted(tune.__all__) == sorted(tune._WHERE)
    for name in tune.__all__:
        assert getattr(tune, name) is not None
