"""The Meter's one writer thread: the run folder's work, in order, off the training thread.

The training thread hands over each window's steps (:meth:`Writer.submit_window`: a put on a
queue, in C, that wakes nobody) and goes on. The writer looks for work at its own pace: when
it has none, it sleeps ``poll_s()`` (a fraction of the loop's time between two hand-overs)
and looks again. Waking a sleeping thread costs the thread that wakes it a system call (and
an interrupt to the CPU the sleeper is on): the put that woke the writer took 25 µs of the
training thread's time in a loop of 1.4 ms steps on a 2-core virtual machine, 14 µs without
the wake, and the writer's work then started at once, in the step after the window boundary,
every time. Found by polling, the work starts anywhere in the steps that follow, and no step
pays for it by its place in the window. Only what waits for the writer
(:meth:`Writer.wait_for`, :meth:`Writer.close`) wakes it.

The writer takes every window waiting when it gets to them in one call (coalesced), so the
lines on disk keep up with any step rate. Each batch of windows is written first
(``on_windows``: their lines in the run folder, all that a SIGKILL would lose) and counted
written at once; the rest of their work (``after_windows``: figures, sinks) follows, paced:
it comes in parts, and between two parts the writer first writes the lines of any window
handed over meanwhile, then sleeps (``pause_s()``). Each part holds the GIL; without the
pauses a training thread that needs it would wait for the whole of the work (the interpreter
takes the GIL back from a thread only after its switch interval, 5 ms). A writer that found
windows or jobs waiting does not pause: it is behind the loop, and catches up first.
Other work (meta.json, a new goal) is queued with :meth:`Writer.submit` and runs in order with
the windows.

Whatever a job raises, ``BaseException`` included, is contained, reported once, and never
reaches the training loop.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from queue import Empty, SimpleQueue
from typing import Any

_STOP = object()
_WINDOW = object()  # tags a window on the queue: (_WINDOW, window)

Parts = Iterable[object] | None
"""What ``after_windows`` and ``on_idle`` return: their work in parts (a generator that yields
between two parts), or None when they did it all in one go."""


class Writer:
    """Runs submitted calls one after another on a daemon thread; ``close()`` drains and joins.

    ``on_windows`` takes the windows handed to :meth:`submit_window`: all those waiting when
    the thread gets to them, in one call, in order; then ``after_windows()`` runs, in its
    parts (see the module). With nothing to do, the thread looks for work every ``poll_s()``.
    While ``holding()`` says work was held back for later windows, ``on_idle`` runs when no
    job comes for ``idle_s``: a loop that stops between windows (an evaluation, a hang) still
    gets its last steps out.
    """

    def __init__(self, on_windows: Callable[[list[Any]], None],
                 on_error: Callable[[BaseException], None], name: str = "trainpace-writer",
                 *, after_windows: Callable[[], Parts] = lambda: None,
                 on_idle: Callable[[], Parts] = lambda: None,
                 holding: Callable[[], bool] = lambda: False, idle_s: float = 0.05,
                 pause_s: Callable[[], float] = lambda: 0.0,
                 poll_s: Callable[[], float] = lambda: 0.005) -> None:
        self._on_windows = on_windows
        self._after_windows = after_windows
        self._on_error = on_error
        self._on_idle = on_idle
        self._holding = holding
        self._idle_s = idle_s
        self._pause_s = pause_s
        self._poll_s = poll_s
        # held while the writer may sleep; released to wake it (by those who wait for it,
        # and close()): the sleep is one acquire with a timeout, in C
        self._wake = threading.Lock()
        self._wake.acquire()
        # a queue in C: a put costs the training thread no Python-level locking, and wakes
        # nobody (the writer never blocks on it: it polls)
        self._queue: SimpleQueue[Any] = SimpleQueue()
        # taken from the queue between two parts of a window's work, not run yet (in order)
        self._taken: list[Any] = []
        self._numbers = itertools.count(1)
        self._done = threading.Condition(threading.Lock())
        self.windows_submitted = 0
        self.windows_written = 0  # on_windows returned: their lines are in the run folder
        self.windows_sent = 0  # after_windows returned too: their records are at the sinks
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: later work must be done by the caller."""
        return self._closed

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)``; it runs after everything submitted before it (found at the
        writer's next look, or at once by a :meth:`wait_for`)."""
        self._queue.put((fn, args))

    def submit_window(self, window: Any) -> int:
        """Hand over one window for ``on_windows``; returns its number (1, 2, ...)."""
        number = self.windows_submitted = next(self._numbers)
        self._queue.put((_WINDOW, window))
        return number

    def wait_for(self, window: int, timeout_s: float, *, sent: bool = False) -> bool:
        """Block until window number ``window`` is written (``sent``: its records at the sinks
        too): True, or False when ``timeout_s`` passed first. Wakes the writer, if asleep."""
        deadline = time.monotonic() + timeout_s
        if self._count(sent) < window:
            self._wake_up()
        with self._done:
            while self._count(sent) < window and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
            return self._count(sent) >= window

    def close(self, timeout_s: float | None = None) -> bool:
        """Run everything still queued, then stop the thread (idempotent). False when the
        work did not end within ``timeout_s`` (the thread is then left to itself)."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._wake_up()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _wake_up(self) -> None:
        with contextlib.suppress(RuntimeError):  # already released: it is awake, or will be
            self._wake.release()

    def _count(self, sent: bool) -> int:
        return self.windows_sent if sent else self.windows_written

    def _run(self) -> None:
        while True:
            if not self._taken:
                item = self._next()
                if item is None:  # nothing came for idle_s while work was held back
                    self._paced(self._on_idle)
                    self._send_written()
                    continue
                self._taken.append(item)
            batch = self._taken + self._waiting()
            windows = list(itertools.takewhile(_is_window, batch))  # taken together
            # what follows keeps its place ahead of anything taken while these are sent
            self._taken = batch[len(windows):]
            if windows:
                self._windows([window for _, window in windows])
                continue
            item = self._taken.pop(0)
            if item is _STOP:
                return
            self._contained(item[0], *item[1])

    def _next(self) -> Any:
        """The next item on the queue, looked for every ``poll_s()`` (or when woken); None
        when work is held back and nothing came for ``idle_s``."""
        idle_since = time.monotonic()
        while True:
            try:
                return self._queue.get_nowait()
            except Empty:
                pass
            sleep_s = self._poll_s()
            if self._holding():
                idle_left_s = self._idle_s - (time.monotonic() - idle_since)
                if idle_left_s <= 0:
                    return None
                sleep_s = min(sleep_s, idle_left_s)
            # True when woken: the lock is held again, for the next sleep (an item put before
            # the wake is on the queue at the next look)
            self._wake.acquire(timeout=sleep_s)

    def _waiting(self) -> list[Any]:
        """Everything on the queue now, without waiting."""
        items = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except Empty:
                return items

    def _windows(self, windows: list[Any]) -> None:
        self._write(windows)
        self._send_written()

    def _write(self, windows: list[Any]) -> None:
        self._contained(self._on_windows, windows)
        with self._done:
            self.windows_written += len(windows)
            self._done.notify_all()

    def _send_written(self) -> None:
        """``after_windows`` for the windows written and not sent yet (again, for those
        written between its parts)."""
        while self.windows_sent < self.windows_written:
            written = self.windows_written
            self._paced(self._after_windows)
            with self._done:
                self.windows_sent = written
                self._done.notify_all()

    def _paced(self, work: Callable[[], Parts]) -> None:
        """``work()``, and between two of its parts: the lines of the windows handed over
        meanwhile (up to the first other job, which keeps its place), or else a pause."""
        try:
            parts = work()
            for _ in parts or ():
                if self._taken:  # a job waits ahead of what came (keep the order): go on
                    continue
                waiting = self._waiting()
                lines = list(itertools.takewhile(_is_window, waiting))
                self._taken = waiting[len(lines):]
                if lines:
                    self._write([item[1] for item in lines])
                elif not self._taken:  # behind the loop, the writer catches up first
                    pause_s = self._pause_s()
                    if pause_s > 0:
                        time.sleep(pause_s)
        except BaseException as exc:  # noqa: BLE001 - the writer must outlive one bad job
            with contextlib.suppress(BaseException):  # reporting must not end it either
                self._on_error(exc)

    def _contained(self, fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the writer must outlive one bad job
            with contextlib.suppress(BaseException):  # reporting must not end it either
                self._on_error(exc)


def _is_window(item: Any) -> bool:
    return item is not _STOP and item[0] is _WINDOW
