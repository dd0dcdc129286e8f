"""Issue 26's data losses in the Meter: a script that changes directory, a Ctrl-C caught by
the loop. Real processes, real signals, real files."""

import json
import subprocess
import sys
import textwrap

import torch

import trainpace
from trainpace.runlog import read_run


def run_child(code, cwd, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=True)


def test_a_relative_run_folder_stays_where_it_was_when_the_script_changes_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "runs" / "x").mkdir(parents=True)  # a folder of the same name over there
    run_child(f"""
        import os, torch, trainpace
        meter = trainpace.Meter("runs/x", window=5, console=False, report=False,
                                count_flops=False)
        for i, b in enumerate(meter.loader([torch.zeros(2)] * 57)):
            if i == 7:
                os.chdir({str(elsewhere)!r})  # Hydra below 1.2 does this
            with meter.step(b):
                pass
        meter.finish()
    """, cwd=tmp_path)
    run = read_run(tmp_path / "runs" / "x")
    assert [s["step"] for s in run.steps] == list(range(1, 58))
    assert run.summary is not None and run.summary.steps.total == 57
    assert list((elsewhere / "runs" / "x").iterdir()) == []  # nothing written there


def test_the_folder_is_resolved_when_the_meter_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    meter = trainpace.Meter("runs/y", console=False, report=False, count_flops=False)
    assert meter.path == tmp_path / "runs" / "y" and meter.config.out.is_absolute()
    meter.finish()


def test_a_ctrl_c_inside_the_steps_entry_leaves_the_next_steps_recorded(tmp_path, clock,
                                                                        monkeypatch):
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=4, console=False,
                            report=False, count_flops=False)
    recorder = meter._recorder
    real_enter, calls = recorder.enter, []

    def enter_once_interrupted(accumulate):
        calls.append(accumulate)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a SIGINT landing inside the entry
        return real_enter(accumulate)

    monkeypatch.setattr(recorder, "enter", enter_once_interrupted)
    interrupted = 0
    for b in meter.loader([torch.zeros(2)] * 10):
        try:
            with meter.step(b):
                clock.advance(0.1)
        except KeyboardInterrupt:  # "Ctrl-C to evaluate": the loop goes on
            interrupted += 1
    summary = meter.finish()
    assert interrupted == 1
    assert summary.steps.total == 9  # every step but the interrupted one
    assert [s["step"] for s in read_run(meter.path).steps] == list(range(1, 10))


def test_a_ctrl_c_inside_the_steps_exit_loses_that_step_only(tmp_path, clock, monkeypatch):
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=4, console=False,
                            report=False, count_flops=False)
    recorder = meter._recorder
    real_exit, calls = recorder.exit, []

    def exit_once_interrupted(batch, failed):
        calls.append(failed)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real_exit(batch, failed)

    monkeypatch.setattr(recorder, "exit", exit_once_interrupted)
    for b in meter.loader([torch.zeros(2)] * 10):
        try:
            with meter.step(b):
                clock.advance(0.1)
        except KeyboardInterrupt:
            pass
    assert meter.finish().steps.total == 9


SIGINTS = """
import json, signal, sys
import torch, trainpace

meter = trainpace.Meter(sys.argv[1], window=10, console=False, report=False, count_flops=False)
recorder = meter._recorder
real = {"enter": recorder.enter, "exit": recorder.exit}
calls = {"enter": 0, "exit": 0}

def signalled(name):
    # a real SIGINT to this process, from inside the step's entry (or exit) every 97th
    # call: Python's own handler raises KeyboardInterrupt there, as at a Ctrl-C
    def wrapper(*args):
        calls[name] += 1
        if calls[name] % 97 == 0:
            signal.raise_signal(signal.SIGINT)
        return real[name](*args)
    return wrapper

recorder.enter, recorder.exit = signalled("enter"), signalled("exit")
done = caught = 0
batch = torch.zeros(2)
for _ in range(3000):
    try:
        with meter.step(batch):
            pass
        done += 1
    except KeyboardInterrupt:  # the loop catches Ctrl-C and goes on
        caught += 1
summary = meter.finish()
print(json.dumps({"done": done, "caught": caught, "recorded": summary.steps.total}))
"""


def test_real_sigints_inside_the_steps_entry_and_exit_lose_those_steps_only(tmp_path):
    out = run_child(SIGINTS.replace("sys.argv[1]", repr(str(tmp_path / "run"))), cwd=tmp_path)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["caught"] + figures["done"] == 3000 and figures["caught"] >= 60
    # before the fix, the first SIGINT inside an entry switched the Meter off for good
    assert figures["recorded"] == figures["done"]
