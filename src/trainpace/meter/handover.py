"""How the steps reach the writer, and what the training thread does for it at a boundary.

On the host clock the writer takes the closed steps from the recorder itself at each of its
looks (:class:`ClosedRows`): the training thread hands nothing over at a window's end; twice
a window it lets the writer take the newest step too, and it marks where a window must end
early (a loader ran out, the run ends). On a device clock the steps' events and values are
read back on the training thread (it issues the copies), twice a window, and handed over as
windows (:class:`HandedWindows`). Either way a SIGKILL loses at most one window.
"""

from __future__ import annotations

from collections import deque
from functools import partial

from trainpace.config import half_window
from trainpace.measure.recorder import StepRecorder
from trainpace.measure.steprow import records_of
from trainpace.meter.meta import MetaLog
from trainpace.meter.pipeline import Window
from trainpace.sinks.background import Writer

# The longest the training thread waits for a writer more than a window behind.
LAG_WAIT_S = 0.5
# The first hand-overs of a run wake the writer (see WriterHandOver.hand_over).
WAKES_AT_START = 2


class ClosedRows:
    """The host clock's steps, taken by the writer thread (:meth:`take`) from the recorder
    and cut into windows of ``window`` steps (a window ends early where the training thread
    said so: :meth:`hand_over`; the writer counts the windows' ends as the loop does, from
    the same steps). The training thread only appends rows and cuts; only the writer takes
    them out."""

    def __init__(self, recorder: StepRecorder, window: int) -> None:
        self._recorder = recorder
        self._window = window
        self._half_window = half_window(window)
        self._window_end = window  # the step at which the open window ends
        self._taken = 0  # the steps taken so far
        # (step, final, flush): where the training thread ended a window early
        self._cuts: deque[tuple[int, bool, bool]] = deque()

    def hand_over(self, final: bool, flush: bool, ends_window: bool) -> bool:
        """Training thread, at each half window: the newest step may be taken too (the loop
        is entering the next step: a value observed from now on is that one's), so a writer
        that was waited for here is not a step behind at the next. A loader that ran out,
        or the run's end, also cuts the window there; True when it did."""
        rec = self._recorder
        cut = final or flush
        if cut:  # the cut first: a writer that takes the newest step knows where it ends
            self._cuts.append((rec.steps_closed, final, flush))
        rec.close_newest()
        return cut

    def steps_to_hand_over(self) -> int:
        """Writer thread: the steps from the loop's last closed one to its next hand-over (a
        window's middle or end), as the writer counts the windows: for the writer to time its
        next look from now, whatever its work took since its last (a cut it has not taken yet
        moves the loop's; the look after it corrects)."""
        closed = self._recorder.steps_closed
        start = self._window_end - self._window  # at most the steps taken, so at most closed
        # windows the writer has not taken into yet count on alike
        start += (closed - start) // self._window * self._window
        halfway = start + self._half_window
        return (halfway if closed < halfway else start + self._window) - closed

    def due(self) -> bool:
        """Writer thread: a half window's steps wait to be taken (the loop has run that far
        ahead of the writer's last look)."""
        return self._recorder.steps_closed - self._taken >= self._half_window

    def take(self) -> list[Window]:
        """Writer thread: the steps closed since the last call that can be taken (the newest
        waits for the next step or a cut: a value observed after it is still its), as
        windows that end at each window's end and at each cut."""
        rec = self._recorder
        rows = rec.take_closed()
        top = rows[-1].step if rows else self._taken
        cuts = []
        # after the rows: a cut is made before its step may be taken
        while self._cuts and self._cuts[0][0] <= top:
            cuts.append(self._cuts.popleft())
        if not cuts and not rows:
            return []
        windows: list[Window] = []
        base = self._taken  # the step before rows[0]
        t0, metered = rec.t0, rec.metered

        def up_to(step: int, final: bool, flush: bool, ends_window: bool) -> None:
            part = rows[self._taken - base:max(step - base, 0)]
            windows.append(Window(partial(records_of, part, t0, metered), final, step, flush,
                                  ends_window))
            self._taken = max(self._taken, step)

        for step, final, flush in cuts:
            while self._window_end < step:
                up_to(self._window_end, False, False, True)
                self._window_end += self._window
            up_to(step, final, flush, True)
            self._window_end = step + self._window
        while self._window_end <= top:
            up_to(self._window_end, False, False, True)
            self._window_end += self._window
        if top > self._taken:
            up_to(top, False, False, False)
        return windows


class HandedWindows:
    """A device clock's windows, handed over by the training thread (read back there, twice
    a window: :meth:`hand_over`) and taken by the writer thread (:meth:`take`). The hand-over
    is an append, in C, that wakes nobody."""

    def __init__(self, recorder: StepRecorder) -> None:
        self._recorder = recorder
        self._windows: deque[Window] = deque()

    def hand_over(self, final: bool, flush: bool, ends_window: bool) -> bool:
        rec = self._recorder
        self._windows.append(Window(rec.take_ready(final=final), final, rec.steps_closed,
                                    flush, ends_window))
        return True

    def due(self) -> bool:
        """Writer thread: a window was handed over since the last take."""
        return bool(self._windows)

    def take(self) -> list[Window]:
        windows = []
        while self._windows:
            windows.append(self._windows.popleft())
        return windows


class WriterHandOver:
    """What the :class:`~trainpace.meter.loop.Loop` calls on the training thread at each half
    window (:meth:`hand_over`). Its promise: a SIGKILL loses at most one window; nothing
    else there waits for the writer."""

    def __init__(self, *, recorder: StepRecorder, source: ClosedRows | HandedWindows,
                 writer: Writer, meta: MetaLog, half_window: int) -> None:
        self._recorder = recorder
        self._half_window = half_window
        self._source = source
        self._writer = writer
        self._meta = meta
        self._writer_stalled = False
        self._previous = 0  # the steps closed at the previous half window's end
        self._hand_overs = 0

    def hand_over(self, final: bool, flush: bool, ends_window: bool) -> bool:
        """At each half window (and at a loader's end, and the run's): the source's
        hand-over (see there); True when every step closed may now be taken. When the writer
        has not written the previous half's lines yet (steps far shorter than its work per
        step, holding the GIL it needs), wait for them (not for the figures and sinks that
        follow), at most LAG_WAIT_S: a SIGKILL then loses the open half and the one before
        it: a window at most. Where the previous hand-over was less than half a window ago
        (a loader ran out soon after a window's middle), only the lines older than half a
        window are waited for: the same bound, and a writer that looks once a half window is
        not waited for there. A writer that keeps up is never waited for; one that could not
        catch up once (a stalled disk) is not waited for again until it has."""
        rec = self._recorder
        closed = rec.steps_closed
        handed = self._source.hand_over(final, flush, ends_window)
        if rec.tokens_counted != self._meta.last.get("tokens_counted"):
            self._meta.log()  # learnt from the first token batch: a killed run keeps it
        writer = self._writer
        previous = min(self._previous, closed - self._half_window)
        self._previous = closed
        self._hand_overs += 1
        if self._hand_overs <= WAKES_AT_START:
            # The idle writer knows the loop's pace only from two looks that found steps;
            # until then it sleeps its longest (a second), and the loop would wait for it at
            # the first window's end. Woken here it writes the first halves in time.
            writer.wake()
        if writer.written_step >= previous:
            self._writer_stalled = False
        elif not final and not self._writer_stalled:
            self._writer_stalled = not writer.wait_for(previous, LAG_WAIT_S)
        return handed
