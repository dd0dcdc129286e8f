"""The job ledger against a Lightning fit's and an HF Trainer's own account: trained with the
framework's checkpoints and evaluations, SIGKILLed mid-way, restarted with the same command,
resumed from the framework's last checkpoint (``ckpt_path=``, ``resume_from_checkpoint=``),
finished. Every event within 2% of the job's wall time, the lost steps exact, whether the kill
came after the next batch's fetch or between the optimizer step and that fetch (trainpace's step
still open: the progress map counts it done from the optimizer step)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from job.test_truth import MAIN, TICK_S, environment, lines, wall_less_boot_s

SCRIPT = Path(__file__).parent / "framework_truth_script.py"

pytestmark = pytest.mark.slow


def kill_and_restart(tmp_path, framework, kill_when):
    command = [sys.executable, str(SCRIPT), framework, str(tmp_path), kill_when]
    spawned = []
    for expected in (-signal.SIGKILL, 0):
        spawned.append(time.time())
        # its own session: nothing it starts outlives the test
        ran = subprocess.Popen(command, cwd=tmp_path, env=environment(meter=False),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            _, stderr = ran.communicate(timeout=300)
        finally:
            if ran.poll() is None:
                os.killpg(ran.pid, signal.SIGKILL)
                ran.wait()
        assert ran.returncode == expected, stderr[-3000:]
    return spawned, lines(tmp_path / "truth.jsonl"), lines(tmp_path / "job" / "job.jsonl")


@pytest.mark.parametrize("kill_when", ["fetched", "stepped"])
@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_the_ledger_holds_what_the_framework_run_measured(tmp_path, framework, kill_when):
    pytest.importorskip("lightning.pytorch" if framework == "lightning" else "transformers")
    wall_less_boot_before_s = wall_less_boot_s()
    spawned, truth, ledger = kill_and_restart(tmp_path, framework, kill_when)
    slewed_s = abs(wall_less_boot_s() - wall_less_boot_before_s)
    facts = {name: [t for t in truth if t["fact"] == name]
             for name in ("start", "first_step", "save", "load", "evaluation")}
    (killed,) = [t for t in truth if t["fact"] == "killed"]
    (end,) = [t for t in truth if t["fact"] == "end"]
    runs = [e for e in ledger if e["event"] == "run_start"]
    assert [(e["run"], e["run_id"]) for e in runs] == [(1, "job"), (2, "job.2")]
    wall_s = end["unix_s"] - runs[0]["process_start_unix_s"]
    close = 0.02 * wall_s  # the bound: 2% of the job's wall time

    def near(ledger_s, truth_s):
        return abs(ledger_s - truth_s) <= close

    # each run's process start, between the test's spawn and the script's first line (to a
    # clock tick, and what the wall clock was slewed by meanwhile: see wall_less_boot_s)
    bound_s = TICK_S + slewed_s
    for run, spawn_s, start in zip(runs, spawned, facts["start"], strict=True):
        assert spawn_s - bound_s <= run["process_start_unix_s"] <= start["unix_s"] + bound_s
    firsts = [e for e in ledger if e["event"] == "first_step"]
    assert [e["run"] for e in firsts] == [1, 2]
    for first, fact in zip(firsts, facts["first_step"], strict=True):
        assert near(first["unix_s"], fact["unix_s"])

    # the framework's saves, each at the run's own step, as long as the script saw them take
    resumed_at = max(t["step"] for t in facts["save"] if t["step"] <= killed["steps_done"])
    saves = [e for e in ledger if e["event"] == "checkpoint_save"]
    assert [(e["run"], e["step"], e["source"]) for e in saves] == [
        (1, t["step"], framework) if t["step"] <= killed["steps_done"]
        else (2, t["step"] - resumed_at, framework) for t in facts["save"]]
    for event, fact in zip(saves, facts["save"], strict=True):
        assert near(event["unix_s"], fact["unix_s"])
        assert near(event["duration_s"], fact["duration_s"])

    # the resuming load(s): timed, in run 2, naming the save they came from
    loads = [e for e in ledger if e["event"] == "checkpoint_load"]
    assert len(loads) == len(facts["load"]) >= 1
    for event, fact in zip(loads, facts["load"], strict=True):
        assert (event["run"], event["saved_by_run"], event["saved_at_step"]) == (
            2, 1, resumed_at)
        assert near(event["unix_s"], fact["unix_s"])
        assert near(event["duration_s"], fact["duration_s"])

    # the evaluations of each run
    evaluations = [e for e in ledger if e["event"] == "evaluation"]
    assert [e["run"] for e in evaluations] == [
        1 if t["step"] <= killed["steps_done"] else 2 for t in facts["evaluation"]]
    for event, fact in zip(evaluations, facts["evaluation"], strict=True):
        assert near(event["unix_s"], fact["unix_s"])
        assert near(event["duration_s"], fact["duration_s"])

    # the killed run's last step exact; the lost steps exact, in the ledger and the goodput
    last_of_killed = max(e["step"] for e in ledger if e["event"] == "progress" and e["run"] == 1)
    assert last_of_killed == killed["steps_done"]
    (run_end,) = [e for e in ledger if e["event"] == "run_end"]
    assert (run_end["run"], run_end["status"], run_end["last_step"]) == (
        2, "finished", end["steps_done"] - resumed_at)
    report = subprocess.run([sys.executable, "-c", MAIN, "report", "--json",
                             str(tmp_path / "job")], env=environment(meter=False),
                            capture_output=True, text=True, timeout=120, check=True)
    goodput = json.loads(report.stdout)["goodput"]
    categories = goodput["categories"]
    assert categories["lost_steps"] == killed["steps_done"] - resumed_at
    for name, fact in (("checkpoint_save_s", "save"), ("checkpoint_load_s", "load"),
                       ("evaluation_s", "evaluation")):
        assert near(categories[name], sum(t["duration_s"] for t in facts[fact]))
    assert goodput["wall_s"] == pytest.approx(wall_s, abs=close)
