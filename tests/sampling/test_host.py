import time
from collections import namedtuple
from types import SimpleNamespace

import pytest

from trainpace.sampling.host import CgroupMemory, HostSource, find_cgroup_memory

CpuTimes = namedtuple("CpuTimes", "user system")
SystemTimes = namedtuple("SystemTimes", "user nice system idle iowait guest guest_nice")
GB = 10**9


class FakeError(Exception):
    pass


class FakeProcess:
    def __init__(self, pid, cpu=0.0, rss=1 * GB):
        self.pid = pid
        self.cpu = cpu
        self.rss = rss
        self.gone = False

    def cpu_times(self):
        if self.gone:
            raise FakeError("no such process")
        return CpuTimes(self.cpu * 0.75, self.cpu * 0.25)

    def memory_info(self):
        return SimpleNamespace(rss=self.rss)


class FakePsutil:
    """Just what HostSource uses, scripted by the test."""

    Error = FakeError

    def __init__(self):
        self.main = FakeProcess(1)
        self.children_list = []
        self.children_calls = 0
        self.system = SystemTimes(0, 0, 0, 0, 0, 0, 0)
        self.memory = SimpleNamespace(total=32 * GB, available=24 * GB)

    def Process(self, pid=None):  # noqa: N802 - psutil's name
        if pid is not None and pid != 1:
            found = next((c for c in self.children_list if c.pid == pid), None)
            if found is None:
                raise FakeError(f"no process {pid}")
            return found
        main, outer = self.main, self

        class Handle:
            def cpu_times(self):
                return main.cpu_times()

            def memory_info(self):
                return main.memory_info()

            def children(self, recursive=False):
                outer.children_calls += 1
                return list(outer.children_list)

        return Handle()

    def cpu_times(self):
        return self.system

    def virtual_memory(self):
        return self.memory


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _source(ps, clock, **kwargs):
    # no /proc children lists here: psutil's scan (the fake's children()) is used
    kwargs.setdefault("proc", "/nonexistent")
    return HostSource(psutil_module=ps, clock=clock, cgroup=False, **kwargs)


def test_cpu_percentages_are_exact_differences_and_the_first_reading_is_a_baseline():
    ps, clock = FakePsutil(), Clock()
    worker = FakeProcess(7, cpu=3.0)
    ps.children_list = [worker]
    host = _source(ps, clock)
    first = host.read()
    assert first["main_cpu_pct"] is None
    assert first["process_cpu_pct"] is None
    assert first["system_cpu_pct"] is None
    assert first["workers"] == 1
    assert first["rss_gb"] == 1.0
    clock.now = 2.0
    ps.main.cpu = 1.5  # 1.5 s of CPU in 2 s
    worker.cpu = 5.0  # 2 s of CPU in 2 s
    ps.system = SystemTimes(3, 0, 1, 3, 1, 0.5, 0)  # busy 4 of 8 (guest is inside user)
    second = host.read()
    assert second["main_cpu_pct"] == 75.0
    assert second["process_cpu_pct"] == 175.0
    assert second["system_cpu_pct"] == 50.0
    assert second["available_gb"] == 24.0
    assert second["memory_total_gb"] == 32.0
    assert second["memory_used_pct"] == 25.0


def test_workers_are_refreshed_every_second_and_new_ones_count_from_their_next_reading():
    ps, clock = FakePsutil(), Clock()
    host = _source(ps, clock, slow_every_s=1.0)
    host.read()
    late = FakeProcess(9, cpu=10.0)  # started between refreshes with 10 s already used
    ps.children_list = [late]
    clock.now = 0.5
    assert host.read()["process_cpu_pct"] == 0.0  # not seen yet: the list is refreshed at 1 s
    clock.now = 1.0
    assert host.read()["process_cpu_pct"] == 0.0  # seen now: a baseline, not 10 s at once
    clock.now = 1.5
    late.cpu = 10.25
    assert host.read()["process_cpu_pct"] == 50.0
    assert ps.children_calls == 2
    late.gone = True
    clock.now = 2.0
    reading = host.read()  # a worker that exited is skipped until the next refresh drops it
    assert reading["process_cpu_pct"] == 0.0
    assert reading["workers"] == 0


def test_a_reaped_worker_is_counted_whole_less_what_its_readings_counted():
    # a DataLoader worker that ends: once reaped, the kernel adds its CPU time to this
    # process's children's; what its readings did not count (before its first, after its
    # last) is counted then, and one that ended before any refresh found it is counted whole
    ps, clock, reaped = FakePsutil(), Clock(), [0.0]
    worker = FakeProcess(7, cpu=1.0)
    ps.children_list = [worker]
    host = _source(ps, clock, slow_every_s=1.0, reaped_cpu_s=lambda: reaped[0])
    host.read()  # the worker's first reading: 1.0 s used before it
    clock.now, worker.cpu = 1.0, 1.5
    assert host.read()["process_cpu_pct"] == 50.0
    clock.now, worker.gone = 2.0, True  # it ended; not reaped yet
    assert host.read()["process_cpu_pct"] == 0.0
    clock.now, reaped[0] = 3.0, 2.25  # reaped: its 2.25 s, of which 0.5 s were counted
    assert host.read()["process_cpu_pct"] == 175.0
    ps.children_list = []
    clock.now, reaped[0] = 4.0, 2.5  # a worker that lived and ended between two refreshes
    assert host.read()["process_cpu_pct"] == 25.0
    clock.now = 5.0
    assert host.read()["process_cpu_pct"] == 0.0


