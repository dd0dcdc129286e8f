"""Linux ``/proc`` read cheaply: files kept open, one ``os.pread`` per reading, bytes parsing.

The sampler wakes every 100 ms with cold caches, and then each ``open``/``read``/``close`` of
a ``/proc`` file costs a few times what one ``pread`` on a file kept open does (path lookup,
a new file object, a new ``seq_file``). :class:`ProcFiles` keeps the descriptors of the files
read at every reading and closes them together (on :meth:`ProcFiles.close`, or when it is
collected). The parsers take the bytes as the kernel gives them and build as few objects as
the figures need.

A process's CPU time is cheaper still through its CPU-time clock (:func:`cpu_seconds`): one
``clock_gettime`` where ``/proc/<pid>/stat`` has the kernel format fifty fields. It is the same
quantity: the kernel scales the utime and stime of ``stat`` so that they add up to the
process's ``sum_exec_runtime``, which is what the clock gives, in nanoseconds instead of
10 ms ticks.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import weakref
from collections.abc import Sequence

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
READ_BYTES = 4096
# /proc/stat's first line is at most 215 bytes (10 numbers of 20 digits) and schedstat's 62:
# reading that little spares a page-sized buffer per reading (the kernel writes the rest of
# /proc/stat, tens of KB on a big machine, into its own buffer whatever is asked)
SYSTEM_STAT_BYTES = 256
SCHEDSTAT_BYTES = 128


def read_bytes(path: str, size: int = READ_BYTES) -> bytes | None:
    """The first ``size`` bytes of a file opened for this call only (None if unreadable)."""
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(size)
    except OSError:
        return None


def _close_all(fds: dict[str, int]) -> None:
    # a snapshot: at the interpreter's exit the finalizer may run while a sampler thread
    # still opens a file into the dict
    for fd in list(fds.values()):
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


class ProcFiles:
    """Descriptors kept open by path; :meth:`read` is one ``pread`` from the start.

    At most ``max_open`` stay open through :meth:`read` (a process with hundreds of threads
    must not take hundreds of descriptors from the user's budget): a file beyond them is
    opened for each read. :meth:`open` keeps a file open whatever the count.
    """

    def __init__(self, max_open: int = 128) -> None:
        self.max_open = max_open
        self._fds: dict[str, int] = {}
        self._closer = weakref.finalize(self, _close_all, self._fds)

    def __len__(self) -> int:
        return len(self._fds)

    def open(self, path: str) -> int | None:
        """The descriptor of ``path``, opened now if it is not open yet (None if it cannot be)."""
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            self._fds[path] = fd
        return fd

    def read(self, path: str, size: int = READ_BYTES) -> bytes | None:
        """The file's first ``size`` bytes now; None (and closed) once it cannot be read."""
        fd = self._fds.get(path)
        if fd is None:
            if len(self._fds) >= self.max_open:
                return read_bytes(path, size)
            fd = self.open(path)
            if fd is None:
                return None
        try:
            return os.pread(fd, size, 0)
        except OSError:  # the process is gone (ESRCH): its files answer no more
            self.forget(path)
            return None

    def forget(self, path: str) -> None:
        """Close ``path`` (a process that exited)."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def forget_all_but(self, keep: set[str]) -> None:
        """Close every file not in ``keep``."""
        for path in [p for p in self._fds if p not in keep]:
            self.forget(path)

    def close(self) -> None:
        """Close every file (one read again later is opened again, and closed when collected)."""
        _close_all(self._fds)


def stat_cpu_s(data: bytes | None) -> float | None:
    """utime + stime (seconds) from a ``/proc/<pid>/stat`` line.

    The process name (field 2) is in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the *last* ``)``; utime and stime are the 12th and 13th
    after it.
    """
    if not data:
        return None
    fields = data[data.rfind(b")") + 2:].split(None, 13)
    try:
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (IndexError, ValueError):
        return None


def schedstat_s(data: bytes | None) -> tuple[float, float] | None:
    """(time on a CPU, time runnable but waiting for one), seconds, from
    ``/proc/<pid>/schedstat``."""
    if not data:
        return None
    fields = data.split(None, 2)
    try:
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (IndexError, ValueError):
        return None


def system_times(data: bytes | None) -> tuple[float, float, float] | None:
    """(idle, total, steal) jiffies from ``/proc/stat``'s first line (guest is inside user;
    steal: the time a hypervisor ran something else on the machine's virtual CPUs)."""
    if not data or not data.startswith(b"cpu "):
        return None
    end = data.find(b"\n")
    fields = (data[4:end] if end >= 0 else data[4:]).split()
    if len(fields) < 4:
        return None
    try:
        values = list(map(int, fields[:8]))
    except ValueError:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    steal = values[7] if len(values) > 7 else 0
    return float(idle), float(sum(values)), float(steal)


