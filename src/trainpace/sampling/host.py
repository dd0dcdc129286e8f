"""The host side through ``psutil``: CPU of the training process and its workers, memory.

CPU percentages are differences of cumulative CPU times over the time between two readings
(100% = one core busy), so the first reading has none: it is the baseline, not a
meaningless 0.0. ``process_cpu_pct`` is the training process plus its descendants (the
DataLoader workers); the list of descendants is refreshed every ``slow_every_s`` from the
kernel's ``/proc/<pid>/task/<tid>/children`` lists (psutil's alternative scans every process
on the machine: milliseconds), and a worker found at a refresh starts counting from there.
``system_cpu_pct`` is the whole machine's busy share (0–100%). Memory (RSS, available,
cgroup) moves slowly: it is read every ``slow_every_s`` too, and held in between.

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
    "available_gb", "memory_total_gb", "memory_used_pct",
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
    ) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._psutil = psutil_module
        self._process = psutil_module.Process(pid)
        self._pid = pid if pid is not None else os.getpid()
        self._proc = Path(proc)
        self._clock = clock
        self._slow_every_s = slow_every_s
        self._cgroup = find_cgroup_memory() if cgroup is True else (cgroup or None)
        self._children: list[Any] = []
        self._slow_at: float | None = None
        self._memory: dict[str, float | None] = {}
        self._previous: tuple[float, float, dict[int, float], float, float] | None = None

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
        try:
            times = self._process.cpu_times()
            main = times.user + times.system
        except ps.Error:
            return row
        workers: dict[int, float] = {}
        for child in self._children:
            try:
                t = child.cpu_times()
            except ps.Error:
                continue  # gone since the refresh
            workers[child.pid] = t.user + t.system
        row["workers"] = len(workers)
        system = ps.cpu_times()
        idle = system.idle + getattr(system, "iowait", 0.0)
        # Linux counts guest time inside user time already
        total = sum(system) - getattr(system, "guest", 0.0) - getattr(system, "guest_nice", 0.0)
        previous = self._previous
        self._previous = (now, main, workers, idle, total)
        if previous is not None and now > previous[0]:
            elapsed = now - previous[0]
            main_pct = 100.0 * (main - previous[1]) / elapsed
            # a worker first seen now has no earlier reading: it counts from the next one
            worker_s = sum(cpu - previous[2][pid] for pid, cpu in workers.items()
                           if pid in previous[2])
            row["main_cpu_pct"] = max(main_pct, 0.0)
            row["process_cpu_pct"] = max(main_pct + 100.0 * worker_s / elapsed, 0.0)
            if total > previous[4]:
                busy = (total - previous[4]) - (idle - previous[3])
                row["system_cpu_pct"] = 100.0 * busy / (total - previous[4])
        return row

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

    def _read_memory(self) -> dict[str, float | None]:
        ps = self._psutil
        try:
            rss: float | None = self._process.memory_info().rss / 1e9
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
