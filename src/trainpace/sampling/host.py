"""The host: CPU of the training process and its workers, memory; from ``/proc``, else psutil.

CPU percentages are differences of cumulative CPU times over the time between two readings
(100% = one core busy), so the first reading has none: it is the baseline, not a
meaningless 0.0. ``process_cpu_pct`` is the training process plus its descendants (the
DataLoader workers); the list of descendants is refreshed every ``slow_every_s`` from the
kernel's ``/proc/<pid>/task/<tid>/children`` lists (psutil's alternative scans every process
on the machine: milliseconds), and a worker found at a refresh starts counting from there.
A worker that ended is counted whole once this process has reaped it, less what its readings
counted already (:mod:`~trainpace.sampling.descendants`).
``system_cpu_pct`` is the whole machine's busy share (0–100%). Memory (RSS, available,
cgroup) moves slowly: it is read every ``slow_every_s`` too, and held in between.

CPU *demand* is CPU time plus time spent runnable but waiting for a core (the kernel's
``/proc/<pid>/schedstat``): a thread that computes wants a core whether or not it gets one,
a thread that waits on I/O wants none. ``main_demand_pct`` is the training loop's thread
(the process's main thread), ``workers_demand_pct`` the workers' main threads, 100 = one
core. Unlike CPU time, demand does not shrink when other processes crowd the machine, so it
tells loading that computes from loading that waits even on a busy machine. On a virtual
machine whose host runs other guests on its CPUs, the kernel counts the time taken from a
running thread (``steal`` in ``/proc/stat``) as neither: the thread's time on a CPU is
grossed up by the share of the machine's busy time that was stolen over the same interval.

On Linux the readings come from ``/proc`` through files kept open and from the processes'
CPU-time clocks (:mod:`~trainpace.sampling.procfs`): a reading is a few ``pread`` and
``clock_gettime`` calls and no psutil, since the sampler's own cost is the point (issue 9
§5); elsewhere, psutil. The clocks give the CPU time that ``/proc/<pid>/stat`` and
``os.times()`` round down to 10 ms ticks, to the nanosecond (a 100 ms reading's CPU share is
no longer a multiple of 10%); ``cpu_clocks=False`` reads the ticks.

Memory respects a cgroup limit (containers, :mod:`~trainpace.sampling.cgroup`).

``job_cpu_pct`` is the job's CPU on this host, 100 = one core: ``process_cpu_pct`` plus this
process's sibling ranks with their descendants (the rule, and when it applies, in
:mod:`~trainpace.sampling.siblings`); those are refreshed with the descendants and counted
the same way. The key is in a reading only where the rule applies (one of several local
ranks, on Linux): a single process's readings are what they were.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from trainpace.sampling.cgroup import CgroupMemory, find_cgroup_memory
from trainpace.sampling.descendants import DescendantsCpu
from trainpace.sampling.descendants import reaped_cpu_s as read_reaped_cpu_s
from trainpace.sampling.procfs import (
    SCHEDSTAT_BYTES,
    SYSTEM_STAT_BYTES,
    ProcFiles,
    descendant_pids,
    meminfo_bytes,
    process_clock,
    process_clocks_work,
    schedstat_s,
    stat_cpu_s,
    statm_rss_bytes,
    system_times,
)
from trainpace.sampling.siblings import SiblingRanks, several_local_ranks

__all__ = ["HOST_KEYS", "JOB_KEY", "CgroupMemory", "HostSource", "find_cgroup_memory"]

HOST_KEYS: tuple[str, ...] = (
    "process_cpu_pct", "main_cpu_pct", "system_cpu_pct", "workers", "rss_gb",
    "available_gb", "memory_total_gb", "memory_used_pct", "main_demand_pct",
    "workers_demand_pct",
)
JOB_KEY = "job_cpu_pct"  # a reading's key where this process is one of several local ranks

Memory = tuple[float | None, float | None, float | None, float | None]
# (rss, available, total: GB; used %)
Sched = tuple[float, float]  # a thread's time on a CPU and time waiting for one, s
MAX_STOLEN = 0.9  # a larger stolen share would gross up a near-zero CPU time into noise


class Times(NamedTuple):
    """One reading's cumulative counters."""

    at: float
    main_cpu_s: float
    idle: float  # jiffies, the machine's: idle, all, stolen
    total: float
    steal: float
    main_sched: Sched | None
    worker_cpu: dict[int, float]  # {worker pid: CPU s}
    worker_sched: dict[int, Sched]
    job_cpu: dict[int, float]  # {sibling rank or its descendant: CPU s}
    reaped_cpu_s: float | None  # this process's reaped descendants' CPU s (None: unknown)


