"""How ``trainpace run`` ends like the script would have: the exit code or the signal to die
of (``exit_status``), and SIGTERM turned into an exception the script unwinds from, with a
watchdog for a script that swallows it (``TERM_GRACE_S``)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Any


class _Terminated(BaseException):
    """SIGTERM, raised in the script so that it unwinds and the report can be made."""


# After SIGTERM, the script has this long to unwind (a bare ``except:`` may swallow the
# exception and train on); then the run is ended from another thread and the process dies
# of SIGTERM, as it would have at once without trainpace.
TERM_GRACE_S = 5.0



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



def restore_sigterm(previous: Any) -> None:
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)



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
    trimmed(failure)
    traceback.print_exception(type(failure), failure, failure.__traceback__, file=sys.stderr)
    if isinstance(failure, KeyboardInterrupt):
        return 128 + signal.SIGINT, signal.SIGINT
    return 1, None
