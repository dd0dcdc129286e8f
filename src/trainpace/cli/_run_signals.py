"""How ``trainpace run`` ends like the script would have: the exit code or the signal to die
of (``exit_status``), and SIGTERM turned into an exception the script unwinds from, with a
watchdog for a script that swallows it (``TERM_GRACE_S``)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)


class _Terminated(BaseException):
    """SIGTERM, raised in the script so that it unwinds and the report can be made."""


# After SIGTERM, the script has this long to unwind (a bare ``except:`` may swallow the
# exception and train on); then the run is ended from another thread and the process dies
# of SIGTERM, as it would have at once without trainpace.
TERM_GRACE_S = 5.0

# After the script, a SIGTERM or Ctrl-C waits for the report this long at most, then ends the
# process: well under torchrun's grace period (30 s from its SIGTERM to its SIGKILL). Rank 0
# stops waiting for the other ranks' last windows after 3 s without news (TERM_WAIT_S).
END_AFTER_SIGNAL_S = 10.0



class RunEnding:
    """The end of the run (summary, report, run folder), made once: by the main thread after
    the script, or by the SIGTERM watchdog when the script does not unwind in time."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._lock = threading.Lock()
        self.done = False

    def __call__(self) -> None:
        with self._lock:
            if not self.done:
                self.done = True
                self._make()



class TermDuringScript:
    """While the script runs: SIGTERM is raised in it as :class:`_Terminated`, so that it
    unwinds and the report is made; a script that swallows it and trains on is ended by a
    watchdog after TERM_GRACE_S (its outcome noted, the run ended, SIGTERM died of)."""

    def __init__(self, ending: RunEnding, outcome: list[BaseException | None], *,
                 main_pid: int) -> None:
        self._ending = ending
        self._outcome = outcome
        self._main_pid = main_pid
        self.terminated = threading.Event()  # a SIGTERM came
        self._script_done = threading.Event()
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def script_done(self) -> None:
        """The script returned or unwound: the watchdog has nothing to end."""
        self._script_done.set()

    def restore(self) -> None:
        """The handler from before, unless a SIGTERM came (the default one is left: the
        process dies of it)."""
        if not self.terminated.is_set():
            previous = self._previous
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    def _watchdog(self) -> None:
        # The script swallowed the SIGTERM exception and trains on: end it from here.
        if not self._script_done.wait(TERM_GRACE_S):
            self._outcome.append(_Terminated())
            self._ending()
            die_of(signal.SIGTERM)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._main_pid:  # a forked DataLoader worker: die as it would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends us at once
        self.terminated.set()
        # Python without trainpace would be dead by now, silently. The DataLoader workers,
        # sent the same SIGTERM by a scheduler, are dying: PyTorch's SIGCHLD handler would
        # raise for each in the finalizer that joins them, which prints "Exception ignored".
        if hasattr(signal, "SIGCHLD"):
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.unraisablehook = lambda unraisable: None
        # Likewise multiprocessing's own threads (the resource sharer of the workers' file
        # descriptors) fail as the workers die: silent too, as the process would have been.
        threading.excepthook = lambda args: None
        threading.Thread(target=self._watchdog, name="trainpace-sigterm", daemon=True).start()
        if raising_is_safe(frame):
            raise _Terminated
        # Else the watchdog ends the run: an exception raised in a finalizer or inside
        # multiprocessing (DataLoader workers shutting down) is printed, not raised.



class EndingGuard:
    """While the report is made (after the script): SIGTERM and SIGINT are noted, not
    raised into it; the end hurries, and is cut at END_AFTER_SIGNAL_S by the signal's own
    default action. :meth:`close` says which signal came (the caller dies of it then)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, *, hurry: Any, main_pid: int) -> None:
        self._hurry = hurry
        self._main_pid = main_pid
        self._lock = threading.Lock()
        self.came: signal.Signals | None = None
        self._closed = False
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self.SIGNALS}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if os.getpid() != self._main_pid:  # a forked worker: as it would have
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            return
        if self.came is not None:
            return
        self.came = sig
        signal.signal(sig, signal.SIG_DFL)  # a second one ends the process at once
        self._hurry()
        timer = threading.Timer(END_AFTER_SIGNAL_S, self._cut, args=(sig,))
        timer.daemon = True
        timer.start()

    def _cut(self, sig: signal.Signals) -> None:
        with self._lock:
            if self._closed:
                return
        print(f"trainpace run: the report was not done {END_AFTER_SIGNAL_S:g} s after "
              f"{sig.name}; ending now", file=sys.stderr)
        die_of(sig)  # (its handler is the default one since the signal came)

    def close(self) -> signal.Signals | None:
        """Put the handlers back; the signal that came meanwhile, if one did."""
        with self._lock:
            self._closed = True
        for sig, previous in self._previous.items():
            if self.came != sig:
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        return self.came



def raising_is_safe(frame: FrameType | None) -> bool:
    """Whether an exception raised where ``frame`` was interrupted reaches the script:
    not in a ``__del__`` (Python prints "Exception ignored" and goes on) nor inside
    multiprocessing's machinery (a DataLoader's workers and queues, whose threads and
    finalizers print their own tracebacks)."""
    marker = f"{os.sep}multiprocessing{os.sep}"
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or marker in code.co_filename:
            return False
        frame = frame.f_back
    return True



def die_of(sig: signal.Signals) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if threading.current_thread() is threading.main_thread():
        signal.signal(sig, signal.SIG_DFL)  # (the SIGTERM watchdog finds it so already)
    os.kill(os.getpid(), sig)



def exit_status(failure: BaseException | None) -> tuple[int, signal.Signals | None]:
    """(exit code, signal to die of): what ``python script.py`` would have given."""
    from trainpace.integrations._script import trimmed

    if failure is None:
        return 0, None
    if isinstance(failure, SystemExit):
        code = failure.code
        if code is None:
            return 0, None
        if isinstance(code, int):
            return code, None
        print(code, file=sys.stderr)
        return 1, None
    if isinstance(failure, _Terminated):
        return 128 + signal.SIGTERM, signal.SIGTERM
    try:  # the script's traceback without trainpace's frames; never at the cost of its end
        trimmed(failure)
    except Exception as exc:  # noqa: BLE001 - printed whole; the run ends as the script did
        logger.debug("trainpace: traceback not trimmed: %r", exc)
    traceback.print_exception(type(failure), failure, failure.__traceback__, file=sys.stderr)
    if isinstance(failure, KeyboardInterrupt):
        return 128 + signal.SIGINT, signal.SIGINT
    return 1, None
