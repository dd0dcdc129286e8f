"""The Meter's end on SIGTERM: what a launcher sends a rank it stops (torchrun, after another
rank failed; a scheduler at the end of a job's time).

Without it, SIGTERM kills the process at once and the run folder keeps only its windows: no
summary, no report. :class:`TermGuard` chains to the handler that was there before it. Where
that is the default action, on SIGTERM it finishes the Meter (the open window, the summary,
the report) within :data:`TERM_FINISH_S`, then lets the signal end the process as it would
have (it dies of SIGTERM). Where the user installed a handler of their own, that handler
decides, as without the Meter: it runs at once; if it ends the script (``sys.exit``), the
Meter ends with it (``with meter:``, ``finish()``); if it returns (a script that checkpoints
and trains on), the Meter measures on. It is installed from the main thread only, and put
back as it was when the Meter finishes (where no one has replaced it meanwhile). It holds the
Meter weakly: a Meter dropped unfinished is not kept alive by its handler.

Ctrl-C is left to Python: ``KeyboardInterrupt`` is raised where the loop was, and a loop may
catch it and train on (the Meter goes on recording); ``with meter:`` ends the run on it.
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

# The longest the Meter's end may take after the signal before the signal goes on: well under
# torchrun's grace period (30 s between its SIGTERM and its SIGKILL).
TERM_FINISH_S = 10.0
# A signal that stops the main thread inside trainpace's own code (where it may hold a lock
# the end needs) is delivered again RETRY_S later, RETRIES times at most (then the end runs
# anyway, bounded by TERM_FINISH_S).
RETRY_S = 0.02
RETRIES = 50
SIGNALS = (signal.SIGTERM,)
_PACKAGE = str(Path(__file__).resolve().parents[1])


class TermGuard:
    """SIGTERM → ``finish()`` (bounded) → the previous handler, or death by the
    signal. ``finish`` and ``hurry`` (a signal came: stop waiting for other ranks soon) are
    bound methods, held weakly."""

    def __init__(self, finish: Callable[[], Any], hurry: Callable[[], None]) -> None:
        self._finish = _weakly(finish)
        self._hurry = _weakly(hurry)
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()
        self.finishing = False  # the Meter's end has begun (on the main thread)
        self._pending: tuple[int, FrameType | None] | None = None
        self._retries = 0

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers belong to the main thread
        for sig in SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # an embedded interpreter without signals
                return

    def uninstall(self) -> None:
        """Put the previous handlers back (unless someone replaced ours meanwhile)."""
        if threading.current_thread() is not threading.main_thread():
            return
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def finished(self) -> None:
        """The Meter's end is done: a signal that came during it goes on now."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._pass_on(*pending)
        else:
            self.uninstall()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked worker: it dies as it would have
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        previous = self._previous.get(signum)
        if callable(previous):  # the user's own handler decides what a SIGTERM means
            previous(signum, frame)
            return
        finish, hurry = self._finish(), self._hurry()
        if finish is None or hurry is None:  # the Meter is gone
            self._pass_on(signum, frame)
            return
        hurry()
        if not self.finishing and self._retries < RETRIES and _in_trainpace(frame):
            self._retries += 1
            again = threading.Timer(RETRY_S, os.kill, args=(os.getpid(), signum))
            again.daemon = True
            again.start()
            return
        if self.finishing:
            # The main thread was in the Meter's end when the signal came: it goes on, and
            # hands the signal on when it is done (finished()).
            self._pending = (signum, frame)
            self._bound_from_another_thread(signum)
            return
        done = threading.Event()

        def end() -> None:
            try:
                finish()
            finally:
                done.set()

        # On its own thread: the main thread may hold a lock the end needs (it was stopped
        # anywhere); past the bound, the signal goes on without the end.
        threading.Thread(target=end, name="trainpace-signal", daemon=True).start()
        done.wait(TERM_FINISH_S)
        self._pass_on(signum, frame)

    def _bound_from_another_thread(self, signum: int) -> None:
        """When the signal will end the process anyway, it does so after TERM_FINISH_S even
        if the Meter's end never returns."""
        if self._previous.get(signum) not in (None, signal.SIG_DFL):
            return  # a handler decides; it runs when the end returns
        signal.signal(signum, signal.SIG_DFL)
        del self._previous[signum]

        def bound() -> None:
            if self._pending is not None:
                os.kill(os.getpid(), signum)

        timer = threading.Timer(TERM_FINISH_S, bound)
        timer.daemon = True
        timer.start()

    def _pass_on(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.uninstall()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default action: the process dies of it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


def _weakly(function: Callable[..., Any]) -> Callable[[], Callable[..., Any] | None]:
    """A bound method held weakly (its object may go); any other callable as it is."""
    if inspect.ismethod(function):
        return weakref.WeakMethod(function)
    return lambda: function


def _in_trainpace(frame: FrameType | None) -> bool:
    """Whether the main thread was stopped inside trainpace's own code."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PACKAGE):
            return True
        frame = frame.f_back
    return False