def children_pids(data: bytes | None) -> list[int]:
    """The pids of a ``/proc/<pid>/task/<tid>/children`` list ([] if unreadable)."""
    if not data:
        return []
    try:
        return [int(c) for c in data.split()]
    except ValueError:
        return []


def _value_after(data: bytes, key: bytes) -> bytes | None:
    """What follows ``key`` on the line that starts with it, or None."""
    if data.startswith(key):
        at = len(key)
    else:
        at = data.find(b"\n" + key)
        if at < 0:
            return None
        at += 1 + len(key)
    end = data.find(b"\n", at)
    return data[at:end] if end >= 0 else data[at:]


LIST_BYTES = 65536  # a children list: ~7 bytes a pid


def descendant_pids(proc: str, roots: Sequence[int], lists: ProcFiles) -> list[int]:
    """The descendants of the processes ``roots``, from the children list of each of their
    threads.

    ``lists`` keeps those lists open from one call to the next; the lists of threads and
    processes that ended are closed.
    """
    found: list[int] = []
    seen: set[str] = set()
    queue = list(roots)
    while queue:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"{proc}/{parent}/task")
        except OSError:
            continue  # exited meanwhile
        for task in tasks:
            path = f"{proc}/{parent}/task/{task}/children"
            seen.add(path)
            children = children_pids(lists.read(path, LIST_BYTES))
            found.extend(children)
            queue.extend(children)
    lists.forget_all_but(seen)
    return found


def meminfo_bytes(data: bytes | None, key: bytes) -> float | None:
    """One ``/proc/meminfo`` value in bytes (``key`` as ``b"MemTotal"``), None if absent."""
    value = _value_after(data, key + b":") if data else None
    if value is None:
        return None
    try:
        return float(value.split()[0]) * 1024
    except (IndexError, ValueError):
        return None


def statm_rss_bytes(data: bytes | None) -> float | None:
    """Resident bytes from ``/proc/<pid>/statm`` (its second field, in pages)."""
    if not data:
        return None
    fields = data.split(None, 2)
    try:
        return float(fields[1]) * PAGE_BYTES
    except (IndexError, ValueError):
        return None


def stat_value(data: bytes | None, key: bytes) -> int | None:
    """The value of ``key`` in a ``key value`` file (cgroup ``memory.stat``), None if absent."""
    value = _value_after(data, key + b" ") if data else None
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def process_clock(pid: int) -> int | None:
    """The id of the clock counting ``pid``'s CPU time (all its threads), None off Linux.

    Linux's ABI for it, what glibc's ``clock_getcpuclockid`` returns: the negated pid shifted
    by 3 bits, ored with ``CPUCLOCK_SCHED`` (2).
    """
    if not sys.platform.startswith("linux") or not hasattr(time, "clock_gettime"):
        return None
    return ((~pid) << 3) | 2


def cpu_seconds(clock_id: int) -> float | None:
    """The CPU time of a process clock (:func:`process_clock`), None once it has been reaped."""
    try:
        return time.clock_gettime(clock_id)
    except OSError:  # EINVAL: no such process
        return None


def process_clocks_work() -> bool:
    """Whether this kernel gives a process's CPU time through its clock (tried on ourselves)."""
    clock_id = process_clock(os.getpid())
    if clock_id is None:
        return False
    before = time.process_time()
    found = cpu_seconds(clock_id)
    return found is not None and abs(found - before) < 0.5
