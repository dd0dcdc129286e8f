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
    out = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import sys, time, torch, trainpace
        meter = trainpace.Meter({str(out)!r}, window=10, console=False, report=False,
                                count_flops=False)
        for i, b in enumerate(meter.loader(iter(lambda: torch.zeros(4, 2), None))):
            with meter.step(b):
                time.sleep(0.002)
                meter.observe(loss=1.0 / (i + 1))
            if i == 64:
                print("ready", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.05)
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
    assert len(steps) >= 50  # at most the window being written and the open one lost
    assert run.summary is not None
    rebuilt = summary_for_run(run)
    assert rebuilt.steps.total == len(steps)
    assert rebuilt.throughput.samples_per_s > 0
    json.dumps(rebuilt.to_dict())
