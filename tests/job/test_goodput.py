"""The goodput of hand-made jobs: every category exact, summing to the wall time."""

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
from trainpace.job import events as ev
from trainpace.job.goodput import goodput
from trainpace.job.ledger import read_job
from trainpace.sinks.names import summary_scalars
from trainpace.summary import Summary
from trainpace.summary_goodput import GOODPUT_CATEGORIES, Goodput

EXACT = 1e-9


def _sums_to_wall(result) -> None:
    parts = [getattr(result.categories, f"{name}_s") or 0.0 for name in GOODPUT_CATEGORIES]
    assert sum(parts) + result.productive_s == pytest.approx(result.wall_s, abs=EXACT)


def test_killed_and_restarted_job_every_category_exact(tmp_path: Path) -> None:
    result = goodput(read_job(killed_and_restarted(tmp_path / "job")))
    c = result.categories
    assert result.wall_s == pytest.approx(62.0, abs=EXACT)
    assert result.productive_s == pytest.approx(18.0, abs=EXACT)
    assert result.pct == pytest.approx(100 * 18.0 / 62.0, abs=EXACT)
    expected = {"startup_s": 10.0 + 4.5, "warmup_excess_s": 2.1 + 1.1, "data_wait_s": 1.8,
                "evaluation_s": 3.0, "checkpoint_save_s": 2.0, "checkpoint_load_s": 1.5,
                "lost_progress_s": 10.0, "restart_gap_s": 6.0, "teardown_s": 1.5,
                "other_s": 0.5}
    assert {k: getattr(c, k) for k in expected} == pytest.approx(expected, abs=EXACT)
    assert c.lost_steps == 10
    assert result.shares_pct["lost_progress"] == pytest.approx(100 * 10.0 / 62.0, abs=EXACT)
    assert result.missing == {}
    _sums_to_wall(result)
    first, second = result.runs
    assert (first.status, first.steps, first.kept_steps, first.resumed_from) == (
        "killed", 20, 10, "run 1, step 10")
    assert (second.status, second.kept_steps, second.categories.restart_gap_s) == (
        "finished", 10, 6.0)
    assert first.productive_s == pytest.approx(9.0, abs=EXACT)
    assert result.notes == []


def test_bands_lay_out_the_timeline(tmp_path: Path) -> None:
    result = goodput(read_job(killed_and_restarted(tmp_path / "job")))
    first, second = ([(b["category"], round(b["start_s"], 9), round(b["end_s"], 9))
                      for b in run.bands] for run in result.runs)
    assert first == [("checkpoint_save", 22.0, 24.0), ("startup", 0.0, 10.0),
                     ("training", 10.0, 24.0), ("lost_progress", 24.0, 34.0)]
    assert second == [("checkpoint_load", 43.0, 44.5), ("evaluation", 57.5, 60.5),
                      ("restart_gap", 34.0, 40.0), ("startup", 40.0, 46.0),
                      ("training", 46.0, 57.5), ("teardown", 57.5, 62.0)]


def test_the_save_the_next_run_loaded_decides_the_lost_steps(tmp_path: Path) -> None:
    """Without saved_at_step in the load, the run's last save decides."""
    folder = killed_and_restarted(tmp_path / "job")
    lines = (folder / ev.LEDGER_FILE).read_text().replace('"saved_by_run": 1', '"saved_by_run": null')
    (folder / ev.LEDGER_FILE).write_text(lines)
    result = goodput(read_job(folder))
    assert result.categories.lost_steps == 10
    assert result.runs[0].resumed_from == "run 1, step 10 (its last save; the next run's load did not say)"


