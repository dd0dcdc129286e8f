"""``trainpace report JOB`` and ``compare JOB_A JOB_B``: the job's goodput; JOB/runs/RUN one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from job.goodput_jobs import (
    T0,
    contiguous,
    event,
    killed_and_restarted,
    run_start,
    steps,
    write_ledger,
    write_run,
)
from trainpace.cli import main
from trainpace.job import events as ev


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return killed_and_restarted(tmp_path / "job")


def report_json(capsys, *argv) -> dict:
    assert main(["report", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_job_json_holds_the_goodput(job: Path, capsys) -> None:
    data = report_json(capsys, job)
    g = data["goodput"]
    assert g["pct"] == pytest.approx(100 * 18 / 62)
    assert g["wall_s"] == pytest.approx(62.0)
    assert g["categories"]["lost_steps"] == 10
    assert g["categories"]["restart_gap_s"] == pytest.approx(6.0)
    assert [r["run_id"] for r in g["runs"]] == ["job", "job.2"]
    assert data["run_id"] == "job.2"  # the signs are the latest run's, as before
    assert "goodput" in {f["id"] for f in data["diagnosis"]["findings"]}


def test_report_job_console_and_html(job: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", str(job)]) == 0
    out = capsys.readouterr().out
    assert "goodput 29.0% of 62 s (2 runs: 1 killed, 1 finished)" in out
    assert "Goodput 29%: startup took 23% of the job's wall time (14.5 s)" in out
    page = tmp_path / "job.html"
    assert main(["report", str(job), "--html", str(page)]) == 0
    assert "The job over time" in page.read_text()


def test_one_earlier_run_reports_alone(job: Path, capsys) -> None:
    data = report_json(capsys, job / ev.RUNS_DIR / "job")
    g = data["goodput"]
    assert data["run_id"] == "job"
    assert [r["run_id"] for r in g["runs"]] == ["job"]
    # without the job's ledger (its first_step event), the steps are placed from the Meter's
    # start: the Meter's start -> its last step's t_s
    assert g["wall_s"] == pytest.approx(24.0)
    assert g["missing"]["checkpoint_save"].startswith("no job.jsonl in the folder")


def lossy_job(folder: Path) -> Path:
    """Run 1 saves (4 s) after step 5 of 20 and is killed; run 2 loads it and finishes 15 steps:
    15 of run 1's steps (15 s) are lost, the largest category."""
    write_run(folder / ev.RUNS_DIR / "job", "job", T0, steps(
        contiguous(1.0, [(1.0, 0.0)] * 5) + contiguous(10.0, [(1.0, 0.0)] * 15)), warmup=0)
    write_run(folder, "job.2", T0 + 30, steps(contiguous(1.0, [(1.0, 0.0)] * 15)), warmup=0)
    write_ledger(folder, [
        run_start(1, T0, "job", T0),
        event(ev.CHECKPOINT_SAVE, 1, T0 + 6, duration_s=4.0, step=5, path="c", source="dcp"),
        run_start(2, T0 + 30, "job.2", T0 + 30),
        event(ev.CHECKPOINT_LOAD, 2, T0 + 30, duration_s=1.0, path="c", saved_by_run=1,
              saved_at_step=5, source="dcp"),
        event(ev.RUN_END, 2, T0 + 46, status="finished", last_step=15,
              last_step_end_unix_s=T0 + 46, signal=None)])
    return folder


def test_mtbf_hours_reaches_the_checkpoint_advice(tmp_path: Path, capsys) -> None:
    job = lossy_job(tmp_path / "job")
    data = report_json(capsys, job)
    g = data["goodput"]
    assert (g["wall_s"], g["categories"]["lost_steps"], g["failures"]) == (46.0, 15, 1)
    (finding,) = [f for f in data["diagnosis"]["findings"] if f["id"] == "goodput"]
    assert finding["evidence"]["category"] == "lost_progress"
    assert "--mtbf-hours H" in finding["advice"][0]  # one failure: too few to measure
    data = report_json(capsys, job, "--mtbf-hours", "0.01")  # 36 s: τ = √(2 × 4 × 36) = 17 s
    (finding,) = [f for f in data["diagnosis"]["findings"] if f["id"] == "goodput"]
    assert finding["evidence"]["young_daly_interval_s"] == pytest.approx(288 ** 0.5)
    assert finding["evidence"]["mtbf_source"] == "given with --mtbf-hours"
    with pytest.raises(SystemExit) as exited:
        main(["report", str(job), "--mtbf-hours", "0"])
    assert exited.value.code == 2
    assert "argument --mtbf-hours: must be > 0, got 0" in capsys.readouterr().err


def test_bad_ledger_lines_are_named_and_the_report_goes_on(job: Path, capsys) -> None:
    with (job / ev.LEDGER_FILE).open("a") as stream:
        stream.write('{"schema": "trainpace.job/1", "event": "lunch", "run": 2, "unix_s": 1}\n')
    assert main(["report", str(job), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["goodput"]["wall_s"] == pytest.approx(62.0)
    assert "skipped 1 line that is not a trainpace.job/1 event (line 10: unknown event 'lunch')" in (
        captured.err)
    assert "Traceback" not in captured.err


def test_compare_two_jobs_by_goodput(job: Path, tmp_path: Path, capsys) -> None:
    other = killed_and_restarted(tmp_path / "other")
    assert main(["compare", str(job), str(other), "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["goodput"]
    assert g["pct"] == [pytest.approx(100 * 18 / 62)] * 2
    assert g["better"] is None
    assert g["categories"]["lost_progress"]["delta_s"] == 0.0
    assert main(["compare", str(job), str(other)]) == 0
    assert "where the jobs' time went" in capsys.readouterr().out
