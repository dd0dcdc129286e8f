"""The Meter's side of the job ledger: which events this run writes, and when.

- ``run_start`` when the Meter opens (with the OS's start time of the process, from which the
  job's startup is timed), ``first_step`` when the first step begins (its ``unix_s`` is the
  zero of steps.jsonl's ``t_s``), ``run_end`` when the run finishes, fails or is interrupted;
- checkpoint saves and loads and evaluations, timed where they happen (:meth:`JobLedger.saving`,
  :meth:`JobLedger.loading`, :meth:`JobLedger.evaluation`): by the patches of
  :mod:`trainpace.meter.checkpoints`, or a framework's hooks;
- the run's last completed step in a memory map at each step (:class:`ProgressMap`, set by
  the training thread; under a framework, as soon as the optimizer stepped:
  :meth:`JobLedger.optimizer_stepped`), which the next run of the job turns into a killed run's last
  ``progress`` event. A window's steps reaching steps.jsonl write nothing here: steps.jsonl
  says the same, and the ledger stays a few records per run (read back whole at each finish).

Only the single process, or rank 0 of a distributed job, writes the ledger; :class:`RunInJob`
wires it to the Meter's parts (the loop's steps, the checkpoint patches) and ends it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainpace.job.events import (
    CHECKPOINT_LOAD,
    CHECKPOINT_SAVE,
    EVALUATION,
    FAILED,
    FINISHED,
    FIRST_STEP,
    INTERRUPTED,
    PROGRESS,
    RUN_END,
    RUN_START,
    TIMING,
)
from trainpace.job.process import job_command, this_process
from trainpace.meter.log_once import LogOnce
from trainpace.sinks.folder_claim import release_claim
from trainpace.sinks.ledger import LedgerWriter, ProgressMap, read_history, read_progress

if TYPE_CHECKING:
    from trainpace.measure.recorder import StepRecorder
    from trainpace.meter.loop import Loop


def checkpoint_path(where: Any) -> str | None:
    """A save's or load's target as the ledger names it (absolute, so that a restart in the
    same folder matches it); None for a buffer or a file object without a name."""
    if isinstance(where, (str, os.PathLike)):
        return os.path.abspath(os.fspath(where))
    name = getattr(where, "name", None)
    return os.path.abspath(name) if isinstance(name, str) else None


_RUNS_STARTED_HERE = 0  # runs this process started (the first one's startup is the process's)


def _interactive() -> bool:
    """An interactive session (a Python prompt, a Jupyter kernel): up long before a run."""
    return hasattr(sys, "ps1") or "ipykernel" in sys.modules


class JobLedger:
    """This run's events in the job's ledger. Nothing here raises into the training."""

    def __init__(self, folder: Path, *, run_id: str, world_size: int,
                 steps_done: Callable[[], int], log_once: LogOnce,
                 clock: Callable[[], float] = time.perf_counter,
                 argv: list[str] | None = None) -> None:
        history = read_history(folder)
        self.run = history.runs + 1
        # a later run of the job: <first run's id>.<n>, unique within the job
        base = history.first_run_id or run_id
        self.run_id = run_id if self.run == 1 else f"{base}.{self.run}"
        self._saves = history.saves
        self._steps_done = steps_done
        self._log_once = log_once
        self.clock = clock  # the run's clock (the Meter's): events timed on it
        self._writer = LedgerWriter(folder, self.run)
        self._ended = False
        self._offset_s = time.time() - clock()  # Unix time of the run's clock zero
        self.folder = folder
        self._last_progress_step = history.last_progress_step
        self._argv = argv
        self._world_size = world_size
        self.progress_map: ProgressMap | None = None

    def start(self) -> None:
        """The run starts: ``run_start`` (after the killed run's last step, when the run
        before was killed), and the progress map is this run's from now on."""
        folder = self.folder
        left = read_progress(folder)
        if left is not None and left[0] == self.run - 1 and left[1] > self._last_progress_step:
            # the run before ended without saying how far it got (a SIGKILL): its map did
            _, step, end_unix_s = left
            for_killed = LedgerWriter(folder, self.run - 1)
            for_killed.write(PROGRESS, end_unix_s, step=step, step_end_unix_s=end_unix_s)
            for_killed.close()
        try:
            self.progress_map = ProgressMap(folder, self.run, self._offset_s)
        except OSError as exc:
            self._log_once.report("keeping the run's last step in the job's progress map", exc)
        me = this_process()
        now = time.time()
        global _RUNS_STARTED_HERE
        _RUNS_STARTED_HERE += 1
        # Startup is the process's own only for the first run it starts, and not in an
        # interactive session: a notebook's kernel or a test session may have been up for
        # hours before this Meter; their startup counts from the Meter's making.
        process_start = (me.start_unix_s if _RUNS_STARTED_HERE == 1 and not _interactive()
                         else now)
        self._writer.write(RUN_START, now, run_id=self.run_id, pid=me.pid, host=me.host,
                           argv=job_command(sys.argv if self._argv is None else self._argv),
                           world_size=self._world_size, process_start_unix_s=process_start)

    def optimizer_stepped(self) -> None:
        """The open step's optimizer stepped now, before the step closes (a framework's step
        runs on to its next batch fetch): the progress map counts it done from this moment,
        so that a kill before the close loses no step the framework did. The step's close
        writes it again, with the step's own end."""
        progress_map = self.progress_map
        if progress_map is None:
            return
        try:
            progress_map.step(self._steps_done() + 1, self.clock())
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("keeping the job's progress", exc)

    def unix(self, clock_s: float) -> float:
        """A time on the run's clock as Unix seconds."""
        return clock_s + self._offset_s

    def first_step(self, t0_s: float) -> None:
        """The first step began at ``t0_s`` (the run's clock)."""
        self._writer.write(FIRST_STEP, self.unix(t0_s))

    @contextmanager
    def saving(self, where: Any, source: str) -> Iterator[None]:
        """Times a checkpoint save; written when it returns."""
        start = self.clock()
        step = self._steps_done()
        yield
        self.saved(self.unix(start), self.clock() - start, where, source, step=step)

    @contextmanager
    def loading(self, where: Any, source: str) -> Iterator[None]:
        """Times a checkpoint load; written when it returns."""
        start = self.clock()
        yield
        self.loaded(self.unix(start), self.clock() - start, where, source)

    def saved(self, unix_s: float, duration_s: float, where: Any, source: str, *,
              step: int | None = None, timing: str | None = None) -> None:
        """A save to ``where`` began at ``unix_s`` and took ``duration_s``, after ``step``
        steps (default: the steps done now); ``timing``: how it was timed, when not exactly
        (an upper bound)."""
        if self._ended:
            return
        try:
            step = self._steps_done() if step is None else step
            path = checkpoint_path(where)
            if path is not None:
                self._saves[path] = (self.run, step)
            self._writer.write(CHECKPOINT_SAVE, unix_s, duration_s=duration_s, step=step,
                               path=path, source=source, **_timing(timing))
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("writing a checkpoint save to the job's ledger", exc)

    def loaded(self, unix_s: float, duration_s: float | None, where: Any, source: str, *,
               timing: str | None = None) -> None:
        """A load from ``where`` began at ``unix_s`` and took ``duration_s``; it names the
        save of the job that wrote that path, if one did. ``duration_s`` None: not timed,
        ``timing`` says why (``unix_s``: when the load was known to be done)."""
        if self._ended:
            return
        try:
            path = checkpoint_path(where)
            saved = self._saves.get(path) if path is not None else None
            self._writer.write(CHECKPOINT_LOAD, unix_s, duration_s=duration_s, path=path,
                               saved_by_run=saved[0] if saved else None,
                               saved_at_step=saved[1] if saved else None, source=source,
                               **_timing(timing))
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("writing a checkpoint load to the job's ledger", exc)

    def evaluation(self, start_unix_s: float, duration_s: float, source: str) -> None:
        """An evaluation loop that began at ``start_unix_s`` ran ``duration_s``."""
        if not self._ended:
            self._writer.write(EVALUATION, start_unix_s, duration_s=duration_s, source=source)

    def end(self, status: str, signal: str | None, last_step: int,
            last_step_end_s: float | None) -> None:
        """The run ended after ``last_step`` steps, the last one ending at
        ``last_step_end_s`` (the run's clock) (once: the first end said is written)."""
        if self._ended:
            return
        self._ended = True
        self._writer.write(RUN_END, time.time(), status=status, last_step=last_step,
                           last_step_end_unix_s=None if last_step_end_s is None
                           else self.unix(last_step_end_s), signal=signal)
        self._writer.close()
        progress_map, self.progress_map = self.progress_map, None
        if progress_map is not None:
            progress_map.close()


