"""A job's folder: a restart of the same command continues the job in it; anything else gets
a folder beside it, with a warning that says why."""

import logging
import os
import socket
import subprocess
import sys
import time

import orjson
import pytest

from trainpace.errors import ConfigError
from trainpace.job.events import SCHEMA
from trainpace.job.process import this_process
from trainpace.sinks.folder_claim import (
    CLAIM_FILE,
    claim_run_folder,
    move_earlier_rank_run,
    release_run_folder,
)

ARGV = ["train.py", "--lr", "0.1"]


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def event(name, run, **keys):
    return {"schema": SCHEMA, "event": name, "run": run, "unix_s": 1000.0 + run, **keys}


def killed_job(folder, *, argv=ARGV, finished=False, pid=None, start_s=None, run_id="exp"):
    """A job folder as a SIGKILLed (or finished) first run leaves it: its files, its ledger,
    its claim, and a checkpoint the script wrote there."""
    folder.mkdir()
    pid = dead_pid() if pid is None else pid
    start_s = time.time() - 60.0 if start_s is None else start_s
    for name in ("meta.json", "summary.json"):
        (folder / name).write_bytes(orjson.dumps({"run_id": run_id}) + b"\n")
    (folder / "steps.jsonl").write_text('{"step": 1}\n')
    (folder / "profile").mkdir()
    (folder / "ckpt.pt").write_bytes(b"weights")
    events = [event("run_start", 1, run_id=run_id, pid=pid, host=socket.gethostname(),
                    argv=list(argv), world_size=1, process_start_unix_s=start_s),
              event("first_step", 1)]
    if finished:
        events.append(event("run_end", 1, status="finished", last_step=1,
                            last_step_end_unix_s=1001.5, signal=None))
    (folder / "job.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    (folder / CLAIM_FILE).write_text(f"{pid} {socket.gethostname()} {start_s}\n")
    return folder


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_restart_of_the_same_command_continues_the_job(tmp_path):
    job = killed_job(tmp_path / "exp")
    assert claim_run_folder(job, argv=ARGV, env={}) == job
    assert tree(job) == [CLAIM_FILE, "ckpt.pt", "job.jsonl", "runs", "runs/exp",
                         "runs/exp/meta.json", "runs/exp/profile", "runs/exp/steps.jsonl",
                         "runs/exp/summary.json"]
    assert (job / "runs/exp/steps.jsonl").read_text() == '{"step": 1}\n'
    me = this_process()
    pid, host, start_s = (job / CLAIM_FILE).read_text().split()  # the claim is ours now
    assert (int(pid), host) == (me.pid, me.host)
    assert float(start_s) == pytest.approx(me.start_unix_s, abs=1e-3)
    assert not (tmp_path / "exp-2").exists()


@pytest.mark.parametrize(("kind", "why"), [
    ("finished", "holds a job whose run there finished"),
    ("command", "holds another command's run"),
    ("going", "holds a run still going (pid {pid})"),
    ("ledgerless", "holds other files than a trainpace job"),
])
def test_what_is_not_continued_gets_a_folder_beside_it_and_says_why(tmp_path, caplog, kind,
                                                                       why):
    me = this_process()
    if kind == "going":  # a live process's run; its claim given back (only the ledger tells)
        job = killed_job(tmp_path / "exp", pid=me.pid, start_s=me.start_unix_s)
        (job / CLAIM_FILE).unlink()
    else:
        job = killed_job(tmp_path / "exp", finished=kind == "finished",
                         argv=["other.py"] if kind == "command" else ARGV)
    if kind == "ledgerless":
        (job / "job.jsonl").unlink()
    before = tree(job)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        assert claim_run_folder(job, argv=ARGV, env={}) == tmp_path / "exp-2"
    assert tree(job) == [name for name in before if name != CLAIM_FILE]  # a dead one's claim
    assert tree(tmp_path / "exp-2") == [CLAIM_FILE]
    message = caplog.records[-1].getMessage()
    assert why.format(pid=me.pid) in message
    assert f"writing this run to {tmp_path / 'exp-2'}" in message
    # the override is named only where it would help
    assert ("TRAINPACE_JOB=continue" in message) is (kind in ("finished", "command"))


def test_a_live_claim_is_never_taken_over(tmp_path):
    me = this_process()
    job = killed_job(tmp_path / "exp")
    (job / CLAIM_FILE).write_text(f"{me.pid} {me.host} {me.start_unix_s}\n")  # ours: alive
    assert claim_run_folder(job, argv=ARGV, env={}) == tmp_path / "exp-2"
    assert not (job / "runs").exists()


def test_trainpace_job_new_never_continues_and_continue_always_does(tmp_path):
    job = killed_job(tmp_path / "exp")
    assert claim_run_folder(job, argv=ARGV, env={"TRAINPACE_JOB": "new"}) == tmp_path / "exp-2"
    assert not (job / "runs").exists()
    finished = killed_job(tmp_path / "done", finished=True, argv=["other.py"])
    assert claim_run_folder(finished, argv=ARGV,
                            env={"TRAINPACE_JOB": "continue"}) == finished
    assert tree(finished / "runs") == ["exp", "exp/meta.json", "exp/profile", "exp/steps.jsonl",
                                       "exp/summary.json"]


def test_a_bad_trainpace_job_value_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"TRAINPACE_JOB must be 'continue'.*got 'resume'"):
        claim_run_folder(tmp_path / "exp", argv=ARGV, env={"TRAINPACE_JOB": "resume"})
    assert not (tmp_path / "exp").exists()


