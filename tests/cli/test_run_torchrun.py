"""``trainpace run`` under torchrun (real jobs: gloo on the CPU, 2 and 4 ranks): the job shown
once by rank 0, and what the survivors report when a rank is killed or stopped."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainpace
from launched import DEAD_RANK_TIMEOUT_S, kill_job

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "dist" / "run_ddp.py"
SRC = str(Path(trainpace.__file__).resolve().parents[1])
MAIN = "import sys; from trainpace.cli import main; sys.exit(main())"
WINDOW_LINE = re.compile(r"^(job, 2 ranks \| )?step (\d+) \|", re.MULTILINE)


def job_command(ranks, *run_args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", "--no-python", sys.executable, "-c", MAIN, "run",
            *map(str, run_args), "--", str(SCRIPT)]


def job_env(**extra):
    return {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1",
            **{k: str(v) for k, v in extra.items()}}


def torchrun(ranks, *run_args, timeout=120, **extra):
    return subprocess.run(job_command(ranks, *run_args), env=job_env(**extra),
                          capture_output=True, text=True, timeout=timeout, check=False)


def steps_of(folder):
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


def findings(summary):
    return {f["id"]: f for f in summary["diagnosis"]["findings"]}


def test_rank0_shows_the_job_once_and_names_the_straggler_on_a_short_job(tmp_path):
    out = tmp_path / "job"
    # 120 steps, the default window of 100: two windows, too few to score a straggler live
    done = torchrun(2, "--out", out, STEPS=120, SLOW_RANK=1, DELAY_S=0.01)
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    # the job's window lines, once each
    assert WINDOW_LINE.findall(err) == [("job, 2 ranks | ", "100"), ("job, 2 ranks | ", "120")], (
        err[-3000:])
    assert err.count("run folder:") == 1
    assert f"run folder: {out}  (see it again: trainpace report {out})" in err
    assert err.count(f"trainpace run run_ddp.py · {out} ") == 1  # one report: the job's
    assert [len(steps_of(out / f"rank{r}")) for r in (0, 1)] == [120, 120]
    merged = json.loads((out / "summary.json").read_text())
    assert (merged["world_size"], [r["rank"] for r in merged["ranks"]]) == (2, [0, 1])
    assert merged["diagnosis"]["bottleneck"] == "straggler"
    straggler = findings(merged)["straggler"]["evidence"]
    assert (straggler["rank"], straggler["cause"]) == (1, "data_wait")
    assert straggler["windows"] >= 3  # the ranks' steps replayed in shorter windows
    assert "Rank 1" in err and "holds the others back" in err


def test_all_ranks_each_rank_shows_its_own_and_rank0_the_job(tmp_path):
    out = tmp_path / "job"
    done = torchrun(2, "--out", out, "--all-ranks", "--window", 10, STEPS=20)
    assert done.returncode == 0, done.stderr[-3000:]
    folders = re.findall(r"^run folder: (\S+)", done.stderr, re.MULTILINE)
    assert sorted(folders) == sorted([str(out), str(out / "rank1")])
    assert done.stderr.count("trainpace run run_ddp.py · ") == 2


def test_four_ranks_json_one_object_the_jobs(tmp_path):
    out = tmp_path / "job"
    done = torchrun(4, "--out", out, "--json", "--window", 10, STEPS=30)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads(done.stdout)  # exactly one object on stdout: rank 0's, the job's
    assert merged["world_size"] == 4
    assert [r["rank"] for r in merged["ranks"]] == [0, 1, 2, 3]
    assert merged["steps"]["total"] == 30
    assert json.loads((out / "summary.json").read_text())["dist"]["missing"] == []
    assert "run folder:" not in done.stderr


def test_a_rank_killed_the_survivor_reports_and_dies_of_the_launchers_sigterm(tmp_path):
    out = tmp_path / "job"
    done = torchrun(2, "--out", out, "--window", 10, STEPS=200, KILL_RANK=1, KILL_STEP=45,
                    STEP_SLEEP_S=0.005, TRAINPACE_DIST_TIMEOUT_S=DEAD_RANK_TIMEOUT_S)
    assert done.returncode != 0
    dead_last = steps_of(out / "rank1")[-1]["step"]  # its last step on disk
    assert 45 - 10 <= dead_last <= 45  # a SIGKILL loses a window (10 steps), at most
    survivor = steps_of(out / "rank0")
    # the survivor's own summary is as new as its steps: never an older one
    own = json.loads((out / "rank0" / "summary.json").read_text())
    assert own["steps"]["total"] == len(survivor)
    merged = json.loads((out / "summary.json").read_text())
    [gone] = merged["dist"]["missing"]
    assert (gone["rank"], gone["last_step"]) == (1, dead_last)
    assert done.stderr.count(f"run folder: {out} ") == 1  # the report came out
    assert "ranks did not report to the end: rank 1" in done.stderr
    # torchrun's SIGTERM came while the report was made: once it is out, the signal ends the
    # rank (-15), as it would have without trainpace; the report first, always
    assert exit_codes(done.stderr) == {0: -15, 1: -9}


def exit_codes(launcher_log):
    """Each failed rank's exit code, from torchrun's failure summary."""
    found = re.findall(r"rank\s+: (\d+) \(local_rank: \d+\)\n\s+exitcode\s+: (-?\d+)",
                       launcher_log)
    return {int(rank): int(code) for rank, code in found}


def test_a_rank_stopped_the_others_time_out_and_report_it(tmp_path):
    out = tmp_path / "job"
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as err:
        job = subprocess.Popen(job_command(2, "--out", out, "--window", 10),
                               env=job_env(STEPS=200, STOP_RANK=1, STOP_STEP=25,
                                           STEP_SLEEP_S=0.005, GLOO_TIMEOUT_S=4,
                                           TRAINPACE_DIST_TIMEOUT_S=DEAD_RANK_TIMEOUT_S),
                               stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "run folder:" not in errors.read_text():
            time.sleep(0.2)
        text = errors.read_text()
    finally:  # the stopped rank too: it is in a session of its own
        kill_job(job)
    assert f"run folder: {out} " in text
    stopped_last = steps_of(out / "rank1")[-1]["step"]
    # 24 or 25 steps closed before the stop (the 25th ends at the optimizer's step or at the
    # next fetch); the writer had them by half windows (of 10), so at most one window is
    # missing from its folder, however far its writer got
    assert 14 <= stopped_last <= 25
    merged = json.loads((out / "summary.json").read_text())
    [gone] = merged["dist"]["missing"]
    assert (gone["rank"], gone["last_step"]) == (1, stopped_last)
    assert json.loads((out / "rank0" / "summary.json").read_text())["steps"]["total"] == len(
        steps_of(out / "rank0"))
