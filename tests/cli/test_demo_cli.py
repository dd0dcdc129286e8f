import json

import pytest

from trainpace.cli import main
from trainpace.runlog import read_run


@pytest.mark.slow
def test_demo_json_prints_exactly_one_object_and_writes_the_run(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--steps", "30", "--batch-size", "8", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)  # stdout is exactly one JSON object
    assert summary["schema"] == "trainpace.summary/1"
    assert summary["steps"]["total"] == 30
    assert summary["data"]["loader"]["batch_size"] == 8
    assert "step 25 |" in captured.err  # progress and report went to stderr
    assert read_run(out).summary.steps.total == 30


@pytest.mark.slow
def test_demo_with_slow_data_and_workers(tmp_path, capsys):
    out = tmp_path / "slow"
    code = main(["demo", "--steps", "12", "--batch-size", "4", "--workers", "2",
                 "--slow-data", "20", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["data"]["loader"]["num_workers"] == 2
    assert summary["data"]["wait_pct"] > 0


def test_demo_bad_flag_is_one_line_and_exit_1(tmp_path, capsys):
    code = main(["demo", "--steps", "0", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == "trainpace demo: error: steps must be >= 1, got 0"
