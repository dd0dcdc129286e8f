import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from trainpace.errors import RunFolderError
from trainpace.measure.summarize import summary_for_run
from trainpace.runlog import read_jsonl, read_run


def test_a_truncated_last_line_is_dropped(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "t_s": 0.1')
    records, truncated = read_jsonl(path)
    assert [r["step"] for r in records] == [1, 2]
    assert truncated


def test_a_bad_line_in_the_middle_is_an_error_naming_it(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"steps\.jsonl:2: not a JSON line"):
        read_jsonl(path)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no such folder"),
        (lambda p: p.write_text("x"), "not a folder"),
        (lambda p: p.mkdir(), "not a trainpace run folder"),
        (lambda p: (p.mkdir(), (p / "summary.json").write_text("{oops")), "not valid JSON"),
        (lambda p: (p.mkdir(), (p / "summary.json").write_text('{"schema": "x/9"}')), "schema is 'x/9'"),
        (lambda p: (p.mkdir(), (p / "meta.json").write_text('{"schema": "y"}')), "schema is 'y'"),
    ],
)
def test_bad_run_folders_are_clear_errors(tmp_path, setup, message):
    target = tmp_path / "run"
    setup(target)
    with pytest.raises(RunFolderError, match=message):
        read_run(target)


@pytest.mark.slow
def test_a_run_killed_with_sigkill_keeps_a_readable_folder(tmp_path):
    # The child stops after 65 steps (6 windows of 10 and 5 open) and is killed once the
    # sixth window is on disk: waited for, not slept for, so a loaded machine only makes it
    # slower. What SIGKILL may lose is the open window; nothing may be torn. A run this short
    # has no mid-run summary yet (the first refresh is 10 s in): the report's is rebuilt from
    # the steps.
    out = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import sys, time, torch, trainpace
        meter = trainpace.Meter({str(out)!r}, window=10, console=False, report=False,
                                count_flops=False)
        for i, b in enumerate(meter.loader(iter(lambda: torch.zeros(4, 2), None))):
            with meter.step(b):
                meter.observe(loss=1.0 / (i + 1))
            if i == 64:
                print("ready", flush=True)
                time.sleep(3600)  # stopped mid-run: the test kills it
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    def sixth_window_written():
        try:
            return (out / "steps.jsonl").read_text().count("\n") >= 60
        except OSError:
            return False

    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not sixth_window_written():
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    run = read_run(out)
    steps = [r["step"] for r in run.steps]
    assert steps == list(range(1, len(steps) + 1))  # nothing out of order, nothing missing
    assert 60 <= len(steps) <= 65  # the open window at most lost
    rebuilt = summary_for_run(run)
    assert rebuilt.steps.total == len(steps)
    assert rebuilt.throughput.samples_per_s > 0
    json.dumps(rebuilt.to_dict())


def _folder(tmp_path, lines, summary_total=None):
    from trainpace.runlog import META_SCHEMA

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"schema": META_SCHEMA, "run_id": "run"}))
    (folder / "steps.jsonl").write_text("".join(line + "\n" for line in lines))
    if summary_total is not None:
        from trainpace.summary import Steps, Summary

        (folder / "summary.json").write_text(json.dumps(Summary(steps=Steps(total=summary_total)).to_dict()))
    return folder


def _step(i, **changes):
    return json.dumps({"step": i, "t_s": 0.1 * i, "step_s": 0.1, "wait_s": 0.0, "samples": 4, **changes})


def test_read_run_skips_bad_lines_with_one_note_naming_file_and_line(tmp_path):
    lines = [_step(i) for i in range(1, 11)]
    lines[3] = _step(4, step_s="slow")
    lines[6] = _step(7, samples="many")
    run = read_run(_folder(tmp_path, lines))
    assert len(run.series) == 8
    path = tmp_path / "run" / "steps.jsonl"
    assert run.notes[0] == (f"{path}:4: skipped 2 lines that are not step records "
                            '(line 4: step_s is "slow", not a number; also lines 7)')
    # the skipped steps are then missing, and said so as ranges
    assert run.missing_steps == [(4, 4), (7, 7)]
    assert run.notes[1].startswith(f"{path}: 2 steps missing from the records: 4, 7 ")
    assert [r["step"] for r in run.steps] == [1, 2, 3, 5, 6, 8, 9, 10]


def test_steps_the_summary_counted_but_the_records_lack_are_missing(tmp_path):
    # the disk filled: steps 4-6 never reached steps.jsonl, and 9-10 came after the last line
    lines = [_step(i) for i in (1, 2, 3, 7, 8)]
    run = read_run(_folder(tmp_path, lines, summary_total=10))
    assert run.missing_steps == [(4, 6), (9, 10)]
    assert "5 steps missing from the records: 4-6, 9-10" in run.notes[-1]


def test_a_clean_run_has_no_notes(tmp_path):
    run = read_run(_folder(tmp_path, [_step(i) for i in range(1, 6)], summary_total=5))
    assert run.notes == [] and run.missing_steps == [] and run.truncated == []
