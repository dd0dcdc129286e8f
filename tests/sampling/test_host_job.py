"""The host reading's job column: this process, its sibling ranks and their workers, from a
fake /proc and injected CPU times (exact figures)."""

import os
from types import SimpleNamespace

from sampling.test_host import Clock, FakePsutil
from sampling.test_siblings import JOB, PYTHON, add_process
from trainpace.sampling.host import HOST_KEYS, JOB_KEY, HostSource


def job_host(root, cpu_s, *, job=True, procfs=True, ps=None):
    """Process 1 (with worker 7) under launcher 100, beside rank 2 (with worker 21)."""
    root.mkdir(parents=True, exist_ok=True)
    add_process(root, 100, parent=5, children={100: [1, 2]})
    add_process(root, 1, parent=100, env=JOB, children={1: [7]})
    add_process(root, 7, parent=1)
    add_process(root, 2, parent=100, env=JOB, children={2: [21]})
    add_process(root, 21, parent=2)
    (root / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\n")

    def cpu_of(pid):
        if pid not in cpu_s:
            raise OSError(3, "No such process")
        return cpu_s[pid]

    clock = Clock()
    host = HostSource(1, psutil_module=ps or FakePsutil(), clock=clock, cgroup=False, proc=root,
                      procfs=procfs, slow_every_s=1.0, process_cpu_s=cpu_of, job=job)
    return host, clock


def test_the_job_column_adds_the_sibling_ranks_and_their_workers(tmp_path):
    cpu_s = {1: 10.0, 7: 1.0, 2: 10.0, 21: 1.0}
    host, clock = job_host(tmp_path, cpu_s)
    first = host.read()
    assert first[JOB_KEY] is None  # a baseline, like every CPU figure
    assert sorted(host.job_pids) == [1, 2, 7, 21]
    clock.now = 2.0
    cpu_s.update({1: 11.0, 7: 1.5, 2: 11.5, 21: 2.0})  # 50% + 25% here, 75% + 50% beside
    (tmp_path / "stat").write_text("cpu  400 0 50 800 50 0 0 0 0 0\n")  # busy 300 of 300
    second = host.read()
    assert (second["process_cpu_pct"], second[JOB_KEY]) == (75.0, 200.0)
    assert second["system_cpu_pct"] == 100.0
    assert list(second) == [*HOST_KEYS, JOB_KEY]
    host.close()


def test_a_rank_that_starts_late_counts_from_its_next_reading_and_one_that_ends_is_dropped(
        tmp_path):
    cpu_s = {1: 10.0, 7: 1.0}  # rank 2 has not started: its pid answers nothing yet
    host, clock = job_host(tmp_path, cpu_s)
    host.read()
    clock.now = 1.0  # the refresh finds rank 2 and its worker: their baseline
    cpu_s.update({1: 10.5, 2: 30.0, 21: 5.0})
    assert host.read()[JOB_KEY] == 50.0
    clock.now = 1.5
    cpu_s.update({1: 10.75, 2: 30.25})
    assert host.read()[JOB_KEY] == 100.0  # 50% here, 50% in rank 2
    del cpu_s[2], cpu_s[21]  # rank 2 ended
    (tmp_path / "100" / "task" / "100" / "children").write_text("1 ")
    clock.now = 2.5
    cpu_s[1] = 11.25
    assert host.read()[JOB_KEY] == 50.0
    assert sorted(host.job_pids) == [1, 7]


def test_a_single_process_reads_no_job_column(tmp_path):
    cpu_s = {1: 10.0, 7: 1.0, 2: 10.0, 21: 1.0}
    for job, procfs in ((False, True), (True, False)):  # not a rank of several; not Linux
        host, _ = job_host(tmp_path / f"{job}{procfs}", cpu_s, job=job, procfs=procfs)
        assert list(host.read()) == list(HOST_KEYS)
        assert host.job_pids == []


def test_by_default_a_process_without_launch_variables_reads_none():
    assert "LOCAL_WORLD_SIZE" not in os.environ and "WORLD_SIZE" not in os.environ
    host = HostSource(slow_every_s=10.0)
    assert JOB_KEY not in host.read()
    host.close()


def test_the_same_executable_is_part_of_the_rule(tmp_path):
    cpu_s = {1: 10.0, 7: 1.0, 2: 10.0, 21: 1.0}
    host, _ = job_host(tmp_path / "x", cpu_s)
    os.remove(tmp_path / "x" / "2" / "exe")
    os.symlink(PYTHON + "-other", tmp_path / "x" / "2" / "exe")
    host.read()
    assert sorted(host.job_pids) == [1, 7]


class TreePsutil(FakePsutil):
    """psutil's scan of a process tree: {pid: [child pids]}."""

    def __init__(self, tree):
        super().__init__()
        self.tree = tree

    def Process(self, pid=None):  # noqa: N802 - psutil's name
        if pid in (None, 1):
            return super().Process(pid)
        tree = self.tree

        class Handle:
            def children(self, recursive=False):
                found, queue = [], list(tree.get(pid, ()))
                while queue:
                    child = queue.pop(0)
                    found.append(child)
                    queue.extend(tree.get(child, ()) if recursive else ())
                return [SimpleNamespace(pid=child) for child in found]

        return Handle()


def test_without_the_kernels_children_lists_psutil_finds_the_siblings_and_their_workers(
        tmp_path):
    cpu_s = {1: 10.0, 7: 1.0, 2: 10.0, 21: 1.0}
    host, clock = job_host(tmp_path, cpu_s, ps=TreePsutil({100: [1, 2], 2: [21], 21: [22]}))
    for path in tmp_path.glob("*/task/*/children"):
        path.unlink()
    host.read()
    assert sorted(host.job_pids) == [1, 2, 21, 22]  # 1's worker 7 is psutil's to find: none
    clock.now = 1.0
    cpu_s.update({1: 10.5, 2: 10.5, 21: 1.5})
    assert host.read()[JOB_KEY] == 150.0
