"""The command's head start: a trace read in a child process while the command imports.

``trainpace analyze`` spends its first ~0.25 s (on a slow machine) importing numpy and the
analysis, on one core, while the other is idle; reading a trace needs neither (:mod:`.extract`).
So the command forks a child before those imports, the child reads the trace into flat
columns and hands them over through a pipe, and :func:`.load.read_trace` takes them instead
of reading the file itself. The child is forked while the process is a single thread that has
imported only the reader, so it shares no lock and little memory; it leaves with
``os._exit`` (no atexit handler, no flush of inherited buffers).

What the child cannot read, it says: a :class:`TraceFormatError` is raised again with its
message, word for word; anything else (it ran out of memory, it was killed) and the file is
read again here, as without a head start. Only regular files are read ahead (a FIFO can be
read once), one trace at a time, on systems that fork natively (Linux).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import stat
import sys
import warnings
from typing import Any

from trainpace.errors import TraceFormatError
from trainpace.trace.extract import EventColumns
from trainpace.trace.memory import CHUNK_BYTES, check_memory, json_bytes
from trainpace.trace.source import Source
from trainpace.trace.stream import Stream

_pending: dict[str, _ReadAhead] = {}
# Below this much JSON the read takes a few tens of ms, about what forking and handing the
# columns over cost (measured: +24 ms on a 1.7 MB trace): such a trace is read in the command.
HEAD_START_MIN_BYTES = 8 << 20


class _ReadAhead:
    """One trace being read by a forked child."""

    def __init__(self, path: str) -> None:
        read_end, write_end = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns on fork in a threaded process; the command forks before any
            # thread, and the child only reads a file and writes a pipe
            warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; what it does is seen through the pipe
            try:
                os.close(read_end)
                _child(path, write_end)
            finally:
                os._exit(0)
        os.close(write_end)
        self.pid, self.fd = pid, read_end

    def result(self) -> tuple[dict[str, Any], EventColumns] | None:
        """The trace's keys around its events and its columns; None if the child could not
        say (then the file is to be read here). Raises the child's TraceFormatError."""
        chunks = []
        try:
            while chunk := os.read(self.fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(self.fd)
            os.waitpid(self.pid, 0)
        try:
            outcome = pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - cut short (killed, out of memory): read it here
            return None
        if outcome[0] == "error":
            raise TraceFormatError(outcome[1])
        if outcome[0] != "ok":
            return None
        _, meta, read = outcome
        return meta, read

    def cancel(self) -> None:
        os.close(self.fd)
        with contextlib.suppress(ProcessLookupError):  # it had just ended
            os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)


def _child(path: str, fd: int) -> None:  # pragma: no cover - runs in the forked child
    outcome: tuple[Any, ...]
    try:
        read = EventColumns()
        with Source(path) as source:
            meta = Stream(source, path, CHUNK_BYTES, read).run()
        outcome = ("ok", meta, read)
    except TraceFormatError as exc:
        outcome = ("error", str(exc))
    except BaseException:  # noqa: BLE001 - the parent reads the file itself
        outcome = ("retry",)
    view = memoryview(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:  # the parent went away
        pass


def start(paths: list[str]) -> None:
    """Start reading ``paths`` ahead if it is one regular file, large enough to pay for it,
    that fits in memory (else do nothing: the analysis then reads as it always does)."""
    if len(paths) != 1 or not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return
    path = paths[0]
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
        if (json_bytes(path) or 0) < HEAD_START_MIN_BYTES:
            return
        check_memory(path, None)
    except (OSError, TraceFormatError):
        return  # the analysis says what is wrong, as without a head start
    _pending[os.path.realpath(path)] = _ReadAhead(path)


def take(path: str) -> tuple[dict[str, Any], EventColumns] | None:
    """What was read ahead for ``path`` (waiting for it), or None if nothing was. Paths are
    compared resolved: the analysis may spell the one it was given differently."""
    ahead = _pending.pop(os.path.realpath(path), None)
    return ahead.result() if ahead is not None else None


def cancel_all() -> None:
    """Stop the children not taken (the command ended before reading them)."""
    while _pending:
        _pending.popitem()[1].cancel()
