"""Windows from the training thread to the writer: the hand-over at each window boundary.

Two promises pull apart when steps are tiny: the run folder holds every window's lines as
soon as the window ends (a SIGKILL loses at most the open window and the one being written),
and the writer thread, whose Python work holds the GIL the loop needs, must not be woken a
thousand times a second (each wake-up is a GIL hand-off, milliseconds on a busy machine).
So a window shorter than ``HAND_OVER_S`` has its lines written here, on the training thread
(its records, one encoding, one ``write``: a few µs a step, kept out of the step times like all
boundary work), unless a window handed over before it still waits for the writer to write its
lines (they would land out of order). Such windows go to the writer together, at most every
``HAND_OVER_S``, with their lines already on disk: the writer never holds the next short window
back, so the training thread does not wait for it while steps are short. When no hand-over
comes within ``HAND_OVER_S`` (a long evaluation after a window), the writer takes the windows
written here by itself. Longer windows (the common case) are handed over at once, and the
writer writes their lines.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from trainpace.measure.recorder import StepRecorder
from trainpace.meter.pipeline import Window
from trainpace.sinks.background import BackgroundWriter, SinkThread
from trainpace.sinks.console import ConsoleSink
from trainpace.sinks.runfolder import RunFolderSink
from trainpace.stepcolumns import StepBatch

# The shortest time between two hand-overs to the writer while windows are written here.
HAND_OVER_S = 0.05
# The training thread waits for the writer when it is more than a window behind (steps far
# shorter than the writer's work per step), at most this long at a time.
LAG_WAIT_S = 0.5
# At a loader's end, the longest wait for the window's console line to be out.
LINE_FLUSH_S = 1.0


class HandOver:
    """The training thread's side of the writer (``__call__`` at each window boundary)."""

    def __init__(self, *, recorder: StepRecorder, writer: BackgroundWriter,
                 run_folder: RunFolderSink | None, sinks: list[SinkThread], stock: int,
                 before: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._recorder = recorder
        self._writer = writer
        self._run_folder = run_folder
        self._consoles = [t for t in sinks if isinstance(t.sink, ConsoleSink)]
        self._stock = stock
        self._before = before  # the Meter's look at what the window taught (meta.json)
        self._clock = clock  # real time: the writer's cost is, whatever the run's clock
        # windows whose lines were written here, for the writer (taken from either thread:
        # appends and pops of a deque are atomic)
        self._written: deque[StepBatch] = deque()
        self._handed_s = -float("inf")
        self._boundary_s = clock()  # the last window's end (the first: the Meter's start)
        self._writer_lines = 0  # the last window handed over whose lines the writer writes
        self._lagging = False  # the writer could not catch up once: stop waiting for it

    def __call__(self, *, final: bool = False, flush: bool = False) -> None:
        """Give the steps closed since the last window to the writer (``flush``: their window
        record goes out now), or write their lines here (see the module). When the writer is
        more than a window behind with lines to write, wait for it (bounded): the run folder
        keeps up."""
        rec = self._recorder
        make_records = rec.take_ready(final=final)
        self._before()
        writer = self._writer
        now = self._clock()
        window_s, self._boundary_s = now - self._boundary_s, now
        # A short window's lines are written here, unless a window handed over before it
        # still waits for the writer to write its lines (they would then land out of order).
        if (not final and not flush and window_s < HAND_OVER_S
                and writer.windows_written >= self._writer_lines):
            batch = make_records()
            if batch.columns.n:
                self._written.append(batch)  # first: the writer gets them whatever happens
                if self._run_folder is not None:
                    self._run_folder.append_steps(batch.lines)
            rec.stock_rows(self._stock)
            if now - self._handed_s < HAND_OVER_S:
                # The writer takes them if no hand-over comes within HAND_OVER_S. Armed at
                # every such window (idempotent, one lock a window): arming only when the
                # deque looked empty lost a window the writer emptied it of between look
                # and append.
                writer.arm()
                return
            # Their lines are on disk: the writer gets the windows for the rest (records,
            # figures, sinks) and never holds the next short window back.
            writer.submit_window(Window(StepBatch.empty, False, rec.steps_closed, False,
                                        self.take_written()))
            self._handed_s = now
            return
        number = writer.submit_window(Window(make_records, final, rec.steps_closed, flush,
                                             self.take_written()))
        self._handed_s = now
        self._writer_lines = number
        if final or number < 2 or writer.windows_written >= number - 1:
            self._lagging = False
            return
        # Behind: wait until it has written this window too, so the next boundaries find it
        # caught up (each wait costs a wake-up of the writer, milliseconds on a busy machine).
        if not self._lagging and not writer.wait_for(number, LAG_WAIT_S):
            self._lagging = True

    def take_written(self) -> tuple[StepBatch, ...]:
        """The windows written here and not handed over yet, oldest first (either thread)."""
        taken = []
        written = self._written
        while written:
            taken.append(written.popleft())
        return tuple(taken)

    def flush_lines(self) -> None:
        """At a loader's end: the window handed over is written and its console line out."""
        if not self._consoles:
            return
        if self._writer.wait_for(self._writer.windows_submitted, LINE_FLUSH_S):
            for thread in self._consoles:
                thread.flush(LINE_FLUSH_S)
