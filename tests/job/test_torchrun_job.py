"""A 2-rank torchrun job (gloo on the CPU) whose rank 0 is SIGKILLed, restarted with the same
command: one job, its ranks' earlier folders moved together, the killed run's last step exact;
with checkpoints, the saves and the resuming load in rank 0's ledger and the lost steps exact."""

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "dist" / "train_ddp.py"
CHECKPOINTING = Path(__file__).parent / "ddp_checkpoint_script.py"
SRC = Path(__file__).resolve().parents[2] / "src"
MAIN = "import sys; from trainpace.cli import main; sys.exit(main())"


def torchrun(out, script=SCRIPT, **env):
    full = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "OUT": str(out),
            "STEPS": "20", "WINDOW": "5", "STEP_SLEEP_S": "0.02",
            "TRAINPACE_DIST_TIMEOUT_S": "5", **env}
    full.pop("TRAINPACE_JOB", None)
    # its own session: whatever the launcher leaves behind is ended with it
    launched = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                 "--nproc-per-node=2", str(script)], env=full,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        stdout, stderr = launched.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launched.pid, signal.SIGKILL)
        launched.wait()
    return subprocess.CompletedProcess(launched.args, launched.returncode, stdout, stderr)


def test_a_killed_torchrun_job_restarted_is_one_job(tmp_path):
    out = tmp_path / "run"
    killed = torchrun(out, KILL_RANK="0", KILL_STEP="13")
    assert killed.returncode != 0
    assert f"exitcode  : {-signal.SIGKILL}" in killed.stderr or "SIGKILL" in killed.stderr
    done = torchrun(out)
    assert done.returncode == 0, done.stderr[-3000:]
    ledger = [json.loads(line) for line in (out / "job.jsonl").read_text().splitlines()]
    starts = [e for e in ledger if e["event"] == "run_start"]
    assert [(e["run"], e["run_id"], e["world_size"]) for e in starts] == [
        (1, "run", 2), (2, "run.2", 2)]
    # rank 0's last step before its SIGKILL, between two windows of its steps.jsonl
    assert max(e["step"] for e in ledger if e["event"] == "progress" and e["run"] == 1) == 13
    (end,) = [e for e in ledger if e["event"] == "run_end"]
    assert (end["run"], end["status"], end["last_step"]) == (2, "finished", 20)
    # each rank's earlier folder beside the job's earlier files; every rank says its run id
    earlier = out / "runs" / "run"
    assert {"rank0", "rank1", "meta.json"} <= {p.name for p in earlier.iterdir()}
    for rank in (0, 1):
        assert json.loads((earlier / f"rank{rank}" / "meta.json").read_text())["run_id"] == "run"
        assert json.loads((out / f"rank{rank}" / "meta.json").read_text())["run_id"] == "run.2"
        steps = (out / f"rank{rank}" / "steps.jsonl").read_text().splitlines()
        assert [json.loads(s)["step"] for s in steps] == list(range(1, 21))  # this run's only


def test_a_checkpointing_torchrun_job_restarted_resumes_and_loses_exactly_its_last_steps(
        tmp_path):
    out = tmp_path / "run"
    env = {"WORK": str(tmp_path), "SAVE_EVERY": "4", "KILL_AT": "15"}
    killed = torchrun(out, CHECKPOINTING, **env)
    assert killed.returncode != 0
    done = torchrun(out, CHECKPOINTING, **env)
    assert done.returncode == 0, done.stderr[-3000:]
    ledger = [json.loads(line) for line in (out / "job.jsonl").read_text().splitlines()]
    checkpoint = str(tmp_path / "ckpt.pt")
    # rank 0's saves, at each run's own steps: 4, 8, 12 before the kill; the job's steps 16
    # and 20 after the resume from step 12 (the run's 4 and 8)
    assert [(e["run"], e["step"], e["path"], e["source"]) for e in ledger
            if e["event"] == "checkpoint_save"] == [
        (1, 4, checkpoint, "torch.save"), (1, 8, checkpoint, "torch.save"),
        (1, 12, checkpoint, "torch.save"), (2, 4, checkpoint, "torch.save"),
        (2, 8, checkpoint, "torch.save")]
    (load,) = [e for e in ledger if e["event"] == "checkpoint_load"]
    assert (load["run"], load["path"], load["saved_by_run"], load["saved_at_step"]) == (
        2, checkpoint, 1, 12)
    assert max(e["step"] for e in ledger if e["event"] == "progress" and e["run"] == 1) == 15
    (end,) = [e for e in ledger if e["event"] == "run_end"]
    assert (end["run"], end["status"], end["last_step"]) == (2, "finished", 8)
    report = subprocess.run([sys.executable, "-c", MAIN, "report", "--json", str(out)],
                            env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
                            text=True, timeout=120, check=True)
    goodput = json.loads(report.stdout)["goodput"]
    assert goodput["categories"]["lost_steps"] == 15 - 12  # the steps after the last save
    # (the killed run's steps.jsonl holds what its writer had written: a window less at most)
    assert [(r["status"], r["categories"]["lost_steps"]) for r in goodput["runs"]] == [
        ("killed", 3), ("finished", 0)]
