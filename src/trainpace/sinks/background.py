"""A background writer: the Meter's output work, in order, off the training thread.

At a window boundary the training thread only hands over the finished steps; the files, the
console line, TensorBoard and the summary refresh happen here. On an accelerator, or on a CPU
whose training releases the GIL inside its ops, that work then costs the training loop next to
nothing. A failure inside is contained (``on_error``) and the writer goes on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class BackgroundWriter:
    """Runs submitted calls one after another on a daemon thread; ``close()`` drains and joins."""

    def __init__(self, on_error: Callable[[BaseException], None], name: str = "trainpace-writer"
                 ) -> None:
        self._on_error = on_error
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False
        self._thread.start()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: later work must be done by the caller."""
        return self._closed

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)``; it runs after everything submitted before it."""
        self._queue.put((fn, args))

    def close(self) -> None:
        """Run everything still queued, then stop the thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - the writer must outlive one bad window
                self._on_error(exc)
