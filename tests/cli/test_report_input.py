"""``trainpace report`` of damaged run-folder files: exit 1, one line naming the file and what
is wrong, no traceback (issue 26)."""

from __future__ import annotations

import json

import pytest

from report.folders import steps, write_run
from trainpace.cli import main
from trainpace.summary import Summary


def _summary_text(**changes: object) -> str:
    data = Summary(run_id="r").to_dict()
    for path, value in changes.items():
        section, key = path.split("__")
        data[section][key] = value
    return json.dumps(data)


@pytest.mark.parametrize(("text", "said"), [
    (_summary_text(steps__total="12"), "steps.total is '12', expected an integer"),
    ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ('{"schema": "trainpace.summary/1", "steps": 1' + "0" * 5000 + "}", "not a trainpace file"),
])
def test_a_damaged_summary_is_one_line_and_exit_1(tmp_path, capsys, text, said):
    run = write_run(tmp_path / "run", steps(5, step_s=0.1, samples=8))
    (run / "summary.json").write_text(text)
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"trainpace report: error: {run}/summary.json: ")
    assert said in err


def test_a_wall_time_of_1e400_is_unknown_not_an_overflow(tmp_path, capsys):
    run = write_run(tmp_path / "run", steps(5, step_s=0.1, samples=8))
    text = _summary_text(steps__total=5, time__wall_s=1.0)  # as many steps: not behind
    (run / "summary.json").write_text(text.replace('"wall_s": 1.0', '"wall_s": 1e400'))
    assert main(["report", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time"]["wall_s"] is None  # unknown
