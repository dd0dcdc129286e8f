"""How a run ended, in the job's ledger: finished, failed, interrupted by a signal."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainpace
from trainpace.cli._run_end import ledger_end
from trainpace.cli._run_signals import _Terminated

SCRIPTS = Path(__file__).parents[1] / "cli" / "scripts"
SRC = str(Path(trainpace.__file__).resolve().parents[1])
MAIN = "import sys; from trainpace.cli import main; sys.exit(main())"


@pytest.mark.parametrize(("failure", "end"), [
    (None, ("finished", None)),
    (SystemExit(0), ("finished", None)),
    (SystemExit(3), ("failed", None)),
    (ValueError("x"), ("failed", None)),
    (KeyboardInterrupt(), ("interrupted", "SIGINT")),
    (_Terminated(), ("interrupted", "SIGTERM")),
])
def test_the_outcome_of_a_script_is_its_run_end(failure, end):
    assert ledger_end(failure) == end


def run(out, script, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [SRC, *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.Popen([sys.executable, "-c", MAIN, "run", "--quiet", "--window", "5",
                             "--out", str(out), script, *map(str, args)], cwd=SCRIPTS, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_end(out):
    (end,) = [e for e in map(json.loads, (out / "job.jsonl").read_text().splitlines())
              if e["event"] == "run_end"]
    steps = (out / "steps.jsonl").read_text().splitlines()
    return end, len(steps)


@pytest.mark.slow
def test_trainpace_run_a_script_that_raises_ends_failed(tmp_path):
    process = run(tmp_path / "job", "raises.py")
    process.communicate(timeout=120)
    assert process.returncode == 1
    end, steps = run_end(tmp_path / "job")
    assert (end["status"], end["signal"], end["last_step"]) == ("failed", None, 10)
    assert steps == 10


@pytest.mark.slow
def test_trainpace_run_ended_by_sigterm_is_interrupted(tmp_path):
    flag = tmp_path / "flag"
    process = run(tmp_path / "job", "until_killed.py", flag)
    deadline = time.monotonic() + 90
    while not flag.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert flag.exists(), process.communicate()
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM
    end, steps = run_end(tmp_path / "job")
    assert (end["status"], end["signal"]) == ("interrupted", "SIGTERM")
    assert end["last_step"] == steps >= 20
