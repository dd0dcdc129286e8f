import os
import subprocess
import sys
import time

import pytest

from trainpace.sampling import procfs
from trainpace.sampling.procfs import (
    ProcFiles,
    children_pids,
    meminfo_bytes,
    schedstat_s,
    stat_cpu_s,
    stat_value,
    statm_rss_bytes,
    system_times,
)


def _stat_line(name, utime, stime, pid=42):
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return (f"{pid} ({name}) S 1 42 42 0 -1 4194304 10 0 0 0 {utime} {stime} 0 0 20 0 3 0 "
            "100 2000000 500 18446744073709551615\n").encode()


@pytest.mark.parametrize("name", ["python", "my trainer", "a) (b c", "x) S 1 2 3 4 5 6 7 8 9 10 11",
                                  ")", "(("])
def test_stat_cpu_counts_fields_after_the_last_parenthesis(name):
    data = _stat_line(name, 250, 50)
    assert stat_cpu_s(data) == 300 / procfs.CLK_TCK


def test_stat_cpu_of_nothing_or_a_cut_line_is_unknown():
    assert stat_cpu_s(None) is None
    assert stat_cpu_s(b"") is None
    assert stat_cpu_s(b"42 (python) S 1 42") is None
    assert stat_cpu_s(b"42 (python) S 1 42 42 0 -1 4194304 10 0 0 0 x y 0") is None


def test_this_process_stat_matches_os_times():
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        data = f.read()
    t = os.times()
    assert stat_cpu_s(data) == pytest.approx(t.user + t.system, abs=0.05)


def test_schedstat_is_run_and_wait_time():
    assert schedstat_s(b"1500000000 500000000 123\n") == (1.5, 0.5)
    assert schedstat_s(b"12") is None
    assert schedstat_s(b"") is None
    assert schedstat_s(b"a b c") is None


def test_system_times_take_the_first_line_only():
    data = (b"cpu  100 5 50 800 20 3 2 10 7 1\ncpu0 50 2 25 400 10 1 1 5 3 0\n"
            b"intr 999999 1 2 3\n")
    # idle = idle + iowait; total = the first 8 (guest is inside user); steal the 8th
    assert system_times(data) == (820.0, 990.0, 10.0)
    assert system_times(b"cpu  1 2 3 4") == (4.0, 10.0, 0.0)  # an old kernel: no iowait, steal
    assert system_times(b"cpu0 1 2 3 4 5\n") is None
    assert system_times(b"cpu  1 2\n") is None
    assert system_times(b"cpu  1 x 3 4 5\n") is None
    assert system_times(None) is None


def test_children_lists():
    assert children_pids(b"7 8 12 ") == [7, 8, 12]
    assert children_pids(b"") == []
    assert children_pids(b"7 x") == []


def test_meminfo_statm_and_key_value_files():
    meminfo = b"MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n"
    assert meminfo_bytes(meminfo, b"MemTotal") == 16000000 * 1024
    assert meminfo_bytes(meminfo, b"MemAvailable") == 8000000 * 1024
    assert meminfo_bytes(meminfo, b"Mem") is None  # a prefix of a key is not the key
    assert meminfo_bytes(meminfo, b"SwapTotal") is None
    assert meminfo_bytes(None, b"MemTotal") is None
    assert statm_rss_bytes(b"5000 1000 300 1 0 900 0\n") == 1000.0 * procfs.PAGE_BYTES
    assert statm_rss_bytes(b"5000") is None
    stat = b"anon 1\nactive_file 5\ninactive_file 1000000000\ntotal_inactive_file 7"
    assert stat_value(stat, b"inactive_file") == 1000000000
    assert stat_value(stat, b"total_inactive_file") == 7  # the last line, no newline
    assert stat_value(stat, b"anon") == 1
    assert stat_value(stat, b"file") is None
    assert stat_value(b"anon x\n", b"anon") is None


def test_files_stay_open_and_show_the_current_contents(tmp_path):
    path = tmp_path / "counter"
    path.write_text("1\n")
    files = ProcFiles()
    assert files.read(str(path)) == b"1\n"
    path.write_text("22\n")  # same file, new contents: one pread sees them
    assert files.read(str(path)) == b"22\n"
    assert len(files) == 1
    assert files.read(str(tmp_path / "absent")) is None
    assert len(files) == 1
    files.forget_all_but(set())
    assert len(files) == 0
    files.close()


def test_files_beyond_the_cap_are_read_without_being_kept(tmp_path):
    files = ProcFiles(max_open=2)
    for i in range(4):
        (tmp_path / str(i)).write_text(str(i))
    assert [files.read(str(tmp_path / str(i))) for i in range(4)] == [b"0", b"1", b"2", b"3"]
    assert len(files) == 2
    files.close()
    assert len(files) == 0


def test_a_process_that_ended_is_forgotten():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    path = f"/proc/{child.pid}/stat"
    files = ProcFiles()
    first = files.read(path)
    child.wait()  # reaped: its open files answer ESRCH
    assert first is None or stat_cpu_s(first) is not None
    assert files.read(path) is None
    assert len(files) == 0


@pytest.mark.skipif(not procfs.process_clocks_work(), reason="needs Linux's process CPU clocks")
def test_a_process_clock_is_its_stat_cpu_time_to_the_nanosecond():
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\ntime.sleep(5)"])
    clock_id = procfs.process_clock(child.pid)
    try:
        deadline = time.monotonic() + 120  # 0.3 s of CPU may take long on a loaded machine
        while (stat := stat_cpu_s(procfs.read_bytes(f"/proc/{child.pid}/stat"))) < 0.3:
            assert time.monotonic() < deadline, "the child never used its 0.3 s of CPU"
            time.sleep(0.05)
        clock = procfs.cpu_seconds(clock_id)
        stat = stat_cpu_s(procfs.read_bytes(f"/proc/{child.pid}/stat"))
    finally:
        child.kill()
        child.wait()
    # stat rounds utime and stime down to ticks each: at most two ticks below the clock
    assert 0.0 <= clock - stat <= 2.0 / procfs.CLK_TCK + 1e-9
    assert procfs.cpu_seconds(clock_id) is None  # reaped


def test_no_process_clocks_off_linux(monkeypatch):
    monkeypatch.setattr(procfs.sys, "platform", "darwin")
    assert procfs.process_clock(1) is None
    assert not procfs.process_clocks_work()


def test_files_closed_can_be_read_again(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    files = ProcFiles()
    assert files.read(str(path)) == b"x"
    files.close()
    assert len(files) == 0
    assert files.read(str(path)) == b"x"  # opened again
    assert len(files) == 1
    files.close()
