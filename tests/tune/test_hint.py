"""The tuner's command, for a diagnosis that cannot re-create the dataset."""

from __future__ import annotations

from trainpace.tune import advice_lines, command_hint, tune_loader
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
    result = tune_loader(Sleepy(sample_s=0.0), batch_size=2, step_s=0.03, budget_s=5)
    (line,) = advice_lines(result)
    assert line.startswith("measured: DataLoader(dataset, batch_size=2, num_workers=0")
    assert f"keeps the wait at {result.wait_pct:.1f}% of the step" in line
