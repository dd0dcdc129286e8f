"""The run-folder writer: meta.json, steps.jsonl, system.jsonl, summary.json.

Lines are appended and flushed at each window, and summary.json is replaced atomically, so a
run killed with SIGKILL leaves a folder that reads back, losing at most the last window.

The folder was claimed before (:mod:`trainpace.sinks.folder_claim`). When a
write fails (a full disk), the steps it held are listed in ``meta.json`` as
``missing_steps`` once the folder can be written again, and a warning names them.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import orjson

from trainpace.runlog import (
    META_FILE,
    PROFILE_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
    SYSTEM_FILE,
    Record,
)

logger = logging.getLogger(__name__)

_LINES = msgspec.json.Encoder()


def _open_own(path: Path, mode: int) -> int:
    """A run-folder file opened for writing (``mode``: O_APPEND or O_TRUNC), never through a
    symbolic link: one planted there fails the open (ELOOP) instead of redirecting the write."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | mode, 0o644)



def _step_of(line: Any) -> int:
    """The step number of a line: a record, or a :data:`~trainpace.records.StepLine`."""
    return int(line["step"] if isinstance(line, Mapping) else line.step)


class RunFolderSink:
    """Writes one run folder (see :mod:`trainpace.runlog` for the format).

    Safe to call from two threads (the Meter's writer thread, and ``finish()`` once the writer
    has stopped): one write at a time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.mkdir(parents=True, exist_ok=True)
        self._fds: dict[str, int] = {}
        self._sizes: dict[str, int] = {}  # bytes in each appended file (cut back to on failure)
        self.missing_steps: list[list[int]] = []  # [first, last] ranges that are not on disk
        self.missing_system_rows = 0
        self._failing: OSError | None = None  # the error of the write failing now, if any
        self._meta: Mapping[str, Any] | None = None
        self._meta_stale = False  # meta.json does not say what is missing yet

    def log(self, record: Record) -> None:
        """Write the record where it belongs in the folder."""
        with self._lock:
            self._log(record)

    def _log(self, record: Record) -> None:
        if record.kind == "meta":
            self._meta = record.data
            self._write_meta()
        elif record.kind == "summary":
            self._replace(SUMMARY_FILE, record.data)
        elif record.kind == "window":
            self._append_steps(record.data["steps"])
        elif record.kind == "system":
            try:
                self._append(SYSTEM_FILE, record.data["rows"])
            except OSError:
                self.missing_system_rows += len(record.data["rows"])
        elif record.kind == "profile":
            self._replace(PROFILE_FILE, record.data)

    def close(self) -> None:
        """Close the appended files."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def append_steps(self, steps: Sequence[Any]) -> None:
        """Append step records to steps.jsonl (a failed write is counted in missing_steps)."""
        with self._lock:
            self._append_steps(steps)

    def _append_steps(self, steps: Sequence[Any]) -> None:
        if not steps:
            return
        try:
            self._append(STEPS_FILE, steps)
        except OSError as exc:
            self._lost(_step_of(steps[0]), _step_of(steps[-1]), exc)
            return
        if self._failing is not None:
            self._failing = None
            ranges = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in self.missing_steps)
            logger.warning("trainpace: %s is written again from step %s; steps %s are missing "
                           "from it (listed in meta.json as missing_steps)",
                           self.path / STEPS_FILE, _step_of(steps[0]), ranges)
        if self._meta_stale:
            self._write_meta()

    def _lost(self, first: int, last: int, exc: OSError) -> None:
        if self.missing_steps and self.missing_steps[-1][1] + 1 >= first:
            self.missing_steps[-1][1] = last
        else:
            self.missing_steps.append([first, last])
        self._meta_stale = True
        if self._failing is None:
            self._failing = exc
            logger.warning("trainpace: cannot write %s (%s) from step %d on; training goes on, "
                           "the steps not written will be listed in meta.json as missing_steps",
                           self.path / STEPS_FILE, exc.strerror or exc, first)

    def _write_meta(self) -> None:
        if self._meta is None:
            return
        meta = dict(self._meta)
        meta["missing_steps"] = [list(r) for r in self.missing_steps]
        meta["missing_system_rows"] = self.missing_system_rows
        try:
            self._replace(META_FILE, meta)
        except OSError:
            self._meta_stale = True  # written with the next lines that reach the disk
            return
        self._meta_stale = False

    def _append(self, name: str, rows: Sequence[Any]) -> None:
        if not rows:
            return
        fd = self._fds.get(name)
        if fd is None:
            fd = self._fds[name] = _open_own(self.path / name, os.O_APPEND)
            self._sizes[name] = os.fstat(fd).st_size
        # All the lines in one call (a call per row costs several times more on the writer
        # thread, which holds the GIL the training loop needs); NaN and infinities are written
        # as null: strict JSON without a pass over the rows.
        whole = _LINES.encode_lines(rows)
        data = memoryview(whole)
        size = self._sizes[name]
        try:
            while data:  # in the OS's hands once written: survives the process being killed
                data = data[os.write(fd, data):]
            self._sizes[name] = size + len(whole)
        except OSError:
            try:  # no half line left behind for the next write to join
                os.ftruncate(fd, size)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    logger.debug("trainpace: could not cut %s back: %s", name, exc)
            raise

    def _replace(self, name: str, data: Any) -> None:
        target = self.path / name
        temporary = target.with_suffix(target.suffix + ".tmp")
        try:
            fd = _open_own(temporary, os.O_TRUNC)
            with open(fd, "wb") as handle:
                handle.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            if exc.filename is None:  # a write that failed (a full disk): name the file
                raise OSError(exc.errno, exc.strerror, str(target)) from exc
            raise
        os.replace(temporary, target)  # atomic: a reader sees the old file or the new one