def test_continue_never_writes_into_files_that_are_not_a_job(tmp_path):
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    assert claim_run_folder(stray, argv=ARGV,
                            env={"TRAINPACE_JOB": "continue"}) == tmp_path / "stray-2"
    assert tree(stray) == ["notes.txt"]


def test_a_runs_folder_that_is_a_link_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = killed_job(tmp_path / "exp")
    (job / "runs").symlink_to(elsewhere)
    assert claim_run_folder(job, argv=ARGV, env={}) == tmp_path / "exp-2"
    assert list(elsewhere.iterdir()) == []
    assert (job / "meta.json").exists()


def test_the_third_run_moves_the_second_beside_the_first(tmp_path):
    job = killed_job(tmp_path / "exp")
    assert claim_run_folder(job, argv=ARGV, env={}) == job
    dead = dead_pid()
    (job / "meta.json").write_text('{"run_id": "exp.2"}\n')
    with open(job / "job.jsonl", "ab") as ledger:
        ledger.write(orjson.dumps(event("run_start", 2, run_id="exp.2", pid=dead,
                                        host=socket.gethostname(), argv=ARGV, world_size=1,
                                        process_start_unix_s=time.time() - 5)) + b"\n")
    (job / CLAIM_FILE).write_text(f"{dead} {socket.gethostname()} {time.time() - 5}\n")
    assert claim_run_folder(job, argv=ARGV, env={}) == job
    assert sorted(os.listdir(job / "runs")) == ["exp", "exp.2"]
    assert os.listdir(job / "runs/exp.2") == ["meta.json"]


def test_each_rank_moves_its_own_earlier_run_beside_the_job_files(tmp_path):
    job = killed_job(tmp_path / "exp")
    for rank in (0, 1):
        folder = job / f"rank{rank}"
        folder.mkdir()
        (folder / "meta.json").write_bytes(orjson.dumps({"run_id": "exp", "rank": rank}))
        (folder / "steps.jsonl").write_text('{"step": 1}\n')
    assert claim_run_folder(job, argv=ARGV, env={}) == job  # rank 0: the top-level files
    for rank in (0, 1):
        move_earlier_rank_run(job / f"rank{rank}")
    assert tree(job / "runs") == [
        "exp", "exp/meta.json", "exp/profile", "exp/rank0", "exp/rank0/meta.json",
        "exp/rank0/steps.jsonl", "exp/rank1", "exp/rank1/meta.json", "exp/rank1/steps.jsonl",
        "exp/steps.jsonl", "exp/summary.json"]
    fresh = job / "rank2"
    fresh.mkdir()  # a rank folder with nothing of an earlier run stays
    move_earlier_rank_run(fresh)
    assert fresh.is_dir()


def test_a_restart_that_failed_to_start_its_run_leaves_the_job_to_the_next_one(tmp_path):
    job = killed_job(tmp_path / "exp")
    assert claim_run_folder(job, argv=ARGV, env={}) == job
    release_run_folder(job)  # its Meter failed (a missing extra) before writing anything
    assert claim_run_folder(job, argv=ARGV, env={}) == job
    assert tree(job / "runs") == ["exp", "exp/meta.json", "exp/profile", "exp/steps.jsonl",
                                  "exp/summary.json"]