def test_a_run_with_no_save_loses_all_its_steps_when_the_job_saves(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write_run(folder / ev.RUNS_DIR / "job", "job", T0, steps(contiguous(1.0, [(1.0, 0.0)] * 4)),
              warmup=0)
    write_run(folder, "job.2", T0 + 10, steps(contiguous(1.0, [(1.0, 0.0)] * 4)), warmup=0)
    write_ledger(folder, [
        run_start(1, T0, "job", T0),
        run_start(2, T0 + 10, "job.2", T0 + 10),
        event(ev.CHECKPOINT_SAVE, 2, T0 + 15, duration_s=0.5, step=4, path="c", source="meter"),
        event(ev.RUN_END, 2, T0 + 16, status="finished", last_step=4,
              last_step_end_unix_s=T0 + 15, signal=None),
    ])
    result = goodput(read_job(folder))
    assert result.categories.lost_steps == 4
    assert result.categories.lost_progress_s == pytest.approx(4.0, abs=EXACT)
    assert result.categories.restart_gap_s == pytest.approx(5.0, abs=EXACT)
    _sums_to_wall(result)


def test_unmeasured_categories_are_null_with_the_reason(tmp_path: Path) -> None:
    """No save or load recorded: saves, loads, evaluation and lost progress are unknown, and
    the killed run's steps stay kept (said so)."""
    folder = tmp_path / "job"
    write_run(folder / ev.RUNS_DIR / "job", "job", T0, steps(contiguous(1.0, [(1.0, 0.0)] * 4)),
              warmup=0)
    write_run(folder, "job.2", T0 + 10, steps(contiguous(1.0, [(1.0, 0.0)] * 4)), warmup=0)
    write_ledger(folder, [run_start(1, T0, "job", T0), run_start(2, T0 + 10, "job.2", T0 + 10)])
    result = goodput(read_job(folder))
    c = result.categories
    assert (c.checkpoint_save_s, c.checkpoint_load_s, c.evaluation_s, c.lost_progress_s,
            c.lost_steps) == (None, None, None, None, None)
    assert set(result.missing) == {"checkpoint_save", "checkpoint_load", "evaluation",
                                   "lost_progress"}
    assert "which of its steps were done again is not known" in result.missing["lost_progress"]
    assert "checkpoint_save" not in result.sources
    assert result.shares_pct["checkpoint_save"] is None
    assert result.productive_s == pytest.approx(8.0, abs=EXACT)
    assert result.wall_s == pytest.approx(15.0, abs=EXACT)
    assert c.startup_s == pytest.approx(2.0, abs=EXACT)
    _sums_to_wall(result)


def test_a_run_folder_without_a_ledger_is_a_job_of_one_run(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "run", "run", T0,
                       steps(contiguous(2.0, [(3.0, 0.0)] + [(1.0, 0.25)] * 4)), finished=False)
    result = goodput(read_job(folder))
    c = result.categories
    assert result.wall_s == pytest.approx(9.0, abs=EXACT)  # the Meter's start -> last step
    assert c.startup_s == pytest.approx(2.0, abs=EXACT)
    assert c.warmup_excess_s == pytest.approx(3.0 - 0.75, abs=EXACT)
    assert c.data_wait_s == pytest.approx(1.0, abs=EXACT)
    assert result.productive_s == pytest.approx(3.75, abs=EXACT)
    assert result.pct == pytest.approx(100 * 3.75 / 9.0, abs=EXACT)
    assert "imports before it are not seen" in result.sources["startup"]
    assert set(result.missing) == {"evaluation", "checkpoint_save", "checkpoint_load"}
    _sums_to_wall(result)


def test_overlapping_runs_are_laid_end_to_end(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    write_run(folder / ev.RUNS_DIR / "job", "job", T0, steps(contiguous(1.0, [(1.0, 0.0)] * 4)),
              warmup=0)
    write_run(folder, "job.2", T0 + 3, steps(contiguous(1.0, [(1.0, 0.0)] * 4)), warmup=0)
    write_ledger(folder, [run_start(1, T0, "job", T0), run_start(2, T0 + 3, "job.2", T0 + 3)])
    job = read_job(folder)
    assert any("runs 1 and 2 overlap (run 2 starts 2.000 s before run 1's last record)" in n
               for n in job.notes)
    result = goodput(job)
    assert result.wall_s == pytest.approx(10.0, abs=EXACT)  # 5 + 5: end to end, no gap
    assert result.categories.restart_gap_s == 0.0
    _sums_to_wall(result)


def test_the_figures_the_checkpoint_advice_needs(tmp_path: Path) -> None:
    result = goodput(read_job(killed_and_restarted(tmp_path / "job")))
    assert (result.failures, result.checkpoint_saves) == (1, 1)
    assert result.checkpoint_save_s_mean == pytest.approx(2.0, abs=EXACT)
    assert result.checkpoint_interval_s is None  # one save: no spacing to measure
    assert result.step_s_median == pytest.approx(1.0, abs=EXACT)
    first, second = result.runs
    assert (first.warmup_steps, second.warmup_steps) == (1, 1)
    assert first.first_step_excess_s == pytest.approx(2.1, abs=EXACT)
    assert second.first_step_excess_s == pytest.approx(1.1, abs=EXACT)
    assert (first.meter_start_unix_s, second.meter_start_unix_s) == (T0 + 2, T0 + 41)


def test_the_goodput_section_round_trips_through_summary_json(tmp_path: Path) -> None:
    result = goodput(read_job(killed_and_restarted(tmp_path / "job")))
    data = json.loads(json.dumps(Summary(goodput=result).to_dict()))
    assert set(data["goodput"]["categories"]) == {
        *(f"{name}_s" for name in GOODPUT_CATEGORIES), "lost_steps"}
    assert Summary.from_dict(data).goodput == result
    older = {k: v for k, v in data.items() if k != "goodput"}  # a writer before jobs
    assert Summary.from_dict(older).goodput == Goodput()
    empty = Summary().to_dict()["goodput"]
    assert empty["pct"] is None and empty["categories"]["startup_s"] is None


def test_the_goodput_reaches_the_sinks_as_tags(tmp_path: Path) -> None:
    result = goodput(read_job(killed_and_restarted(tmp_path / "job")))
    tags = summary_scalars(Summary(goodput=result).to_dict())
    goodput_tags = {k: v for k, v in tags.items() if k.startswith("trainpace/goodput/")}
    assert goodput_tags == pytest.approx({
        "trainpace/goodput/pct": 100 * 18 / 62, "trainpace/goodput/wall_s": 62.0,
        "trainpace/goodput/lost_steps": 10.0,
        **{f"trainpace/goodput/{name}_pct": 100 * s / 62 for name, s in (
            ("startup", 14.5), ("warmup_excess", 3.2), ("data_wait", 1.8), ("evaluation", 3.0),
            ("checkpoint_save", 2.0), ("checkpoint_load", 1.5), ("lost_progress", 10.0),
            ("restart_gap", 6.0), ("teardown", 1.5), ("other", 0.5))}})
    assert not any(k.startswith("trainpace/goodput/") for k in summary_scalars(Summary().to_dict()))


def test_an_untimed_load_still_names_the_save_and_bounds_are_said(tmp_path: Path) -> None:
    """A load a framework could not time (HF's callback alone): no duration, its time stays in
    the startup it fell in, and the lost progress still comes from the save it names; a save
    timed as an upper bound is counted and said so."""
    folder = killed_and_restarted(tmp_path / "job")
    ledger = folder / ev.LEDGER_FILE
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    bound = "upper bound: since the end of HF's on_log hook"
    for line in lines:
        if line["event"] == ev.CHECKPOINT_LOAD:
            line.update(duration_s=None, timing="not timed: before any hook")
        if line["event"] == ev.CHECKPOINT_SAVE:
            line["timing"] = bound
    ledger.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = goodput(read_job(folder))
    c = result.categories
    assert (c.checkpoint_load_s, c.startup_s, c.checkpoint_save_s) == (None, 16.0, 2.0)
    assert result.missing["checkpoint_load"] == (
        "the checkpoint loads in job.jsonl were not timed (not timed: before any hook); their "
        "time is in the part of the run they fell in")
    assert (c.lost_steps, c.lost_progress_s) == (10, 10.0)
    _sums_to_wall(result)
    assert result.notes == [
        f"1 timed event is an upper bound (the first: checkpoint_save, {bound})",
        "run 2's checkpoint_load at 1800000043.000 was not timed (not timed: before any hook): "
        "its time is in the part of the run it fell in"]


def test_lost_steps_past_steps_jsonl_come_from_the_ledger(tmp_path: Path) -> None:
    """A SIGKILL loses the window being written: run 1's steps.jsonl ends at step 15, the
    ledger's progress (the progress map) says step 20 ended at T0+34. Every figure is as if
    steps.jsonl held them all."""
    folder = killed_and_restarted(tmp_path / "job")
    steps_file = folder / ev.RUNS_DIR / "job" / "steps.jsonl"
    steps_file.write_text("".join(steps_file.read_text().splitlines(keepends=True)[:15]))
    result = goodput(read_job(folder))
    c = result.categories
    assert (c.lost_steps, c.lost_progress_s, c.other_s, c.checkpoint_save_s) == (
        10, pytest.approx(10.0, abs=EXACT), pytest.approx(0.5, abs=EXACT), 2.0)
    assert result.productive_s == pytest.approx(18.0, abs=EXACT)
    _sums_to_wall(result)
    first = result.runs[0]
    assert (first.steps, first.kept_steps, first.categories.lost_steps) == (15, 10, 10)
    assert [(b["start_s"], b["end_s"]) for b in first.bands
            if b["category"] == "lost_progress"] == [(24.0, 34.0)]


def test_lost_steps_past_the_save_and_steps_jsonl_begin_at_the_save_end(tmp_path: Path) -> None:
    """steps.jsonl ends at step 8, before the step-10 save the next run resumed from: the lost
    steps 11-20 begin where that save ended (T0+24)."""
    folder = killed_and_restarted(tmp_path / "job")
    steps_file = folder / ev.RUNS_DIR / "job" / "steps.jsonl"
    steps_file.write_text("".join(steps_file.read_text().splitlines(keepends=True)[:8]))
    result = goodput(read_job(folder))
    c = result.categories
    assert (c.lost_steps, c.lost_progress_s) == (10, pytest.approx(10.0, abs=EXACT))
    _sums_to_wall(result)


def test_a_frameworks_step_killed_after_its_optimizer_step_is_a_lost_step(tmp_path: Path) -> None:
    """Under Lightning or the HF Trainer, the progress map has a step from its optimizer step
    on, before the step closes at the next fetch: run 1 was killed in step 20's framework work,
    after its optimizer stepped at T0+33.5, so steps.jsonl ends at step 19 (T0+33) and the
    ledger's progress is step 20, one beyond it, ended at T0+33.5. Steps 11-20 are lost: 10
    steps, 9 s of steps 11-19 and the 0.5 s of step 20 up to its optimizer step."""
    folder = killed_and_restarted(tmp_path / "job")
    steps_file = folder / ev.RUNS_DIR / "job" / "steps.jsonl"
    steps_file.write_text("".join(steps_file.read_text().splitlines(keepends=True)[:19]))
    ledger = folder / ev.LEDGER_FILE
    ledger.write_text(ledger.read_text().replace(
        json.dumps(event(ev.PROGRESS, 1, T0 + 34, step=20, step_end_unix_s=T0 + 34)),
        json.dumps(event(ev.PROGRESS, 1, T0 + 33.5, step=20, step_end_unix_s=T0 + 33.5))))
    job = read_job(folder)
    assert job.runs[0].last_step_end_unix_s == T0 + 33.5
    result = goodput(job)
    c = result.categories
    assert (c.lost_steps, c.lost_progress_s) == (10, pytest.approx(9.5, abs=EXACT))
    _sums_to_wall(result)
    first = result.runs[0]
    assert (first.steps, first.kept_steps, first.categories.lost_steps) == (19, 10, 10)
    assert first.categories.teardown_s == 0.0  # its end is that progress: its last record
    assert [(b["start_s"], b["end_s"]) for b in first.bands
            if b["category"] == "lost_progress"] == [(24.0, 33.5)]
