"""``trainpace tune-loader``: one JSON object, errors that name the factory, exit codes,
and no worker process left behind whatever happens."""

from __future__ import annotations

import json

import pytest

from report.folders import steps, write_run
from trainpace.cli import main
from tune.helpers import children

KEYS = {"recommended", "wait_pct", "reachable", "sample_s", "batch_s", "trials", "verdict"}


def test_json_is_one_object_with_the_contract(capsys):
    code = main(["tune-loader", "tune.loaders:free", "--step-ms", "30", "--budget-s", "6",
                 "--batch-size", "4", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    data = json.loads(captured.out)
    assert set(data) >= KEYS
    assert data["recommended"] == {"num_workers": 0, "prefetch_factor": None,
                                   "pin_memory": False, "persistent_workers": False}
    assert data["reachable"] is True
    assert data["step_s"] == pytest.approx(0.030)
    assert data["step_source"] == "--step-ms"
    assert data["batch_size"] == 4
    assert "trying w=0" in captured.err  # progress goes to stderr


def test_a_dataloader_factory_keeps_its_batch_size_and_takes_the_step_from_a_run(
        tmp_path, capsys):
    run = write_run(tmp_path / "run", steps(20, step_s=0.040, samples=16, wait_s=0.010))
    code = main(["tune-loader", "tune.loaders:sleepy_loader", "--run", str(run),
                 "--budget-s", "8", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["batch_size"] == 16
    assert data["step_s"] == pytest.approx(0.030)
    assert data["step_source"].endswith("median of 20 measured steps, data wait excluded")
    assert data["code"].startswith("DataLoader(dataset, batch_size=16, ")


def test_text_output_has_the_table_and_the_line_to_paste(capsys):
    assert main(["tune-loader", "tune.loaders:free", "--step-ms", "30", "--budget-s", "5"]) == 0
    out = capsys.readouterr().out
    assert "workers  prefetch  pin  batches/s" in out
    assert "DataLoader(dataset, batch_size=1, num_workers=0, pin_memory=False)" in out


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module_here:make", "no_such_module_here:make: cannot import 'no_such_module_here'"),
    ("tune.loaders:nothing", "tune.loaders has no attribute 'nothing'"),
    ("tune.loaders:not_a_dataset", "not_a_dataset() returned builtins.int, not a Dataset"),
    ("tune.loaders:faulty", "item 37 raised ValueError: corrupt record 37 in a DataLoader worker"),
    ("tune.loaders:killed", "a DataLoader worker died while loading item 40"),
    ("tune.loaders:huge", "tune.loaders:huge: item 0 holds 0.07 GB of tensors"),
])
def test_errors_name_the_factory_and_the_item_and_leave_no_worker(spec, message, capsys):
    code = main(["tune-loader", spec, "--step-ms", "1", "--budget-s", "10", "--batch-size", "16",
                 "--memory-gb", "0.5"])
    err = capsys.readouterr().err
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("trainpace tune-loader: error: ")
    assert message in last
    assert "Traceback" not in err
    assert children() == []


def test_bad_usage_is_exit_2(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["tune-loader", "tune.loaders:free", "--step-ms", "3", "--run", "x"])
    assert caught.value.code == 2


def test_bad_values_are_exit_1(tmp_path, capsys):
    assert main(["tune-loader", "tune.loaders:free", "--step-ms", "-3"]) == 1
    assert "--step-ms must be > 0, got -3.0" in capsys.readouterr().err
    assert main(["tune-loader", "tune.loaders:free", "--run", str(tmp_path / "none")]) == 1
    assert "no such folder" in capsys.readouterr().err
    assert main(["tune-loader", "tune.loaders:free", "--budget-s", "0"]) == 1
    assert "budget_s must be a number of seconds > 0, got 0.0" in capsys.readouterr().err
