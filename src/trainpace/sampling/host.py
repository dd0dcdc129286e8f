"""The host side through ``psutil``: CPU of the training process and its workers, memory.

CPU percentages are differences of cumulative CPU times over the time between two readings
(100% = one core busy), so the first reading has none: it is the baseline, not a
meaningless 0.0. ``process_cpu_pct`` is the training process plus its descendants (the
DataLoader workers); the list of descendants is refreshed every ``slow_every_s`` from the
kernel's ``/proc/<pid>/task/<tid>/children`` lists (psutil's alternative scans every process
on the machine: milliseconds), and a worker found at a refresh starts counting from there.
``system_cpu_pct`` is the whole machine's busy share (0–100%). Memory (RSS, available,
cgroup) moves slowly: it is read every ``slow_every_s`` too, and held in between.

CPU *demand* is CPU time plus time spent runnable but waiting for a core (the kernel's
``/proc/<pid>/schedstat``): a thread that computes wants a core whether or not it gets one,
a thread that waits on I/O wants none. ``main_demand_pct`` is the training loop's thread
(the process's main thread), ``workers_demand_pct`` the workers' main threads, 100 = one
core. Unlike CPU time, demand does not shrink when other processes crowd the machine, so it
tells loading that computes from loading that waits even on a busy machine.

On Linux the readings come from ``/proc`` directly (``os.times()`` for this process): one
small read per file, a fraction of psutil's cost per call; elsewhere through psutil.

Memory respects a cgroup limit (containers): when one is lower than the machine's memory,
the total is the limit and ``available_gb`` is the limit minus the cgroup's working set
(its usage less reclaimable file cache), if that is lower than what the machine says.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST_KEYS: tuple[str, ...] = (
    "process_cpu_pct", "main_cpu_pct", "system_cpu_pct", "workers", "rss_gb",
    "available_gb", "memory_total_gb", "memory_used_pct", "main_demand_pct",
    "workers_demand_pct",
)


@dataclass(frozen=True)
class CgroupMemory:
    """The memory limit of this process's cgroup and the files that give its usage."""

    limit_bytes: int
    usage_file: Path
    stat_file: Path
    inactive_key: str  # the reclaimable page-cache line of memory.stat

    def working_set_bytes(self) -> int | None:
        """Usage less inactive file cache (what the kernel cannot simply drop), or None."""
        try:
            usage = int(self.usage_file.read_text().strip())
            inactive = 0
            for line in self.stat_file.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == self.inactive_key:
                    inactive = int(value)
                    break
        except (OSError, ValueError):
            return None
        return max(usage - inactive, 0)


def find_cgroup_memory(root: str | Path = "/sys/fs/cgroup",
                       proc_cgroup: str | Path = "/proc/self/cgroup") -> CgroupMemory | None:
    """This process's cgroup memory limit (v2, else v1), or None when there is none."""
    root = Path(root)
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        relative = path.lstrip("/")
        if controllers == "" and (root / relative / "memory.max").exists():  # v2
            folder = root / relative
            candidate = (folder / "memory.max", folder / "memory.current", folder / "memory.stat",
                         "inactive_file")
        elif "memory" in controllers.split(","):  # v1
            folder = root / "memory" / relative
            candidate = (folder / "memory.limit_in_bytes", folder / "memory.usage_in_bytes",
                         folder / "memory.stat", "total_inactive_file")
        else:
            continue
        try:
            text = candidate[0].read_text().strip()
        except OSError:
            continue
        if text == "max" or not text.isdigit():
            return None
        return CgroupMemory(int(text), candidate[1], candidate[2], candidate[3])
    return None


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(4096)
    except OSError:
        return None


def _stat_cpu_s(data: bytes | None) -> float | None:
    """utime + stime (seconds) from a ``/proc/<pid>/stat`` line."""
    if not data:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (IndexError, ValueError):
        return None


def _schedstat_s(data: bytes | None) -> float | None:
    """Time on a CPU + time waiting for one (seconds), from ``/proc/<pid>/schedstat``."""
    if not data:
        return None
    fields = data.split()
    try:
        return (int(fields[0]) + int(fields[1])) / 1e9
    except (IndexError, ValueError):
        return None