def test_memory_is_read_every_second_and_held_in_between():
    ps, clock = FakePsutil(), Clock()
    host = _source(ps, clock, slow_every_s=1.0)
    assert host.read()["available_gb"] == 24.0
    ps.memory = SimpleNamespace(total=32 * GB, available=8 * GB)
    ps.main.rss = 3 * GB
    clock.now = 0.9
    assert host.read()["available_gb"] == 24.0
    clock.now = 1.0
    reading = host.read()
    assert reading["available_gb"] == 8.0
    assert reading["memory_used_pct"] == 75.0
    assert reading["rss_gb"] == 3.0


def _proc_tree(root, tree):
    """A fake /proc with children lists: {pid: {tid: [child pids]}}."""
    for pid, tasks in tree.items():
        for tid, children in tasks.items():
            folder = root / str(pid) / "task" / str(tid)
            folder.mkdir(parents=True)
            (folder / "children").write_text(" ".join(map(str, children)) + " ")


def test_workers_come_from_the_kernels_children_lists(tmp_path):
    ps, clock = FakePsutil(), Clock()
    ps.children_list = [FakeProcess(7, cpu=1.0), FakeProcess(8, cpu=2.0), FakeProcess(9)]
    # the main process (pid 1) forked 7 from one thread and 8 from another; 7 forked 9
    _proc_tree(tmp_path, {1: {1: [7], 2: [8]}, 7: {7: [9]}, 8: {8: []}, 9: {9: []}})
    host = HostSource(1, psutil_module=ps, clock=clock, cgroup=False, proc=tmp_path)
    assert host.read()["workers"] == 3
    assert ps.children_calls == 0  # no scan of the whole process table
    clock.now = 1.0
    ps.children_list[2].cpu = 0.5
    assert host.read()["process_cpu_pct"] == 50.0


def test_a_cgroup_limit_below_the_machine_caps_memory():
    ps, clock = FakePsutil(), Clock()
    limit = SimpleNamespace(limit_bytes=8 * GB, working_set_bytes=lambda files=None: 6 * GB)
    host = HostSource(psutil_module=ps, clock=clock, cgroup=limit)
    reading = host.read()
    assert reading["memory_total_gb"] == 8.0
    assert reading["available_gb"] == 2.0
    assert reading["memory_used_pct"] == 75.0


