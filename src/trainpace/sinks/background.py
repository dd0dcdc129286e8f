"""The Meter's one writer thread: the run folder's work, in order, off the training thread.

The training thread hands over each window's steps (:meth:`Writer.submit_window`: an append
under a lock) and goes on; the writer takes every window waiting when it gets to them in one
call (coalesced), so the lines on disk keep up with any step rate without the training thread
ever waiting for it. Other work (meta.json, a new goal) is queued with :meth:`Writer.submit`
and runs in order with the windows.

Whatever a job raises, ``BaseException`` included, is contained, reported once, and never
reaches the training loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

_STOP = object()
_WINDOWS = object()  # a job that takes every window handed over so far
_IDLE = object()  # no job came for idle_s while work was held back


class Writer:
    """Runs submitted calls one after another on a daemon thread; ``close()`` drains and joins.

    ``on_windows`` takes the windows handed to :meth:`submit_window`: all those waiting when
    the thread gets to them, in one call, in order. While ``holding()`` says work was held
    back for later windows, ``on_idle`` runs when no job comes for ``idle_s``: a loop that
    stops between windows (an evaluation, a hang) still gets its last steps out.
    """

    def __init__(self, on_windows: Callable[[list[Any]], None],
                 on_error: Callable[[BaseException], None], name: str = "trainpace-writer",
                 *, on_idle: Callable[[], None] = lambda: None,
                 holding: Callable[[], bool] = lambda: False, idle_s: float = 0.05) -> None:
        self._on_windows = on_windows
        self._on_error = on_error
        self._on_idle = on_idle
        self._holding = holding
        self._idle_s = idle_s
        self._jobs: deque[Any] = deque()
        self._windows: list[Any] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self.windows_submitted = 0
        self.windows_written = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: later work must be done by the caller."""
        return self._closed

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)``; it runs after everything submitted before it."""
        with self._lock:
            self._jobs.append((fn, args))
            self._wake.notify()

    def submit_window(self, window: Any) -> int:
        """Hand over one window for ``on_windows``; returns its number (1, 2, ...)."""
        with self._lock:
            if not self._windows:  # else a job already takes the windows waiting
                self._jobs.append(_WINDOWS)
                self._wake.notify()
            self._windows.append(window)
            self.windows_submitted += 1
            return self.windows_submitted

    def wait_for(self, window: int, timeout_s: float) -> bool:
        """Block until window number ``window`` is written (True), or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self.windows_written < window and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
            return self.windows_written >= window

    def close(self, timeout_s: float | None = None) -> bool:
        """Run everything still queued, then stop the thread (idempotent). False when the
        work did not end within ``timeout_s`` (the thread is then left to itself)."""
        if not self._closed:
            self._closed = True
            with self._lock:
                self._jobs.append(_STOP)
                self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._lock:
                job = self._next_job()
                windows: list[Any] = []
                if job is _WINDOWS:
                    windows, self._windows = self._windows, []
            if job is _STOP:
                return
            try:
                if windows:
                    self._on_windows(windows)
                elif job is _IDLE:
                    self._on_idle()
                elif job is not _WINDOWS:
                    fn, args = job
                    fn(*args)
            except BaseException as exc:  # noqa: BLE001 - the writer must outlive one bad job
                with contextlib.suppress(BaseException):  # reporting must not end it either
                    self._on_error(exc)
            if windows:
                with self._lock:
                    self.windows_written += len(windows)
                    self._done.notify_all()

    def _next_job(self) -> Any:
        """The next job (the lock held): waits for one, or for ``idle_s`` while holding."""
        while not self._jobs:
            if self._holding():
                if not self._wake.wait(self._idle_s) and not self._jobs:
                    return _IDLE
            else:
                self._wake.wait()
        return self._jobs.popleft()
