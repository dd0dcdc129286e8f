"""The job ledger's writer: ``job.jsonl`` in the job's folder (see :mod:`trainpace.job.events`).

An event is one line, appended with one ``write`` as it happens (O_APPEND: whole lines even
with a reader tailing the file), so a SIGKILL loses at most the event being timed at that
moment. Never written through a symbolic link. A failed write is logged once and the training
goes on: the ledger is an account of the job, never a reason to stop it.

Also the one place a job's earlier events are read back for writing (which run this is, what
an earlier run saved): the full reading for goodput is :mod:`trainpace.job.ledger`'s.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from trainpace.job.events import (
    CHECKPOINT_SAVE,
    LEDGER_FILE,
    PROGRESS,
    RUN_END,
    RUN_START,
    SCHEMA,
)

logger = logging.getLogger(__name__)

PROGRESS_FILE = ".trainpace-progress"
"""The latest run's last completed step, as the training thread leaves it at each step: a few
bytes in a shared memory map, which a SIGKILL does not lose (the kernel holds the pages). The
next run of the job reads it and writes it to the ledger as the dead run's last ``progress``."""

# step (int64, 0: none yet) and the step's end on the run's clock, at each step; then, once,
# the run (its number in the job) and its clock's offset to Unix time. In the machine's byte
# order (standard sizes, no padding): the step's fields are written through typed memory views,
# which know no other; the file is read on the machine that wrote it, by the job's next run.
STEP_LAYOUT = struct.Struct("=qd")
RUN_LAYOUT = struct.Struct("=qd")
PROGRESS_SIZE = STEP_LAYOUT.size + RUN_LAYOUT.size


@dataclass
class JobHistory:
    """What a run needs to know of the job's earlier events to write its own."""

    runs: int = 0  # the run number of the latest run_start (0: a new job)
    first_run_id: str | None = None  # the first run's id (later runs are <id>.2, <id>.3...)
    last_progress_step: int = 0  # the latest run's last step the ledger knows of
    saves: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (run, step)


def read_history(folder: Path) -> JobHistory:
    """The job's history from its ledger (an empty one when there is none)."""
    history = JobHistory()
    for event in _events(folder / LEDGER_FILE):
        run = event.get("run")
        if not isinstance(run, int):
            continue
        name = event.get("event")
        if name == RUN_START:
            history.runs = max(history.runs, run)
            if history.first_run_id is None and isinstance(event.get("run_id"), str):
                history.first_run_id = event["run_id"]
            history.last_progress_step = 0
        elif name in (PROGRESS, RUN_END) and run == history.runs:
            step = event.get("step" if name == PROGRESS else "last_step")
            if isinstance(step, int):
                history.last_progress_step = max(history.last_progress_step, step)
        elif name == CHECKPOINT_SAVE and isinstance(event.get("path"), str):
            step = event.get("step")
            history.saves[event["path"]] = (run, step if isinstance(step, int) else 0)
    return history


def _events(ledger: Path) -> Iterator[dict[str, Any]]:
    try:
        fd = os.open(ledger, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    with open(fd, "rb") as lines:
        for line in lines:
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line cut by a kill: the events around it stand
            if isinstance(event, dict) and event.get("schema") == SCHEMA:
                yield event


class LedgerWriter:
    """Appends this run's events to the job's ledger. Safe from any thread."""

    def __init__(self, folder: Path, run: int) -> None:
        self.path = folder / LEDGER_FILE
        self.run = run
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._failed = False

    def write(self, event: str, unix_s: float, **keys: Any) -> None:
        """One event, written now; never raises (a failure is logged once)."""
        line = orjson.dumps({"schema": SCHEMA, "event": event, "run": self.run,
                             "unix_s": unix_s, **keys}) + b"\n"
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND
                                       | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
                os.write(self._fd, line)  # one write: the line is whole or absent
            except OSError as exc:
                if not self._failed:
                    self._failed = True
                    logger.warning("trainpace: cannot write %s (%s); training goes on, the "
                                   "job's ledger misses this run's %s event and may miss later "
                                   "ones", self.path, exc.strerror or exc, event)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class ProgressMap:
    """The run's last completed step in :data:`PROGRESS_FILE`, kept current by the training
    thread at each step (:meth:`step`): two stores into the shared page through typed views, no
    system call (the page is shared with the kernel, which writes it out whatever happens to
    the process). Right after a CPU training step that took about 7 µs where one
    ``STEP_LAYOUT.pack_into`` took 13 (``benchmarks/cold_calls.py``: the struct module's code
    is cold there, and each step's call paid for bringing it back into the CPU's caches)."""

    def __init__(self, folder: Path, run: int, offset_s: float) -> None:
        path = folder / PROGRESS_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o644)
        try:
            # written, not only sized: a page the disk has no room for fails here, not as a
            # SIGBUS in the training loop
            os.write(fd, bytes(STEP_LAYOUT.size) + RUN_LAYOUT.pack(run, offset_s))
            self._map = mmap.mmap(fd, PROGRESS_SIZE)
        finally:
            os.close(fd)
        whole = memoryview(self._map)
        # STEP_LAYOUT's two fields, in the machine's byte order like the layout
        self._step = whole[:8].cast("q")
        self._end_s = whole[8:16].cast("d")
        whole.release()

    def step(self, step: int, end_s: float) -> None:
        """Step ``step`` ended at ``end_s`` (the run's clock). The end goes first: a reader
        that finds the new step finds its end (a process killed between the two leaves the
        previous step with this one's end, never a step with an older end)."""
        self._end_s[0] = end_s
        self._step[0] = step

    def close(self) -> None:
        self._step.release()
        self._end_s.release()
        with contextlib.suppress(BufferError, ValueError):
            self._map.close()


def read_progress(folder: Path) -> tuple[int, int, float] | None:
    """The run, its last step and that step's end (Unix seconds) left in
    :data:`PROGRESS_FILE` (None: none)."""
    try:
        fd = os.open(folder / PROGRESS_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    with open(fd, "rb") as file:
        data = file.read(PROGRESS_SIZE)
    if len(data) < PROGRESS_SIZE:
        return None
    step, end_s = STEP_LAYOUT.unpack_from(data)
    run, offset_s = RUN_LAYOUT.unpack_from(data, STEP_LAYOUT.size)
    return (run, step, end_s + offset_s) if step > 0 else None