def _timing(timing: str | None) -> dict[str, str]:
    """The event's ``timing`` key: only on an event not timed exactly."""
    return {} if timing is None else {TIMING: timing}


def end_of(exc: BaseException) -> tuple[str, str | None]:
    """The ledger's run_end (status, signal) of a run ended by ``exc``."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED, "SIGINT"
    if isinstance(exc, SystemExit) and exc.code in (None, 0):
        return FINISHED, None
    return FAILED, None


class Patches(Protocol):
    """What the run in its job does with the checkpoint patches
    (:class:`~trainpace.meter.checkpoints.CheckpointPatches`, which imports this module)."""

    def install(self) -> None: ...

    def remove(self) -> None: ...


class RunInJob:
    """A Meter's run in its job's ledger: the events its parts give (the loop's closed steps
    into the progress map, the checkpoint patches' saves and loads) from :meth:`open` until
    :meth:`end`. Nothing here raises into the training."""

    def __init__(self, ledger: JobLedger, *, recorder: StepRecorder, loop: Loop,
                 checkpoints: Patches | None, log_once: LogOnce) -> None:
        self.ledger = ledger
        self._recorder = recorder
        self._loop = loop
        self._checkpoints = checkpoints
        self._log_once = log_once

    def open(self) -> None:
        """The run starts: ``run_start``, then each step closed goes to the progress map."""
        self.ledger.start()
        if self.ledger.progress_map is not None:
            self._loop.step_closed = self.ledger.progress_map.step
        if self._checkpoints is not None:
            self._checkpoints.install()

    def end(self, status: str, signal_name: str | None, *, release: bool = True) -> None:
        """The run's end in the job's ledger (once), and, with ``release``, the folder's claim
        given back (after the summary is written)."""
        if self._checkpoints is not None:
            self._checkpoints.remove()
        self._loop.step_closed = None  # the map is closed with the ledger
        last = self._recorder.last_closed
        try:
            self.ledger.end(status, signal_name, self._recorder.steps_closed,
                            last.end_s if last is not None else None)
            if release:
                release_claim(self.ledger.folder)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._log_once.report("ending the job's ledger", exc)
