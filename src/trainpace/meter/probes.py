"""The run's probes, one owner for their lifetimes: the profiler window and the FLOP count.

Both wrap steps of the user's loop and hold global state while they run (the profiler, the
FLOP counter's dispatch mode), so leaving one open would slow or distort the rest of the
training. :meth:`StepProbes.close`, which ``Meter.finish()`` always calls, ends whatever is still
open, whatever happened in the loop. Starting and stopping the profiler takes tens to hundreds
of milliseconds: that time is in the figures like the loop's own (inside the step, or outside
the steps when it falls between them), never left out.
"""

from __future__ import annotations

import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any

from trainpace.meter.log_once import LogOnce
from trainpace.trace.capture import ProfileWindow
from trainpace.trace.findings import TraceAnalysis

Clock = Any  # Callable[[], float]


def profile_window(steps: tuple[int, int] | None, run_folder: Path | None) -> ProfileWindow | None:
    """The profiler window of ``Meter(profile_steps=...)``: its trace in the run folder's
    ``profile/`` (a temporary folder without a run folder); None without profile_steps."""
    if steps is None:
        return None
    start, stop = steps
    folder = (run_folder / "profile" if run_folder is not None
              else Path(tempfile.mkdtemp(prefix="trainpace-profile-")))
    return ProfileWindow(start, stop, folder)


class StepProbes:
    """Opens and closes the probes around steps; ``active`` is False when none is running
    (then the loop skips calling in at all)."""

    def __init__(self, profile: ProfileWindow | None, faults: LogOnce, clock: Clock) -> None:
        self.profile = profile
        self._faults = faults
        self._clock = clock
        self._flops: AbstractContextManager[Any] | None = None
        self._begun = 0  # the last step whose profiler span was opened
        self.active = profile is not None

    def count_flops(self, counter: AbstractContextManager[Any]) -> None:
        """Enter ``counter`` around the step that begins now; it ends with that step."""
        try:
            counter.__enter__()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._faults.report("counting FLOPs", exc)
            return
        self._flops = counter
        self.active = True

    def step_begin(self, steps_closed: int) -> float:
        """The step after ``steps_closed`` starts its cycle (before its batch is fetched):
        open its profiler span. Returns the seconds spent (starting the profiler is slow)."""
        profile = self.profile
        if profile is None or self._begun > steps_closed:
            return 0.0
        self._begun = steps_closed + 1
        started = self._clock()
        profile.step_begin(self._begun)
        return float(self._clock() - started)

    def step_end(self, closed: bool, steps_closed: int, exc_type: type[BaseException] | None,
                 exc: BaseException | None, tb: TracebackType | None) -> float:
        """A step block ended (``closed``: it closed an optimizer step). Ends the FLOP count
        and, after the window's last step, the profiler. Returns the seconds spent."""
        started = self._clock()
        if closed and self.profile is not None:
            self.profile.step_end(steps_closed)
        counting = self._flops
        if counting is not None and (closed or exc_type is not None):
            self._flops = None
            self._exit(counting, exc_type, exc, tb)
        self.active = self.profile is not None or self._flops is not None
        return float(self._clock() - started)

    def close(self) -> None:
        """End every capture still open (idempotent); the profiler keeps what it recorded."""
        counting, self._flops = self._flops, None
        if counting is not None:
            self._exit(counting, None, None, None)
        if self.profile is not None:
            try:
                self.profile.close()
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._faults.report("closing the profiler", exc)
        self.active = False

    def analyze(self) -> TraceAnalysis | None:
        """The profiled steps' trace analysis (None without a profile, or if it failed)."""
        return self.profile.analyze() if self.profile is not None else None

    def _exit(self, counting: AbstractContextManager[Any], exc_type: type[BaseException] | None,
              exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            counting.__exit__(exc_type, exc, tb)
        except Exception as error:  # noqa: BLE001 - monitoring never breaks training
            self._faults.report("counting FLOPs", error)
