"""Rank 0's reads of the store while a window waits for a rank (a thread beside the writer).

Rank 0 reads the other ranks' records in the trip that posts its own; a rank whose writer
posts a moment later would then be merged only at rank 0's next boundary, one window late.
So while a window waits for a rank, :class:`Poller` reads the store again (every few
milliseconds at first, less and less often without news) and the window is merged as soon as
its last record is there. No step waits on it: its ``poll`` takes the merge's lock, which only
the writer thread also takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

# The first read soon after rank 0's own post (the others' writers post within milliseconds
# of it), then twice as far apart each time nothing new came, up to POLL_MAX_S (a rank that is
# gone costs a read a second, not a busy loop).
POLL_FIRST_S = 0.005
POLL_MAX_S = 1.0


class Poller:
    """A daemon thread, started on the first wake, that calls ``poll`` (True: still waiting)
    at growing intervals until nothing waits, then sleeps until the next wake."""

    def __init__(self, poll: Callable[[], bool]) -> None:
        self._poll = poll
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        if self._stopping.is_set():
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainpace-dist-poll",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopping.is_set():
                return
            self._wake.clear()
            interval_s = POLL_FIRST_S
            # a wake while waiting (a new window) starts the intervals again
            while not self._stopping.wait(interval_s):
                if not self._poll():
                    break
                interval_s = POLL_FIRST_S if self._wake.is_set() else min(2 * interval_s,
                                                                         POLL_MAX_S)
                self._wake.clear()
