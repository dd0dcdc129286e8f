"""``trainpace report RUN``: the table, --json, --html, runs killed mid-way, bad input."""

import json

import pytest

from report.folders import steps, write_run
from trainpace.cli import main
from trainpace.summary import SCHEMA, Summary

LOADER = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "batch_size": 32}


@pytest.fixture
def slow_data_run(tmp_path):
    # 0.1 s steps, 0.04 s of them waiting for the batch: 40% data wait, 320 samples/s
    return write_run(tmp_path / "slow", steps(60, step_s=0.1, samples=32, wait_s=0.04),
                     meta={"loader": LOADER})


def test_table_shows_the_signs_and_the_diagnosis(slow_data_run, capsys):
    assert main(["report", str(slow_data_run)]) == 0
    out = capsys.readouterr().out
    assert "320 samples/s" in out
    assert "wait 40% of step" in out
    assert "bottleneck: data loading — The step waits for data 40% of the time" in out
    # a batch takes the loop 0.04 s, it must arrive every 0.06 s: ceil(1.2 × 0.04 / 0.06) = 1 → 2
    assert "try `DataLoader(num_workers=2, persistent_workers=True)`" in " ".join(out.split())


def test_json_is_one_summary_object_with_the_diagnosis(slow_data_run, capsys):
    assert main(["report", str(slow_data_run), "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data["schema"] == SCHEMA
    assert data["throughput"]["samples_per_s"] == pytest.approx(320.0)
    assert data["data"]["wait_pct"] == pytest.approx(40.0)
    assert data["diagnosis"]["bottleneck"] == "data_loading"
    assert data["diagnosis"]["findings"][0]["id"] == "data_wait"
    assert data["device"]["util_pct"] is None  # never measured: null, not 0


def test_a_killed_run_is_reported_from_its_steps(slow_data_run, capsys):
    with open(slow_data_run / "steps.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 61, "t_s": 6.1, "step_')  # the process died mid-line
    assert not (slow_data_run / "summary.json").exists()
    assert main(["report", str(slow_data_run), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["steps"]["total"] == 60
    assert "steps.jsonl: the last line was cut off" in captured.err
    assert "summary.json is missing or behind; the figures are recomputed from 60 steps" in captured.err


def test_a_run_with_no_step_yet_shows_nothing_measured(tmp_path, capsys):
    folder = write_run(tmp_path / "fresh", [])
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.count("not measured: ") == 5
    # nothing timed is not "no bottleneck found" (issue 25 §6)
    assert "bottleneck: not measured — Nothing was measured: no step was timed" in out
    assert "No bottleneck found" not in out


def test_html_report_is_written(slow_data_run, tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["report", str(slow_data_run), "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert "The step waits for data 40% of the time" in text
    assert capsys.readouterr().out == f"{page}\n"  # only the path: the page is the report


def test_thresholds_can_be_set(slow_data_run, capsys):
    assert main(["report", str(slow_data_run), "--json", "--threshold", "data_wait_warning_pct=45",
                 "--threshold", "data_wait_critical_pct=60"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnosis"]["bottleneck"] == "none"


@pytest.mark.parametrize(("setup", "message"), [
    (lambda p: p, "no such folder"),
    (lambda p: (p.mkdir(), p)[1], "not a trainpace run folder"),
    (lambda p: (p.write_text("x"), p)[1], "not a folder"),
    (lambda p: (p.mkdir(), (p / "summary.json").write_text('{"schema": "other/2"}'), p)[2],
     "schema is 'other/2', expected 'trainpace.summary/1'"),
    (lambda p: (p.mkdir(), (p / "summary.json").write_text("{not json"), p)[2], "not valid JSON"),
])
def test_bad_input_is_one_clear_line_and_exit_1(tmp_path, capsys, setup, message):
    path = setup(tmp_path / "x")
    assert main(["report", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("trainpace report: error: ")
    assert message in lines[0]


def test_bad_threshold_name_is_exit_1_and_bad_form_exit_2(slow_data_run, capsys):
    assert main(["report", str(slow_data_run), "--threshold", "nope=1"]) == 1
    assert "threshold is not one of" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["report", str(slow_data_run), "--threshold", "nope"])
    assert exc.value.code == 2


def test_a_finished_summary_is_used_as_written(tmp_path, capsys):
    summary = Summary(run_id="done", world_size=1)
    folder = write_run(tmp_path / "done", [], summary=summary)
    assert main(["report", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["run_id"] == "done"
    assert "recomputed" not in captured.err


def test_an_unwritable_html_path_is_one_line_and_exit_1(slow_data_run, tmp_path, capsys):
    target = tmp_path / "missing-folder" / "report.html"
    assert main(["report", str(slow_data_run), "--html", str(target)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"trainpace report: error: {target}: cannot write the page")
    assert "Traceback" not in "\n".join(err)


def test_a_wrong_typed_value_is_a_note_not_a_traceback(slow_data_run, capsys):
    path = slow_data_run / "steps.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[9])
    record["step_s"] = "slow"
    lines[9] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    assert main(["report", str(slow_data_run), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["steps"]["total"] == 59
    assert (f"trainpace report: {path}:10: skipped a line that is not a step record "
            '(step_s is "slow", not a number)') in captured.err
    assert f"trainpace report: {path}: 1 steps missing from the records: 10 " in captured.err


def test_missing_steps_are_named_as_ranges_on_the_page_too(tmp_path, capsys):
    records = [r for r in steps(60, step_s=0.1, samples=32) if not 20 <= r["step"] <= 29]
    folder = write_run(tmp_path / "gappy", records, meta={"loader": LOADER})
    page = tmp_path / "p.html"
    assert main(["report", str(folder), "--html", str(page)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{page}\n"
    assert "10 steps missing from the records: 20-29" in captured.err
    assert "10 steps missing from the records: 20-29" in page.read_text(encoding="utf-8")


def test_the_console_report_has_a_legend_of_its_marks(slow_data_run, capsys):
    assert main(["report", str(slow_data_run)]) == 0
    out = capsys.readouterr().out
    assert "● ok   ◆ info   ▲ warning   ■ critical   ○ not measured" in out
