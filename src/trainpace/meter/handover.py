"""The training thread's hand-over to the writer: the steps closed, twice a window, as they
are; a SIGKILL loses at most one window."""

from __future__ import annotations

from trainpace.measure.recorder import StepRecorder
from trainpace.meter.meta import MetaLog
from trainpace.meter.pipeline import Window
from trainpace.sinks.background import Writer
from trainpace.sinks.base import FanOut
from trainpace.sinks.console_line import ConsoleSink

# At a loader's end, the longest wait for the window's console line to be out.
LINE_FLUSH_S = 1.0
# The longest the training thread waits for a writer more than a window behind.
LAG_WAIT_S = 0.5


class WriterHandOver:
    """What the :class:`~trainpace.meter.loop.Loop` calls on the training thread to give the
    writer its work (:meth:`hand_over`, twice a window) and, at a loader's end, to have the
    console line out (:meth:`console_line_out`). Its promise: a SIGKILL loses at most one
    window."""

    def __init__(self, *, recorder: StepRecorder, writer: Writer, meta: MetaLog, sinks: FanOut,
                 console: bool) -> None:
        self._recorder = recorder
        self._writer = writer
        self._meta = meta
        self._sinks = sinks
        self._console = console
        self._writer_stalled = False

    def hand_over(self, final: bool, flush: bool, ends_window: bool) -> None:
        """The steps closed since the last hand-over (half a window), to the writer as they
        are. When the writer has not written an earlier half's lines yet (steps far shorter
        than its work per step, holding the GIL it needs), wait for them (not for the figures
        and sinks that follow), at most LAG_WAIT_S: a SIGKILL then loses
        the open half and the one handed over: a window at most. A writer that keeps up is
        never waited for; one that could not catch up once (a stalled disk) is not waited for
        again until it has."""
        rec = self._recorder
        make_records = rec.take_ready(final=final)
        if rec.tokens_counted != self._meta.last.get("tokens_counted"):
            self._meta.log()  # learnt from the first token batch: a killed run keeps it
        writer = self._writer
        number = writer.submit_window(Window(make_records, final, rec.steps_closed, flush,
                                             ends_window))
        if writer.windows_written >= number - 1:
            self._writer_stalled = False
        elif not final and not self._writer_stalled:
            self._writer_stalled = not writer.wait_for(number - 1, LAG_WAIT_S)

    def console_line_out(self) -> None:
        """At a loader's end: the window's console line is out before the user's code goes on
        (an evaluation printing its own lines), within LINE_FLUSH_S."""
        if self._console and self._writer.wait_for(self._writer.windows_submitted,
                                                   LINE_FLUSH_S, sent=True):
            self._sinks.flush(LINE_FLUSH_S, only=lambda sink: isinstance(sink, ConsoleSink))
