"""The tuner's command, for a diagnosis that cannot re-create the dataset."""

from __future__ import annotations

from trainpace.tune import advice_lines, command_hint, tune_loader
from tune.fakes import ManualHost, ModelTrials, Timed
from tune.loaders import Sleepy


def test_with_the_run_folder_the_step_comes_from_it():
    meta = {"loader": {"class": "torch.utils.data.dataloader.DataLoader", "num_workers": 0}}
    assert command_hint(meta, "runs/my exp") == (
        "trainpace tune-loader MODULE:FACTORY --run 'runs/my exp'  (FACTORY: a function in "
        "MODULE that returns your DataLoader; it finds the fewest workers that hide the wait)")


def test_without_a_folder_or_a_loader():
    assert command_hint(None) == (
        "trainpace tune-loader MODULE:FACTORY --step-ms STEP_MS  (FACTORY: a function in "
        "MODULE that returns your dataset or DataLoader; it finds the fewest workers that "
        "hide the wait)")


def test_a_known_step_is_written_out():
    assert "--step-ms 45 " in command_hint({}, step_s=0.045)


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


def test_the_hint_does_not_load_torch():
    import subprocess
    import sys

    code = ("import sys; from trainpace.tune.hint import command_hint; command_hint({}); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_the_package_names_are_all_there():
    import trainpace.tune as tune

    assert sorted(tune.__all__) == sorted(tune._WHERE)
    for name in tune.__all__:
        assert getattr(tune, name) is not None
