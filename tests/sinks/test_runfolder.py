"""The run folder: claimed atomically, written whatever the disk does, read back."""

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainpace.sinks.folder_claim as folder_claim
import trainpace.sinks.runfolder as runfolder
from trainpace.errors import ConfigError
from trainpace.records import STEP_FIELDS
from trainpace.runlog import Record, read_run
from trainpace.sinks.folder_claim import CLAIM_FILE, claim_run_folder
from trainpace.sinks.runfolder import RunFolderSink


def steps(first, last):
    return [dict.fromkeys(STEP_FIELDS) | {"step": n, "t_s": float(n), "step_s": 1.0,
                                          "wait_s": 0.0, "samples": 1, "micro_batches": 1}
            for n in range(first, last + 1)]


def window(first, last):
    return Record("window", {"window": {}, "steps": steps(first, last)}, last)


def test_each_claim_of_one_path_gets_its_own_folder(tmp_path):
    got = [claim_run_folder(tmp_path / "run") for _ in range(3)]
    assert [p.name for p in got] == ["run", "run-2", "run-3"]
    assert all((p / CLAIM_FILE).exists() for p in got)


def test_an_empty_folder_made_beforehand_is_used_and_an_old_run_is_not(tmp_path):
    (tmp_path / "empty").mkdir()
    assert claim_run_folder(tmp_path / "empty") == tmp_path / "empty"
    old = tmp_path / "old"
    old.mkdir()
    (old / "meta.json").write_text("{}")  # written before claims existed
    assert claim_run_folder(old) == tmp_path / "old-2"
    assert not (old / CLAIM_FILE).exists()


def test_a_path_that_is_a_file_or_under_a_file_is_a_config_error(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="out must be a folder, but it is a file"):
        claim_run_folder(tmp_path / "f")
    with pytest.raises(ConfigError, match="out cannot be made into a run folder"):
        claim_run_folder(tmp_path / "f" / "run")


RACE = """
import sys, time
from pathlib import Path
from trainpace.sinks.folder_claim import claim_run_folder
start = float(sys.argv[2])
while time.time() < start:
    pass
print(claim_run_folder(Path(sys.argv[1])).name, flush=True)
sys.stdin.read()  # alive until the test has every answer: a dead process's claim is stale
"""


def test_processes_racing_for_one_path_each_get_their_own(tmp_path):
    import time

    start = time.time() + 1.5  # all of them released at once
    env = dict(os.environ, PYTHONPATH=str(Path(runfolder.__file__).parents[2]))
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path / "run"), str(start)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(4)]
    names = sorted(p.stdout.readline().strip() for p in procs)
    for p in procs:
        p.communicate(timeout=60)
    assert names == ["run", "run-2", "run-3", "run-4"]


def test_a_full_disk_loses_the_steps_it_held_and_says_which(tmp_path, monkeypatch, caplog):
    sink = RunFolderSink(tmp_path)
    sink.log(Record("meta", {"schema": "trainpace.meta/1", "run_id": "r"}))
    sink.log(window(1, 10))
    real_write = os.write
    full = {"on": True}

    def write(fd, data):
        if full["on"]:
            real_write(fd, bytes(data[:7]))  # part of a line reaches the disk, then ENOSPC
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(runfolder.os, "write", write)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        sink.log(window(11, 20))
        sink.log(window(21, 30))
        full["on"] = False
        sink.log(window(31, 40))
    sink.close()
    run = read_run(tmp_path)
    assert [r["step"] for r in run.steps] == [*range(1, 11), *range(31, 41)]  # no torn line
    assert run.meta["missing_steps"] == [[11, 30]]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("from step 11 on" in m for m in messages) == 1
    assert sum("steps 11-30 are missing" in m for m in messages) == 1




def test_a_folder_holding_anything_but_a_run_is_not_claimed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    planted = tmp_path / "shared"
    planted.mkdir()
    (planted / "steps.jsonl").symlink_to(victim)  # planted by another user, no meta.json
    assert claim_run_folder(planted) == tmp_path / "shared-2"
    assert sorted(p.name for p in planted.iterdir()) == ["steps.jsonl"]  # left as it was
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    assert claim_run_folder(stray) == tmp_path / "stray-2"


def test_a_run_folder_that_is_a_symlink_is_not_claimed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").symlink_to(elsewhere)
    assert claim_run_folder(tmp_path / "run") == tmp_path / "run-2"
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("name", ["steps.jsonl", "summary.json.tmp", "meta.json.tmp"])
def test_files_are_never_written_through_a_symlink(tmp_path, name, caplog):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    folder = tmp_path / "run"
    folder.mkdir()
    sink = RunFolderSink(folder)
    (folder / name).symlink_to(victim)  # planted after the claim
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        sink.log(Record("meta", {"run_id": "x"}, 0))
        sink.log(window(1, 3))
        if name == "summary.json.tmp":
            with pytest.raises(OSError, match="symbolic links"):
                sink.log(Record("summary", {"x": 1}, 3))
        else:
            sink.log(Record("summary", {"x": 1}, 3))
    sink.close()
    assert victim.read_text() == "precious\n"


def test_a_full_disk_at_the_claim_is_no_error(tmp_path, monkeypatch):
    def write(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runfolder.os, "write", write)
    assert claim_run_folder(tmp_path / "run") == tmp_path / "run"  # the claim file is made
    assert claim_run_folder(tmp_path / "run") == tmp_path / "run-2"  # and holds the name


def test_the_current_folder_with_files_in_it_gets_a_run_folder_beside_it(tmp_path, monkeypatch):
    here = tmp_path / "project"
    here.mkdir()
    (here / "train.py").write_text("")
    monkeypatch.chdir(here)
    assert claim_run_folder(Path(".")) == tmp_path / "project-2"
    assert sorted(p.name for p in here.iterdir()) == ["train.py"]


@pytest.mark.parametrize("planted", ["run/rank1", "run"])
def test_a_ranks_folder_is_never_reached_through_a_planted_link(tmp_path, planted):
    """A rank >= 1 takes the folder name rank 0 agreed; on a filesystem the ranks do not
    share, rank{r}/ (or the job's folder) may be a link someone planted: refused, and nothing
    is made or written where it points."""
    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp_path / "out" / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=True)
    with pytest.raises(ConfigError, match="out is a symbolic link") as refused:
        folder_claim.claim_rank_folder(tmp_path / "out" / "run" / "rank1")
    assert str(refused.value).endswith(f"got {str(link)!r}")  # the link is named
    assert list(victim.iterdir()) == []


def test_a_ranks_folder_is_made_or_taken_when_it_is_a_real_folder(tmp_path):
    folder = tmp_path / "out" / "run" / "rank1"
    folder_claim.claim_rank_folder(folder)
    assert folder.is_dir()
    folder_claim.claim_rank_folder(folder)  # made by this rank a moment before: taken
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot be made into a run folder"):
        folder_claim.claim_rank_folder(tmp_path / "file" / "x" / "rank1")
    (tmp_path / "plain" / "run").mkdir(parents=True)
    (tmp_path / "plain" / "run" / "rank2").write_text("")
    with pytest.raises(ConfigError, match=r"out is not a folder.*rank2'$"):
        folder_claim.claim_rank_folder(tmp_path / "plain" / "run" / "rank2")