class HostSource:
    """Reads the host: call :meth:`read` periodically (the sampler does)."""

    def __init__(
        self,
        pid: int | None = None,
        *,
        psutil_module: Any = None,
        cgroup: CgroupMemory | bool | None = True,
        slow_every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        proc: str | Path = "/proc",
        procfs: bool | None = None,
        cpu_clocks: bool | None = None,
        process_cpu_s: Callable[[int], float] | None = None,
        job: bool | None = None,
        reaped_cpu_s: Callable[[], float | None] | None = None,
    ) -> None:
        """``job``: read ``job_cpu_pct`` (None: where this process is one of several local
        ranks, :func:`~trainpace.sampling.siblings.several_local_ranks`). ``reaped_cpu_s``:
        the CPU seconds of this process's reaped descendants (None: ``getrusage`` where it
        reads its own process and psutil is the real one; tests give theirs)."""
        if reaped_cpu_s is None and psutil_module is None and (pid is None
                                                                or pid == os.getpid()):
            reaped_cpu_s = read_reaped_cpu_s
        self._descendants = DescendantsCpu(reaped_cpu_s)
        if psutil_module is None:
            import psutil

            psutil_module = psutil
            if procfs is None:
                procfs = Path(proc, "self", "stat").exists()
        self._psutil = psutil_module
        self._process = psutil_module.Process(pid)
        self._pid = pid if pid is not None else os.getpid()
        self._own = self._pid == os.getpid()
        self._proc = str(proc)
        self._procfs = bool(procfs)
        # a process's CPU time: ``cpu_of(key)`` (OSError once it is gone), keyed by its clock's
        # id (the real /proc) or by pid (``process_cpu_s``: tests); ``ticks``: from its stat
        # file instead (os.times() for this process), in 10 ms ticks
        self._cpu_by_pid = process_cpu_s is not None
        self._cpu_of: Callable[[int], float] = process_cpu_s or time.clock_gettime
        self._ticks = not self._cpu_by_pid and not (
            cpu_clocks is not False and self._procfs and self._proc == "/proc"
            and (cpu_clocks or process_clocks_work()))
        self._main_key = self._cpu_key(self._pid)
        self._clock = clock
        self._slow_every_s = slow_every_s
        self._cgroup = find_cgroup_memory() if cgroup is True else (cgroup or None)
        self._files = ProcFiles()  # read at every reading (and each second: memory)
        self._lists = ProcFiles()  # the children lists, read each second
        self._has_lists: bool | None = None  # whether the kernel keeps children lists
        self._children: list[Any] = []  # psutil processes (the psutil way)
        # the procfs way, per descendant: pid, its ``cpu_of`` key, its stat and schedstat files
        self._workers: list[tuple[int, int, str, str]] = []
        if job is None:
            job = several_local_ranks()
        self._siblings = (SiblingRanks(self._pid, proc=self._proc, children_of=self._children_of)
                          if job and self._procfs else None)
        self._job_lists = ProcFiles()  # the sibling ranks' children lists
        # per sibling rank and descendant of one: pid, its ``cpu_of`` key, its stat file
        self._job: list[tuple[int, int, str]] = []
        own = f"{self._proc}/{self._pid}"
        self._stat_path, self._schedstat_path = f"{own}/stat", f"{own}/schedstat"
        self._system_path = f"{self._proc}/stat"
        self._slow_at = -math.inf
        self._memory: Memory = (None, None, None, None)
        self._previous: Times | None = None

    def _cpu_key(self, pid: int) -> int:
        """What ``cpu_of`` takes for ``pid``."""
        clock_id = None if self._ticks or self._cpu_by_pid else process_clock(pid)
        return pid if clock_id is None else clock_id

    @property
    def job_pids(self) -> list[int]:
        """The processes ``job_cpu_pct`` counts as of the last refresh: this one, its
        descendants, its sibling ranks and theirs ([] where it reads no job column)."""
        if self._siblings is None:
            return []
        return [self._pid, *(w[0] for w in self._workers), *(j[0] for j in self._job)]

    def close(self) -> None:
        """Close the files kept open (also done when the source is collected)."""
        self._files.close()
        self._lists.close()
        self._job_lists.close()
        if self._siblings is not None:
            self._siblings.close()

    def read(self) -> dict[str, float | int | None]:
        """One reading: :data:`HOST_KEYS`, None where unknown (CPU: on the first reading)."""
        now = self._clock()
        if now - self._slow_at >= self._slow_every_s:
            self._refresh()
            self._slow_at = now
        times = self._read_procfs(now) if self._procfs else self._read_psutil(now)
        return self._row(times)

    def _row(self, times: Times | None) -> dict[str, float | int | None]:
        """The row of a reading's counters against the previous reading's."""
        rss, available, total, used = self._memory
        process = main = system = main_demand = workers_demand = job = None
        workers = None
        if times is not None:
            workers = len(times.worker_cpu)
            previous, self._previous = self._previous, times
            worker_s = self._descendants.cpu_s(
                times.worker_cpu, times.reaped_cpu_s,
                None if previous is None else previous.worker_cpu,
                None if previous is None else previous.reaped_cpu_s)
            if previous is not None and times.at > previous.at:
                elapsed = times.at - previous.at
                main_pct = 100.0 * (times.main_cpu_s - previous.main_cpu_s) / elapsed
                main = process = max(main_pct, 0.0)
                jiffies = times.total - previous.total
                busy = jiffies - (times.idle - previous.idle)
                stolen = min(max((times.steal - previous.steal) / busy, 0.0), MAX_STOLEN) \
                    if busy > 0 else 0.0
                if worker_s:
                    process = max(main_pct + 100.0 * worker_s / elapsed, 0.0)
                if times.worker_cpu:
                    earlier = previous.worker_sched
                    wanted = sum(_demand_s(sched, earlier[pid], stolen, elapsed)
                                 for pid, sched in times.worker_sched.items() if pid in earlier)
                    workers_demand = max(0.0, 100.0 * wanted / elapsed)
                if self._siblings is not None:
                    job = process + _new_cpu_pct(times.job_cpu, previous.job_cpu, elapsed)
                if jiffies > 0:
                    system = 100.0 * busy / jiffies
                if times.main_sched is not None and previous.main_sched is not None:
                    main_demand = max(0.0, 100.0 * _demand_s(
                        times.main_sched, previous.main_sched, stolen, elapsed) / elapsed)
        row: dict[str, float | int | None] = {
            "process_cpu_pct": process, "main_cpu_pct": main, "system_cpu_pct": system,
            "workers": workers, "rss_gb": rss, "available_gb": available,
            "memory_total_gb": total, "memory_used_pct": used,
            "main_demand_pct": main_demand, "workers_demand_pct": workers_demand}
        if self._siblings is not None:
            row[JOB_KEY] = job
        return row

    def _read_procfs(self, now: float) -> Times | None:
        read, cpu_of, ticks = self._files.read, self._cpu_of, self._ticks
        main: float | None
        if self._own and ticks:
            t = os.times()
            main = t.user + t.system
        elif self._own and not self._cpu_by_pid:
            main = time.process_time()
        elif not ticks:
            main = _cpu_or_none(cpu_of, self._main_key)
        else:
            main = stat_cpu_s(read(self._stat_path))
        system = system_times(read(self._system_path, SYSTEM_STAT_BYTES))
        if main is None or system is None:
            return None
        workers: dict[int, float] = {}
        demand: dict[int, Sched] = {}
        for pid, key, stat_path, schedstat_path in self._workers:  # none: no work
            cpu = stat_cpu_s(read(stat_path)) if ticks else _cpu_or_none(cpu_of, key)
            if cpu is None:
                continue  # gone since the refresh
            workers[pid] = cpu
            wanted = schedstat_s(read(schedstat_path, SCHEDSTAT_BYTES))
            if wanted is not None:
                demand[pid] = wanted
        job: dict[int, float] = {}
        for pid, key, stat_path in self._job:  # none: a single process
            cpu = stat_cpu_s(read(stat_path)) if ticks else _cpu_or_none(cpu_of, key)
            if cpu is not None:
                job[pid] = cpu
        return Times(now, main, *system, schedstat_s(read(self._schedstat_path, SCHEDSTAT_BYTES)),
                     workers, demand, job, self._descendants.reaped())

    def _read_psutil(self, now: float) -> Times | None:
        ps = self._psutil
        try:
            times = self._process.cpu_times()
            main = times.user + times.system
        except ps.Error:
            return None
        workers: dict[int, float] = {}
        for child in self._children:
            try:
                t = child.cpu_times()
            except ps.Error:
                continue  # gone since the refresh
            workers[child.pid] = t.user + t.system
        system = ps.cpu_times()
        idle = system.idle + getattr(system, "iowait", 0.0)
        # Linux counts guest time inside user time already
        total = sum(system) - getattr(system, "guest", 0.0) - getattr(system, "guest_nice", 0.0)
        steal = getattr(system, "steal", 0.0)
        return Times(now, main, idle, total, steal, None, workers, {}, {},
                     self._descendants.reaped())

    # -- each slow_every_s: the descendants and the memory --------------------------------

    def _refresh(self) -> None:
        try:
            pids = self._descendant_pids()
            if pids is None:
                pids = [child.pid for child in self._process.children(recursive=True)]
        except self._psutil.Error:
            pids = []
        if self._procfs:
            self._follow(pids, self._job_tree())
        else:
            self._children = self._psutil_children(pids)
        self._memory = self._read_memory()

    def _descendant_pids(self) -> list[int] | None:
        """Descendants from the kernel's children lists; None where the kernel has none."""
        if self._has_lists is None:
            self._has_lists = os.path.exists(
                f"{self._proc}/{self._pid}/task/{self._pid}/children")
        return descendant_pids(self._proc, [self._pid], self._lists) if self._has_lists else None

    def _children_of(self, pid: int) -> list[int]:
        """``pid``'s children from psutil's scan (kernels without children lists)."""
        try:
            return [child.pid for child in self._psutil.Process(pid).children()]
        except self._psutil.Error:
            return []

    def _job_tree(self) -> list[int]:
        """The sibling ranks and their descendants ([] for a single process)."""
        if self._siblings is None:
            return []
        siblings = self._siblings.find()
        if not siblings or self._has_lists:
            return siblings + descendant_pids(self._proc, siblings, self._job_lists)
        tree = list(siblings)
        for pid in siblings:
            try:
                tree.extend(c.pid for c in self._psutil.Process(pid).children(recursive=True))
            except self._psutil.Error:
                continue
        return tree

    def _follow(self, pids: list[int], job: list[int]) -> None:
        """Read these descendants, and the job's other processes on this host, from now on
        (the files of one that ended are closed)."""
        proc = self._proc
        keep = {self._stat_path, self._schedstat_path, self._system_path,
                f"{proc}/{self._pid}/statm", f"{proc}/meminfo"}
        if self._cgroup is not None:
            keep.update((str(self._cgroup.usage_file), str(self._cgroup.stat_file)))
        workers = []
        for pid in pids:
            stat_path, schedstat_path = f"{proc}/{pid}/stat", f"{proc}/{pid}/schedstat"
            # kept open from one refresh to the next: one that ended answers ESRCH, and
            # ProcFiles.read closes it, so a pid used again is read from its own files
            keep.update((stat_path, schedstat_path))
            workers.append((pid, self._cpu_key(pid), stat_path, schedstat_path))
        self._job = []
        for pid in job:
            stat_path = f"{proc}/{pid}/stat"
            keep.add(stat_path)
            self._job.append((pid, self._cpu_key(pid), stat_path))
        self._files.forget_all_but(keep)  # workers that ended
        self._workers = workers

    def _psutil_children(self, pids: list[int]) -> list[Any]:
        known = {child.pid: child for child in self._children}
        children = []
        for pid in pids:
            child = known.get(pid)
            if child is None:
                try:
                    child = self._psutil.Process(pid)
                except self._psutil.Error:
                    continue
            children.append(child)
        return children

    def _procfs_memory(self) -> tuple[float | None, float, float] | None:
        """(rss, total, available) bytes from /proc, or None to ask psutil."""
        statm = self._files.read(f"{self._proc}/{self._pid}/statm")
        meminfo = self._files.read(f"{self._proc}/meminfo")
        rss = statm_rss_bytes(statm)
        total = meminfo_bytes(meminfo, b"MemTotal")
        available = meminfo_bytes(meminfo, b"MemAvailable")
        if rss is None or total is None or available is None:
            return None
        return rss, total, available

    def _read_memory(self) -> Memory:
        ps = self._psutil
        fast = self._procfs_memory() if self._procfs else None
        if fast is not None:
            rss_bytes, total_bytes, available = fast
            rss: float | None = None if rss_bytes is None else rss_bytes / 1e9
        else:
            try:
                rss = self._process.memory_info().rss / 1e9
            except ps.Error:
                rss = None
            memory = ps.virtual_memory()
            total_bytes, available = float(memory.total), float(memory.available)
        cgroup = self._cgroup
        if cgroup is not None and cgroup.limit_bytes < total_bytes:
            total_bytes = float(cgroup.limit_bytes)
            working_set = cgroup.working_set_bytes(self._files)
            if working_set is not None:
                available = min(available, max(total_bytes - working_set, 0.0))
            else:
                available = min(available, total_bytes)
        return (rss, available / 1e9, total_bytes / 1e9,
                100.0 * (total_bytes - available) / total_bytes)


def _demand_s(now: Sched, before: Sched, stolen: float, elapsed_s: float) -> float:
    """The seconds a thread wanted a core between two readings: its time waiting for one, and
    its time on one grossed up by the share the hypervisor stole (the kernel counts neither).

    The share is the machine's; the hypervisor takes unevenly from its virtual CPUs, so a
    thread on one it took less from reads high: at most the whole interval, all one thread
    can want."""
    wanted_s = (now[0] - before[0]) / (1.0 - stolen) + (now[1] - before[1])
    return min(wanted_s, elapsed_s)


def _new_cpu_pct(now: dict[int, float], before: dict[int, float], elapsed: float) -> float:
    """The CPU % of the processes read both times (one first seen now counts from the next)."""
    return max(100.0 * sum(cpu - before[pid] for pid, cpu in now.items() if pid in before)
               / elapsed, 0.0)


def _cpu_or_none(cpu_of: Callable[[int], float], key: int) -> float | None:
    try:
        return cpu_of(key)
    except OSError:  # gone
        return None
