"""Real local ranks (torch.multiprocessing.spawn and torchrun, gloo on the CPU): each rank's
host sampler counts both ranks in its job column."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launched import kill_job

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("local_ranks.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_each_rank_counts_both_ranks_as_its_job(tmp_path, launcher):
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    command = ([sys.executable, str(SCRIPT), str(tmp_path), str(free_port())]
               if launcher == "spawn" else
               [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node=2", str(SCRIPT), str(tmp_path)])
    job = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = job.communicate(timeout=180)
    finally:
        kill_job(job)
    assert job.returncode == 0, output[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    pids = {r["pid"] for r in ranks}
    assert len(pids) == 2
    for r in ranks:
        assert pids <= set(r["job_pids"])
        assert r["job_cpu_pct"] >= r["process_cpu_pct"]
