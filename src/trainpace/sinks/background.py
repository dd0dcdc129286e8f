"""The Meter's one writer thread: the run folder's work, in order, off the training thread.

Its windows come from ``take_windows()``, which it calls at each look: the steps closed
since its last look, cut at the windows' ends (on the host clock it takes them from the
recorder itself, and the training thread hands nothing over at a window's end); its other
work (meta.json, a new goal) is queued with :meth:`Writer.submit`. Nothing the training thread
does wakes it: it looks for work at its own pace, and with none sleeps ``poll_s()`` (a
fraction of the loop's time per half window) and looks again. Waking a sleeping thread costs
the thread that wakes it a system call (and an interrupt to the CPU the sleeper is on): a put
that woke the writer took 25 µs of the training thread's time in a loop of 1.4 ms steps on a
2-core virtual machine, 14 µs without the wake, and the writer's work then started at once,
in the step after the window boundary, every time. Found by looking, the work starts
anywhere in the steps that follow, and no step pays for it by its place in the window. Only
what waits for the writer (:meth:`Writer.wait_for`, :meth:`Writer.close`) wakes it, and the
run's first two hand-overs (:meth:`Writer.wake`), while the writer does not know the loop's
pace yet and sleeps its longest.

At each look the windows come first: written (``on_windows``: their lines in the run folder,
all that a SIGKILL would lose) and counted written at once; the rest of their work
(``after_windows``: figures, sinks) follows, paced: it comes in parts, and between two parts
the writer first writes the lines of the windows due meanwhile (``due()``: a half window's
steps closed, or a window handed over), then sleeps (``pause_s()``). Each part holds the GIL;
without the pauses a training thread that needs it would wait for the whole of the work (the
interpreter takes the GIL back from a thread only after its switch interval, 5 ms). A writer
that found windows due or jobs waiting does not pause: it is behind the loop, and catches up
first; after a look that found windows it looks again at once only when more are due (else it
would find a step or two, and pay a write's whole fixed cost for them). The queued jobs run in
order, after the windows found at the same look.

Whatever a job raises, ``BaseException`` included, is contained, reported once, and never
reaches the training loop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

_STOP = object()
T = TypeVar("T")

Parts = Iterable[object] | None
"""What ``after_windows`` and ``on_idle`` return: their work in parts (a generator that yields
between two parts), or None when they did it all in one go."""


class Writer:
    """Runs the run's windows and submitted calls on a daemon thread; ``close()`` drains and
    joins.

    ``take_windows()`` returns the windows ready since its last call (each with the
    ``last_step`` it reaches), in order; ``on_windows`` takes them, all those found at one
    look in one call; then ``after_windows()`` runs, in its parts (see the module). With
    nothing to do, the thread looks for work every ``poll_s()``. While ``holding()`` says work
    was held back for later windows, ``on_idle`` runs when nothing comes for ``idle_s()``: a
    loop that stops between windows (an evaluation, a hang) still gets its last steps out;
    and at ``close()``.
    """

    def __init__(self, on_windows: Callable[[list[Any]], None],
                 on_error: Callable[[BaseException], None], name: str = "trainpace-writer",
                 *, take_windows: Callable[[], list[Any]] = list,
                 after_windows: Callable[[], Parts] = lambda: None,
                 on_idle: Callable[[], Parts] = lambda: None,
                 holding: Callable[[], bool] = lambda: False,
                 idle_s: Callable[[], float] = lambda: 0.05,
                 pause_s: Callable[[], float] = lambda: 0.0,
                 poll_s: Callable[[], float] = lambda: 0.005,
                 due: Callable[[], bool] = lambda: True) -> None:
        self._on_windows = on_windows
        self._take_windows = take_windows
        self._due = due
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
        # a queue in C: a put costs the caller no Python-level locking, and wakes nobody
        # (the writer never blocks on it: it looks)
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._done = threading.Condition(threading.Lock())
        self.written_step = 0  # on_windows returned: lines up to this step are in the folder
        self.sent_step = 0  # after_windows returned too: their records are at the sinks
        # windows written and sent, counted: a window may reach no further step than the one
        # before it (the run's end, cut where the steps were taken already) and still has
        # work to send
        self._written = self._sent = 0
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

    def wait_for(self, step: int, timeout_s: float, *, sent: bool = False) -> bool:
        """Block until the lines up to ``step`` are written (``sent``: their records at the
        sinks too): True, or False when ``timeout_s`` passed first. Wakes the writer, if
        asleep."""
        deadline = time.monotonic() + timeout_s
        if self._count(sent) < step:
            self._wake_up()
        with self._done:
            while self._count(sent) < step and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
            return self._count(sent) >= step

    def close(self, timeout_s: float | None = None) -> bool:
        """Write every window and run everything still queued, then stop the thread
        (idempotent). False when the work did not end within ``timeout_s`` (the thread is
        then left to itself)."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._wake_up()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def wake(self) -> None:
        """Wake the writer if it sleeps (a system call for the caller; nothing waits)."""
        self._wake_up()

    def _wake_up(self) -> None:
        with contextlib.suppress(RuntimeError):  # already released: it is awake, or will be
            self._wake.release()

    def _count(self, sent: bool) -> int:
        return self.sent_step if sent else self.written_step

    def _run(self) -> None:
        idle_since = time.monotonic()
        look = True
        while True:
            if look and self._windows(self._taken()):
                idle_since = time.monotonic()
                # again at once only where windows are due already (steps far shorter than
                # the writer's work): a look that finds a step or two writes it at the full
                # fixed cost of a write
                look = self._is_due()
                continue
            look = True
            try:
                item = self._queue.get_nowait()
            except Empty:
                item = None
            if item is _STOP:
                # windows made before close() but after this look's take: theirs too
                while self._windows(self._taken()):
                    pass
                if self._holding():  # and the work held back for windows that never came
                    self._paced(self._on_idle)
                    self._send_written()
                return
            if item is not None:
                self._contained(item[0], *item[1])
                idle_since = time.monotonic()
                continue
            sleep_s = self._poll_s()
            if self._holding():
                idle_left_s = self._idle_s() - (time.monotonic() - idle_since)
                if idle_left_s <= 0:  # nothing came for idle_s while work was held back
                    self._paced(self._on_idle)
                    self._send_written()
                    idle_since = time.monotonic()
                    continue
                sleep_s = min(sleep_s, idle_left_s)
            # True when woken: the lock is held again, for the next sleep
            self._wake.acquire(timeout=sleep_s)

    def _taken(self) -> list[Any]:
        return self._guarded(self._take_windows, [])

    def _is_due(self) -> bool:
        return self._guarded(self._due, True)

    def _windows(self, windows: list[Any]) -> bool:
        if not windows:
            return False
        self._write(windows)
        self._send_written()
        return True

    def _write(self, windows: list[Any]) -> None:
        self._contained(self._on_windows, windows)
        with self._done:
            self._written += len(windows)
            self.written_step = max(self.written_step, windows[-1].last_step)
            self._done.notify_all()

    def _send_written(self) -> None:
        """``after_windows`` for the windows written and not sent yet (again, for those
        written between its parts)."""
        while self._sent < self._written:
            written, step = self._written, self.written_step
            self._paced(self._after_windows)
            with self._done:
                self._sent, self.sent_step = written, step
                self._done.notify_all()

    def _paced(self, work: Callable[[], Parts]) -> None:
        """``work()``, and between two of its parts: the lines of the windows due meanwhile,
        or else (no job waiting either) a pause. What it raises ends that work only."""
        self._contained(self._parts, work)

    def _parts(self, work: Callable[[], Parts]) -> None:
        for _ in work() or ():
            windows = self._taken() if self._is_due() else []
            if windows:
                self._write(windows)
            elif self._queue.empty():  # behind the loop, the writer catches up first
                pause_s = self._pause_s()
                if pause_s > 0:
                    time.sleep(pause_s)

    def _contained(self, fn: Callable[..., object], *args: Any) -> None:
        self._guarded(lambda: fn(*args), None)

    def _guarded(self, fn: Callable[[], T], failed: T) -> T:
        """``fn()``, or ``failed`` when it raised: whatever it raises, ``BaseException``
        included, is reported and ends nothing (the writer must outlive one bad look or job)."""
        try:
            return fn()
        except BaseException as exc:  # noqa: BLE001 - the writer must outlive one bad call
            with contextlib.suppress(BaseException):  # reporting must not end it either
                self._on_error(exc)
            return failed
