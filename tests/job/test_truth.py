"""The job ledger against a script's own account: trained, checkpointed, SIGKILLed mid-way,
restarted with the same command, resumed from its checkpoint, finished."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainpace

SCRIPT = Path(__file__).parent / "truth_script.py"
SRC = str(Path(trainpace.__file__).resolve().parents[1])
TICK_S = 0.01  # the kernel counts a process's start in clock ticks


def wall_less_boot_s():
    """The wall clock less the kernel's boot clock. A process's start is counted on the boot
    clock and given on the wall clock, so a wall clock slewed meanwhile (NTP, a virtual
    machine's clock sync: 5 ms a second seen here) moves the start given by as much as this
    moves; the start's bound allows for what it moved during the test."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
MAIN = "import sys; from trainpace.cli import main; sys.exit(main())"


def environment(meter):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [SRC, *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("TRAINPACE_JOB", None)
    if meter:
        env["TRUTH_METER"] = "1"
    else:
        env.pop("TRUTH_METER", None)
    return env


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def kill_and_restart(tmp_path, *, meter):
    """The script run twice by the same command: killed, then to its end."""
    if meter:
        command = [sys.executable, str(SCRIPT), str(tmp_path)]
    else:
        command = [sys.executable, "-c", MAIN, "run", "--quiet", "--window", "10", "--out",
                   str(tmp_path / "job"), str(SCRIPT), str(tmp_path)]
    spawned = [time.time()]
    killed = subprocess.run(command, cwd=tmp_path, env=environment(meter), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    spawned.append(time.time())
    done = subprocess.run(command, cwd=tmp_path, env=environment(meter), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return spawned, lines(tmp_path / "truth.jsonl"), lines(tmp_path / "job" / "job.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("meter", [True, False], ids=["Meter", "trainpace-run"])
def test_the_ledger_holds_what_the_script_measured_and_the_lost_steps_exactly(tmp_path, meter):
    wall_less_boot_before_s = wall_less_boot_s()
    spawned, truth, ledger = kill_and_restart(tmp_path, meter=meter)
    slewed_s = abs(wall_less_boot_s() - wall_less_boot_before_s)
    starts = [t for t in truth if t["fact"] == "start"]
    (killed,) = [t for t in truth if t["fact"] == "killed"]
    (end,) = [t for t in truth if t["fact"] == "end"]
    (load,) = [t for t in truth if t["fact"] == "load"]
    runs = [e for e in ledger if e["event"] == "run_start"]
    assert [(e["run"], e["run_id"]) for e in runs] == [(1, "job"), (2, "job.2")]
    wall_s = end["unix_s"] - runs[0]["process_start_unix_s"]
    close = 0.02 * wall_s  # the bound: 2% of the job's wall time

    def near(ledger_s, truth_s):
        return abs(ledger_s - truth_s) <= close

    # startup: the OS's start of each process, after the test made it and before the script's
    # first line ran (to a clock tick, and what the wall clock was slewed by meanwhile)
    bound_s = TICK_S + slewed_s
    for run, spawn_s, start in zip(runs, spawned, starts, strict=True):
        assert spawn_s - bound_s <= run["process_start_unix_s"] <= start["unix_s"] + bound_s
    firsts = [e for e in ledger if e["event"] == "first_step"]
    assert [e["run"] for e in firsts] == [1, 2]
    for first, fact in zip(firsts, [t for t in truth if t["fact"] == "first_step"], strict=True):
        assert near(first["unix_s"], fact["unix_s"])

    # saves: each one, at the run's own step, for as long as the script saw it take
    resumed_at = load["step"]
    saves = [e for e in ledger if e["event"] == "checkpoint_save"]
    facts = [t for t in truth if t["fact"] == "save"]
    assert [(e["run"], e["step"]) for e in saves] == [
        (1 if t["step"] <= killed["steps_done"] else 2,
         t["step"] if t["step"] <= killed["steps_done"] else t["step"] - resumed_at)
        for t in facts]
    assert {e["path"] for e in saves} == {str(tmp_path / "ckpt.pt")}
    for event, fact in zip(saves, facts, strict=True):
        assert near(event["unix_s"], fact["unix_s"])
        assert near(event["duration_s"], fact["duration_s"])

    # the load names the save it resumed from
    (loaded,) = [e for e in ledger if e["event"] == "checkpoint_load"]
    assert loaded["run"] == 2
    assert (loaded["saved_by_run"], loaded["saved_at_step"]) == (1, resumed_at)
    assert near(loaded["unix_s"], load["unix_s"])
    assert near(loaded["duration_s"], load["duration_s"])

    # the killed run: no end, and its last step known exactly (not a window's worth earlier)
    ends = [e for e in ledger if e["event"] == "run_end"]
    assert [(e["run"], e["status"], e["last_step"]) for e in ends] == [
        (2, "finished", end["steps_done"] - resumed_at)]
    last_of_killed = max(e["step"] for e in ledger if e["event"] == "progress" and e["run"] == 1)
    assert last_of_killed == killed["steps_done"]
    assert killed["steps_done"] % 10 != 0  # between two windows of steps.jsonl
    last_save = max(e["step"] for e in saves if e["run"] == 1)
    assert last_of_killed - last_save == killed["steps_done"] - resumed_at  # lost steps, exact

    # the job folder: the killed run moved beside the one that finished
    job = tmp_path / "job"
    assert sorted(p.name for p in (job / "runs").iterdir()) == ["job"]
    assert json.loads((job / "runs" / "job" / "meta.json").read_text())["run_id"] == "job"
    assert json.loads((job / "meta.json").read_text())["run_id"] == "job.2"
    assert all(line["event"] in {"run_start", "first_step", "checkpoint_save", "checkpoint_load",
                                 "progress", "run_end"} for line in ledger)
