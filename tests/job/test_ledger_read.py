"""read_job: the ledger checked line by line, the runs found and placed, bad input named."""

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
from trainpace.errors import RunFolderError
from trainpace.job import events as ev
from trainpace.job.goodput import goodput
from trainpace.job.ledger import read_job


def test_runs_are_found_matched_and_placed(tmp_path: Path) -> None:
    job = read_job(killed_and_restarted(tmp_path / "job"))
    assert job.has_ledger and job.notes == []
    first, second = job.runs
    assert (first.number, first.run_id, first.status, first.steps) == (1, "job", "killed", 20)
    assert first.path == tmp_path / "job" / "runs" / "job"
    assert (first.process_start_unix_s, first.first_step_unix_s) == (T0, T0 + 10)
    assert first.end_unix_s == pytest.approx(T0 + 34)
    assert first.end_source == "its last record"
    assert (second.run_id, second.status, second.path) == ("job.2", "finished", tmp_path / "job")
    assert (second.end_unix_s, second.end_source) == (T0 + 62, "job.jsonl run_end")


def test_bad_lines_are_skipped_and_named(tmp_path: Path) -> None:
    folder = killed_and_restarted(tmp_path / "job")
    good = (folder / ev.LEDGER_FILE).read_text().splitlines(keepends=True)
    bad = [json.dumps({**event(ev.EVALUATION, 2, T0 + 50, duration_s=1.0, source="x"),
                       "schema": "other/1"}) + "\n",
           "not json\n",
           json.dumps(event("lunch", 2, T0 + 51)) + "\n",
           json.dumps(event(ev.CHECKPOINT_SAVE, 2, T0 + 52, duration_s="long", step=1,
                            path=None, source="meter")) + "\n"]
    (folder / ev.LEDGER_FILE).write_text("".join(good[:4] + bad + good[4:]) + '{"schema": "tr')
    job = read_job(folder)
    assert len(job.events) == len(good)
    ledger = folder / ev.LEDGER_FILE
    assert job.notes == [
        f"{ledger}:5: skipped 5 lines that are not a trainpace.job/1 event (line 5: schema is "
        "'other/1', expected 'trainpace.job/1'; also lines 6, 7, 8, 14)"]
    result = goodput(job)  # the figures of the good lines, as before
    assert result.wall_s == pytest.approx(62.0)
    assert result.categories.lost_steps == 10


def test_a_cut_off_last_line_is_said_as_such(tmp_path: Path) -> None:
    folder = killed_and_restarted(tmp_path / "job")
    with (folder / ev.LEDGER_FILE).open("a") as stream:
        stream.write('{"schema": "trainpace.job/1", "ev')
    notes = read_job(folder).notes
    assert len(notes) == 1 and "cut off (a process killed mid-write)" in notes[0]


def test_a_run_folder_from_another_job_is_left_out(tmp_path: Path) -> None:
    folder = killed_and_restarted(tmp_path / "job")
    write_run(folder / ev.RUNS_DIR / "stranger", "stranger", T0 + 1,
              steps(contiguous(0.0, [(1.0, 0.0)])))
    write_run(folder / ev.RUNS_DIR / "imposter", "job.3", T0 + 1,
              steps(contiguous(0.0, [(1.0, 0.0)])), argv=["other.py"])
    (folder / ev.LEDGER_FILE).write_text((folder / ev.LEDGER_FILE).read_text() + json.dumps(
        run_start(3, T0 + 70, "job.3", T0 + 70)) + "\n")
    job = read_job(folder)
    stranger = [n for n in job.notes if "stranger" in n]
    assert stranger == [f"{folder / 'runs' / 'stranger'}: a run folder from another job (its "
                        "run id 'stranger' is not one of "
                        f"{folder / ev.LEDGER_FILE}'s runs: 'job', 'job.2', 'job.3'); left "
                        "out. Move it out of the job folder"]
    assert any("imposter: a run folder from another job (its command 'other.py' is not run "
               "3's" in n for n in job.notes)
    assert [r.run_id for r in job.runs] == ["job", "job.2", "job.3"]
    assert job.runs[2].data is None  # its only folder was another command's
    assert any("run 3 ('job.3') has no run folder here" in n for n in job.notes)


def test_a_clock_that_went_backwards_between_runs(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write_run(folder / ev.RUNS_DIR / "job", "job", T0, steps(contiguous(1.0, [(1.0, 0.0)] * 2)),
              warmup=0)
    write_run(folder, "job.2", T0 - 100, steps(contiguous(1.0, [(1.0, 0.0)] * 2)), warmup=0)
    write_ledger(folder, [run_start(1, T0, "job", T0),
                          run_start(2, T0 - 100, "job.2", T0 - 100)])
    job = read_job(folder)
    assert len(job.notes) == 1
    assert "the clock went backwards between runs 1 and 2 (run 2 starts 103.000 s before" in (
        job.notes[0])
    result = goodput(job)
    assert result.wall_s == pytest.approx(6.0)
    assert result.pct == pytest.approx(100 * 4.0 / 6.0)


def test_a_run_killed_before_its_first_step(tmp_path: Path) -> None:
    folder = killed_and_restarted(tmp_path / "job")
    lines = (folder / ev.LEDGER_FILE).read_text()
    lines += json.dumps(run_start(3, T0 + 70, "job.3", T0 + 65)) + "\n"
    lines += json.dumps(event(ev.CHECKPOINT_LOAD, 3, T0 + 72, duration_s=2.0, path="ckpt.pt",
                              saved_by_run=None, saved_at_step=None, source="torch.save")) + "\n"
    (folder / ev.LEDGER_FILE).write_text(lines)
    job = read_job(folder)
    third = job.runs[2]
    assert (third.status, third.first_step_unix_s, third.end_unix_s) == ("killed", None, T0 + 74)
    assert any("run 3 ('job.3') ended (killed) before its first step; all of its time is "
               "counted as startup" in n for n in job.notes)
    result = goodput(job)
    assert result.runs[2].categories.startup_s == pytest.approx(9.0 - 2.0)
    assert result.categories.checkpoint_load_s == pytest.approx(1.5 + 2.0)
    assert result.wall_s == pytest.approx(74.0)


def test_not_a_job_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="not a trainpace run folder"):
        read_job(tmp_path)


def test_a_torchrun_job_is_timed_from_rank_0s_steps(tmp_path: Path) -> None:
    """rank 0 writes the job's top-level files; its steps are in rank0/."""
    folder = tmp_path / "job"
    write_run(folder / "rank0", "job", T0 + 1, steps(contiguous(2.0, [(1.0, 0.0)] * 3)),
              warmup=0)
    write_run(folder, "job", T0, [], warmup=0)
    (folder / "steps.jsonl").unlink()
    write_ledger(folder, [run_start(1, T0, "job", T0)])
    (run,) = read_job(folder).runs
    assert (run.steps, run.meter_start_unix_s) == (3, T0 + 1)
    assert (run.first_step_unix_s, run.last_step_end_unix_s) == (T0 + 3, T0 + 6)