def _write(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def test_find_cgroup_v2(tmp_path):
    _write(tmp_path / "job", {"memory.max": "4294967296\n", "memory.current": "3000000000\n",
                              "memory.stat": "anon 1\ninactive_file 1000000000\nactive_file 5\n"})
    (tmp_path / "cgroup").write_text("0::/job\n")
    found = find_cgroup_memory(tmp_path, tmp_path / "cgroup")
    assert found.limit_bytes == 4294967296
    assert found.working_set_bytes() == 2 * GB


def test_find_cgroup_v1_and_unlimited(tmp_path):
    _write(tmp_path / "memory" / "docker", {
        "memory.limit_in_bytes": "2000000000", "memory.usage_in_bytes": "1500000000",
        "memory.stat": "cache 9\ntotal_inactive_file 500000000\n"})
    (tmp_path / "cgroup").write_text("12:cpu,cpuacct:/docker\n11:memory:/docker\n")
    found = find_cgroup_memory(tmp_path, tmp_path / "cgroup")
    assert found.limit_bytes == 2 * GB
    assert found.working_set_bytes() == 1 * GB
    _write(tmp_path / "free", {"memory.max": "max\n"})
    (tmp_path / "cgroup2").write_text("0::/free\n")
    assert find_cgroup_memory(tmp_path, tmp_path / "cgroup2") is None
    assert find_cgroup_memory(tmp_path, tmp_path / "absent") is None


def test_unreadable_cgroup_usage_is_none(tmp_path):
    limit = CgroupMemory(GB, tmp_path / "nope", tmp_path / "nope", "inactive_file")
    assert limit.working_set_bytes() is None


def spin(seconds):
    """Compute for ``seconds`` of wall time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(i * i for i in range(1000))


def bounded_reading(source, work, cpu=time.process_time):
    """The source's reading over ``work``, and the lowest and highest CPU % of ``cpu`` its
    interval can hold: the clocks are read on both sides of each of its two readings, so the
    bounds hold whatever a loaded machine does between them."""
    c0, w0 = cpu(), time.monotonic()
    source.read()
    c1, w1 = cpu(), time.monotonic()
    work()
    c2, w2 = cpu(), time.monotonic()
    reading = source.read()
    c3, w3 = cpu(), time.monotonic()
    return reading, 100.0 * (c2 - c1) / (w3 - w0), 100.0 * (c3 - c0) / (w2 - w1)


# CPU time in ticks (/proc/<pid>/stat, psutil) loses up to a tick at each end of an interval
TICKS_PCT = 100.0 * 2 / 100 / 0.3  # two 10 ms ticks over the 0.3 s of work


def test_real_workers_are_counted():
    import subprocess
    import sys

    import psutil

    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.time()\nwhile time.time() - t < 0.4: pass\n"
                              "time.sleep(5)"])
    try:
        host = HostSource(slow_every_s=0.0)
        first = host.read()
        worker = psutil.Process(child.pid)
        second, low, high = bounded_reading(host, lambda: time.sleep(0.5),
                                            cpu=lambda: sum(worker.cpu_times()[:2]))
    finally:
        child.kill()
        child.wait()
    assert first["workers"] >= 1
    workers_pct = second["process_cpu_pct"] - second["main_cpu_pct"]
    assert low - TICKS_PCT <= workers_pct <= high + TICKS_PCT


def test_a_real_child_that_ended_between_two_readings_is_counted():
    import resource
    import subprocess
    import sys

    def children_cpu_s():
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    host = HostSource(slow_every_s=10.0)  # no refresh between the readings: never followed
    started = time.monotonic()
    host.read()
    before_s = children_cpu_s()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass\n"], check=True)  # reaped
    child_s = children_cpu_s() - before_s
    reading = host.read()
    elapsed_s = time.monotonic() - started  # at least the time between the two readings
    assert child_s >= 0.3
    # this process's CPU includes the child's: at least its CPU over the readings' interval
    assert reading["process_cpu_pct"] >= 100.0 * child_s / elapsed_s


def test_real_psutil_matches_this_process_cpu_time():
    host = HostSource(slow_every_s=10.0)
    reading, low, high = bounded_reading(host, lambda: spin(0.3))
    # same process, the same interval within the bounds; ticks of 10 ms
    assert low - TICKS_PCT <= reading["main_cpu_pct"] <= high + TICKS_PCT
    assert reading["process_cpu_pct"] >= reading["main_cpu_pct"] - 1e-9
    assert 0.0 <= reading["system_cpu_pct"] <= 100.0
    assert reading["rss_gb"] > 0
    assert 0 < reading["available_gb"] <= reading["memory_total_gb"]


def test_procfs_and_psutil_readings_agree():
    fast, slow = HostSource(slow_every_s=10.0), HostSource(slow_every_s=10.0, procfs=False)
    assert fast._procfs and not slow._procfs
    # each against this process's CPU time over its own interval: they agree through it
    a, low_a, high_a = bounded_reading(fast, lambda: spin(0.3))
    b, low_b, high_b = bounded_reading(slow, lambda: spin(0.3))
    assert low_a - TICKS_PCT <= a["main_cpu_pct"] <= high_a + TICKS_PCT
    assert low_b - TICKS_PCT <= b["main_cpu_pct"] <= high_b + TICKS_PCT
    assert 0.0 <= a["system_cpu_pct"] <= 100.0
    assert 0.0 <= b["system_cpu_pct"] <= 100.0
    assert a["memory_total_gb"] == pytest.approx(b["memory_total_gb"], rel=1e-6)
    assert a["rss_gb"] == pytest.approx(b["rss_gb"], rel=0.2)
    assert b["main_demand_pct"] is None  # psutil has no run-queue time


def test_demand_counts_waiting_for_a_core_and_not_sleeping():
    host = HostSource(slow_every_s=10.0)
    host.read()
    time.sleep(0.3)  # sleeping: no demand
    idle = host.read()["main_demand_pct"]
    wall0, cpu0 = time.monotonic(), time.process_time()
    while time.monotonic() - wall0 < 0.3:  # computing: demand at least the CPU time it got
        sum(i * i for i in range(1000))
    busy = host.read()
    cpu_pct = 100.0 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
    assert idle < 10.0
    assert busy["main_demand_pct"] >= 0.8 * cpu_pct
    # running or runnable the whole time: far above sleeping (not at 100: the stolen share is
    # the machine's, and a vCPU the hypervisor takes more from than the other reads lower)
    assert busy["main_demand_pct"] > idle + 50.0


def test_cpu_clocks_and_ticks_give_the_same_figures():
    clocks = HostSource(slow_every_s=10.0)
    ticks = HostSource(slow_every_s=10.0, cpu_clocks=False)
    assert not clocks._ticks and ticks._ticks
    a, low_a, high_a = bounded_reading(clocks, lambda: spin(0.3))
    b, low_b, high_b = bounded_reading(ticks, lambda: spin(0.3))
    assert low_a - 0.5 <= a["main_cpu_pct"] <= high_a + 0.5  # no 10 ms ticks to lose
    assert low_b - TICKS_PCT <= b["main_cpu_pct"] <= high_b + TICKS_PCT
