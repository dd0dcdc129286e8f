"""A job's sibling ranks from a fake process table: who counts, and when the search is made."""

import os
import sys

import pytest

from trainpace.sampling.siblings import SiblingRanks, parent_pid, several_local_ranks

PYTHON = "/usr/bin/python3.12"
JOB = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def add_process(root, pid, *, parent, exe=PYTHON, env=None, children=None):
    """A fake /proc/<pid>: its stat (the parent), exe link, environ and children lists
    (``children``: {tid: [pids]}); ``exe=None`` and ``env=None``: unreadable."""
    folder = root / str(pid)
    folder.mkdir()
    (folder / "stat").write_text(f"{pid} (pt_main (thread)) S {parent} {pid} {pid} 0 -1 0 1 2 3\n")
    if exe is not None:
        os.symlink(exe, folder / "exe")
    if env is not None:
        (folder / "environ").write_bytes(
            b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    for tid, pids in (children or {pid: []}).items():
        (folder / "task" / str(tid)).mkdir(parents=True)
        (folder / "task" / str(tid) / "children").write_text(" ".join(map(str, pids)) + " ")


def launcher(root, children):
    """Process 100 (an agent with two threads) and its children ``{pid: (exe, env)}``;
    this process is 1, started with ``JOB`` and LOCAL_RANK=0."""
    pids = list(children)
    add_process(root, 100, parent=7, children={100: [1, *pids[:-1]], 101: pids[-1:]})
    add_process(root, 1, parent=100, env={"PATH": "/bin", **JOB, "LOCAL_RANK": "0"})
    for pid, (exe, env) in children.items():
        add_process(root, pid, parent=100, exe=exe, env=env)


def test_siblings_are_the_parents_children_running_the_same_program_for_the_same_job(tmp_path):
    launcher(tmp_path, {
        2: (PYTHON, {"PATH": "/bin", **JOB, "LOCAL_RANK": "1"}),  # a rank: LOCAL_RANK differs
        3: ("/usr/bin/bash", {**JOB}),  # another program
        4: (PYTHON, {**JOB, "MASTER_PORT": "29501"}),  # another job's rank
        5: (None, None),  # another user's: unreadable
        6: (PYTHON, {"PATH": "/usr/bin", **JOB, "LOCAL_RANK": "2"}),  # forked by the 2nd thread
    })
    ranks = SiblingRanks(1, proc=str(tmp_path))
    assert sorted(ranks.find()) == [2, 6]
    ranks.close()


def test_a_spawned_rank_matches_its_siblings_whatever_it_set_after_it_started(tmp_path):
    # torch.multiprocessing.spawn: the ranks and multiprocessing's resource tracker start
    # with the spawning process's environment; a rank's os.environ changes are not in
    # /proc/<pid>/environ, for it as for its siblings
    started = {"PATH": "/bin"}
    add_process(tmp_path, 100, parent=7, children={100: [9, 1, 2]})
    add_process(tmp_path, 1, parent=100, env=started)
    add_process(tmp_path, 2, parent=100, env=started)
    add_process(tmp_path, 9, parent=100, env=started)  # the resource tracker: the job's own
    assert sorted(SiblingRanks(1, proc=str(tmp_path)).find()) == [2, 9]


def test_torchrun_ranks_match_by_the_agents_run_id(tmp_path):
    mine = {"TORCHELASTIC_RUN_ID": "a", **JOB}
    launcher(tmp_path, {2: (PYTHON, mine), 3: (PYTHON, {**mine, "TORCHELASTIC_RUN_ID": "b"})})
    (tmp_path / "1" / "environ").write_bytes(b"TORCHELASTIC_RUN_ID=a\0MASTER_ADDR=127.0.0.1\0"
                                             b"MASTER_PORT=29500\0")
    assert SiblingRanks(1, proc=str(tmp_path)).find() == [2]


def test_each_child_is_judged_once_and_ones_that_left_are_dropped(tmp_path):
    launcher(tmp_path, {2: (PYTHON, JOB), 3: (PYTHON, JOB)})
    (tmp_path / "1" / "environ").write_bytes(b"MASTER_ADDR=127.0.0.1\0MASTER_PORT=29500\0")
    ranks = SiblingRanks(1, proc=str(tmp_path))
    assert sorted(ranks.find()) == [2, 3]
    (tmp_path / "2" / "environ").write_bytes(b"")  # read again it would not match
    (tmp_path / "100" / "task" / "101" / "children").write_text("")  # 3 ended
    assert ranks.find() == [2]


def test_no_parent_or_no_children_lists_find_no_siblings(tmp_path):
    add_process(tmp_path, 1, parent=100, env=JOB)
    assert SiblingRanks(1, proc=str(tmp_path)).find() == []  # the parent is gone
    add_process(tmp_path, 100, parent=7, children={100: [1, 2]})
    add_process(tmp_path, 2, parent=100, env=JOB)
    (tmp_path / "100" / "task" / "100" / "children").unlink()  # a kernel without the lists
    asked = []
    ranks = SiblingRanks(1, proc=str(tmp_path), children_of=lambda pid: asked.append(pid) or [1, 2])
    assert ranks.find() == [2]
    assert asked == [100]
    assert SiblingRanks(1, proc=str(tmp_path)).find() == []


def test_parent_pid_counts_from_the_last_parenthesis():
    assert parent_pid(b"42 (a) S 1 (b) R 7) S 100 42 42 0") == 100
    assert parent_pid(b"42 (python) S") is None
    assert parent_pid(None) is None


@pytest.mark.parametrize(("env", "several"), [
    ({"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}, True),  # torchrun, two ranks per host
    ({"LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "4"}, False),  # one rank per host
    ({"WORLD_SIZE": "2"}, True),  # a launcher that sets no local size: the rule decides
    ({"WORLD_SIZE": "1"}, False),
    ({}, False),  # no variables and no process group: a single process
])
def test_when_to_look_for_siblings(env, several):
    assert several_local_ranks(env) is several


def test_without_variables_an_initialized_group_of_several_ranks_says_so(monkeypatch):
    # torch.multiprocessing.spawn sets no variables: the ranks' process group tells
    class Dist:
        world_size = 2

        def is_available(self):
            return True

        def is_initialized(self):
            return True

        def get_world_size(self):
            return self.world_size

    dist = Dist()
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    assert several_local_ranks({}) is True
    assert several_local_ranks({"LOCAL_WORLD_SIZE": "1"}) is False  # the variables first
    dist.world_size = 1
    assert several_local_ranks({}) is False
