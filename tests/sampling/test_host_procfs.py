"""HostSource on a fake ``/proc``: its figures are exact differences of the kernel's counters
(CPU time, run-queue time, steal), and its open files follow the processes."""

from sampling.test_host import GB, Clock, FakePsutil, _proc_tree
from trainpace.sampling.host import HOST_KEYS, HostSource


def _fake_proc(root, *, ticks, clk_tck):
    """A fake /proc for pid 1 (named with spaces and parentheses) and its worker 7.

    ``ticks``: {pid: (utime, stime, run_ns, wait_ns)} and "cpu": the /proc/stat line's values.
    """
    for pid in (1, 7):
        utime, stime, run_ns, wait_ns = ticks[pid]
        folder = root / str(pid)
        folder.mkdir(exist_ok=True)
        (folder / "stat").write_text(
            f"{pid} (my (odd) trainer) S 0 {pid} {pid} 0 -1 4194304 10 0 0 0 {utime} {stime} "
            "0 0 20 0 3 0 100 2000000 500\n")
        (folder / "schedstat").write_text(f"{run_ns} {wait_ns} 9\n")
        (folder / "statm").write_text("9000 250000 300 1 0 900 0\n")
    (root / "stat").write_text("cpu  " + " ".join(map(str, ticks["cpu"])) + "\n"
                               "cpu0 1 2 3 4 5 6 7 8 9 10\nintr 123 4 5 6\n")
    (root / "meminfo").write_text("MemTotal:       31250000 kB\nMemFree:      1 kB\n"
                                  "MemAvailable:   23437500 kB\n")


def _one_worker(tmp_path):
    """A fake /proc of pid 1 and its worker 7, a second of CPU each: (the clock, the ticks)."""
    from trainpace.sampling import procfs

    tck = procfs.CLK_TCK
    _proc_tree(tmp_path, {1: {1: [7]}, 7: {7: []}})
    ticks = {1: (tck, 0, 0, 0), 7: (tck, 0, 0, 0), "cpu": (1, 0, 0, 1, 0, 0, 0, 0, 0, 0)}
    _fake_proc(tmp_path, clk_tck=tck, ticks=ticks)
    return Clock(), ticks