def _system_times(data: bytes | None) -> tuple[float, float] | None:
    """(idle, total) jiffies from ``/proc/stat``'s first line (guest is inside user)."""
    if not data or not data.startswith(b"cpu "):
        return None
    values = [int(v) for v in data[:data.find(b"\n")].split()[1:9]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return float(idle), float(sum(values))


@dataclass
class _Times:
    """One reading's cumulative counters."""

    at: float
    main: float
    workers: dict[int, float]
    idle: float
    total: float
    main_demand: float | None
    workers_demand: dict[int, float]


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
    ) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
            if procfs is None:
                procfs = Path(proc, "self", "stat").exists()
        self._psutil = psutil_module
        self._process = psutil_module.Process(pid)
        self._pid = pid if pid is not None else os.getpid()
        self._own = self._pid == os.getpid()
        self._proc = Path(proc)
        self._procfs = bool(procfs)
        self._clock = clock
        self._slow_every_s = slow_every_s
        self._cgroup = find_cgroup_memory() if cgroup is True else (cgroup or None)
        self._children: list[Any] = []
        self._slow_at: float | None = None
        self._memory: dict[str, float | None] = {}
        self._previous: _Times | None = None

    def read(self) -> dict[str, float | int | None]:
        """One reading: :data:`HOST_KEYS`, None where unknown (CPU: on the first reading)."""
        ps = self._psutil
        now = self._clock()
        row: dict[str, float | int | None] = dict.fromkeys(HOST_KEYS)
        if self._slow_at is None or now - self._slow_at >= self._slow_every_s:
            try:
                self._children = self._find_children()
            except ps.Error:
                self._children = []
            self._memory = self._read_memory()
            self._slow_at = now
        row.update(self._memory)
        times = self._read_procfs(now) if self._procfs else self._read_psutil(now)
        if times is None:
            return row
        row["workers"] = len(times.workers)
        previous, self._previous = self._previous, times
        if previous is None or now <= previous.at:
            return row
        elapsed = now - previous.at
        main_pct = 100.0 * (times.main - previous.main) / elapsed
        # a worker first seen now has no earlier reading: it counts from the next one
        worker_s = sum(cpu - previous.workers[pid] for pid, cpu in times.workers.items()
                       if pid in previous.workers)
        row["main_cpu_pct"] = max(main_pct, 0.0)
        row["process_cpu_pct"] = max(main_pct + 100.0 * worker_s / elapsed, 0.0)
        if times.total > previous.total:
            busy = (times.total - previous.total) - (times.idle - previous.idle)
            row["system_cpu_pct"] = 100.0 * busy / (times.total - previous.total)
        if times.main_demand is not None and previous.main_demand is not None:
            row["main_demand_pct"] = max(
                0.0, 100.0 * (times.main_demand - previous.main_demand) / elapsed)
        if times.workers:
            demand = sum(d - previous.workers_demand[pid]
                         for pid, d in times.workers_demand.items()
                         if pid in previous.workers_demand)
            row["workers_demand_pct"] = max(0.0, 100.0 * demand / elapsed)
        return row

    def _read_procfs(self, now: float) -> _Times | None:
        proc = str(self._proc)
        if self._own:
            t = os.times()
            main: float | None = t.user + t.system
        else:
            main = _stat_cpu_s(_read_bytes(f"{proc}/{self._pid}/stat"))
        system = _system_times(_read_bytes(f"{proc}/stat"))
        if main is None or system is None:
            return None
        workers: dict[int, float] = {}
        demand: dict[int, float] = {}
        for child in self._children:
            cpu = _stat_cpu_s(_read_bytes(f"{proc}/{child.pid}/stat"))
            if cpu is None:
                continue  # gone since the refresh
            workers[child.pid] = cpu
            wanted = _schedstat_s(_read_bytes(f"{proc}/{child.pid}/schedstat"))
            if wanted is not None:
                demand[child.pid] = wanted
        return _Times(now, main, workers, system[0], system[1],
                      _schedstat_s(_read_bytes(f"{proc}/{self._pid}/schedstat")), demand)

    def _read_psutil(self, now: float) -> _Times | None:
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
        return _Times(now, main, workers, idle, total, None, {})

    def _descendant_pids(self) -> list[int] | None:
        """Descendants from the kernel's children lists; None where the kernel has none."""
        if not (self._proc / str(self._pid) / "task" / str(self._pid) / "children").exists():
            return None
        found: list[int] = []
        queue = [self._pid]
        while queue:
            pid = queue.pop()
            try:
                tasks = list((self._proc / str(pid) / "task").iterdir())
            except OSError:
                continue  # exited meanwhile
            for task in tasks:
                try:
                    children = [int(c) for c in (task / "children").read_text().split()]
                except (OSError, ValueError):
                    continue
                found.extend(children)
                queue.extend(children)
        return found

    def _find_children(self) -> list[Any]:
        pids = self._descendant_pids()
        if pids is None:
            return list(self._process.children(recursive=True))
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
        statm = _read_bytes(f"{self._proc}/{self._pid}/statm")
        meminfo = _read_bytes(f"{self._proc}/meminfo")
        if not statm or not meminfo:
            return None
        found: dict[bytes, float] = {}
        for line in meminfo.splitlines():
            key, _, rest = line.partition(b":")
            if key in (b"MemTotal", b"MemAvailable"):
                found[key] = float(rest.split()[0]) * 1024
                if len(found) == 2:
                    break
        if len(found) < 2:
            return None
        return (float(statm.split()[1]) * _PAGE, found[b"MemTotal"], found[b"MemAvailable"])

    def _read_memory(self) -> dict[str, float | None]:
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
        if self._cgroup is not None and self._cgroup.limit_bytes < total_bytes:
            total_bytes = float(self._cgroup.limit_bytes)
            working_set = self._cgroup.working_set_bytes()
            if working_set is not None:
                available = min(available, max(total_bytes - working_set, 0.0))
            else:
                available = min(available, total_bytes)
        return {
            "rss_gb": rss,
            "available_gb": available / 1e9,
            "memory_total_gb": total_bytes / 1e9,
            "memory_used_pct": 100.0 * (total_bytes - available) / total_bytes,
        }
