"""A 2-rank torchrun job (gloo on the CPU) whose rank 0 is SIGKILLed, restarted with the same
command: one job, its ranks' earlier folders moved together, the killed run's last step exact."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "dist" / "train_ddp.py"
SRC = Path(__file__).resolve().parents[2] / "src"


def torchrun(out, **env):
    full = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "OUT": str(out),
            "STEPS": "20", "WINDOW": "5", "STEP_SLEEP_S": "0.02",
            "TRAINPACE_DIST_TIMEOUT_S": "5", **env}
    full.pop("TRAINPACE_JOB", None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node=2", str(SCRIPT)], env=full, capture_output=True,
                          text=True, timeout=300, check=False)


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