def test_procfs_readings_are_exact_differences_of_the_kernels_counters(tmp_path):
    from trainpace.sampling import procfs

    tck = procfs.CLK_TCK
    ps, clock = FakePsutil(), Clock()
    _proc_tree(tmp_path, {1: {1: [7]}, 7: {7: []}})
    _fake_proc(tmp_path, clk_tck=tck, ticks={
        1: (10 * tck, 2 * tck, 10**9, 10**8), 7: (1 * tck, 0, 0, 0),
        "cpu": (100, 0, 50, 800, 50, 0, 0, 0, 0, 0)})
    host = HostSource(1, psutil_module=ps, clock=clock, cgroup=False, proc=tmp_path,
                      procfs=True, slow_every_s=10.0)
    first = host.read()
    assert first == {"process_cpu_pct": None, "main_cpu_pct": None, "system_cpu_pct": None,
                     "workers": 1, "rss_gb": 250000 * procfs.PAGE_BYTES / 1e9,
                     "available_gb": 24.0, "memory_total_gb": 32.0, "memory_used_pct": 25.0,
                     "main_demand_pct": None, "workers_demand_pct": None}
    assert list(first) == list(HOST_KEYS)
    clock.now = 2.0
    _fake_proc(tmp_path, clk_tck=tck, ticks={
        1: (11 * tck, 2 * tck + tck // 2, 2 * 10**9, 6 * 10**8),  # 1.5 s of CPU in 2 s
        7: (3 * tck, 0, 10**9, 10**9),  # 2 s of CPU; 2 s of demand in 2 s
        "cpu": (200, 0, 100, 1000, 100, 0, 0, 0, 0, 0)})  # busy 150 of 400
    second = host.read()
    assert second["main_cpu_pct"] == 75.0
    assert second["process_cpu_pct"] == 175.0
    assert second["system_cpu_pct"] == 37.5
    assert second["main_demand_pct"] == 75.0  # (1 s run + 0.5 s wait) in 2 s
    assert second["workers_demand_pct"] == 100.0
    assert second["workers"] == 1
    assert ps.children_calls == 0  # neither psutil's scan nor its per-process calls
    kept = len(host._files)
    assert kept == 7  # stat, 1/stat, 1/schedstat, 7/stat, 7/schedstat, statm, meminfo
    host.close()
    assert len(host._files) == 0


def test_demand_counts_the_time_a_hypervisor_stole_from_a_running_thread(tmp_path):
    # the kernel counts stolen time neither as the thread's time on a CPU nor as waiting for
    # one: on a virtual machine whose host is crowded, CPU-bound work would read as waiting
    from trainpace.sampling import procfs

    tck = procfs.CLK_TCK
    clock = Clock()
    _proc_tree(tmp_path, {1: {1: [7]}, 7: {7: []}})
    _fake_proc(tmp_path, clk_tck=tck, ticks={
        1: (0, 0, 10**9, 10**9), 7: (0, 0, 10**9, 0),
        "cpu": (100, 0, 50, 800, 50, 0, 0, 20)})
    host = HostSource(1, psutil_module=FakePsutil(), clock=clock, cgroup=False, proc=tmp_path,
                      procfs=True, slow_every_s=10.0)
    host.read()
    clock.now = 2.0
    _fake_proc(tmp_path, clk_tck=tck, ticks={
        1: (tck // 2, 0, 15 * 10**8, 15 * 10**8),  # 0.5 s on a CPU, 0.5 s waiting for one
        7: (tck, 0, 2 * 10**9, 0),  # 1 s on a CPU
        # 100 jiffies of user time, 100 stolen, 200 idle: half the busy time was stolen
        "cpu": (200, 0, 50, 1000, 50, 0, 0, 120)})
    reading = host.read()
    assert reading["system_cpu_pct"] == 50.0
    assert reading["main_cpu_pct"] == 25.0
    assert reading["main_demand_pct"] == 75.0  # (0.5 / (1 - 0.5) + 0.5) s in 2 s
    assert reading["workers_demand_pct"] == 100.0  # 1 s / (1 - 0.5) in 2 s
    clock.now = 4.0
    _fake_proc(tmp_path, clk_tck=tck, ticks={
        1: (tck, 0, 3 * 10**9, 15 * 10**8),  # 1.5 s on a CPU: on a virtual CPU stolen from less
        7: (tck, 0, 2 * 10**9, 0),
        "cpu": (300, 0, 50, 1200, 50, 0, 0, 220)})
    # 3 s grossed up would be more than one thread can want in 2 s: the whole interval
    assert host.read()["main_demand_pct"] == 100.0
    host.close()


def test_procfs_a_worker_that_ends_is_dropped_and_its_files_closed(tmp_path):
    clock, _ = _one_worker(tmp_path)
    host = HostSource(1, psutil_module=FakePsutil(), clock=clock, cgroup=False, proc=tmp_path,
                      procfs=True, slow_every_s=1.0)
    assert host.read()["workers"] == 1
    (tmp_path / "7" / "stat").write_text("")  # gone: its files answer nothing
    clock.now = 0.5
    assert host.read()["workers"] == 0
    (tmp_path / "1" / "task" / "1" / "children").write_text("")
    clock.now = 1.0
    reading = host.read()
    assert reading["workers"] == 0
    assert reading["process_cpu_pct"] == reading["main_cpu_pct"]
    assert reading["workers_demand_pct"] is None
    assert not any("/7/" in path for path in host._files._fds)


def test_procfs_cgroup_files_are_read_through_the_open_files(tmp_path):
    from trainpace.sampling.cgroup import CgroupMemory

    tck = 100
    _proc_tree(tmp_path, {1: {1: []}})
    _fake_proc(tmp_path, clk_tck=tck, ticks={1: (0, 0, 0, 0), 7: (0, 0, 0, 0),
                                             "cpu": (1, 0, 0, 1, 0, 0, 0, 0, 0, 0)})
    (tmp_path / "memory.current").write_text("7000000000\n")
    (tmp_path / "memory.stat").write_text("anon 5\ninactive_file 1000000000\nactive_file 3\n")
    limit = CgroupMemory(8 * GB, tmp_path / "memory.current", tmp_path / "memory.stat",
                         "inactive_file")
    host = HostSource(1, psutil_module=FakePsutil(), clock=Clock(), cgroup=limit, proc=tmp_path,
                      procfs=True)
    reading = host.read()
    assert reading["memory_total_gb"] == 8.0
    assert reading["available_gb"] == 2.0  # the limit less (7 GB used - 1 GB reclaimable)
    assert reading["memory_used_pct"] == 75.0
    assert str(tmp_path / "memory.stat") in host._files._fds


def _twins(tmp_path, clock, ticks_now):
    """CPU times from the processes' clocks (here a dict) and from their stat files' ticks."""
    from trainpace.sampling import procfs

    def cpu_s(pid):
        if pid not in ticks_now or (tmp_path / str(pid) / "stat").read_text() == "":
            raise OSError(3, "No such process")
        utime, stime, _, _ = ticks_now[pid]
        return (utime + stime) / procfs.CLK_TCK

    kwargs = {"psutil_module": FakePsutil(), "clock": clock, "cgroup": False, "proc": tmp_path,
              "procfs": True, "slow_every_s": 1.0}
    fast = HostSource(1, process_cpu_s=cpu_s, **kwargs)
    careful = HostSource(1, cpu_clocks=False, **kwargs)
    assert not fast._ticks and careful._ticks
    return fast, careful


def test_clocks_and_stat_ticks_give_the_same_figures(tmp_path):
    from trainpace.sampling import procfs

    tck = procfs.CLK_TCK
    clock = Clock()
    _proc_tree(tmp_path, {1: {1: [7]}, 7: {7: []}})
    ticks = {1: (10 * tck, 2 * tck, 10**9, 10**8), 7: (1 * tck, 0, 0, 0),
             "cpu": (100, 0, 50, 800, 50, 0, 0, 0, 0, 0)}
    _fake_proc(tmp_path, clk_tck=tck, ticks=ticks)
    fast, careful = _twins(tmp_path, clock, ticks)
    readings = []
    for now, change in ((0.0, None), (2.0, {1: (11 * tck, 2 * tck + tck // 2, 2 * 10**9, 6 * 10**8),
                                            7: (3 * tck, 0, 10**9, 10**9),
                                            "cpu": (200, 0, 100, 1000, 100, 0, 0, 0, 0, 0)}),
                        (2.5, {7: (3 * tck, tck // 4, 125 * 10**7, 10**9)})):
        clock.now = now
        if change:
            ticks.update(change)
            _fake_proc(tmp_path, clk_tck=tck, ticks=ticks)
        a, b = fast.read(), careful.read()
        assert a == b
        readings.append(a)
    assert readings[1]["process_cpu_pct"] == 175.0
    assert readings[1]["main_demand_pct"] == 75.0
    assert readings[2]["process_cpu_pct"] == 50.0  # 0.25 s of the worker's CPU in 0.5 s
    assert readings[2]["workers_demand_pct"] == 50.0  # 0.25 s on a CPU in 0.5 s
    (tmp_path / "7" / "stat").write_text("")  # the worker is gone
    clock.now = 3.0
    a, b = fast.read(), careful.read()
    assert a == b
    assert a["workers"] == 0
    assert a["workers_demand_pct"] is None


def test_an_odd_proc_stat_leaves_the_cpu_figures_unknown(tmp_path):
    from trainpace.sampling import procfs

    tck = procfs.CLK_TCK
    clock = Clock()
    _proc_tree(tmp_path, {1: {1: []}})
    ticks = {1: (tck, 0, 0, 0), 7: (0, 0, 0, 0), "cpu": (1, 0, 0, 1, 0, 0, 0, 0, 0, 0)}
    _fake_proc(tmp_path, clk_tck=tck, ticks=ticks)
    fast, _ = _twins(tmp_path, clock, ticks)
    fast.read()
    (tmp_path / "stat").write_text("intr 1 2 3\n")  # no cpu line: the machine's share is unknown
    clock.now = 1.0
    reading = fast.read()
    assert reading["system_cpu_pct"] is None
    assert reading["main_cpu_pct"] is None  # no counters this time: nothing to diff
    assert reading["memory_total_gb"] == 32.0


def test_a_pid_used_again_is_read_from_its_new_files(tmp_path):
    clock, ticks = _one_worker(tmp_path)
    fast, _ = _twins(tmp_path, clock, ticks)
    assert fast.read()["workers"] == 1
    children = tmp_path / "1" / "task" / "1" / "children"
    children.write_text("")
    clock.now = 1.0
    assert fast.read()["workers"] == 0  # 7 ended
    schedstat = tmp_path / "7" / "schedstat"
    schedstat.unlink()  # another process 7: new files
    schedstat.write_text("0 0 1\n")
    children.write_text("7 ")
    clock.now = 2.0
    fast.read()
    schedstat.write_text("500000000 0 2\n")  # the files before would say 0
    clock.now = 2.5
    assert fast.read()["workers_demand_pct"] == 100.0
