"""A framework's checkpoint saves, loads and evaluations, timed into the job's ledger from its
own hooks and methods (Lightning's ``Trainer.save_checkpoint`` and its strategy's
``load_checkpoint``, HF's ``Trainer._save_checkpoint`` / ``_load_from_checkpoint`` /
``evaluate``), never by replacing a module's functions.

A framework loads the checkpoint it resumes from before the fit starts, that is before the
callback's Meter exists: such an event is timed all the same and written when the Meter opens.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from trainpace.meter.ledger import JobLedger

Where = Callable[[tuple[Any, ...], dict[str, Any]], Any]


class FrameworkEvents:
    """The events a framework integration times, for the Meter it runs (``attach``)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._ledger: JobLedger | None = None
        self._attached = False  # a Meter opened: events wait for it no longer
        self._pending: list[Callable[[JobLedger], None]] = []
        self._wrapped: list[tuple[Any, str, Any]] = []  # (object, method name, our wrapper)
        # the saves and loads timed on the framework's own methods (``timed``): exactly, so a
        # hook that can only bound them leaves them alone
        self.exact_saves = 0
        self.exact_loads = 0

    def attach(self, meter: Any) -> None:
        """The Meter opened: what was timed before it goes into its ledger now."""
        self._ledger = meter._job_ledger
        self._attached = True
        pending, self._pending = self._pending, []
        if self._ledger is not None:
            for write in pending:
                write(self._ledger)

    def detach(self) -> None:
        self._ledger = None
        self._attached = False

    def _record(self, write: Callable[[JobLedger], None]) -> None:
        if self._ledger is not None:
            write(self._ledger)
        elif not self._attached:  # (a Meter without a ledger, another rank's: nothing kept)
            self._pending.append(write)

    def save(self, unix_s: float, duration_s: float, where: Any, *,
             timing: str | None = None) -> None:
        source = self.source
        self._record(lambda ledger: ledger.saved(unix_s, duration_s, where, source,
                                                 timing=timing))

    def load(self, unix_s: float, duration_s: float | None, where: Any, *,
             timing: str | None = None) -> None:
        source = self.source
        self._record(lambda ledger: ledger.loaded(unix_s, duration_s, where, source,
                                                  timing=timing))

    def clock(self) -> tuple[Callable[[], float], Callable[[float], float]]:
        """(a clock, its readings as Unix seconds): the Meter's once it runs, so that these
        events and the steps are timed alike."""
        ledger = self._ledger
        if ledger is None:
            offset_s = time.time() - time.perf_counter()
            return time.perf_counter, lambda clock_s: clock_s + offset_s
        return ledger.clock, ledger.unix

    def evaluation(self, unix_s: float, duration_s: float) -> None:
        if self._ledger is not None:  # (one before the fit, a sanity check, is set-up)
            self._ledger.evaluation(unix_s, duration_s, self.source)

    def timed(self, kind: str, call: Callable[..., Any], where: Any, *args: Any,
              **kwargs: Any) -> Any:
        """``call(*args, **kwargs)``, timed as a ``kind`` ("save", "load") of ``where``
        (written only when it returns)."""
        clock, unix = self.clock()
        start = clock()
        result = call(*args, **kwargs)
        if kind == "save":
            self.exact_saves += 1
            self.save(unix(start), clock() - start, where)
        else:
            self.exact_loads += 1
            self.load(unix(start), clock() - start, where)
        return result

    def wrap(self, obj: Any, name: str, kind: str, where: Where) -> None:
        """Time ``obj.name(...)`` (this object's method only: an attribute on the instance)
        until :meth:`unwrap`; ``where(args, kwargs)`` names the checkpoint."""
        original = getattr(obj, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            return self.timed(kind, original, where(args, kwargs), *args, **kwargs)

        setattr(obj, name, timed)
        self._wrapped.append((obj, name, timed))

    def unwrap(self) -> None:
        for obj, name, ours in reversed(self._wrapped):
            if vars(obj).get(name) is ours:
                delattr(obj, name)  # the class's method shows through again
        self._wrapped.clear()


def argument(position: int, name: str) -> Where:
    """The checkpoint named by argument ``position`` (or keyword ``name``) of the call."""
    def where(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return kwargs.get(name, args[position] if len(args) > position else None)
    return where
