"""The CPU time of a process's descendants between two readings, the ended ones included.

The sampler reads each descendant it follows (a DataLoader worker) from its own files, from
its first reading on. A descendant that ended is counted whole once this process has reaped
it: the kernel then adds its CPU time to this process's children's
(``getrusage(RUSAGE_CHILDREN)``), of which what its readings counted already is taken out.
So a worker that lives and ends between two refreshes of the list of descendants (a
DataLoader whose workers start again every epoch) is still counted as this process's CPU,
not as other processes'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


class DescendantsCpu:
    """Call :meth:`cpu_s` at each reading, with the followed descendants' CPU seconds then
    and at the reading before. ``reaped_cpu_s`` gives this process's reaped descendants' CPU
    seconds (None where unknown: the followed ones only are counted)."""

    def __init__(self, reaped_cpu_s: Callable[[], float | None] | None) -> None:
        self._reaped_cpu_s = reaped_cpu_s
        # per descendant followed, its CPU time at its first reading: its readings count
        # from there, and what it adds to the reaped time beyond that is new
        self._first_cpu_s: dict[int, float] = {}
        self._counted_gone_s = 0.0  # counted of descendants gone, not in the reaped time yet

    def reaped(self) -> float | None:
        """This process's reaped descendants' CPU seconds now (None: unknown)."""
        return self._reaped_cpu_s() if self._reaped_cpu_s is not None else None

    def cpu_s(self, now: Mapping[int, float], reaped_now: float | None,
              before: Mapping[int, float] | None, reaped_before: float | None) -> float:
        """The descendants' CPU seconds since the reading before (``before`` None: this is
        the first, 0): those read both times (one first seen now counts from the next), and
        the reaped ones' time beyond what their readings counted."""
        for pid, cpu in now.items():
            self._first_cpu_s.setdefault(pid, cpu)
        if before is None:
            return 0.0
        cpu_s = sum(cpu - before[pid] for pid, cpu in now.items() if pid in before)
        for pid in before.keys() - now.keys():  # gone (or no longer followed)
            self._counted_gone_s += before[pid] - self._first_cpu_s.pop(pid, before[pid])
        if reaped_now is not None and reaped_before is not None:
            reaped_s = reaped_now - reaped_before
            counted_s = min(self._counted_gone_s, reaped_s)
            self._counted_gone_s -= counted_s
            cpu_s += reaped_s - counted_s
        return cpu_s


def reaped_cpu_s() -> float | None:
    """This process's reaped descendants' CPU seconds (to the microsecond), None where the
    platform has no ``getrusage``."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
